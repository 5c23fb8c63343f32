"""Each module here gets its own data folder (warehouse, sample data, job-log database)."""

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
