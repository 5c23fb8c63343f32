"""`sharp-dagster sql ...` and `sharp-dagster table ...`: query the warehouse's tables by name, see and undo publishes.

- `sql "select ..."` runs one query in the project's Spark session (the Iceberg catalog `sharp` is its default
  catalog, so tables are named `ods.orders`) and prints the result: an aligned text table, CSV or JSON. It is
  read-only: anything but a query, SHOW, DESCRIBE or EXPLAIN is refused by `cli/readonly_sql.py` before it runs.
- `table history dwd/order_detail` lists `main`'s snapshots, oldest first, with the attempt that published each
  (`sharp.token`, `sharp.job_id`, `sharp.partition` of the snapshot summary); of an ODS table, also its published
  days (tags).
- `table rollback dwd/order_detail --to SNAPSHOT_ID` makes an older snapshot current again and records, for every
  period whose publish it undoes, a FAILURE attempt in the job log (`sharp_dagster.joblog.rollback`), so the planner
  runs those periods again and downstream waits for them. An ODS table goes back to a day instead
  (`--to-day YYYY-MM-DD`, `cli/ods_days.py`).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import re
import sys
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from sharp_dagster.cli.args import int_range
from sharp_dagster.cli.database import open_job_log
from sharp_dagster.cli.log import known_assets
from sharp_dagster.cli.main import CliError
from sharp_dagster.settings import Settings

# Spark, the job log's engine and the project's assets are imported inside the commands: building the CLI's
# parser (every `sharp-dagster` call) must not start a JVM or load SQLAlchemy.

_TABLE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)[./]([A-Za-z_][A-Za-z0-9_]*)$")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sql",
        help="run one read-only query (SELECT, SHOW, DESCRIBE, EXPLAIN) on the warehouse and print the result",
    )
    p.add_argument(
        "statement", metavar="SQL", help="e.g. \"select * from ods.orders version as of '2024-01-01'\""
    )
    p.add_argument("--format", choices=["text", "csv", "json"], default="text", help="output (default text)")
    p.add_argument("--limit", type=int_range(0, 1_000_000), default=100, help="rows to print (default 100)")
    p.set_defaults(func=cmd_sql)

    table = subparsers.add_parser("table", help="a warehouse table's publish history, and undoing publishes")
    sub = table.add_subparsers(dest="table_command", required=True, metavar="ACTION")

    p = sub.add_parser("history", help="main's snapshots, oldest first, with the attempt that published each")
    p.add_argument("table", metavar="TABLE", help="ods/orders or ods.orders")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser(
        "rollback",
        help="make an older snapshot (an ODS table: day) current again; what it undoes becomes FAILURE",
    )
    p.add_argument("table", metavar="TABLE", help="dwd/order_detail, ods/orders or ods.orders")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument(
        "--to",
        dest="to",
        type=int_range(-(2**63), 2**63 - 1),
        metavar="SNAPSHOT_ID",
        help="snapshot to restore (of an ODS table: a day tag's snapshot)",
    )
    to.add_argument(
        "--to-day",
        dest="to_day",
        metavar="YYYY-MM-DD",
        help="an ODS table: the published day to go back to (its tag); the later days are unpublished",
    )
    p.add_argument("--reason", default=None, help="why; recorded in the job log")
    p.set_defaults(func=cmd_rollback)


# ---------------------------------------------------------------- helpers


def cli_settings() -> Any:
    """The project's settings from the environment; a bad one is a `CliError` naming it (the `sql`, `dqc` and
    `ods` commands read them the same way)."""
    try:
        return Settings.from_env()
    except ValueError as exc:
        raise CliError(f"bad settings: {exc}") from None


def open_tables(settings: Any) -> Any:
    """The project's session and the Iceberg tables of its warehouse (catalog made current)."""
    from pyspark.sql import SparkSession

    from sharp_dagster.spark.iceberg import warehouse_tables
    from sharp_dagster.spark.session import build_spark_session

    # A process that already has its session (a test, an embedding program) keeps it as it is: building again
    # would re-set the `sharp` catalog's conf under a catalog Spark has already loaded. `warehouse_tables` then
    # picks (or adds) the catalog of these settings' warehouse.
    spark = SparkSession.getActiveSession() or build_spark_session(settings, app_name="sharp_dagster_cli")
    return warehouse_tables(spark, settings)


