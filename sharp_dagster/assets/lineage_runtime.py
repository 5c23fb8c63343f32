"""The run-time lineage check of a SQL asset, in Dagster: parsed lineage against Spark's analyzed plan.

Every SQL asset declares the non-blocking check `lineage_runtime` (`check_specs`). When a partition's SELECT has
been rendered and analyzed by Spark (`sql_assets._transform`), `RuntimeLineageCheck.observe` takes that SQL text
and reads the analyzed plan (`lineage/spark_plan.py`), compares it with the parser's lineage of the table's SQL as
the project builds it (`warehouse/catalog_lineage.py`; `lineage/runtime.py` does the comparison) and keeps both
answers with the run:

- in the check's metadata (`parsed`, `spark`, `differences`), and
- in `<SHARP_WAREHOUSE_DIR>/lineage_runs/<layer>/<table>/<partition key>.json` (the latest run of that partition; the
  file names the Dagster run id).

Compared: the tables read and each output column's source columns. A difference is reported as a WARN check
result naming the table or column and both answers; it never stops the pipeline. The columns that filter, join,
group or sort the rows (dataset-level dependencies) are compared too, but a disagreement there is a note in the
metadata and the description, not a failure (see `lineage/runtime.py`). A plan that cannot be read is also a WARN (with the error), never a failed materialization.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey, MetadataValue

from sharp_dagster.lineage.parser import ScriptLineage, parse_script
from sharp_dagster.lineage.runtime import Comparison, compare
from sharp_dagster.lineage.spark_plan import analyzed_plan_json, plan_lineage
from sharp_dagster.settings import Settings, warehouse_sql_dir
from sharp_dagster.spark.filesystem import file_system
from sharp_dagster.warehouse.catalog import SqlTable, load_catalog
from sharp_dagster.warehouse.catalog_lineage import project_lineage, project_schemas

CHECK_NAME = "lineage_runtime"
RUNS_FOLDER = "lineage_runs"


def check_specs(asset_key_path: list[str], partitions_def: Any) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(
            name=CHECK_NAME,
            asset=AssetKey(asset_key_path),
            blocking=False,
            partitions_def=partitions_def,
            description="The tables and columns the parser says the SQL reads, against Spark's analyzed plan "
            "of the statement that ran (WARN on any difference).",
        )
    ]


@lru_cache(maxsize=4)
def _project(sql_dir: str) -> tuple[Mapping[str, ScriptLineage], Mapping[str, str], Mapping[str, Mapping]]:
    catalog = load_catalog(sql_dir)
    results = project_lineage(catalog)
    schema = project_schemas(catalog, results)
    return results, {t.qualified: t.rendered for t in catalog.tables}, schema


def parsed_lineage(table: SqlTable) -> ScriptLineage:
    """The parser's lineage of the table, as the project built it (the one behind its deps and metadata).

    A table that is not the catalog's (tests, or a file changed since the code location loaded) is parsed the
    same way, with the schemas the project knows (so `SELECT *` over a project table expands alike)."""
    results, rendered, schema = _project(str(warehouse_sql_dir()))
    if table.qualified in results and rendered.get(table.qualified) == table.rendered:
        return results[table.qualified]
    return parse_script(table.rendered, dialect="spark", schema=schema, default_target=table.qualified)


def report_path(table: SqlTable, partition_key: str) -> Path | str:
    """Beside the tables, on the warehouse's file system (a local Path, or a Hadoop URI on a cluster)."""
    safe = re.sub(r"[^A-Za-z0-9_.=-]", "_", partition_key)
    root = Settings.from_env().warehouse_dir
    if isinstance(root, Path):
        return root / RUNS_FOLDER / table.layer / table.name / f"{safe}.json"
    return f"{root}/{RUNS_FOLDER}/{table.layer}/{table.name}/{safe}.json"


class RuntimeLineageCheck:
    """The check of one asset execution: one comparison per computed partition, one check result at the end."""

    def __init__(self, table: SqlTable):
        self.table = table
        self.outcomes: list[dict[str, Any]] = []

    def observe(self, context: Any, partition_key: str, df: Any, sql: str) -> dict[str, Any]:
        """Compare the parser with the plan of `df`, the partition's statement `sql` as the run rendered it (not
        rendered again); keep both answers."""
        table = self.table
        outcome: dict[str, Any] = {
            "asset": table.asset_key_str,
            "partition": partition_key,
            "run_id": getattr(context, "run_id", None),
            "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "sql": sql,
        }
        try:
            lineage = parsed_lineage(table)
            default_db = str(df.sparkSession.catalog.currentDatabase())
            comparison: Comparison = compare(
                lineage,
                table.qualified,
                plan_lineage(analyzed_plan_json(df)),
                default_database=default_db,
            )
            outcome.update(comparison.to_dict())
        except Exception as exc:  # the check warns; it must never fail the materialization
            outcome.update(
                target=table.qualified, passed=False, differences=[], error=f"{type(exc).__name__}: {exc}"
            )

        path = report_path(table, partition_key)
        fs = file_system(path, df.sparkSession)
        fs.write_text(str(path), json.dumps(outcome, indent=1, sort_keys=True) + "\n")
        outcome["report_path"] = str(path)
        self.outcomes.append(outcome)
        if not outcome["passed"] and context is not None:
            context.log.warning(f"{table.qualified} [{partition_key}]: " + _summary(outcome))
        return outcome

    def results(self, asset_key: AssetKey) -> Iterator[AssetCheckResult]:
        """One result for the execution: failed (WARN) when any computed partition disagreed."""
        if not self.outcomes:
            return  # every partition was skipped (already done): nothing ran, nothing to check
        failed = [o for o in self.outcomes if not o["passed"]]
        shown = failed[-1] if failed else self.outcomes[-1]
        metadata: dict[str, Any] = {
            "partitions_checked": len(self.outcomes),
            "partitions_differing": [o["partition"] for o in failed],
            "partition": shown["partition"],
            "differences": MetadataValue.json([d for d in shown.get("differences", [])]),
            "notes": MetadataValue.json([d for d in shown.get("notes", [])]),
            "parsed": MetadataValue.json(shown.get("parsed") or {}),
            "spark": MetadataValue.json(shown.get("spark") or {}),
            "report": MetadataValue.path(shown["report_path"]),
        }
        if shown.get("error"):
            metadata["error"] = shown["error"]
        yield AssetCheckResult(
            asset_key=asset_key,
            check_name=CHECK_NAME,
            passed=not failed,
            severity=AssetCheckSeverity.WARN,
            description=_summary(shown) if failed else _passed_summary(shown),
            metadata=metadata,
        )


def _passed_summary(outcome: Mapping[str, Any]) -> str:
    notes = "; ".join(n["message"] for n in outcome.get("notes", []))
    return "parsed lineage matches Spark's analyzed plan" + (f" (note: {notes})" if notes else "")


def _summary(outcome: Mapping[str, Any]) -> str:
    if outcome.get("error"):
        return f"could not compare with Spark's plan: {outcome['error']}"
    return "; ".join(d["message"] for d in outcome.get("differences", []))
