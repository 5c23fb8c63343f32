"""The base of `IcebergTables`: names, loading a table through Py4J, committing snapshot references with retries,
partition values, and creating tables. Write-audit-publish (`wap.py`) and history (`snapshots.py`) build on it."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sharp_dagster.spark.catalog import DEFAULT_CATALOG, check_catalog_name
from sharp_dagster.spark.tables import TableRef

COMMIT_ATTEMPTS = 20
_VALUE = re.compile(r"^[A-Za-z0-9_\-:. ]+$")

# How a write that spans partitions (an append, a range's stage) is laid out: rows clustered by partition (one file
# per partition), sorted by it within a task, ONE data file open at a time (Iceberg's clustered writer). Without
# `fanout-enabled=false` Iceberg picks its fanout writer (one open Parquet writer per partition): a backfill's
# landing of 30 days spans 2,880 raw binlog partitions (table, day, hour), and the fanout writer ran a 2 GiB driver
# out of heap on 16,000 rows (`bench/bench_pipeline.py --backfill`).
MULTI_PARTITION_WRITE = {"distribution-mode": "hash", "fanout-enabled": "false"}

# New columns are accepted on write (the merge may widen a table); Iceberg adds them to the table schema.
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.spark.accept-any-schema": "true",
    # A stage writes one partition: no shuffle to cluster rows by partition first (one Spark job less per write).
    # Appends that span partitions ask for the hash distribution themselves (`append`).
    "write.distribution-mode": "none",
}


def java_error(exc: BaseException) -> tuple[str, str]:
    """The Java class and message behind a Py4J error (Py4J's own text names only the called method)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return type(exc).__name__, str(exc)
    return str(java.getClass().getName()), str(java.getMessage())


class IcebergBase:
    """One catalog of one SparkSession: what the write-audit-publish cycle, the history and the reads share."""

    def __init__(
        self, spark: SparkSession, catalog: str = DEFAULT_CATALOG, warehouse_dir: str | Path | None = None
    ):
        check_catalog_name(catalog)
        if not spark.conf.get(f"spark.sql.catalog.{catalog}", None):
            raise ValueError(f"Spark catalog {catalog!r} is not configured: apply catalog_conf(...) first")
        self.spark = spark
        self.catalog = catalog
        # Where the catalog keeps data; other files of the warehouse (the landing's done markers) live beside it.
        self.warehouse_dir = str(warehouse_dir).rstrip("/") if warehouse_dir is not None else None
        self._jvm = spark.sparkContext._jvm
        self.commit_retries = 0  # reference commits retried after another writer committed first

    def name(self, ref: TableRef) -> str:
        return f"{self.catalog}.{ref.database}.{ref.name}"

    def _branch_table(self, ref: TableRef, branch: str) -> str:
        return f"{self.name(ref)}.`branch_{branch}`"

    def java_table(self, ref: TableRef) -> Any:
        """The Java `org.apache.iceberg.Table` of `ref`, freshly loaded (its metadata is current): what reads of
        its references, snapshots, schemas and properties go through (`spark/refs.py`). `LookupError` when there is
        no such table."""
        try:
            return self._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                self.spark._jsparkSession, self.name(ref)
            )
        except Exception as exc:
            kind, message = java_error(exc)
            if "NoSuchTable" in kind or "TABLE_OR_VIEW_NOT_FOUND" in message:
                raise LookupError(f"no Iceberg table {self.name(ref)}") from exc
            raise

    def refresh(self, ref: TableRef) -> None:
        """Let this session's SQL and DataFrame reads of `ref` see its newest metadata: Spark caches loaded tables
        per session, so a commit through the Java API (or by another process) is seen only after a refresh."""
        self.spark.catalog.refreshTable(self.name(ref))

    def commit_refs(self, ref: TableRef, build: Callable[[Any], Any]) -> Any:
        """Commit a snapshot-reference change built by `build(table)` on freshly loaded metadata, retrying when
        another writer committed first: the one way references change (`spark/refs.py` speaks in branches and tags
        over it; `build` gets the Java table and returns its `manageSnapshots()` with every change of the commit).

        Iceberg's `ManageSnapshots` does not retry by itself after a concurrent commit (its operations keep the
        metadata they were built on and fail with "Table metadata refresh is required"), so each attempt reloads
        the table and rebuilds the change; `build` re-checks its preconditions and returns None for no change.
        Returns the table, whose metadata includes the commit.
        """
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.java_table(ref)
            if attempt:
                table.refresh()  # the session's catalog may cache the table: read the catalog's pointer again
            pending = build(table)
            if pending is None:
                return table
            try:
                pending.commit()
                return table
            except Exception as exc:
                kind, _ = java_error(exc)
                if (
                    kind != "org.apache.iceberg.exceptions.CommitFailedException"
                    or attempt == COMMIT_ATTEMPTS - 1
                ):
                    raise
            self.commit_retries += 1
            time.sleep(random.uniform(0.02, 0.1) * (attempt + 1))

    def _condition(self, ref: TableRef, values: Mapping[str, str]):
        cond = None
        for col in ref.partition_cols:
            term = F.col(col) == F.lit(str(values[col]))
            cond = term if cond is None else cond & term
        return cond

    def _check_values(self, ref: TableRef, values: Mapping[str, str]) -> dict[str, str]:
        missing = [c for c in ref.partition_cols if c not in values]
        if missing:
            raise ValueError(f"{ref.qualified}: partition values missing for {missing}")
        for col in ref.partition_cols:
            if not _VALUE.match(str(values[col])):
                raise ValueError(f"{ref.qualified}: unsafe partition value {values[col]!r} for {col}")
        return {c: str(values[c]) for c in ref.partition_cols}

    # ---------------------------------------------------------------- tables
    def exists(self, ref: TableRef) -> bool:
        return bool(self.spark.catalog.tableExists(self.name(ref)))

    def ensure_table(self, ref: TableRef, df: DataFrame) -> bool:
        """Create the table from `df`'s schema, partitioned by identity on `ref.partition_cols`, unless it exists.

        Returns True when this call created it. Two processes creating it at once: one wins, the other sees it.
        """
        if self.exists(ref):
            return False
        missing = [c for c in ref.partition_cols if c not in df.columns]
        if missing:
            raise ValueError(
                f"{ref.qualified}: partition columns {missing} not in the DataFrame {df.columns}"
            )
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.catalog}.{ref.database}")
        writer = df.limit(0).writeTo(self.name(ref)).using("iceberg").partitionedBy(*ref.partition_cols)
        for key, value in TABLE_PROPERTIES.items():
            writer = writer.tableProperty(key, value)
        try:
            writer.create()
        except Exception as exc:
            if "already exists" not in str(exc).lower() and "TABLE_OR_VIEW_ALREADY_EXISTS" not in str(exc):
                raise
            return False
        return True

    def _in_table_order(self, ref: TableRef, df: DataFrame) -> DataFrame:
        """`df`'s columns in the table's order, new ones last: Iceberg matches a write's columns by position, and
        adds the new ones (schema merge) at the end of the table."""
        known = self.spark.table(self.name(ref)).columns
        ordered = [c for c in known if c in df.columns] + [c for c in df.columns if c not in known]
        return df if ordered == df.columns else df.select(*ordered)

    def register(self, ref: TableRef, refresh: bool = False) -> bool:
        """An Iceberg table is always resolvable by name (refreshed on demand); False when it does not exist."""
        if not self.exists(ref):
            return False
        if refresh:
            self.refresh(ref)
        return True

    def drop_table(self, ref: TableRef) -> None:
        self.spark.sql(f"DROP TABLE IF EXISTS {self.name(ref)} PURGE")

    def current_snapshot_id(self, ref: TableRef) -> int | None:
        current = self.java_table(ref).currentSnapshot()
        return int(current.snapshotId()) if current is not None else None
