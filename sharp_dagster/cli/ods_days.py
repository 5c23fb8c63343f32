"""`table history` and `table rollback` of an ODS table, whose published days are Iceberg tags (`cdc.ods.versions`).

- `table history ods/orders` prints `main`'s snapshots as for any table, then the day tags: each published day,
  the snapshot its tag points at, when that was committed, its live rows, the attempt that wrote it (when the
  snapshot says) and which one `main` is at.
- `table rollback ods/orders --to-day 2024-01-02` moves `main` of `ods.orders` and `ods_state.orders` back to that
  day's tag (`ods_store.rollback_to_day`): every later day is no longer published (its tag is dropped), and each
  gets in the job log what a `dt` table's undone period gets (a claim, a `rollback` step, FAILURE naming the day
  restored), so the planner re-runs them in order and downstream waits. `--to SNAPSHOT_ID` is accepted when the
  snapshot is a day tag's (the latest day at it is the one restored); any other snapshot is refused: `main` of an
  ODS table is always at a published day.

Spark and the engines are imported inside the functions, as in `cli/tables.py`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sharp_dagster.cli.main import CliError


def day_rows(tables: Any, name: str) -> list[dict[str, Any]]:
    """The published days of `ods.<name>`, oldest first, as `table history` shows them."""
    from sharp_dagster.cdc.ods.read import day_snapshots

    out = []
    for d in day_snapshots(tables, name):
        props = d["properties"]
        committed = datetime.fromtimestamp(d["committed_ms"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        out.append(
            {
                "day": d["day"],
                "snapshot_id": d["snapshot_id"],
                "time_utc": committed,
                "rows": d["rows"],
                "main": d["is_main"],
                "token": props.get("token"),
                "job_id": props.get("job_id"),
                "run_id": props.get("run_id"),
            }
        )
    return out


def day_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    headers = ["DAY (TAG)", "SNAPSHOT", "TIME (UTC)", "ROWS", "MAIN", "TOKEN", "JOB_ID"]
    body = [
        [
            r["day"],
            str(r["snapshot_id"]),
            r["time_utc"],
            "-" if r["rows"] is None else str(r["rows"]),
            "*" if r["main"] else "",
            r["token"] or "-",
            r["job_id"] or "-",
        ]
        for r in rows
    ]
    return headers, body


def target_day(days: list[dict[str, Any]], to_day: str | None, to_snapshot: int | None, table: str) -> str:
    """The day a rollback restores: `--to-day` (a published day), or the latest day whose tag is at `--to`."""
    from sharp_dagster.cdc.ods.versions import day_tag

    published = [d["day"] for d in days]
    if to_day is not None:
        try:
            day_tag(to_day)
        except ValueError as exc:
            raise CliError(f"--to-day: {exc}") from None
        if to_day not in published:
            shown = f"{published[0]} .. {published[-1]}" if published else "none"
            raise CliError(
                f"rollback of {table} refused, nothing changed: day {to_day} is not published "
                f"(no tag {to_day!r}; published days: {shown})"
            )
        return to_day
    at = [d["day"] for d in days if d["snapshot_id"] == to_snapshot]
    if not at:
        raise CliError(
            f"rollback of {table} refused, nothing changed: snapshot {to_snapshot} is no published day's tag; "
            "an ODS table goes back to a day: --to-day YYYY-MM-DD (`table history` lists them)"
        )
    return at[-1]


def rollback(tables: Any, job_log: Any, name: str, args: Any, specs: Any) -> Any:
    """Roll `ods.<name>` back to a day (see the module doc); returns the `RollbackResult`. The caller turns the
    engine's refusals (`RollbackRefused`, `StalePublishError`, ...) into one-line errors, as for any table."""
    from sharp_dagster.cdc.ods import store as ods_store
    from sharp_dagster.cdc.ods.read import day_snapshots
    from sharp_dagster.cdc.ods.versions import ods_ref
    from sharp_dagster.joblog.rollback import UndonePublish, rollback_days

    table = ods_ref(name).qualified
    # `main` first, the days after: a day published in between moves `main`, and the fenced rollback refuses.
    head = ods_store.ref_snapshot(tables, ods_ref(name), "main")
    days = day_snapshots(tables, name)
    day = target_day(days, getattr(args, "to_day", None), getattr(args, "to", None), table)
    target = next(d for d in days if d["day"] == day)
    undone = [
        UndonePublish(
            snapshot_id=d["snapshot_id"],
            operation=None,
            token=d["properties"].get("token"),
            job_id=d["properties"].get("job_id"),
            partition_key=d["day"],
            job_name=f"ods/{name}",
            run_id=d["properties"].get("run_id"),
            day=d["day"],
        )
        for d in days
        if d["day"] > day
    ]

    def roll() -> int | None:
        ods_store.rollback_to_day(tables, name, day, expected_main=head)
        return head

    return rollback_days(
        job_log,
        table=table,
        job_name=f"ods/{name}",
        target_day=day,
        target_snapshot_id=target["snapshot_id"],
        undone=undone,
        specs=specs,
        rollback=roll,
        reason=args.reason,
    )


def print_result(result: Any) -> None:
    print(
        f"{result.table}: main restored to day {result.target_day} (tag {result.target_day}, snapshot "
        f"{result.target_snapshot_id}; was snapshot {result.previous_snapshot_id}); "
        f"{len(result.undone)} later day(s) no longer published"
    )
    for u in result.undone:
        print(f"  undone: {u.describe()}")
    for p in result.periods:
        print(
            f"  job log: {p.job_name} [{p.partition_key}] attempt {p.attempt} FAILURE (job {p.job_id}): re-run it"
        )
