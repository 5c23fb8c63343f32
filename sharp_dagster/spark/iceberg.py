"""Warehouse tables as Apache Iceberg tables: one partition replaced in one commit, after an audit, or not at all.

`IcebergTables` is the one handle on them. Its parts: `catalog.py` (the catalog's Spark conf: `catalog_conf`,
`use_warehouse`), `iceberg_base.py` (loading tables, committing snapshot references, creating tables), `wap.py`
(the write-audit-publish cycle of one table partition on a branch: stage, audit, publish; appends; staging
branches), `wap_range.py` (the same for several partitions in one write), `snapshots.py` (history, rollback).
This module puts them together and adds the reads of `main`.

Nothing here imports Dagster. The table API is reached through Py4J (`Spark3Util.loadIcebergTable`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession

from sharp_dagster.settings import warehouse_location
from sharp_dagster.spark.catalog import use_warehouse
from sharp_dagster.spark.snapshots import SnapshotHistory
from sharp_dagster.spark.tables import MissingPartitionError, TableRef, partition_label
from sharp_dagster.spark.wap import WriteAuditPublish
from sharp_dagster.spark.wap_range import RangeStage

T = TypeVar("T")


class IcebergTables(RangeStage, WriteAuditPublish, SnapshotHistory):
    """Stages, audits, publishes and undoes partitions of Iceberg tables in one catalog of one SparkSession."""

    _counts_memo: dict[str, Any] | None = None
    _counts_locks: dict[str, threading.Lock] = {}
    _locks_lock = threading.Lock()  # guards the making of a key's lock

    @contextmanager
    def counts_read_once(self) -> Iterator[None]:
        """Within the block, each table's partition counts (and an ODS table's day tags, `cdc.ods.read`) are read
        once: a range run reads the same upstream tables for every period, and a source's day (`assets/ods_source.py`)
        the same raw binlog table for every table, from several threads; those are not written meanwhile (their
        periods passed the upstream gate: the done markers). A block inside another keeps the outer one's memory."""
        if self._counts_memo is not None:  # inside another such block (a range in a source's day): its memory
            yield
            return
        self._counts_memo, self._counts_locks = {}, {}
        try:
            yield
        finally:
            self._counts_memo, self._counts_locks = None, {}

    def read_once(self, key: str, read: Callable[[], T]) -> T:
        """`read()`; within `counts_read_once()`, its first answer for `key` again (what `cdc.ods.read` reads of an
        ODS table's tags goes through it). Threads asking for the same key at once wait for the one that reads it."""
        memo = self._counts_memo
        if memo is None:
            return read()
        with self._locks_lock:
            lock = self._counts_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in memo:
                memo[key] = read()
            return memo[key]

    def list_partitions(self, ref: TableRef) -> list[dict[str, str]]:
        """Partitions of `main` that hold rows, sorted by their values."""
        counts = self.partition_counts(ref)
        return [dict(zip(ref.partition_cols, key, strict=True)) for key in sorted(counts)]

    def partition_counts(self, ref: TableRef) -> dict[tuple[str, ...], int]:
        """Rows of every partition of `main` that holds rows, from the table's metadata (no data is read): partitions
        are only ever replaced whole, so the data files' record counts are the rows. Read once within
        `counts_read_once()`."""
        return self.read_once(ref.qualified, lambda: self._partition_counts(ref))

    def _partition_counts(self, ref: TableRef) -> dict[tuple[str, ...], int]:
        if not self.exists(ref):
            return {}
        self.refresh(ref)
        cols = ", ".join(f"partition.`{c}` AS `{c}`" for c in ref.partition_cols)
        rows = self.spark.sql(
            f"SELECT {cols}, record_count FROM {self.name(ref)}.partitions WHERE record_count > 0"
        ).collect()
        return {tuple(str(r[c]) for c in ref.partition_cols): int(r["record_count"]) for r in rows}

    def has_partition(self, ref: TableRef, values: Mapping[str, str]) -> bool:
        wanted = self._check_values(ref, values)
        return wanted in self.list_partitions(ref)

    def require_partitions(
        self, ref: TableRef, partitions: Iterable[Mapping[str, str]], needed_by: str = ""
    ) -> int:
        """The rows of the given partitions of `main` (from the metadata: no data is read), or
        `MissingPartitionError` naming every partition with no rows."""
        wanted = [self._check_values(ref, p) for p in partitions]
        counts = self.partition_counts(ref)
        keys = [tuple(p[c] for c in ref.partition_cols) for p in wanted]
        missing = [p for p, k in zip(wanted, keys, strict=True) if k not in counts]
        if missing:
            labels = ", ".join(partition_label(ref, p) for p in missing[:10])
            more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
            who = f" needed by {needed_by}" if needed_by else ""
            raise MissingPartitionError(f"upstream partition not written{who}: {labels}{more}")
        return sum(counts[k] for k in keys)

    def read_partitions(
        self, ref: TableRef, partitions: Iterable[Mapping[str, str]], needed_by: str = ""
    ) -> DataFrame:
        """Rows of the given partitions of `main`; `MissingPartitionError` names every partition with no rows."""
        wanted = [self._check_values(ref, p) for p in partitions]
        self.require_partitions(ref, wanted, needed_by)
        df = self.spark.table(self.name(ref))
        if not wanted:
            return df.limit(0)
        cond = None
        for p in wanted:
            term = self._condition(ref, p)
            cond = term if cond is None else cond | term
        return df.where(cond)


def warehouse_tables(spark: SparkSession, settings: Any) -> IcebergTables:
    """The Iceberg tables of `settings`' warehouse in `spark`, its catalog made current (`use_warehouse`)."""
    name = use_warehouse(spark, settings)
    return IcebergTables(spark, name, warehouse_dir=warehouse_location(settings.warehouse_dir))
