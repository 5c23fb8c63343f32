"""The ODS assets' schema check `ods_schema`: before a day is published, what its staged schema changed since the
previous published day (a column dropped, renamed or retyped, by Iceberg field id: `cdc/ods/schema_diff.py`) and
every DWD/ADS column that reads a changed column, transitively, with the SQL file and line reading it
(`lineage/impact.py`, the same answer as `sharp-dagster lineage impact` and the explorer's impact view).

The source's YAML says what the check does (`schema_check:` in `warehouse/cdc/<source>.yaml`, default strong):
strong holds the day when a change breaks a downstream column (the check fails as a blocking Dagster check, the
day is not published, the attempt is FAILURE naming the columns, an alert goes out); weak publishes the day and
alerts. Either way the check's metadata lists the changes and the impacted columns (Dagster UI), and the job log's
`schema_check` step has one line per impacted column. A change nothing downstream reads passes, listed.

The lifecycle runs it as one of the staged day's audits (`AssetPublish.audit`), beside the data-quality rules, so
its verdict travels as a `RuleResult` through the same strong gate, weak report and alerts.
"""

from __future__ import annotations

from typing import Any

from dagster import AssetCheckSpec, AssetKey, MetadataValue

from sharp_dagster.cdc.ods.schema_diff import SchemaChange, day_changes
from sharp_dagster.dqc.evaluate import RuleResult
from sharp_dagster.lineage.impact import Impact, impact
from sharp_dagster.publish.run import PartitionRun
from sharp_dagster.warehouse.catalog import load_catalog
from sharp_dagster.warehouse.catalog_lineage import build_project_graph, sql_texts
from sharp_dagster.warehouse.cdc_layout import OdsTable

__all__ = ["CHECK_NAME", "OdsSchemaCheck", "schema_check_spec"]

CHECK_NAME = "ods_schema"
TEMPLATE = "schema_change"


def schema_check_spec(ods_table: OdsTable, partitions_def) -> AssetCheckSpec:
    severity = ods_table.source.schema_check
    return AssetCheckSpec(
        name=CHECK_NAME,
        asset=AssetKey(["ods", ods_table.name]),
        blocking=severity == "strong",
        description=f"[{severity}, schema] no column that a DWD/ADS table reads is dropped, renamed or retyped "
        f"since the previous published day ({'holds the day' if severity == 'strong' else 'alerts'}; "
        f"`schema_check:` in the source's YAML)",
        partitions_def=partitions_def,
        metadata={"template": TEMPLATE, "severity": severity},
    )


def downstream(table: str, changes: list[SchemaChange]) -> list[Impact]:
    """Every DWD/ADS column (and table's rows) each change breaks, from the project's lineage graph."""
    if not changes:
        return []
    catalog = load_catalog()
    graph, texts = build_project_graph(catalog), sql_texts(catalog)
    if table not in graph:
        return []
    return [i for change in changes for i in impact(graph, texts, table, change.column)]


def _line(i: Impact) -> str:
    where = ", ".join(str(r) for r in i.reads) or "not built by SQL"
    return f"{i.table}.{i.column} ({i.kind}, reads {i.via[0]}.{i.via[1]} at {where})"


class OdsSchemaCheck:
    """The audit of one ODS table's staged days (`AssetPublish.audit`): `(run, staged day) -> [RuleResult]`."""

    def __init__(self, ods_table: OdsTable) -> None:
        self.table = ods_table
        self.severity = ods_table.source.schema_check

    def __call__(self, run: PartitionRun, staged: Any) -> list[RuleResult]:
        qualified = f"ods.{self.table.name}"
        with run.step("schema_check", source_type="iceberg") as rec:
            previous, changes = day_changes(run.tables, self.table.name, run.key)
            found = downstream(qualified, changes)
            said = "; ".join(c.describe() for c in changes)
            if not changes:
                message = (
                    f"{qualified}: no column dropped, renamed or retyped since {previous or 'no earlier day'}"
                )
            elif not found:
                message = f"{qualified}: since {previous}, {said}: no DWD/ADS column reads it"
            else:
                message = (
                    f"{qualified}: since {previous}, {said}: breaks {len(found)} downstream column(s): "
                    + "; ".join(_line(i) for i in found)
                )
            if not found:
                rec.info(f"[{self.severity}] {message}")
            for change in changes:
                rec.info(f"[{self.severity}] {qualified}.{change.describe()} (field id {change.field_id})")
            for i in found:
                rec.info(f"[{self.severity}] {i.changed[0]}.{i.changed[1]} -> {_line(i)}")
            rec.source_count = len(changes)
            rec.failure_count = len(found)
            rec.success_count = 0 if found else 1
        return [self._result(run, changes, found, message)]

    def _result(
        self, run: PartitionRun, changes: list[SchemaChange], found: list[Impact], message: str
    ) -> RuleResult:
        impacted = [i.to_dict() for i in found]
        table = "\n".join(
            f"| {i.changed[1]} | {i.table}.{i.column} | {i.kind} | {', '.join(str(r) for r in i.reads)} |"
            for i in found
        )
        metadata: dict[str, Any] = {
            "schema_changes": MetadataValue.json([c.to_dict() for c in changes]),
            "impacted": MetadataValue.json(impacted),
        }
        if found:
            metadata["impact"] = MetadataValue.md(
                "| changed | impacted | how | read at |\n|---|---|---|---|\n" + table
            )
        return RuleResult(
            rule_id=CHECK_NAME,
            rule_version="1",
            asset=run.asset.job_name,
            partition=run.key,
            template=TEMPLATE,
            dimension="consistency",
            severity=self.severity,
            comparator="=",
            actual=float(len(found)),
            expected=0.0,
            lower_bound=None,
            upper_bound=None,
            passed=not found,
            downgraded=False,
            downgrade_reason=None,
            message=message,
            run_id=run.run_id,
            details={"metadata": metadata},
        )
