"""`sharp-dagster cdc ...`: run the binlog collector and the hourly landing from the command line.

    SHARP_CDC_MYSQL_PASSWORD=... sharp-dagster cdc collect --config cdc/shop.yaml --host 127.0.0.1 --port 3306 \\
        --user cdc --bootstrap-servers 127.0.0.1:9092 [--once]
    sharp-dagster cdc land --config cdc/shop.yaml --database shop --bootstrap-servers 127.0.0.1:9092 \\
        --state-file data/cdc/shop.landing.json

The password is read from the environment only, never from a flag (flags show up in `ps`). `collect` without
`--once` runs until SIGTERM/SIGINT and then stops cleanly: it flushes and saves the last commit. It keeps its
resume position in the job-log database (`SHARP_LOG_DB_URL`, `cdc/capture/collector_db.py`), so a collector restarted
on any machine resumes there; `--state-file` names the local file of older versions, read once on upgrade. `land` keeps
its offsets and watermarks in a small JSON file (the Dagster jobs keep them in the job log instead) and writes
the done markers. Also runnable as `python -m sharp_dagster.cli.cdc`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from sharp_dagster.cli.args import existing_dir, float_range, int_range, new_file
from sharp_dagster.settings import Settings, warehouse_location, warehouse_sql_dir

# The engines (the config's YAML, the collector's MySQL/Kafka clients, Spark for `land`) are imported inside the
# commands, so that registering this group costs nothing to every other `sharp-dagster` call.

# The same name as `sharp_dagster.cdc.source.config.PASSWORD_ENV`, written here so that `--help` needs no import of the
# config module (sharp_dagster_tests/test_cli_startup.py checks that the two agree).
PASSWORD_ENV = "SHARP_CDC_MYSQL_PASSWORD"


def _cli_error(message: str) -> Exception:
    from sharp_dagster.cli.main import CliError

    return CliError(message)


def register(subparsers: argparse._SubParsersAction) -> None:
    cdc = subparsers.add_parser("cdc", help="binlog change data capture: collect and land")
    sub = cdc.add_subparsers(dest="cdc_command", required=True, metavar="CDC_COMMAND")
    _register_collect(sub)
    _register_land(sub)
    _register_init(sub)
    _register_bootstrap(sub)


def _register_collect(sub: argparse._SubParsersAction) -> None:
    collect = sub.add_parser("collect", help="read the row binlog and send one Kafka message per row change")
    collect.add_argument("--config", required=True, help="the CDC source YAML")
    collect.add_argument(
        "--database", action="append", help="capture only this configured database (repeatable)"
    )
    _server_flags(collect)
    collect.add_argument("--bootstrap-servers", required=True)
    collect.add_argument(
        "--state-file",
        type=new_file,
        help="the local position file of older versions: read once when the job-log database has none yet",
    )
    collect.add_argument("--once", action="store_true", help="stop at the current end of the binlog")
    collect.add_argument(
        "--start",
        help="where a collector without a saved position starts: earliest, current, a GTID position or file:pos "
        "(default: the position `cdc bootstrap` recorded in the job log, else earliest); a position the "
        "collector saved before always wins",
    )
    collect.add_argument(
        "--flush-every",
        type=int_range(1, 10_000_000),
        default=5000,
        help="flush and save after this many messages",
    )
    collect.add_argument(
        "--flush-interval", type=float_range(0, 3600), default=1.0, help="... or after this many seconds"
    )
    collect.add_argument("--heartbeat-interval", type=float_range(0, 86400), default=30.0)
    collect.add_argument(
        "--txn-memory-mb",
        type=float_range(1, 1_000_000),
        default=64,
        help="a transaction's messages are held until its commit: in memory up to this size, then on disk",
    )
    collect.add_argument(
        "--spill-dir", type=existing_dir, help="where larger transactions are held (default: the temp folder)"
    )
    collect.set_defaults(func=cmd_collect)


def _register_land(sub: argparse._SubParsersAction) -> None:
    land = sub.add_parser("land", help="land a binlog topic into original_binlog.<db> and write done markers")
    land.add_argument("--config", required=True)
    land.add_argument("--database", required=True)
    land.add_argument("--bootstrap-servers", required=True)
    land.add_argument(
        "--state-file",
        required=True,
        type=new_file,
        help="JSON with the offsets and watermarks of the last run (its folder must exist)",
    )
    land.add_argument("--warehouse", help="warehouse folder (default: SHARP_WAREHOUSE_DIR / settings)")
    land.set_defaults(func=cmd_land)


def _register_init(sub: argparse._SubParsersAction) -> None:
    init = sub.add_parser(
        "init", help="write the source YAML from a live server's schema; check its binlog settings and grants"
    )
    _server_flags(init)
    init.add_argument("--database", action="append", required=True, help="database to capture (repeatable)")
    init.add_argument("--source-id", help="the source's id (default: <first database>-<flavor>)")
    init.add_argument("--replica-server-id", type=int_range(1, 4_294_967_295), default=4101)
    init.add_argument("--lateness-minutes", type=int_range(0, 1440), default=15)
    init.add_argument("--topic-partitions", type=int_range(1, 10_000), default=1)
    init.add_argument(
        "--exclude", action="append", default=[], help="regex of physical tables to leave out (repeatable)"
    )
    init.add_argument("--output", help="where to write (default: <warehouse SQL dir>/cdc/<source_id>.yaml)")
    init.add_argument("--dry-run", action="store_true", help="print the YAML, write nothing")
    init.add_argument(
        "--force",
        action="store_true",
        help="overwrite an existing file with a fresh one (its edits are lost)",
    )
    init.add_argument(
        "--apply",
        action="store_true",
        help="an existing file: replace it with the proposal (default: print the diff, write <file>.proposed)",
    )
    init.set_defaults(func=cmd_init)


def _register_bootstrap(sub: argparse._SubParsersAction) -> None:
    boot = sub.add_parser(
        "bootstrap",
        help="snapshot every table into its ODS starting state, at a binlog position the collector starts from",
    )
    boot.add_argument(
        "--config", required=True, help="the CDC source YAML (its start: is set to the snapshot's day)"
    )
    boot.add_argument("--database", action="append", help="only this configured database (repeatable)")
    _server_flags(boot)
    boot.add_argument(
        "--table",
        metavar="DB.TABLE",
        help="snapshot this one table alone (a table that joined the YAML, or with --force a repair); the other "
        "tables, their days and the YAML's start stay as they are",
    )
    boot.add_argument(
        "--force", action="store_true", help="take a new snapshot of a bootstrapped database (or --table)"
    )
    boot.add_argument(
        "--partition-rows",
        type=int_range(1, 1_000_000_000),
        default=1_000_000,
        help="rows per parallel JDBC key range of a large table",
    )
    boot.set_defaults(func=cmd_bootstrap)


def _server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int_range(1, 65535), default=3306)
    parser.add_argument("--user", default="root", help=f"MySQL user; the password comes from ${PASSWORD_ENV}")


def _load_config(path: str):
    from sharp_dagster.cdc.source.config import ConfigError, load_source_config

    try:
        return load_source_config(path)
    except ConfigError as exc:
        raise _cli_error(str(exc)) from None


def cmd_collect(args: argparse.Namespace) -> int:
    from sharp_dagster.cdc.capture.collector import Collector
    from sharp_dagster.cdc.capture.collector_db import DbStateStore
    from sharp_dagster.cdc.capture.collector_state import CollectorError, followed_tables
    from sharp_dagster.cdc.source.config import ConfigError, MysqlSettings
    from sharp_dagster.db import DatabaseUnavailable

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(
        logging.WARNING
    )  # the job-log schema check, not the collector's news
    source = _load_config(args.config)
    try:
        source = source.only(args.database)
    except ConfigError as exc:
        raise _cli_error(str(exc)) from None
    mysql = MysqlSettings.from_env(args.host, args.port, args.user)
    try:
        url = Settings.from_env().log_db_url
        store = DbStateStore(url, source.source_id, legacy_file=args.state_file)
        # A saved position is where the collector resumes; the bootstrap's start is for a first run only.
        saved = store.load(follows=followed_tables(source))
        start = args.start or ("earliest" if saved is not None else _bootstrap_start(url, source))
        collector = Collector(
            mysql,
            {"bootstrap.servers": args.bootstrap_servers},
            source,
            store,
            start=start,
            flush_max_messages=args.flush_every,
            flush_interval_s=args.flush_interval,
            heartbeat_interval_s=args.heartbeat_interval,
            txn_memory_bytes=int(args.txn_memory_mb * 1024 * 1024),
            spill_dir=args.spill_dir,
        )
    except (CollectorError, DatabaseUnavailable) as exc:
        raise _cli_error(str(exc)) from None
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: collector.stop())
    try:
        stats = collector.run(once=args.once)
    except CollectorError as exc:
        raise _cli_error(str(exc)) from None
    state = stats.state
    print(
        f"cdc collect {mysql.describe()}: {stats.messages} messages ({stats.row_changes} row changes, "
        f"{stats.statements} DDL/TRUNCATE, {stats.heartbeats} heartbeats), {stats.commits} commits "
        f"({stats.spilled} held on disk), "
        f"stopped by {stats.stopped_by}; resume at "
        + (
            f"{state.binlog_file}:{state.binlog_pos} gtid {state.gtid_pos}"
            if state
            else "the start (nothing saved)"
        )
    )
    return 0


def _bootstrap_start(url: str, source) -> str:
    """The start `cdc bootstrap` recorded for the source's databases (`bootstrap.collector_start`), else earliest."""
    from sharp_dagster.cdc.ods.bootstrap import collector_start
    from sharp_dagster.joblog import JobLog

    start, why = collector_start(JobLog(url), [db.name for db in source.databases])
    logging.getLogger("sharp_dagster.cdc.capture.collector").info(
        "a collector without a saved position starts at %s: %s", start or "the earliest binlog", why
    )
    return start or "earliest"


