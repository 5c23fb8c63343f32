"""Column lineage and governance, as Dagster shows them: `dagster/column_lineage` metadata, the same lineage as a
Markdown table (the open-source UI does not draw `dagster/column_lineage`), a link to the asset's page in the
lineage explorer (`sharp-dagster lineage serve`), and warning checks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    AssetSpec,
    MetadataValue,
    TableColumnDep,
    TableColumnLineage,
    asset_check,
    map_asset_specs,
)

from sharp_dagster.lineage.explorer.links import table_url
from sharp_dagster.lineage.governance import Violation
from sharp_dagster.lineage.parser import ScriptLineage
from sharp_dagster.naming import parts

# Metadata keys shown on each SQL asset (besides `dagster/column_lineage`).
LINEAGE_TABLE_KEY = "column lineage"
EXPLORER_URL_KEY = "lineage explorer"


def column_lineage(lineage: ScriptLineage, target: str) -> TableColumnLineage | None:
    """Each output column of `target` -> the source columns its value is computed from."""
    deps: dict[str, list[TableColumnDep]] = {}
    for col in lineage.columns:
        # The parser's (table, column) pairs: a column name may hold a dot (`` AS `a.b` ``).
        table, column = col.table, col.column
        if table != target or column == "*":
            continue
        sources = []
        for src_table, src_col in col.refs:
            if src_col == "*" or "." not in src_table:
                continue
            sources.append(TableColumnDep(asset_key=AssetKey(parts(src_table)), column_name=src_col))
        deps[column] = sources
    return TableColumnLineage(deps_by_column=deps) if deps else None


def governance_check(asset_key: list[str], violations: list[Violation]):
    """A non-blocking WARN check on an asset that breaks the layer or naming rules (`lineage/governance.py`)."""
    message = "; ".join(v.message for v in violations)

    @asset_check(
        asset=AssetKey(asset_key),
        name="governance",
        blocking=False,
        description="Layer and naming rules of the warehouse (sharp-dagster lineage check).",
    )
    def _governance():
        return AssetCheckResult(
            passed=False,
            severity=AssetCheckSeverity.WARN,
            description=message,
            metadata={"violations": [f"{v.rule}: {v.message}" for v in violations]},
        )

    return _governance


def _md_cell(text: str) -> str:
    # A pipe would end the cell and a newline the row; backticks would open code spans.
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("\n", " ")


def column_lineage_markdown(lineage: ScriptLineage, target: str) -> str:
    """`target`'s column lineage as a Markdown table: each output column and the source columns it is computed
    from; then the columns that filter, join, group or order its rows (dataset-level dependencies)."""
    rows = []
    for col in lineage.columns:
        table, column = col.table, col.column
        if table != target:
            continue
        sources = ", ".join(f"`{_md_cell(s)}`" for s in col.sources) or "(a constant or no column)"
        rows.append(f"| `{_md_cell(column)}` | {sources} |")
    lines = [f"Column lineage of `{_md_cell(target)}` (parsed from its SQL).", ""]
    if rows:
        lines += ["| column | computed from |", "|---|---|", *rows]
    else:
        lines.append("No column lineage was found in its SQL.")
    deps = lineage.target_dependencies.get(target, ())
    if deps:
        lines += [
            "",
            "Rows filtered, joined, grouped or ordered by: " + ", ".join(f"`{_md_cell(d)}`" for d in deps),
        ]
    return "\n".join(lines)


def lineage_metadata(lineage: ScriptLineage, target: str) -> dict[str, Any]:
    """The lineage metadata of a SQL asset: `dagster/column_lineage` (when any), the same as a Markdown table,
    and the URL of its page in the lineage explorer (base URL from `SHARP_LINEAGE_URL`)."""
    out: dict[str, Any] = {
        LINEAGE_TABLE_KEY: MetadataValue.md(column_lineage_markdown(lineage, target)),
        EXPLORER_URL_KEY: MetadataValue.url(table_url(target)),
    }
    structured = column_lineage(lineage, target)
    if structured is not None:
        out["dagster/column_lineage"] = structured
    return out


def table_of_key(key: AssetKey) -> str:
    """The lineage graph's name of an asset: ['ods', 'orders'] -> 'ods.orders'; a source system's table
    ['mysql', 'shop', 'orders'] -> 'mysql:shop.orders'."""
    path = key.path
    if len(path) == 3:
        return f"{path[0]}:{path[1]}.{path[2]}"
    if len(path) == 2:
        return f"{path[0]}.{path[1]}"
    return ".".join(path)


def with_explorer_links(assets: Iterable[Any]) -> list[Any]:
    """The non-SQL assets (CDC landing and merge, source tables, ODS upkeep) with the URL of their explorer page,
    so every asset of the UI links to its lineage (the SQL assets get it with `lineage_metadata`). An asset that
    names its warehouse table (`dagster/table_name`: an upkeep asset names the ODS table it maintains) links to
    that table's page, any other to its key's."""

    def link(spec: AssetSpec) -> AssetSpec:
        named = spec.metadata.get("dagster/table_name")
        table = str(getattr(named, "value", named)) if named else table_of_key(spec.key)
        return spec.merge_attributes(metadata={EXPLORER_URL_KEY: MetadataValue.url(table_url(table))})

    return list(map_asset_specs(link, list(assets)))
