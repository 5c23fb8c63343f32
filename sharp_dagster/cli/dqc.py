"""`sharp-dagster dqc ...`: the data-quality report of an asset, and the rules with their compiled SQL.

- `dqc report --asset KEY [--limit N] [--png PATH]`: each rule's recent results from `dqc_result` (the database
  at `SHARP_LOG_DB_URL`), optionally as a chart.
- `dqc rules [--asset KEY] [--spark]`: the rule files' rules and the SQL they compile to; `--spark` also judges
  each custom_sql rule by Spark's own plan of it (`sharp_dagster.dqc.plan_guard`), as a run would at first use.

Rule files are read from the folder the code location loads them from, `quality/` of the warehouse's SQL folder
(`SHARP_WAREHOUSE_SQL_DIR`, default `sharp_dagster/warehouse/`), unless `--rules-dir` says otherwise. Without the
warehouse's column schemas at hand, `dqc rules` checks everything but column and asset existence.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sharp_dagster.cli.args import existing_dir, int_range, new_file
from sharp_dagster.cli.database import log_db_url, open_engine
from sharp_dagster.cli.log import check_asset_key
from sharp_dagster.cli.main import CliError
from sharp_dagster.cli.tables import cli_settings, open_tables
from sharp_dagster.settings import warehouse_sql_dir


def rules_dir(args: argparse.Namespace) -> Path:
    """`--rules-dir`, or the folder `sharp_dagster.definitions` loads the rules from (read when the command runs)."""
    return args.rules_dir if args.rules_dir is not None else warehouse_sql_dir() / "quality"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("dqc", help="data-quality rules and results", description=__doc__)
    sub = parser.add_subparsers(dest="dqc_command", required=True, metavar="SUBCOMMAND")

    report = sub.add_parser("report", help="recent rule results of an asset (text, optional PNG chart)")
    report.add_argument("--asset", required=True, help="asset key, e.g. dwd/order_detail")
    report.add_argument(
        "--limit", type=int_range(1, 10_000), default=14, help="newest partitions to show (default 14)"
    )
    report.add_argument(
        "--png", type=new_file, help="also write a chart to this PNG file (its folder must exist)"
    )
    report.add_argument("--rules-dir", type=existing_dir, default=None, help=argparse.SUPPRESS)
    report.set_defaults(func=cmd_report)

    rules = sub.add_parser("rules", help="list rules and the SQL they compile to")
    rules.add_argument("--asset", help="only this asset's rules")
    rules.add_argument(
        "--rules-dir",
        type=existing_dir,
        default=None,
        help="folder of rule YAML files (default: quality/ of SHARP_WAREHOUSE_SQL_DIR, as the code location)",
    )
    rules.add_argument(
        "--spark",
        action="store_true",
        help="also judge each custom_sql rule by Spark's plan of it, against the warehouse (starts Spark)",
    )
    rules.set_defaults(func=cmd_rules)


def known_assets(rules_dir: Path) -> set[str]:
    """Assets named by rule files or defined by the warehouse's SQL files (best effort: both may be absent)."""
    from sharp_dagster.dqc.rule_files import parse_rule_file, rule_files
    from sharp_dagster.dqc.rules import RuleError

    names: set[str] = set()
    if rules_dir.exists():
        for path in rule_files(rules_dir):
            try:
                names.update(str(r["asset"]) for r in parse_rule_file(path) if r.get("asset"))
            except RuleError:
                continue
    try:
        from sharp_dagster.warehouse.catalog import load_catalog

        names.update(t.asset_key_str for t in load_catalog().tables)
    except Exception:  # noqa: BLE001 - the catalog is optional context for an error message
        pass
    return names


def cmd_report(args: argparse.Namespace) -> int:
    # Imported here, not at the top: SQLAlchemy (and matplotlib for --png) are only needed by this command.
    from sqlalchemy import inspect

    from sharp_dagster.dqc.report import format_report, write_chart
    from sharp_dagster.dqc.store import DqcStore, dqc_result

    check_asset_key(args.asset)
    engine = open_engine(log_db_url(), "data-quality results' database")
    has_table = inspect(engine).has_table(dqc_result.name)
    results = DqcStore(engine).recent(args.asset, args.limit) if has_table else []
    if not results and args.asset not in known_assets(rules_dir(args)):
        stored = DqcStore(engine).assets() if has_table else []
        hint = f"; assets with results: {', '.join(stored)}" if stored else ""
        raise CliError(f"unknown asset {args.asset!r}: no data-quality results and no rules for it{hint}")
    print(format_report(args.asset, results), end="")
    if args.png:
        path = write_chart(args.asset, results, args.png)
        print(f"chart written to {path}")
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    from sharp_dagster.dqc.compiler import explain_rules
    from sharp_dagster.dqc.rule_files import load_rules
    from sharp_dagster.dqc.rules import RuleError

    folder = rules_dir(args)
    if not folder.is_dir():
        raise CliError(f"no rules folder at {folder}")
    try:
        rules = load_rules(folder, schemas=None)
    except RuleError as exc:
        raise CliError(str(exc)) from None
    if args.asset:
        rules = [r for r in rules if r.asset == args.asset]
        if not rules:
            raise CliError(f"no rules for asset {args.asset!r} in {folder}")
    for r in rules:
        print(
            f"{r.asset}:{r.id}  {r.template}  [{r.severity}, {r.dimension}]  passes when "
            f"{r.describe_expectation()}  version {r.version}  ({Path(r.source).name})"
        )
    print()
    print(explain_rules(rules), end="")
    if args.spark:
        _spark_check(rules)
    return 0


def _spark_check(rules) -> None:
    """`--spark`: the plan check each custom_sql rule gets at its first use in a run, done now."""

    from sharp_dagster.dqc.spark_check import check_rules

    verdicts = check_rules(open_tables(cli_settings()).spark, rules)
    for v in verdicts:
        line = f"spark check: {v.rule.asset}:{v.rule.id}: {v.status}" + (
            f" ({v.message})" if v.message else ""
        )
        print(line, file=sys.stderr if v.status == "refused" else sys.stdout)
    refused = [v for v in verdicts if v.status == "refused"]
    if refused:
        raise CliError(
            f"{len(refused)} custom_sql rule(s) refused by Spark's plan check; first: {refused[0].message}"
        )
