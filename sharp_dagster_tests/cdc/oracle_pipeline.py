"""The pipeline side of `test_source_oracle.py`: the collector, and warehouses driven through Dagster.

`build_defs(sql_dir)` loads the code location (`sharp_dagster/definitions.py`, run afresh) over a warehouse folder
holding only the test's CDC YAML, as `SHARP_WAREHOUSE_SQL_DIR` makes Dagster load it. A `Warehouse` is one data
folder (Iceberg tables, job log, done markers) with its own Dagster instance; inside `warehouse.env()` the
environment points the project at it, so the two warehouses of the test never see each other's state.
`collect(...)` runs the collector in process up to the end of the binlog, its heartbeats stamped with a simulated
source clock (the server's real clock is years past the simulated days, see test_end_to_end.py).
"""

from __future__ import annotations

import runpy
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, DagsterInstance, materialize
from pyspark.sql import functions as F

from sharp_dagster.cdc.capture.collector import Collector, CollectStats
from sharp_dagster.cdc.merge.result import SEQ_COLUMN
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.bootstrap import bootstrap_source
from sharp_dagster.logdriven import job_log
from sharp_dagster.settings import KAFKA_ENV, Settings
from sharp_dagster.spark.iceberg import warehouse_tables
from sharp_dagster_tests.cdc.oracle_source import TableContent, sort_rows
from sharp_dagster_tests.cdc_support import QUIET

SQL_DIR_ENV = "SHARP_WAREHOUSE_SQL_DIR"