def cmd_land(args: argparse.Namespace) -> int:
    from sharp_dagster.cdc.landing.done_markers import write_done_markers
    from sharp_dagster.cdc.landing.kafka_source import LandingError
    from sharp_dagster.cdc.landing.land import land
    from sharp_dagster.spark.iceberg import warehouse_tables
    from sharp_dagster.spark.session import build_spark_session

    source = _load_config(args.config)
    try:
        db = source.database(args.database)
    except KeyError as exc:
        raise _cli_error(str(exc.args[0])) from None
    state_path = Path(args.state_file)
    state = _read_json(state_path)
    settings = Settings.from_env()
    if args.warehouse:
        try:
            location = warehouse_location(args.warehouse)
        except ValueError as exc:
            raise _cli_error(f"--warehouse: {exc}") from None
        # A typo in a local folder must not start a new, empty warehouse beside the real one.
        if isinstance(location, Path) and not location.is_dir():
            raise _cli_error(f"--warehouse: no such folder: {str(location)!r} (an existing warehouse)")
        settings = replace(settings, warehouse_dir=location)
    spark = build_spark_session(settings, app_name="sharp_dagster_cdc_land")
    store = warehouse_tables(spark, settings)
    try:
        result = land(
            spark,
            store,
            {"bootstrap.servers": args.bootstrap_servers},
            db.topic,
            {int(p): o for p, o in state.get("offsets", {}).items()},
            "latest",
            db.shard_rules,
            database=db.name,
            prior_watermarks={int(p): w for p, w in state.get("watermarks", {}).items()},
        )
    except LandingError as exc:
        raise _cli_error(str(exc)) from None
    known = [x for x in (state.get("first_event_ts_ms"), result.first_seen_ms) if x is not None]
    first = min(known) if known else None
    markers = write_done_markers(
        store.warehouse_dir,
        db.name,
        result.low_watermark_ms,
        source.lateness_minutes,
        first,
        spark,
        prior_low_watermark_ms=state.get("low_watermark_ms"),
    )
    _write_json(
        state_path,
        {
            "topic": db.topic,
            "offsets": {str(p): o for p, o in result.end_offsets.items()},
            "watermarks": {str(p): w for p, w in result.watermarks_ms.items()},
            "first_event_ts_ms": first,
            "low_watermark_ms": result.low_watermark_ms,
        },
    )
    print(
        f"cdc land {db.topic}: read {result.read}, landed {result.landed}, duplicates {result.duplicates}, "
        f"quarantined {result.quarantined}, heartbeats {result.heartbeats}; {len(result.touched_hours)} hours touched, "
        f"{len(markers)} done markers written"
    )
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from sharp_dagster.cdc.source.config import MysqlSettings
    from sharp_dagster.cdc.source.introspect import IntrospectError, introspect

    planned = Path(args.output) if args.output else None
    if planned is None and args.source_id:
        planned = warehouse_sql_dir() / "cdc" / f"{args.source_id}.yaml"
    if planned is not None and planned.exists() and not args.force and not args.dry_run:
        _check_existing(
            planned
        )  # before connecting: a re-run proposes changes to a source YAML, nothing else
    mysql = MysqlSettings.from_env(args.host, args.port, args.user)
    names = ("source_id", "replica_server_id", "lateness_minutes", "topic_partitions", "exclude")
    try:
        result = introspect(mysql, args.database, **{name: getattr(args, name) for name in names})
    except IntrospectError as exc:
        raise _cli_error(str(exc)) from None
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.dry_run:
        print(result.yaml, end="")
    for problem in result.problems:
        print(f"missing: {problem}", file=sys.stderr)
    if result.problems:
        raise _cli_error(f"{len(result.problems)} problem(s) above; nothing written")
    if args.dry_run:
        return 0
    out = (
        Path(args.output)
        if args.output
        else warehouse_sql_dir() / "cdc" / f"{result.config['source_id']}.yaml"
    )
    if out.exists() and not args.force:
        from sharp_dagster.cli.cdc_join import propose_update

        return propose_update(out, result, apply=args.apply)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(result.yaml)
    tables = sum(len(db["tables"]) for db in result.config["databases"])
    print(f"cdc init: wrote {out} ({tables} tables); server settings and grants are complete")
    return 0


