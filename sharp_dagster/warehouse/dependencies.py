"""Which tables each SQL table reads, and the cross-check against what it declares (`@deps`).

The tables come from the lineage engine's parse of the SQL (`sharp_dagster.warehouse.catalog_lineage.project_lineage`), so
the asset graph is derived from the SQL and cannot drift from it: a table that is an asset becomes an upstream
asset, any other table an external source. Where a file also declares its deps, the two must agree, or loading
fails naming the asset and the missing/extra tables. An unparsable file fails naming its path, line and column. An
ODS table is read one day at a time, by its tag (`tagged_reads.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sharp_dagster.lineage.parser import ScriptLineage
from sharp_dagster.warehouse.catalog import WarehouseCatalog, WarehouseDefinitionError
from sharp_dagster.warehouse.catalog_lineage import project_lineage
from sharp_dagster.warehouse.tagged_reads import check_tagged_reads


@dataclass(frozen=True)
class TableDeps:
    assets: list[str]
    externals: list[str]
    lineage: ScriptLineage | None = field(default=None, compare=False)


def resolve(catalog: WarehouseCatalog) -> dict[str, TableDeps]:
    try:
        lineage = project_lineage(catalog)
    except ValueError as exc:  # the lineage engine names path:line:col
        raise WarehouseDefinitionError(f"SQL syntax error: {exc}") from exc
    assets = {*catalog.by_qualified(), *catalog.other_assets}
    result: dict[str, TableDeps] = {}
    for table in catalog.tables:
        check_tagged_reads(table, catalog.day_tagged)
        read = sorted(s for s in lineage[table.qualified].sources if s != table.qualified)
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
            assets=[r for r in read if r in assets],
            externals=[r for r in read if r not in assets],
            lineage=lineage[table.qualified],
        )
    return result
