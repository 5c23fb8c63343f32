"""The warehouse IO manager: it loads upstream partitions of warehouse tables as one Spark DataFrame; it never writes.

Writing a partition belongs to the publish lifecycle (`sharp_dagster.publish`: staged on an Iceberg branch,
audited by the strong rules, fenced by the job log, published in one commit), which the log-driven assets run
themselves and report with `MaterializeResult`. Input: the upstream partitions the partition mapping asks for; a
partition that was never written fails the step naming it. An ODS table's partition is a day, read at its tag
(`cdc.ods.read.read_days`: the day's state, with the day in column `dt`); a day without a tag fails the same way.
The log-driven assets declare their upstreams as dependencies, not inputs, so nothing is loaded before their run has
claimed the period and passed the upstream gate.
"""

from __future__ import annotations

from dagster import (
    ConfigurableIOManager,
    InputContext,
    OutputContext,
)
from pyspark.sql import DataFrame

from sharp_dagster.cdc.ods.read import read_days
from sharp_dagster.partitions import grain_of
from sharp_dagster.periods import PARTITION_COLUMNS, partition_values
from sharp_dagster.resources.spark import SparkResource
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.warehouse.sources import day_tagged_tables


def table_ref_for(asset_key_path: list[str] | tuple[str, ...], grain: str | None) -> TableRef:
    database, name = asset_key_path[0], asset_key_path[-1]
    return TableRef(database, name, PARTITION_COLUMNS[grain] if grain else ())


class SparkTableIOManager(ConfigurableIOManager):
    """Reads warehouse tables `<layer>.<table>` partition by partition."""

    spark: SparkResource

    def handle_output(self, context: OutputContext, obj: object) -> None:
        if obj is None:
            return
        raise TypeError(
            f"{context.asset_key.to_user_string()}: the warehouse IO manager only loads; a warehouse table is "
            f"published through sharp_dagster.publish (staged, audited, fenced), not returned as {type(obj).__name__}"
        )

    def load_input(self, context: InputContext) -> DataFrame:
        grain = grain_of(context.asset_partitions_def) if context.has_asset_partitions else None
        ref = table_ref_for(context.asset_key.path, grain)
        store = self.spark.store()
        if grain is None:
            store.register(ref)
            return store.spark.table(store.name(ref))
        keys = sorted(context.asset_partition_keys)
        needed_by = _downstream_label(context)
        if ref.qualified in day_tagged_tables():  # an ODS table: each day is a tag (`cdc.ods.read`)
            return read_days(store, ref.name, keys, needed_by=needed_by)
        return store.read_partitions(ref, [partition_values(k, grain) for k in keys], needed_by=needed_by)


def _downstream_label(context: InputContext) -> str:
    """`dwd/order_detail[2024-01-02]`: who needs the input, for the missing-partition message."""
    try:
        step = context.step_context
        name = step.assets_def.key.to_user_string() if step.assets_def else context.op_def.name
        return f"{name}[{step.partition_key}]" if step.has_partition_key else name
    except Exception:  # contexts built by hand (`build_input_context`) carry no step
        pass
    try:
        return context.op_def.name
    except Exception:  # ... and may carry no op either: Dagster raises rather than answer None
        return ""
