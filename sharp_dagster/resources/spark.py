"""Spark as a Dagster resource: one SparkSession per run process, configured from the environment."""

from __future__ import annotations

from dataclasses import replace

from dagster import ConfigurableResource
from pydantic import Field
from pyspark.sql import SparkSession

from sharp_dagster.settings import Settings
from sharp_dagster.spark.iceberg import IcebergTables, warehouse_tables
from sharp_dagster.spark.session import build_spark_session


class SparkResource(ConfigurableResource):
    """The process's SparkSession (built on first use) and the warehouse's Iceberg tables.

    `master` defaults to `SHARP_SPARK_MASTER` (local[2]); `conf` adds Spark settings on top of `SHARP_SPARK_CONF`.
    """

    master: str | None = Field(
        default=None, description="Spark master URL; default SHARP_SPARK_MASTER or local[2]"
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark configuration")

    def settings(self) -> Settings:
        settings = Settings.from_env()
        if self.master:
            settings = replace(settings, spark_master=self.master)
        return settings

    def session(self) -> SparkSession:
        return build_spark_session(self.settings(), **self.conf)

    def store(self) -> IcebergTables:
        """The warehouse's Iceberg tables, its catalog made the session's current one (`catalog.use_warehouse`)."""
        return warehouse_tables(self.session(), self.settings())
