"""Which tables each SQL table reads, and the cross-check against what it declares (`@deps`).

The tables come from the parsed SQL (the lineage engine), so the asset graph is derived from the SQL and cannot
drift from it: a table that is an asset becomes an upstream asset, any other table an external source. Where a
file also declares its deps, the two must agree, or loading fails naming the table and the missing/extra tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from sharp_dagster.warehouse.catalog import SqlTable, WarehouseCatalog, WarehouseDefinitionError


@dataclass(frozen=True)
class TableDeps:
    assets: list[str]
    externals: list[str]


def tables_read(table: SqlTable) -> list[str]:
    try:
        statements = sqlglot.parse(table.rendered, read="spark")
    except ParseError as exc:
        err = exc.errors[0] if exc.errors else {}
        line, col = err.get("line", "?"), err.get("col", "?")
        raise WarehouseDefinitionError(
            f"{table.path}:{line}:{col}: SQL syntax error: {err.get('description', exc)}"
        ) from exc
    names: set[str] = set()
    for stmt in statements:
        if stmt is None:
            continue
        ctes = {c.alias_or_name.lower() for c in stmt.find_all(exp.CTE)}
        for t in stmt.find_all(exp.Table):
            if not t.name:
                continue
            name = f"{t.db}.{t.name}".lower() if t.db else t.name.lower()
            if name not in ctes:
                names.add(name)
    return sorted(names)


def resolve(catalog: WarehouseCatalog) -> dict[str, TableDeps]:
    assets = catalog.by_qualified()
    result: dict[str, TableDeps] = {}
    for table in catalog.tables:
        read = tables_read(table)
        if table.declared_deps is not None:
            missing = sorted(set(read) - set(table.declared_deps))
            extra = sorted(set(table.declared_deps) - set(read))
            if missing or extra:
                parts = []
                if missing:
                    parts.append(f"reads {missing} not named in @deps")
                if extra:
                    parts.append(f"@deps names {extra} that the SQL does not read")
                raise WarehouseDefinitionError(
                    f"{table.path}:1: asset {table.asset_key_str}: declared deps disagree with its SQL: "
                    + "; ".join(parts)
                )
        unqualified = [r for r in read if "." not in r]
        if unqualified:
            raise WarehouseDefinitionError(
                f"{table.path}:1: asset {table.asset_key_str}: tables must be named db.table, got {unqualified}"
            )
        result[table.qualified] = TableDeps(
            assets=[r for r in read if r in assets and r != table.qualified],
            externals=[r for r in read if r not in assets],
        )
    return result
