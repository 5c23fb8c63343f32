"""`sharp-dagster log ...`: look at and operate the job log (status, pending queue, ordered re-runs, takeover).

Asset keys are written `layer/table`. The known log-driven assets and their periods come from
the project's layout (`sharp_dagster.warehouse.layout`); re-runs are handed to `sharp_dagster.cli.rerun.rerun_periods`,
which runs them in order through Dagster.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import TYPE_CHECKING, Any

from sharp_dagster.cli.args import ROW_LIMIT
from sharp_dagster.cli.database import check_log_db_url, log_db_url, open_job_log
from sharp_dagster.cli.main import CliError

# The job log's engine (SQLAlchemy, Alembic) is imported inside the commands: building the CLI's parser, which
# every `sharp-dagster` call does, must not pay for it.
if TYPE_CHECKING:
    from sharp_dagster.joblog.records import JobRun
    from sharp_dagster.joblog.store import JobLog
    from sharp_dagster.periods import Period, PeriodSpec

_ASSET_KEY = re.compile(r"^[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)+$")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("log", help="the job log: status, pending queue, re-runs, takeover")
    parser.add_argument("--db-url", default=None, help="job-log database URL (default: SHARP_LOG_DB_URL)")
    sub = parser.add_subparsers(dest="log_command", required=True, metavar="ACTION")

    status = sub.add_parser("status", help="recent runs with status, range, counts and duration")
    status.add_argument("--asset", help="only this asset (layer/table)")
    status.add_argument("--limit", type=ROW_LIMIT, default=20, help="number of rows (default 20)")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=cmd_status)

    plan = sub.add_parser(
        "plan", help="the pending queue of an asset: failed and missing periods, oldest first"
    )
    plan.add_argument("--asset", required=True, help="asset key layer/table")
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(func=cmd_plan)

    rerun = sub.add_parser("rerun", help="re-run an explicit range of periods, in order, through Dagster")
    rerun.add_argument("--asset", required=True, help="asset key layer/table")
    rerun.add_argument(
        "--from", dest="from_", required=True, help="first day YYYY-MM-DD (or YYYY-MM-DD-HH:MM)"
    )
    rerun.add_argument("--to", required=True, help="last day, inclusive: YYYY-MM-DD (or YYYY-MM-DD-HH:MM)")
    rerun.set_defaults(func=cmd_rerun)

    takeover = sub.add_parser(
        "takeover", help="end a stale RUNNING job: mark it FAILURE and release its claim"
    )
    takeover.add_argument("job_id", metavar="JOB_ID")
    takeover.add_argument("--reason", default=None, help="recorded as the job's error")
    takeover.add_argument("--force", action="store_true", help="even if its heartbeat is fresh")
    takeover.set_defaults(func=cmd_takeover)


# ---------------------------------------------------------------- helpers


def _job_log(args: argparse.Namespace) -> JobLog:

    return open_job_log(getattr(args, "db_url", None))


def check_asset_key(key: str) -> str:
    if not _ASSET_KEY.fullmatch(key):
        raise CliError(f"asset key {key!r} is malformed: write it as layer/table, e.g. dwd/orders")
    return key


def known_assets() -> dict[str, PeriodSpec]:
    """The periods of every log-driven asset of the project (`sharp_dagster.warehouse.layout`)."""
    from sharp_dagster.warehouse.catalog import WarehouseDefinitionError
    from sharp_dagster.warehouse.layout import layout

    try:
        return {key: asset.spec for key, asset in layout().log_assets.items()}
    except WarehouseDefinitionError as exc:
        raise CliError(f"cannot load the project's log-driven assets: {exc}") from None


def _spec_of(key: str) -> PeriodSpec:
    assets = known_assets()
    spec = assets.get(check_asset_key(key))
    if spec is None:
        known = ", ".join(sorted(assets)) or "none"
        raise CliError(f"unknown asset {key!r} (log-driven assets: {known})")
    return spec


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{sec:02d}s"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _first_line(text: str | None, width: int = 80) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[-1] if "Traceback" in text else text.strip().splitlines()[0]
    return line if len(line) <= width else line[: width - 3] + "..."


# ---------------------------------------------------------------- commands


def cmd_status(args: argparse.Namespace) -> int:
    from sharp_dagster.joblog.store import utcnow

    if args.asset is not None:
        check_asset_key(args.asset)
    job_log = _job_log(args)
    if args.asset is not None:
        try:
            known = set(known_assets())
        except CliError:
            known = set()
        if args.asset not in known and not job_log.has_rows(args.asset):
            raise CliError(f"unknown asset {args.asset!r}: not a log-driven asset and not in the job log")
    runs: list[JobRun] = job_log.recent(args.asset, args.limit)
    now = utcnow()
    if args.json:
        print(json.dumps([r.as_dict(now) for r in runs], indent=2))
        return 0
    if not runs:
        print("no runs in the job log" + (f" for {args.asset}" if args.asset else ""))
        return 0
    rows = [
        [
            r.job_name,
            r.partition_key or "-",
            r.status,
            str(r.attempt),
            f"{r.range_start or '-'}..{r.range_end or '-'}",
            _count(r.source_count),
            _count(r.target_count),
            _duration(r.duration_s(now)),
            r.run_id or "-",
            r.job_id,
            _first_line(r.error, 60),
        ]
        for r in runs
    ]
    print(
        _table(
            [
                "ASSET",
                "PARTITION",
                "STATUS",
                "TRY",
                "RANGE",
                "SOURCE",
                "TARGET",
                "DURATION",
                "RUN",
                "JOB_ID",
                "ERROR",
            ],
            rows,
        )
    )
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from sharp_dagster.joblog.planner import pending_queue
    from sharp_dagster.joblog.store import utcnow

    spec = _spec_of(args.asset)
    job_log = _job_log(args)
    now = utcnow()
    queue = pending_queue(job_log, args.asset, spec, now)
    running = job_log.running(args.asset)
    if args.json:
        print(
            json.dumps(
                {
                    "asset": args.asset,
                    "grain": spec.grain,
                    "start": spec.start.isoformat(),
                    "pending": [p.as_dict() for p in queue],
                    "running": [
                        {"partition_key": r.partition_key, "run_id": r.run_id, "job_id": r.job_id}
                        for r in running
                    ],
                },
                indent=2,
            )
        )
        return 0
    print(f"{args.asset} ({spec.grain} from {spec.start:%Y-%m-%d %H:%M} UTC): {len(queue)} pending")
    for line in _queue_lines(queue, spec):
        print(f"  {line}")
    for r in running:
        print(f"  running: {r.partition_key or r.range_start} (run {r.run_id}, job {r.job_id})")
    return 0


def _queue_lines(queue: list[Period], spec: PeriodSpec) -> list[str]:
    """One line per failed period; consecutive never-run periods folded into one 'A .. B' line."""
    lines: list[str] = []
    i = 0
    while i < len(queue):
        j = i
        if queue[i].last_status is None:
            while (
                j + 1 < len(queue) and queue[j + 1].last_status is None and queue[j + 1].start == queue[j].end
            ):
                j += 1
        if j > i:
            lines.append(
                f"{queue[i].partition_key} .. {queue[j].partition_key} (never run, {j - i + 1} {spec.grain} periods)"
            )
        else:
            lines.append(queue[i].describe())
        i = j + 1
    return lines


def cmd_rerun(args: argparse.Namespace) -> int:
    from sharp_dagster.joblog.planner import refresh_periods

    spec = _spec_of(args.asset)
    try:
        periods = refresh_periods(spec, args.from_, args.to)
    except ValueError as exc:
        raise CliError(f"{args.asset}: {exc}") from None
    if args.db_url:
        # The re-run's materializations write the job log of the code location's settings, not of this flag.
        raise CliError("log rerun writes the job log at SHARP_LOG_DB_URL: set it instead of --db-url")
    check_log_db_url(log_db_url())
    from sharp_dagster.cli.rerun import rerun_periods

    print(
        f"re-running {len(periods)} {spec.grain} period(s) of {args.asset} in order: "
        f"{periods[0].partition_key} .. {periods[-1].partition_key}"
    )
    result = rerun_periods(args.asset, periods)
    if isinstance(result, bool) or result is None:
        return 0 if result in (None, True) else 1
    return int(result) if isinstance(result, int) else 0


def cmd_takeover(args: argparse.Namespace) -> int:
    from sharp_dagster.joblog.errors import JobLogError
    from sharp_dagster.joblog.store import utcnow

    job_log = _job_log(args)
    reason = args.reason or f"taken over from the command line at {utcnow():%Y-%m-%d %H:%M:%S} UTC"
    try:
        run = job_log.takeover(args.job_id, reason, force=args.force)
    except JobLogError as exc:
        raise CliError(str(exc)) from None
    print(
        f"job {run.job_id} ({run.job_name} {run.partition_key or run.range_start}, run {run.run_id}) is now {run.status}: {reason}"
    )
    return 0