def _check_existing(path: Path) -> None:
    from sharp_dagster.cdc.source.config import ConfigError, load_source_config

    try:
        load_source_config(path)
    except ConfigError as exc:
        raise _cli_error(
            f"{path} exists and is no source YAML to propose changes to ({exc}); pass --force to overwrite it"
        ) from None


def cmd_bootstrap(args: argparse.Namespace) -> int:
    from sharp_dagster.cdc.ods.bootstrap import BootstrapError, bootstrap_source, check_before_spark
    from sharp_dagster.cdc.ods.snapshot import SnapshotError
    from sharp_dagster.cdc.source.config import MysqlSettings, write_start
    from sharp_dagster.joblog import ClaimRefused, JobLog
    from sharp_dagster.spark.iceberg import warehouse_tables
    from sharp_dagster.spark.session import build_spark_session

    if args.table:
        from sharp_dagster.cli.cdc_join import bootstrap_one_table

        return bootstrap_one_table(args)
    mysql = MysqlSettings.from_env(args.host, args.port, args.user)
    source = _selected(_load_config(args.config), args.database)
    settings = Settings.from_env()
    jl = JobLog(settings.log_db_url)  # first: an unreachable job log stops the command before Spark starts
    try:  # so do a second bootstrap and a server that refuses the user (a wrong password)
        check_before_spark(jl, mysql, source, force=args.force)
    except BootstrapError as exc:
        raise _cli_error(str(exc)) from None
    spark = build_spark_session(settings, app_name="sharp_dagster_cdc_bootstrap")
    options = {"force": args.force, "partition_rows": args.partition_rows, "progress": print}
    try:
        results = bootstrap_source(spark, warehouse_tables(spark, settings), jl, mysql, source, **options)
    except (BootstrapError, SnapshotError, ClaimRefused) as exc:  # ClaimRefused: another bootstrap runs
        raise _cli_error(str(exc)) from None
    start = min(r.start for r in results)
    write_start(args.config, start)
    for r in results:
        print(
            f"cdc bootstrap {r.database}: {sum(r.rows.values())} rows in {len(r.rows)} tables (job {r.job_id}); "
            f"ODS starts on {r.start}; `cdc collect` starts at its position ({r.collector_start}) by itself"
        )
    print(f"{args.config}: start: {start}")
    return 0


