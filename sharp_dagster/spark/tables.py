"""Warehouse tables as Hive-style partitioned parquet folders, written one partition at a time, atomically.

Layout: `<warehouse>/<database>.db/<table>/dt=2024-01-01[/hour=05]/part-*.parquet`. A partition is written in
two phases so that readers never see a half-written partition and a failed write leaves the old one in place:

1. `stage()` writes the DataFrame to `<table>/_staging/<token>/` (Spark ignores folders starting with `_` or `.`
   when it lists a table, so staged data is invisible to readers). Data-quality rules can read it there.
2. `publish()` swaps it in with two renames: the old partition folder moves to `<table>/.trash/`, the staged
   folder takes its place, and the trash is deleted. A crash between the two renames is healed by the next
   `recover()` (run before every read and write of the table): a partition missing from the table but present in
   the trash is moved back.

The file system is reached through Hadoop's FileSystem API, so the same code works on a local disk, on HDFS and on
the shared disk of a standalone cluster. Tables are registered in the session's catalog on demand
(`CREATE TABLE ... USING parquet LOCATION ...`), so SQL can name them `database.table`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VALUE = re.compile(r"^[A-Za-z0-9_\-:. ]+$")


class MissingPartitionError(LookupError):
    """An upstream partition that a run needs has not been written."""


@dataclass(frozen=True)
class TableRef:
    """A warehouse table: `database.name`, partitioned by `partition_cols` (outermost first)."""

    database: str
    name: str
    partition_cols: tuple[str, ...] = ("dt",)

    def __post_init__(self) -> None:
        for part in (self.database, self.name, *self.partition_cols):
            if not _IDENT.match(part):
                raise ValueError(f"not a plain identifier: {part!r} in table {self.database}.{self.name}")

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"


def partition_label(ref: TableRef, values: Mapping[str, str]) -> str:
    """`ods.orders[dt=2024-01-02]` for messages."""
    spec = ",".join(f"{c}={values[c]}" for c in ref.partition_cols)
    return f"{ref.qualified}[{spec}]"


@dataclass(frozen=True)
class StagedPartition:
    ref: TableRef
    values: tuple[tuple[str, str], ...]
    path: str
    row_count: int
    columns: tuple[str, ...] = ()

    @property
    def values_dict(self) -> dict[str, str]:
        return dict(self.values)


class TableStore:
    """Reads and writes partitions of warehouse tables through one SparkSession."""

    def __init__(self, spark: SparkSession, warehouse_dir: str | Path):
        self.spark = spark
        self.warehouse_dir = str(warehouse_dir).rstrip("/")
        jvm = spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._fs = self._Path(self._uri(self.warehouse_dir)).getFileSystem(self._conf)
        self._registered: dict[str, tuple[str, ...]] = {}

    # ---------------------------------------------------------------- paths
    @staticmethod
    def _uri(path: str) -> str:
        return path if "://" in path else f"file://{path}"

    def table_path(self, ref: TableRef) -> str:
        return f"{self.warehouse_dir}/{ref.database}.db/{ref.name}"

    def partition_path(self, ref: TableRef, values: Mapping[str, str]) -> str:
        missing = [c for c in ref.partition_cols if c not in values]
        if missing:
            raise ValueError(f"{ref.qualified}: partition values missing for {missing}")
        parts = []
        for col in ref.partition_cols:
            value = str(values[col])
            if not _VALUE.match(value):
                raise ValueError(f"{ref.qualified}: unsafe partition value {value!r} for {col}")
            parts.append(f"{col}={value}")
        return "/".join([self.table_path(ref), *parts])

    def _p(self, path: str):
        return self._Path(self._uri(path))

    def _exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._p(path)))

    # ---------------------------------------------------------------- partitions
    def has_partition(self, ref: TableRef, values: Mapping[str, str]) -> bool:
        """A partition exists when its folder holds the `_SUCCESS` marker of a completed write."""
        return self._exists(self.partition_path(ref, values) + "/_SUCCESS")

    def list_partitions(self, ref: TableRef) -> list[dict[str, str]]:
        """Every published partition, sorted by its values."""
        self.recover(ref)
        root = self.table_path(ref)
        if not self._exists(root):
            return []
        found: list[dict[str, str]] = []

        def walk(path: str, depth: int, acc: dict[str, str]) -> None:
            col = ref.partition_cols[depth]
            for status in self._fs.listStatus(self._p(path)):
                name = status.getPath().getName()
                if not status.isDirectory() or not name.startswith(f"{col}="):
                    continue
                here = {**acc, col: name.split("=", 1)[1]}
                child = f"{path}/{name}"
                if depth + 1 < len(ref.partition_cols):
                    walk(child, depth + 1, here)
                elif self._exists(child + "/_SUCCESS"):
                    found.append(here)

        walk(root, 0, {})
        return sorted(found, key=lambda v: tuple(v[c] for c in ref.partition_cols))

    def stage(self, ref: TableRef, values: Mapping[str, str], df: DataFrame) -> StagedPartition:
        """Write `df` where no reader looks, and return a handle to publish or discard it."""
        self.recover(ref)
        self.partition_path(ref, values)  # validates the values before anything is written
        drop = [c for c in ref.partition_cols if c in df.columns]
        data = df.drop(*drop) if drop else df
        path = f"{self.table_path(ref)}/_staging/{uuid.uuid4().hex}"
        # Count the rows while they are written (one Spark job, not a second read of the files).
        observation = Observation(f"rows_{uuid.uuid4().hex[:8]}")
        data.observe(observation, F.count(F.lit(1)).alias("rows")).write.mode("error").parquet(
            self._uri(path)
        )
        row_count = int(observation.get["rows"])
        ordered = tuple((c, str(values[c])) for c in ref.partition_cols)
        return StagedPartition(
            ref=ref, values=ordered, path=path, row_count=row_count, columns=tuple(data.columns)
        )

    def read_staged(self, staged: StagedPartition) -> DataFrame:
        """The staged rows with the partition columns added back, as readers will see them once published."""
        df = self.spark.read.parquet(self._uri(staged.path))
        for col, value in staged.values:
            df = df.withColumn(col, F.lit(value))
        return df

    def publish(self, staged: StagedPartition) -> None:
        """Swap the staged partition in; the previous data of that partition is replaced as a whole."""
        ref, values = staged.ref, staged.values_dict
        target = self.partition_path(ref, values)
        trash_root = f"{self.table_path(ref)}/.trash"
        self._fs.mkdirs(self._p(trash_root))
        self._fs.mkdirs(self._p(target).getParent())
        trash = f"{trash_root}/{'__'.join(f'{c}={v}' for c, v in staged.values)}.{uuid.uuid4().hex}"
        moved_old = False
        if self._exists(target):
            if not self._fs.rename(self._p(target), self._p(trash)):
                raise OSError(f"could not move the old partition {target} aside")
            moved_old = True
        if not self._fs.rename(self._p(staged.path), self._p(target)):
            if moved_old:
                self._fs.rename(self._p(trash), self._p(target))
            raise OSError(f"could not publish staged data {staged.path} as {target}")
        if moved_old:
            self._fs.delete(self._p(trash), True)
        known = self._registered.get(ref.qualified)
        if known is not None and set(staged.columns) <= set(known):
            self.spark.catalog.refreshTable(ref.qualified)  # same columns: only the file listing changed
        else:
            self._registered.pop(ref.qualified, None)  # new columns: merge the schema again
            self.register(ref)

    def discard(self, staged: StagedPartition) -> None:
        self._fs.delete(self._p(staged.path), True)

    def write_partition(self, ref: TableRef, values: Mapping[str, str], df: DataFrame) -> StagedPartition:
        staged = self.stage(ref, values, df)
        try:
            self.publish(staged)
        except Exception:
            self.discard(staged)
            raise
        return staged

    def recover(self, ref: TableRef) -> list[str]:
        """Move back partitions a crash left in the trash with nothing in their place; return what was restored."""
        trash_root = f"{self.table_path(ref)}/.trash"
        if not self._exists(trash_root):
            return []
        restored = []
        for status in self._fs.listStatus(self._p(trash_root)):
            name = status.getPath().getName()
            spec = name.rsplit(".", 1)[0]
            values = dict(part.split("=", 1) for part in spec.split("__"))
            target = self.partition_path(ref, values)
            if self._exists(target):
                self._fs.delete(status.getPath(), True)
            else:
                self._fs.mkdirs(self._p(target).getParent())
                self._fs.rename(status.getPath(), self._p(target))
                restored.append(target)
        return restored

    # ---------------------------------------------------------------- reading
    def register(self, ref: TableRef, refresh: bool = False) -> bool:
        """Make `database.table` resolvable in SQL; return False when the table has no data yet.

        A table registered by this store is only refreshed (its file listing); the full schema is merged when the
        table is first registered and when a write of this store brings new columns (`publish`).
        """
        spark = self.spark
        key = ref.qualified
        if key in self._registered and not refresh:
            return True
        if key in self._registered and refresh:
            spark.catalog.refreshTable(key)
            return True
        if not self.list_partitions(ref):
            return False
        spark.sql(
            f"CREATE DATABASE IF NOT EXISTS `{ref.database}` LOCATION '{self.warehouse_dir}/{ref.database}.db'"
        )
        fresh = self.spark.read.option("mergeSchema", "true").parquet(self._uri(self.table_path(ref))).columns
        current = self._registered.get(key)
        if current is not None and current != tuple(fresh):
            spark.sql(f"DROP TABLE IF EXISTS {key}")
            current = None
        if current is None:
            spark.sql(f"DROP TABLE IF EXISTS {key}")
            spark.sql(
                f"CREATE TABLE {key} USING parquet OPTIONS (mergeSchema 'true') "
                f"LOCATION '{self._uri(self.table_path(ref))}'"
            )
            self._registered[key] = tuple(fresh)
        elif refresh:
            spark.catalog.refreshTable(key)
        return True

    def read_partitions(
        self, ref: TableRef, partitions: Iterable[Mapping[str, str]], needed_by: str = ""
    ) -> DataFrame:
        """Rows of the given partitions; raises `MissingPartitionError` naming every partition not written."""
        wanted = [dict(p) for p in partitions]
        missing = [p for p in wanted if not self.has_partition(ref, p)]
        if missing:
            labels = ", ".join(partition_label(ref, p) for p in missing[:10])
            more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
            who = f" needed by {needed_by}" if needed_by else ""
            raise MissingPartitionError(f"upstream partition not written{who}: {labels}{more}")
        self.register(ref, refresh=True)
        df = self.spark.table(ref.qualified)
        if not wanted:
            return df.limit(0)
        cond = None
        for p in wanted:
            term = None
            for col in ref.partition_cols:
                eq = F.col(col) == F.lit(str(p[col]))
                term = eq if term is None else term & eq
            cond = term if cond is None else cond | term
        return df.where(cond)

    def drop_table(self, ref: TableRef) -> None:
        self.spark.sql(f"DROP TABLE IF EXISTS {ref.qualified}")
        self._registered.pop(ref.qualified, None)
        self._fs.delete(self._p(self.table_path(ref)), True)