def _ref(name: str, tables: Any = None) -> Any:
    from sharp_dagster.spark.tables import TableRef

    match = _TABLE.match(name.strip())
    if not match:
        raise CliError(
            f"table {name!r} is malformed: write it as layer/table or layer.table, e.g. ods/orders"
        )
    ref = TableRef(match.group(1), match.group(2))
    if tables is not None and not tables.exists(ref):
        raise CliError(f"unknown table {ref.qualified}: no such table in the warehouse catalog")
    return ref


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, float | Decimal | date):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, dict | list | tuple):
        return json.dumps(_plain(value), default=str)
    return str(value)


def _plain(value: Any) -> Any:
    """A JSON-able copy of a collected value (Row -> dict, dates as ISO text)."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return value


def _text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(out)


def _utc(ts: Any) -> str:
    if not isinstance(ts, datetime):
        return "-" if ts is None else str(ts)
    # PySpark hands timestamps back as naive local time of this process: make them UTC.
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


# ---------------------------------------------------------------- commands


def cmd_sql(args: argparse.Namespace) -> int:
    from sharp_dagster.cli.readonly_sql import (
        judged_query,
        read_only_conf,
        sql_error,
    )  # the rules' walker: sqlglot

    if not args.statement.strip():
        raise CliError("empty SQL statement")
    tables = open_tables(cli_settings())
    # PySpark logs a failed statement with its Java stack trace to stderr; the error below says it in one place.
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    with read_only_conf(tables.spark):
        df = judged_query(tables.spark, args.statement)
        try:
            headers = list(df.columns)
            rows = df.limit(args.limit + 1).collect() if headers else []
        except Exception as exc:
            raise CliError(f"SQL failed: {sql_error(exc)}") from None
    truncated = len(rows) > args.limit
    rows = rows[: args.limit]
    note = f"(first {args.limit} rows shown; the result has more: raise --limit)" if truncated else None
    if args.format == "json":
        print(
            json.dumps(
                [{h: _plain(r[i]) for i, h in enumerate(headers)} for r in rows], indent=2, default=str
            )
        )
    elif args.format == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows([["" if v is None else _cell(v) for v in r] for r in rows])
        sys.stdout.write(buf.getvalue())
    else:
        if headers:
            print(_text_table(headers, [[_cell(v) for v in r] for r in rows]))
            note = note or f"({len(rows)} row{'s' if len(rows) != 1 else ''})"
        else:
            note = "ok"
    if note:
        # Machine-readable output stays clean: the note goes to stderr for CSV and JSON.
        print(note, file=sys.stdout if args.format == "text" else sys.stderr)
    return 0


def _history_rows(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last_current = max((i for i, h in enumerate(history) if h["is_current"]), default=None)
    out = []
    for i, h in enumerate(history):
        props = h.get("properties") or {}
        out.append(
            {
                "snapshot_id": h["snapshot_id"],
                "parent_id": h["parent_id"],
                "time_utc": _utc(h["made_current_at"]),
                "operation": h["operation"],
                "current": i == last_current,
                "on_main": bool(h["is_current_ancestor"]),
                "token": h.get("token"),
                "job_id": props.get("job_id"),
                "partition": props.get("partition"),
                "run_id": props.get("run_id"),
                "added_records": h["added_records"],
                "deleted_records": h["deleted_records"],
            }
        )
    return out


def cmd_history(args: argparse.Namespace) -> int:
    from sharp_dagster.cdc.ods.read import is_day_tagged
    from sharp_dagster.cli import ods_days

    tables = open_tables(cli_settings())
    ref = _ref(args.table, tables)
    rows = _history_rows(tables.history(ref))
    days = ods_days.day_rows(tables, ref.name) if is_day_tagged(tables, ref.database, ref.name) else None
    if args.format == "json":
        print(
            json.dumps(
                {"table": ref.qualified, "snapshots": rows, **({"days": days} if days is not None else {})},
                indent=2,
            )
        )
        return 0
    if not rows:
        print(f"{ref.qualified}: no snapshots")
        return 0
    headers = [
        "SNAPSHOT",
        "TIME (UTC)",
        "OPERATION",
        "CURRENT",
        "TOKEN",
        "JOB_ID",
        "PARTITION",
        "ADDED",
        "DELETED",
    ]
    body = [
        [
            str(r["snapshot_id"]),
            r["time_utc"],
            r["operation"] or "-",
            "*" if r["current"] else ("" if r["on_main"] else "(undone)"),
            r["token"] or "-",
            r["job_id"] or "-",
            r["partition"] or "-",
            str(r["added_records"]),
            str(r["deleted_records"]),
        ]
        for r in rows
    ]
    print(f"{ref.qualified}: {len(rows)} snapshot(s) of main, oldest first")
    print(_text_table(headers, body))
    if days is not None:
        print(
            f"\n{ref.qualified}: {len(days)} published day(s), each a tag (read as VERSION AS OF 'YYYY-MM-DD')"
        )
        if days:
            print(_text_table(*ods_days.day_table(days)))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from sharp_dagster.cdc.ods.read import is_day_tagged
    from sharp_dagster.cdc.ods.versions import ODS_DATABASE, TOMBSTONE_DATABASE
    from sharp_dagster.cli import ods_days
    from sharp_dagster.joblog.rollback import RollbackRefused, rollback_table
    from sharp_dagster.spark.wap import StalePublishError

    settings = cli_settings()
    named = _ref(args.table)  # a malformed name is refused before the job log or Spark is touched
    if named.database == TOMBSTONE_DATABASE:
        raise CliError(
            f"{named.qualified} moves with ods.{named.name}: roll back ods.{named.name} (--to-day YYYY-MM-DD)"
        )
    specs = known_assets()  # the same asset specs as `sharp-dagster log rerun`
    job_log = open_job_log(settings.log_db_url, "job log unavailable, nothing was changed: ")
    tables = open_tables(settings)
    ref = _ref(args.table, tables)
    day_tagged = is_day_tagged(tables, ref.database, ref.name)
    if args.to is None and not day_tagged:
        why = (
            f"{ref.qualified} keeps its days as dt partitions: migrate it (`sharp-dagster ods migrate {ref.name}`) "
            "or use --to SNAPSHOT_ID"
            if ref.database == ODS_DATABASE
            else f"--to-day is for an ODS table (its days are tags); {ref.qualified}: --to SNAPSHOT_ID"
        )
        raise CliError(why)

    def roll(target: int, expected_head: int | None) -> int | None:
        return tables.rollback(ref, target, expected_head=expected_head)

    try:
        if day_tagged:
            result = ods_days.rollback(tables, job_log, ref.name, args, specs)
        else:
            result = rollback_table(
                job_log,
                table=ref.qualified,
                default_job_name=f"{ref.database}/{ref.name}",
                history=tables.history(ref),
                target=args.to,
                specs=specs,
                rollback=roll,
                reason=args.reason,
            )
    except RollbackRefused as exc:
        raise CliError(f"rollback of {ref.qualified} refused, nothing changed: {exc}") from None
    except (StalePublishError, LookupError, ValueError) as exc:
        raise CliError(f"rollback of {ref.qualified} failed: {exc}") from None
    if result.target_day is not None:
        ods_days.print_result(result)
        return 0

    print(
        f"{ref.qualified}: main restored to snapshot {result.target_snapshot_id} "
        f"(was {result.previous_snapshot_id}); {len(result.undone)} snapshot(s) undone"
    )
    for u in result.undone:
        print(
            f"  undone: snapshot {u.snapshot_id} {u.operation or '-'} partition {u.partition_key or '-'} "
            f"attempt {u.token or '-'} job {u.job_id or '-'} (+{u.added_records} -{u.deleted_records} records)"
        )
    for p in result.periods:
        print(
            f"  job log: {p.job_name} [{p.partition_key}] attempt {p.attempt} FAILURE (job {p.job_id}): re-run it"
        )
    for u, why in result.unrecorded:
        print(f"  not in the job log: snapshot {u.snapshot_id}: {why}")
    return 0
