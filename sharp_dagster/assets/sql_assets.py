"""One Dagster asset per SQL table file: key `[layer, table]`, group = layer, time-window partitioned.

The asset's upstream tables come from the SQL itself (parsed); a table that is an asset becomes an input loaded by
the warehouse IO manager (which checks that every upstream partition the mapping asks for exists), a table that is
not becomes an external source asset. The asset runs its SQL for one partition, variables substituted from the
partition window, and returns the DataFrame for the IO manager to publish.
"""

from __future__ import annotations

from collections.abc import Callable

from dagster import (
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    Failure,
    MetadataValue,
    TimeWindowPartitionMapping,
    asset,
)

from sharp_dagster.partitions import partitions_for
from sharp_dagster.settings import Settings
from sharp_dagster.warehouse.catalog import SqlTable, WarehouseCatalog

# Run before a table's SQL: (context, table, spark resource) -> None. Registers external sources, etc.
PrepareHook = Callable[[AssetExecutionContext, SqlTable, object], None]


def asset_key_of(qualified: str) -> AssetKey:
    return AssetKey(qualified.split("."))


def input_name(qualified: str) -> str:
    return qualified.replace(".", "__")


def sql_description(table: SqlTable) -> str:
    """The table's description followed by its SQL, as the UI shows it."""
    return f"{table.description}\n\n```sql\n{table.sql.strip()}\n```"


def build_sql_asset(
    table: SqlTable,
    upstream_assets: list[str],
    external_sources: list[str],
    grains: dict[str, str],
    metadata: dict | None = None,
    prepare: PrepareHook | None = None,
) -> AssetsDefinition:
    """The asset of one SQL table; `upstream_assets` are qualified names of asset tables it reads."""
    ins = {}
    for up in upstream_assets:
        mapping = None
        if up in table.lookback:
            mapping = TimeWindowPartitionMapping(start_offset=-table.lookback[up], end_offset=0)
        elif grains.get(up, table.grain) != table.grain:
            mapping = TimeWindowPartitionMapping()
        ins[input_name(up)] = AssetIn(key=asset_key_of(up), partition_mapping=mapping)

    @asset(
        name=table.name,
        key_prefix=[table.layer],
        group_name=table.layer,
        description=sql_description(table),
        partitions_def=partitions_for(table.grain, table.start),
        ins=ins,
        deps=[asset_key_of(s) for s in external_sources],
        io_manager_key="warehouse_io_manager",
        required_resource_keys={"spark"},
        kinds={"spark", "sql"},
        metadata={
            "sql_file": MetadataValue.path(str(table.path)),
            "dagster/table_name": table.qualified,
            **(metadata or {}),
        },
    )
    def _sql_asset(context, **inputs):  # no annotation: Dagster inspects it at runtime
        spark_resource = context.resources.spark
        if prepare is not None:
            prepare(context, table, spark_resource)
        sql = table.render(context.partition_key)
        context.log.debug(f"{table.qualified} [{context.partition_key}]\n{sql}")
        try:
            return spark_resource.session().sql(sql)
        except Exception as exc:  # AnalysisException and friends: name the table and file
            raise Failure(
                description=f"{table.qualified}: the SQL of {table.path} failed for {context.partition_key}: {exc}"
            ) from exc

    return _sql_asset


def external_asset_specs(catalog: WarehouseCatalog, names: list[str]) -> list[AssetSpec]:
    specs = []
    for qualified in sorted(set(names)):
        schema = catalog.external_schemas.get(qualified, {})
        db = qualified.split(".")[0]
        specs.append(
            AssetSpec(
                key=asset_key_of(qualified),
                group_name="sources",
                description=f"External source table `{qualified}` (not written by this code location).",
                kinds={"source"},
                metadata={"dagster/table_name": qualified, "columns": ", ".join(schema)} if schema else None,
                tags={"layer": db},
            )
        )
    return specs


def sample_dir() -> str:
    return str(Settings.from_env().sample_dir)
