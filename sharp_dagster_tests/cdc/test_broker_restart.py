"""The Kafka broker dies during an hourly landing and comes back: nothing is lost, nothing is recorded twice.

A real Apache Kafka broker (its own, in this test's folder) serves the shop's binlog. The landing asset runs
through Dagster; with its end offsets fixed, as it starts reading, the broker is SIGKILLed. The landing must fail fast, record
no offsets (its job-log row ends FAILURE with the start it had), and leave nothing half-landed that a re-run would
double. The broker restarts on the same log dirs, the landing is re-run and the day merged: the ODS tables equal
the source replayed in Python.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from dagster import DagsterInstance

from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.demo.generator import GeneratorConfig, generate, read_changes
from sharp_dagster.settings import KAFKA_ENV, Settings
from sharp_dagster_tests.cdc_support import QUIET, CdcFeed

CFG = GeneratorConfig(days=1, users=40, products=10, orders_per_day=25, history_orders=20)
DAY = "2024-01-01"
LANDING_JOB = "original_binlog/shop"


def _plain(value):
    """Decimal columns (ODS) and JSON numbers (the source files) compared as numbers."""
    return float(value) if isinstance(value, Decimal | float) else value


def _expected(table: str, key: str, value: str) -> list[tuple]:
    """(key, value) of every row of the source table after the day, replayed over the snapshot (the oracle)."""
    root = Settings.from_env().sample_dir
    state: dict = {}
    for path in sorted((root / "shop" / "snapshot" / table).glob("*.jsonl")):  # one file per shard
        for line in path.read_text().splitlines():
            row = json.loads(line)
            state[row[key]] = _plain(row[value])
    for change in read_changes(root, DAY):
        if change["_table"] != table:
            continue
        if change["_op"] == "d":
            state.pop(change[key])
        else:
            state[change[key]] = _plain(change[value])
    return sorted(state.items())


@pytest.fixture()
def own_warehouse(tmp_path, monkeypatch):
    """A data folder (warehouse, job log, sample shop) of this test alone."""
    monkeypatch.setenv("SHARP_DATA_DIR", str(tmp_path / "data"))
    generate(Settings.from_env().sample_dir, CFG, force=True)
    return tmp_path


def test_broker_killed_during_landing_then_restarted(spark, own_warehouse, monkeypatch):
    from sharp_dagster.cdc.landing import land as landing
    from sharp_dagster.cdc.landing.raw_tables import raw_table_ref
    from sharp_dagster.definitions import defs
    from sharp_dagster.joblog.store import JobLog
    from sharp_dagster.servers.broker import LocalBroker
    from sharp_dagster.spark.iceberg import warehouse_tables

    broker = LocalBroker(base_dir=own_warehouse / "kafka").start()
    try:
        monkeypatch.setenv(KAFKA_ENV, broker.bootstrap_servers)
        instance = DagsterInstance.ephemeral()
        feed = CdcFeed(defs, instance)

        read = landing._read
        killed: list[dict] = []

        def kill_then_read(consumer, errors, topic, starts, ends, *rest):
            broker.kill()  # SIGKILL, as a crash, with the end offsets fixed and nothing read yet
            killed.append(dict(ends))
            return read(consumer, errors, topic, starts, ends, *rest)

        monkeypatch.setattr(landing, "_read", kill_then_read)
        with pytest.raises(AssertionError, match="unreachable"):
            feed.land(DAY)
        assert killed and sum(killed[0].values()) > 0, "the landing never reached the broker"

        jl = JobLog(Settings.from_env().log_db_url)
        failed = jl.recent(LANDING_JOB, limit=5)
        assert [r.status for r in failed] == ["FAILURE"]
        assert jl.last_success(LANDING_JOB, order_by_range=False, incremental_type="kafka_offset") is None
        assert failed[0].range_end in (None, failed[0].range_start), "the failed run recorded offsets"
        tables = warehouse_tables(spark, Settings.from_env())
        raw = raw_table_ref(feed.database)
        assert tables.list_partitions(raw) == [], "the failed landing committed rows to the raw binlog table"

        monkeypatch.setattr(landing, "_read", read)
        broker.start()  # same ports, same log dirs
        feed.land(DAY, replay=False)  # the messages are still in the restarted broker
        ok = jl.last_success(LANDING_JOB, order_by_range=False, incremental_type="kafka_offset")
        assert ok is not None and json.loads(ok.range_end) == {
            feed.topic: {str(p): o for p, o in killed[0].items()}
        }

        job = defs.resolve_job_def("warehouse_daily")  # ODS merge -> DWD -> ADS of the day
        assert job.execute_in_process(partition_key=DAY, instance=instance, run_config=QUIET).success
        columns = {
            "orders": ("order_id", "order_status"),
            "user_info": ("user_id", "level"),
            "product": ("product_id", "price"),
            "order_item": ("item_id", "quantity"),
        }
        assert tables.list_partitions(raw), "the re-run landed nothing"
        for table, (key, value) in columns.items():
            rows = ods_store.read_version(tables, table, DAY).select(key, value).collect()  # the day's tag
            assert sorted((k, _plain(v)) for k, v in rows) == _expected(table, key, value), (
                f"ods.{table} differs from the source"
            )
    finally:
        broker.cleanup()