def _selected(source, databases: list[str] | None):
    """The source restricted to `databases` (all when none), or the CLI error naming those not configured."""
    from sharp_dagster.cdc.source.config import ConfigError

    try:
        return source.only(databases)
    except ConfigError as exc:
        raise _cli_error(str(exc)) from None


def _read_json(path: Path) -> dict[str, Any]:
    """The landing's state file, its shape checked before Spark starts: partition -> offset / watermark numbers."""
    if not path.exists():
        return {}
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise _cli_error(f"{path}: not a readable JSON state file: {exc}") from None
    if not isinstance(state, dict):
        raise _cli_error(f"{path}: the state file must hold a JSON object, not {type(state).__name__}")
    for key in ("offsets", "watermarks"):
        value = state.get(key, {})
        # A partition without any event yet has no watermark (null).
        ok = isinstance(value, dict) and all(
            str(p).isdigit() and (type(v) is int or (v is None and key == "watermarks"))
            for p, v in value.items()
        )
        if not ok:
            raise _cli_error(f"{path}: {key!r} must map partition numbers to whole numbers")
    first = state.get("first_event_ts_ms")
    if first is not None and type(first) is not int:
        raise _cli_error(f"{path}: 'first_event_ts_ms' must be a whole number of milliseconds")
    return state


def _write_json(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".land.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point (`python -m sharp_dagster.cli.cdc collect ...`)."""
    from sharp_dagster.cli.main import main as cli_main

    return cli_main(["cdc", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
