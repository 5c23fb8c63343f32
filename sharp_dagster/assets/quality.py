"""Data-quality rules as Dagster asset checks: loaded and validated with the code location, run per partition.

Rules live in `warehouse/quality/*.yaml` (see `sharp_dagster.dqc.rules`). They are validated when the code location
loads, against each table's output columns (from its parsed SQL) and the known tables: an unknown asset, column,
template or comparator, or a parameter that is not a plain identifier fails loading, naming the file and the rule.

Each rule is an `AssetCheckSpec` of its asset (blocking for strong rules). At run time all rules of a partition
are evaluated in one scan of the *staged* rows (`sharp_dagster.publish.rules`); strong failures keep the partition
from being published; weak results are reported (WARN) and alerted after it is published.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dagster import AssetCheckSpec, AssetKey

from sharp_dagster.dqc.rule_files import load_rules
from sharp_dagster.dqc.rules import Rule
from sharp_dagster.naming import key_str
from sharp_dagster.warehouse.catalog import WarehouseCatalog, WarehouseDefinitionError
from sharp_dagster.warehouse.dependencies import TableDeps


def output_columns(deps: TableDeps, qualified: str) -> dict[str, str]:
    """A table's output columns (types unknown before Spark runs: the rules check names)."""
    cols: dict[str, str] = {}
    for col in deps.lineage.columns if deps.lineage else ():
        table, _, name = col.target.rpartition(".")
        if table == qualified and name != "*":
            cols[name] = ""
    return cols


def load_project_rules(
    catalog: WarehouseCatalog, deps: Mapping[str, TableDeps], quality_dir: Path
) -> dict[str, list[Rule]]:
    """Every rule of the project by asset (`layer/table`); raises WarehouseDefinitionError on a bad rule."""
    if not quality_dir.is_dir():
        return {}
    schemas = {t.asset_key_str: output_columns(deps[t.qualified], t.qualified) for t in catalog.tables}
    for qualified in catalog.other_assets:  # tables built by the CDC path
        schemas[key_str(qualified)] = dict(catalog.external_schemas.get(qualified, {}))
    known = {name: cols for name, cols in catalog.external_schemas.items() if ":" not in name}
    try:
        rules = load_rules(quality_dir, schemas, known)
    except ValueError as exc:  # RuleError names the YAML file and the rule
        raise WarehouseDefinitionError(f"data-quality rules: {exc}") from exc
    by_asset: dict[str, list[Rule]] = {}
    for rule in rules:
        _check_other_day(rule, catalog.day_tagged)
        by_asset.setdefault(rule.asset, []).append(rule)
    return by_asset


def _check_other_day(rule: Rule, day_tagged: frozenset[str]) -> None:
    """A rule comparing with an ODS table's day reads its tag: the table has no `dt` partitions (`cdc.ods.versions`)."""
    other = str(rule.params.get("other") or "").lower()
    if other in day_tagged and rule.params.get("other_partition", "same") == "same":
        raise WarehouseDefinitionError(
            f"data-quality rules: {rule.source}: rule {rule.id!r} (asset {rule.asset}) compares with {other}, whose "
            "days are tags, not dt partitions: set `other_partition: tag` (its day, VERSION AS OF '${dt}') or "
            "`all` (its latest state)"
        )


def check_specs(asset_key_path: list[str], rules: list[Rule], partitions_def) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(
            name=rule.id,
            asset=AssetKey(asset_key_path),
            blocking=rule.severity == "strong",
            description=f"[{rule.severity}, {rule.dimension}] {rule.description or rule.template}: "
            f"{rule.describe_expectation()}",
            partitions_def=partitions_def,
            metadata={"template": rule.template, "severity": rule.severity, "source": rule.source},
        )
        for rule in rules
    ]
