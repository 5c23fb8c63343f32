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
