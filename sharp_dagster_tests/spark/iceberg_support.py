"""What the Iceberg tests share: a catalog of the test's own on the shared session (fixture `ice`, through
`conftest.py`; backed by a JDBC catalog in a SQLite file of its own, as the pipeline's catalog lives in the job
log's SQLite database), the table they write and builders of its rows."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from sharp_dagster.spark.catalog import apply_catalog_conf, catalog_conf
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.tables import TableRef

REF = TableRef("ods", "orders")


_names = itertools.count()


@dataclass(frozen=True)
class _Settings:
    warehouse_dir: Path
    log_db_url: str


@pytest.fixture()
def ice(spark, tmp_path) -> IcebergTables:
    settings = _Settings(tmp_path / "warehouse", f"sqlite:///{tmp_path / 'sharp_log.db'}")
    catalog = f"ice{os.getpid()}_{next(_names)}"
    apply_catalog_conf(spark, catalog_conf(settings, catalog=catalog))
    return IcebergTables(spark, catalog)


def _rows(spark, dt: str, n: int, tag: str):
    return spark.createDataFrame([(i, tag, dt) for i in range(n)], "id BIGINT, v STRING, dt STRING")


def _content(ice: IcebergTables, ref: TableRef = REF) -> dict[str, tuple[int, tuple[str, ...]]]:
    """dt -> (row count, distinct tags) on main."""
    ice.register(ref, refresh=True)
    rows = ice.spark.sql(
        f"SELECT dt, count(*) AS n, sort_array(collect_set(v)) AS tags FROM {ice.name(ref)} GROUP BY dt"
    ).collect()
    return {r.dt: (r.n, tuple(r.tags)) for r in rows}
