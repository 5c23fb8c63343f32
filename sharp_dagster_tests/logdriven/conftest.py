"""Fresh data folders (warehouse, sample data, job-log database) with the binlog feed over a broker of their own.

`isolated`/`feed` serve a whole module; `own_feed` gives one test a folder and broker of its own, so the test sets
up every state it relies on and passes alone and in any order.
"""

from __future__ import annotations

import pytest

from sharp_dagster.demo.generator import GeneratorConfig, generate

SMALL = GeneratorConfig(days=6, users=40, products=10, orders_per_day=15, history_orders=15)


@pytest.fixture(scope="module")
def isolated(tmp_path_factory):
    """A fresh SHARP_DATA_DIR with the small sample shop, for the whole module."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("logdriven")
    mp.setenv("SHARP_DATA_DIR", str(root))
    mp.setenv("SHARP_CLAIM_TIMEOUT_S", "120")
    from sharp_dagster.settings import Settings

    generate(Settings.from_env().sample_dir, SMALL)
    yield root
    mp.undo()


@pytest.fixture(scope="module")
def feed(isolated, spark):
    """A broker for the module and the ODS states bootstrapped; `feed.land(day)` lands a day's binlog."""
    from dagster import DagsterInstance

    from sharp_dagster.definitions import defs
    from sharp_dagster_tests.cdc_support import CdcFeed, local_broker

    with local_broker():
        yield CdcFeed(defs, DagsterInstance.ephemeral())


@pytest.fixture()
def own_feed(tmp_path, spark, monkeypatch):
    """A fresh data folder with the small sample shop, its own broker and an ephemeral Dagster instance."""
    from dagster import DagsterInstance

    from sharp_dagster.definitions import defs
    from sharp_dagster.settings import Settings
    from sharp_dagster_tests.cdc_support import CdcFeed, local_broker

    monkeypatch.setenv("SHARP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SHARP_CLAIM_TIMEOUT_S", "120")
    monkeypatch.delenv("SHARP_LOG_DB_URL", raising=False)
    generate(Settings.from_env().sample_dir, SMALL)
    with local_broker(), DagsterInstance.ephemeral() as instance:
        yield CdcFeed(defs, instance)
