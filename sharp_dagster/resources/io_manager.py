"""The warehouse IO manager: Spark DataFrames in and out of partitioned warehouse tables.

Output: the asset's DataFrame is written to exactly the partition being materialized, atomically (staged, then
swapped in by `TableStore.publish`; a failed write leaves the old partition intact). For a log-driven
materialization the run's `PartitionRun` does the publishing: job-log steps, and the strong data-quality rules on
the staged rows before the swap (a failed rule keeps the data out and fails the step). Each materialization records `dagster/row_count`, `dagster/partition_row_count` and
`dagster/column_schema`.

Input: the upstream partitions the partition mapping asks for, as one DataFrame; a partition that was never
written fails the step with a message naming it (so no table is built on missing input). Loading is not a gate:
the log-driven assets (SQL tables, ODS merges) declare their upstreams as dependencies, not inputs, so nothing is
loaded before their run lifecycle has claimed the period and checked that every upstream period it reads is
SUCCESS in the job log (`planner.require_upstreams_done`, called from `logdriven.PartitionRun.begin`).
"""

from __future__ import annotations

from dagster import (
    ConfigurableIOManager,
    InputContext,
    MetadataValue,
    OutputContext,
    TableColumn,
    TableSchema,
)
from pyspark.sql import DataFrame

from sharp_dagster.partitions import PARTITION_COLUMNS, grain_of, partition_values
from sharp_dagster.resources.spark import SparkResource
from sharp_dagster.spark.tables import StagedPartition, TableRef


def table_ref_for(asset_key_path: list[str] | tuple[str, ...], grain: str | None) -> TableRef:
    database, name = asset_key_path[0], asset_key_path[-1]
    return TableRef(database, name, PARTITION_COLUMNS[grain] if grain else ())


class SparkTableIOManager(ConfigurableIOManager):
    """Writes and reads warehouse tables `<layer>.<table>` partition by partition."""

    spark: SparkResource

    def handle_output(self, context: OutputContext, obj: DataFrame | StagedPartition | None) -> None:
        if obj is None:
            return  # the asset published its partitions itself (a range run)
        if not isinstance(obj, DataFrame | StagedPartition):
            raise TypeError(
                f"{context.asset_key.to_user_string()}: expected a Spark DataFrame, got {type(obj)}"
            )
        if not context.has_asset_partitions:
            raise ValueError(
                f"{context.asset_key.to_user_string()}: warehouse tables are partitioned by time"
            )
        grain = grain_of(context.asset_partitions_def)
        ref = table_ref_for(context.asset_key.path, grain)
        key = context.asset_partition_key
        values = partition_values(key, grain)
        store = self.spark.store()
        from sharp_dagster.logdriven import active_run

        run = active_run(context.run_id, context.asset_key.to_user_string(), key)
        if isinstance(obj, StagedPartition):  # staged and checked by the asset: only the swap is left
            staged = obj
            schema = store.read_staged(staged).schema
            if run is not None:
                run.publish_staged(store, staged)
            else:
                store.publish(staged)
        else:
            schema = obj.schema
            if run is not None:
                staged = run.publish(store, ref, values, obj)  # job-log steps, then the swap
            else:
                staged = store.write_partition(ref, values, obj)
        context.add_output_metadata(
            {
                "dagster/row_count": staged.row_count,
                "dagster/partition_row_count": staged.row_count,
                "dagster/column_schema": TableSchema(
                    columns=[TableColumn(f.name, f.dataType.simpleString()) for f in schema.fields]
                ),
                "dagster/table_name": ref.qualified,
                "path": MetadataValue.path(store.partition_path(ref, values)),
            }
        )

    def load_input(self, context: InputContext) -> DataFrame:
        grain = grain_of(context.asset_partitions_def) if context.has_asset_partitions else None
        ref = table_ref_for(context.asset_key.path, grain)
        store = self.spark.store()
        if grain is None:
            store.register(ref)
            return store.spark.table(ref.qualified)
        keys = sorted(context.asset_partition_keys)
        needed_by = _downstream_label(context)
        return store.read_partitions(ref, [partition_values(k, grain) for k in keys], needed_by=needed_by)


def _downstream_label(context: InputContext) -> str:
    """`dwd/order_detail[2024-01-02]`: who needs the input, for the missing-partition message."""
    try:
        step = context.step_context
        name = step.assets_def.key.to_user_string() if step.assets_def else context.op_def.name
        return f"{name}[{step.partition_key}]" if step.has_partition_key else name
    except Exception:  # contexts built by hand in tests carry no step
        return context.op_def.name if context.op_def else ""
