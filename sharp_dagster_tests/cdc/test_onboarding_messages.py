"""Onboarding a MariaDB, the messages are as true as the README: a second bootstrap and a server refusing the user
are refused before Spark starts; the bootstrap does not send the user to `--start`; a collector resuming from its
saved position does not say it has none."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from sharp_dagster.cdc.ods import bootstrap as bs
from sharp_dagster.cli.main import main
from sharp_dagster.joblog import JobLog
from sharp_dagster.settings import WAREHOUSE_SQL_DIR
from sharp_dagster_tests.joblog.pgserver import free_port

SHOP_YAML = str(WAREHOUSE_SQL_DIR / "cdc" / "shop.yaml")


@pytest.fixture()
def no_spark(tmp_path, monkeypatch):
    """A job log of the test's own, and a Spark that must not start."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    monkeypatch.setenv("SHARP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SHARP_LOG_DB_URL", url)

    def spark_started(*args, **kwargs):
        raise AssertionError("Spark started")

    monkeypatch.setattr("sharp_dagster.spark.session.build_spark_session", spark_started)
    return url


def _record_bootstrap(url: str) -> None:
    jl = JobLog(url)
    with jl.run(bs.job_name("shop"), bs._Day("2024-01-01"), run_id=None) as handle:
        with jl.step(handle, bs.POSITION_STEP, source_type="mysql") as rec:
            position = {"gtid": "0-1-42", "binlog_file": "b.000001", "binlog_pos": 4, "binlog_seq": "4"}
            rec.info(json.dumps({**position, "start": "2024-01-01"}))


def test_a_second_bootstrap_is_refused_before_spark_and_the_server(no_spark, capsys):
    _record_bootstrap(no_spark)
    argv = ["cdc", "bootstrap", "--config", SHOP_YAML, "--database", "shop", "--port", str(free_port())]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bootstrapped already" in err and "--force" in err, err


def test_a_server_refusing_the_connection_is_refused_before_spark(no_spark, capsys, monkeypatch):
    monkeypatch.setenv("SHARP_CDC_MYSQL_PASSWORD", "wrong-Pw0rdX")
    argv = ["cdc", "bootstrap", "--config", SHOP_YAML, "--database", "shop", "--port", str(free_port())]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot connect to root@127.0.0.1" in err and "Pw0rdX" not in err, (
        err
    )


def test_the_bootstrap_says_the_collector_finds_its_start(no_spark, capsys, monkeypatch):
    result = SimpleNamespace(
        database="shop", rows={"orders": 3}, job_id=7, start="2024-01-01", collector_start="0-1-42"
    )
    monkeypatch.setattr(bs, "check_before_spark", lambda *a, **k: None)
    monkeypatch.setattr(bs, "bootstrap_source", lambda *a, **k: [result])
    monkeypatch.setattr("sharp_dagster.spark.session.build_spark_session", lambda *a, **k: None)
    monkeypatch.setattr("sharp_dagster.spark.iceberg.warehouse_tables", lambda *a, **k: None)
    monkeypatch.setattr("sharp_dagster.cdc.source.config.write_start", lambda *a, **k: None)
    assert main(["cdc", "bootstrap", "--config", SHOP_YAML, "--database", "shop"]) == 0
    out = capsys.readouterr().out
    assert "--start" not in out and "by itself" in out, out


def test_a_resuming_collector_does_not_say_it_has_no_saved_position(no_spark, monkeypatch, caplog):
    seen = {}

    class Store:
        def __init__(self, *args, **kwargs):
            pass

        def load(self, follows=None):
            return SimpleNamespace(binlog_file="b.000002", binlog_pos=99, gtid_pos="0-1-50")

    class Collector:
        def __init__(self, *args, start=None, **kwargs):
            seen["start"] = start

        def run(self, once=False):
            return SimpleNamespace(messages=0, row_changes=0, statements=0, heartbeats=0, commits=0, spilled=0,
                                   stopped_by="once", state=Store().load())  # fmt: skip

    monkeypatch.setattr("sharp_dagster.cdc.capture.collector_db.DbStateStore", Store)
    monkeypatch.setattr("sharp_dagster.cdc.capture.collector.Collector", Collector)
    with caplog.at_level(logging.INFO):
        code = main(["cdc", "collect", "--config", SHOP_YAML, "--bootstrap-servers", "127.0.0.1:1", "--once"])
    assert code == 0
    assert "without a saved position" not in caplog.text


def test_a_primary_without_replica_monitor_gets_no_warning(caplog):
    """The README's grants on a MariaDB primary cannot read SHOW REPLICA STATUS (1227): that is no fault, said
    once at info level, not as a warning after the bootstrap's success lines."""
    import pymysql

    from sharp_dagster.cdc.source.clock import SourceClock

    class Cursor:
        def execute(self, sql):
            raise pymysql.err.OperationalError(1227, "Access denied; you need the REPLICA MONITOR privilege")

    clock = SourceClock({}, "cdc@db1:3306")
    with caplog.at_level(logging.INFO):
        assert clock._replica_status(Cursor()) is None
        assert clock._replica_status(Cursor()) is None
    assert [r.levelno for r in caplog.records] == [logging.INFO], caplog.text
    assert "REPLICA MONITOR" in caplog.text
