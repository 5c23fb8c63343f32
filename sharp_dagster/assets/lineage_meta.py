"""Column lineage and governance, as Dagster shows them: `dagster/column_lineage` metadata and warning checks."""

from __future__ import annotations

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    TableColumnDep,
    TableColumnLineage,
    asset_check,
)

from sharp_dagster.lineage.governance import Violation
from sharp_dagster.lineage.parser import ScriptLineage


def _split(ref: str) -> tuple[str, str]:
    table, _, column = ref.rpartition(".")
    return table, column


def column_lineage(lineage: ScriptLineage, target: str) -> TableColumnLineage | None:
    """Each output column of `target` -> the source columns its value is computed from."""
    deps: dict[str, list[TableColumnDep]] = {}
    for col in lineage.columns:
        table, column = _split(col.target)
        if table != target or column == "*":
            continue
        sources = []
        for src in col.sources:
            src_table, src_col = _split(src)
            if src_col == "*" or "." not in src_table:
                continue
            sources.append(TableColumnDep(asset_key=AssetKey(src_table.split(".")), column_name=src_col))
        deps[column] = sources
    return TableColumnLineage(deps_by_column=deps) if deps else None


def governance_check(asset_key: list[str], violations: list[Violation]):
    """A non-blocking WARN check on an asset that breaks the layer or naming rules (seed 004)."""
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