@contextmanager
def environment(**values: str | None):
    """Set (or, with None, unset) environment variables for the block; restore them after."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in values.items():
            if value is None:
                mp.delenv(key, raising=False)
            else:
                mp.setenv(key, value)
        yield


def build_defs(sql_dir: Path) -> dict[str, Any]:
    """The code location's globals (`defs`, ...) over `sql_dir`, loaded as Dagster loads it, with its ODS tables
    and landing databases (`ods_tables`, `databases`)."""
    with environment(**{SQL_DIR_ENV: str(sql_dir)}):
        loaded = runpy.run_module("sharp_dagster.definitions")
        loaded["ods_tables"] = loaded["ods_tables"]()
        loaded["databases"] = [db for _, db, _ in loaded["landing_assets"]()]
        return loaded


class SimulatedClock:
    """A source clock reading `epoch_ms` when made, running on from there."""

    def __init__(self, epoch_ms: int):
        self._offset = epoch_ms / 1000 - time.time()

    def __call__(self) -> int:
        return int((time.time() + self._offset) * 1000)


def collect(mysql, kafka: str, source, state: Path, start: str, clock_ms: int) -> CollectStats:
    collector = Collector(
        mysql, {"bootstrap.servers": kafka}, source, state, start=start, clock=SimulatedClock(clock_ms)
    )
    stats = collector.run(once=True)
    assert stats.stopped_by == "eof", stats
    return stats


def failure_text(result) -> str:
    failures = [e for e in result.all_events if e.is_step_failure]
    if not failures:
        return "run failed without a step failure"
    return "; ".join(f.step_failure_data.error.message.strip().splitlines()[0] for f in failures)


class Warehouse:
    """One data folder driven through Dagster: landing runs, ODS merges by day or as one range, ODS reads."""

    def __init__(self, spark, root: Path, sql_dir: Path, kafka: str):
        self.spark = spark
        self.root = root
        self.sql_dir = sql_dir
        self.kafka = kafka
        self.instance = DagsterInstance.ephemeral()
        self.last_result = None  # the last run's result (its check evaluations, events)

    def load(self, defs: dict[str, Any]) -> None:
        """Use the code location `defs` (`build_defs`): loaded once the bootstrap has set the source's start."""
        self.defs = defs["defs"]
        self.ods_tables = defs["ods_tables"]
        self.databases = defs["databases"]  # the landing's databases (the oracle tests have one)

    @contextmanager
    def env(self):
        with environment(
            SHARP_DATA_DIR=str(self.root),
            SHARP_WAREHOUSE_DIR=None,
            SHARP_LOG_DB_URL=None,
            SHARP_CLAIM_TIMEOUT_S="120",
            **{SQL_DIR_ENV: str(self.sql_dir), KAFKA_ENV: self.kafka},
        ):
            yield

    def store(self):
        return warehouse_tables(self.spark, Settings.from_env())

    def _materialize(self, keys: list[AssetKey], partition: str | tuple[str, str]) -> str | None:
        """One Dagster run of `keys` for one partition or a (first, last) range; its failure, or None."""
        kwargs: dict[str, Any] = {}
        if isinstance(partition, tuple):
            kwargs["tags"] = {
                "dagster/asset_partition_range_start": partition[0],
                "dagster/asset_partition_range_end": partition[1],
            }
        else:
            kwargs["partition_key"] = partition
        with self.env():
            result = materialize(
                list(self.defs.assets),
                selection=keys,
                instance=self.instance,
                resources=self.defs.resources,
                raise_on_error=False,
                run_config=QUIET,
                **kwargs,
            )
        self.last_result = result
        return None if result.success else failure_text(result)

    def run(self, keys: list[AssetKey], partition: str | tuple[str, str]) -> str | None:
        """Any assets (a DWD table, ...) for one partition or a range, in one run; its failure, or None."""
        return self._materialize(keys, partition)

    def land(self, hours: str | tuple[str, str]) -> str | None:
        """The landing assets `original_binlog/<db>` of every database for an hourly partition or a range of them."""
        return self._materialize([AssetKey(["original_binlog", db]) for db in self.databases], hours)

    def merge(self, days: str | tuple[str, str]) -> str | None:
        """Every ODS asset for one day, or for a range of days in one run (a single-run backfill)."""
        return self._materialize([AssetKey(["ods", t.name]) for t in self.ods_tables], days)

    def bootstrap(self, mysql, source, clock) -> list:
        """`cdc bootstrap` of `source` into this warehouse (what the command runs, in this process), its day read
        from the source's simulated `clock`."""
        with self.env():
            return bootstrap_source(self.spark, self.store(), job_log(), mysql, source, clock=clock)

    def compare(self, states: dict[str, dict[str, TableContent]], label: str) -> list[str]:
        """Differences between the ODS of every table on each day of `states` (day -> table -> the source's content
        at the day's end) and the source; each day read at its tag (`ods.<t> VERSION AS OF '<day>'`)."""
        problems = []
        with self.env():
            store = self.store()
            for table in next(iter(states.values())):
                present = set(ods_store.published_days(store, table))
                for day, expected in states.items():
                    columns: list[str] = []
                    rows: list[dict] = []
                    if day in present:
                        df = ods_store.read_version(store, table, day).drop(SEQ_COLUMN)
                        columns = list(df.columns)
                        text = [F.col(f"`{c}`").cast("string") for c in columns]
                        rows = [dict(zip(columns, r, strict=True)) for r in df.select(*text).collect()]
                    problem = ods_difference(day in present, columns, rows, expected[table])
                    if problem:
                        problems.append(f"{label} {day} ods.{table}: {problem}")
        return problems

    def close(self) -> None:
        self.instance.dispose()


def ods_difference(present: bool, columns: list[str], ods: list[dict], expected: TableContent) -> str | None:
    """Why a day's ODS rows (`columns`, each row's values as text) differ from `expected`, or None."""
    source_columns, rows = expected
    if not present:
        return "no tag of the day" if rows else None
    missing = sorted(set(source_columns) - set(columns))
    if missing:
        return f"columns {missing} missing (ODS has {columns})"
    # A day's tag reads with its snapshot's schema; a column the source did not have yet must be NULL anyway.
    later = [c for c in columns if c not in source_columns]
    if any(r[c] is not None for r in ods for c in later):
        return f"values in columns the source did not have yet: {later}"
    got = sort_rows([tuple(r[c] for c in source_columns) for r in ods])
    if got == rows:
        return None
    want, have = Counter(rows), Counter(got)
    lacking, extra = sorted((want - have).elements(), key=repr), sorted((have - want).elements(), key=repr)
    return (
        f"{len(lacking)} source row(s) missing, {len(extra)} row(s) not in the source "
        f"(of {len(rows)} / {len(got)}); columns {source_columns}; missing {lacking[:3]}; extra {extra[:3]}"
    )
