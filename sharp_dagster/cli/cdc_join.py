"""`cdc init` re-run over an existing YAML and `cdc bootstrap --table`: the commands a table joins a running source
(or is repaired) with; registered in `cli/cdc.py`, the engines in `cdc/source/reconcile.py` and
`cdc/ods/bootstrap_table.py` (imported inside the commands, as in `cli/cdc.py`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sharp_dagster.settings import Settings


def _cli_error(message: str) -> Exception:
    # Not at the top: cli.main registers cli.cdc, which imports this module.
    from sharp_dagster.cli.main import CliError

    return CliError(message)


def load_config(path: str):
    from sharp_dagster.cdc.source.config import ConfigError, load_source_config

    try:
        return load_source_config(path)
    except ConfigError as exc:
        raise _cli_error(str(exc)) from None


def propose_update(out: Path, result, apply: bool) -> int:
    """`cdc init` over an existing file: the server's new tables and columns (and tables gone) as a diff, written
    beside the file, or applied with --apply; never a silent rewrite (`cdc/source/reconcile.py`)."""
    import yaml

    from sharp_dagster.cdc.source.config import ConfigError, load_source_config
    from sharp_dagster.cdc.source.reconcile import propose, proposed_text, unified_diff

    try:
        load_source_config(out)  # the user's file must load before anything is proposed over it
        existing_text = out.read_text()
        proposal = propose(yaml.safe_load(existing_text), result.config, origin=str(out))
    except ConfigError as exc:
        raise _cli_error(str(exc)) from None
    for note in proposal.notes:
        print(f"note: {note}", file=sys.stderr)
    if not proposal.changes:
        print(f"cdc init: {out} is up to date with the server; nothing to change")
        return 0
    text = proposed_text(existing_text, proposal)
    print(unified_diff(existing_text, text, str(out)), end="")
    for change in proposal.changes:
        print(f"change: {change}")
    target = out if apply else out.with_name(out.name + ".proposed")
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, target)
    if apply:
        print(f"cdc init: applied {len(proposal.changes)} change(s) to {out}")
    else:
        print(
            f"cdc init: {out} unchanged; the proposal ({len(proposal.changes)} change(s)) is in {target}: "
            "review the diff above, then re-run with --apply (or move that file over yours)"
        )
    return 0


def bootstrap_one_table(args: argparse.Namespace) -> int:
    """`cdc bootstrap --table db.t` (`cdc/ods/bootstrap_table.py`): refusals before Spark, then the one snapshot."""
    from sharp_dagster.cdc.ods.bootstrap import BootstrapError
    from sharp_dagster.cdc.ods.bootstrap_table import (
        bootstrap_table,
        check_table_before_spark,
        configured_table,
    )
    from sharp_dagster.cdc.ods.snapshot import SnapshotError
    from sharp_dagster.cdc.source.config import MysqlSettings, snapshot_day
    from sharp_dagster.joblog import ClaimRefused, JobLog
    from sharp_dagster.spark.iceberg import warehouse_tables
    from sharp_dagster.spark.session import build_spark_session

    if args.database:
        raise _cli_error("--table names its database (db.table); leave out --database")
    mysql = MysqlSettings.from_env(args.host, args.port, args.user)
    settings = Settings.from_env()
    jl = JobLog(settings.log_db_url)
    try:
        source = load_config(args.config)
        db, table = configured_table(source, args.table, args.config)
        check_table_before_spark(jl, mysql, db, table, force=args.force, source_id=source.source_id)
    except BootstrapError as exc:
        raise _cli_error(str(exc)) from None
    spark = build_spark_session(settings, app_name="sharp_dagster_cdc_bootstrap")
    options = dict(
        force=args.force, partition_rows=args.partition_rows, progress=print, source_id=source.source_id
    )
    try:
        r = bootstrap_table(spark, warehouse_tables(spark, settings), jl, mysql, db, table, **options)
    except (BootstrapError, SnapshotError, ClaimRefused) as exc:
        raise _cli_error(str(exc)) from None
    print(
        f"cdc bootstrap {args.table}: {r.rows[table.name]} rows (job {r.job_id}); ods.{table.name} is the "
        f"snapshot as of {snapshot_day(r.start)} and is merged from {r.start} on; other tables unchanged"
    )
    return 0
