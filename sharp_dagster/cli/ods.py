"""`sharp-dagster ods ...`: the ODS tables' layout (issue 33).

- `ods migrate orders` converts ODS table `orders` from the `dt`-partitioned layout (`ods_state.orders` and
  `ods.orders` with one partition per day) into the current state with one tag per day (`cdc/ods/migrate.py`):
  the last partition becomes the state, every partition a tag that reads back exactly that day. The old tables
  stay, renamed `<table>__dt_layout`; a failure leaves them as they were; a second run is refused.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from sharp_dagster.cli.main import CliError

_NAME = re.compile(r"^(?:ods[./])?([A-Za-z_][A-Za-z0-9_]*)$")


def register(subparsers: Any) -> None:
    ods = subparsers.add_parser(
        "ods", help="the ODS tables' layout: migrate a dt-partitioned table to day tags"
    )
    sub = ods.add_subparsers(dest="ods_command", required=True, metavar="ACTION")
    p = sub.add_parser(
        "migrate",
        help="convert a dt-partitioned ODS table into the current state with one Iceberg tag per day",
    )
    p.add_argument("table", metavar="TABLE", help="the ODS table: orders, ods/orders or ods.orders")
    p.set_defaults(func=cmd_migrate)


def _declared(name: str) -> Any:
    """The table's CDC declaration (its key and shard column), from `warehouse/cdc/*.yaml`."""
    from sharp_dagster.warehouse.cdc_layout import ods_tables

    match = _NAME.match(name.strip())
    if not match:
        raise CliError(f"table {name!r} is malformed: write it as orders, ods/orders or ods.orders")
    found = {t.name: t for t in ods_tables()}
    table = found.get(match.group(1))
    if table is None:
        known = ", ".join(sorted(found)) or "none"
        raise CliError(f"unknown ODS table {match.group(1)!r}: the CDC declarations have {known}")
    return table


def cmd_migrate(args: argparse.Namespace) -> int:
    from sharp_dagster.cdc.ods.migrate import MigrationRefused, migrate_table
    from sharp_dagster.cli.tables import cli_settings, open_tables

    table = _declared(args.table)
    store = open_tables(cli_settings())
    try:
        result = migrate_table(
            store,
            table.name,
            table.key_columns(),
            table.shard_column,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except MigrationRefused as exc:
        raise CliError(f"ods migrate {table.name}: {exc}") from None
    print(
        f"ods.{table.name}: {len(result.days)} days migrated ({result.days[0]} .. {result.days[-1]}), each a tag; "
        f"state {result.live_rows} rows, {result.tombstones} tombstones; old tables kept as "
        f"{', '.join(result.backups)}"
    )
    return 0
