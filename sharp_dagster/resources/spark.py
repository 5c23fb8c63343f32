"""Spark as a Dagster resource: one SparkSession per run process, configured from the environment."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field
from pyspark.sql import SparkSession

from sharp_dagster.settings import Settings
from sharp_dagster.spark.session import build_spark_session
from sharp_dagster.spark.tables import TableStore

_STORES: dict[tuple[int, str], TableStore] = {}


class SparkResource(ConfigurableResource):
    """The process's SparkSession (built on first use) and the warehouse's table store.

    `master` defaults to `SHARP_SPARK_MASTER` (local[2]); `conf` adds Spark settings on top of `SHARP_SPARK_CONF`.
    """

    master: str | None = Field(
        default=None, description="Spark master URL; default SHARP_SPARK_MASTER or local[2]"
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark configuration")

    def settings(self) -> Settings:
        settings = Settings.from_env()
        if self.master:
            from dataclasses import replace

            settings = replace(settings, spark_master=self.master)
        return settings

    def session(self) -> SparkSession:
        return build_spark_session(self.settings(), **self.conf)

    def store(self) -> TableStore:
        spark = self.session()
        warehouse = str(self.settings().warehouse_dir)
        key = (id(spark), warehouse)
        if key not in _STORES:
            _STORES[key] = TableStore(spark, warehouse)
        return _STORES[key]
