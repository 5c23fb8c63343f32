"""Fixtures of the DQC tests: a small order partition as a temp view, two warehouse tables, a SQLite store.

The rows are plain Python data so that every test computes its expected values from them independently of Spark.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

ASSET = "dwd/order_detail"
PARTITION = "2024-01-01"
COLUMNS = ("order_id", "line_no", "user_id", "status", "amount", "email", "updated_at")

# (order_id, line_no, user_id, status, amount, email, updated_at)
ORDERS: list[tuple[Any, ...]] = [
    (1, 1, 1, "paid", 10.5, "a@x.com", "2024-01-01 08:00:00"),
    (1, 2, 1, "paid", 5.0, "a@x.com", "2024-01-01 08:00:00"),
    (2, 1, 2, "shipped", 99.0, "b@y.com", "2024-01-01 09:15:00"),
    (2, 1, 2, "shipped", 99.0, "b@y.com", "2024-01-01 09:15:00"),
    (3, 1, 3, "it's", 1.0, "c@z.com", "2024-01-01 10:00:00"),
    (4, 1, 9, "refunded", -3.0, "not-an-email", "2024-01-01 12:00:00"),
    (5, 1, None, None, None, None, "2024-01-01 13:00:00"),
    (6, 1, 4, "paid", 2500.0, "D@Q.COM", "2024-01-01 20:30:00"),
    (7, 1, 5, "a\\b", 7.0, "e@x.com", None),
    (8, 1, 6, "cancel'led", 8.0, "f@x.com", "2024-01-01 14:00:00"),
    (None, 1, 2, "paid", 3.0, "g@x.com", "2024-01-01 15:00:00"),
    (8, 1, 6, "paid", 8.0, "f@x.com", "2024-01-01 14:00:00"),
]
ORDERS_SCHEMA = {
    "order_id": "bigint",
    "line_no": "int",
    "user_id": "bigint",
    "status": "string",
    "amount": "double",
    "email": "string",
    "updated_at": "timestamp",
    "dt": "string",
}
# dwd.user_dim per dt: user 5, 6, 9 are missing on 2024-01-01 but present on 2024-01-02.
USER_DIM = {"2024-01-01": [1, 2, 3, 4], "2024-01-02": [1, 2, 3, 4, 5, 6, 9]}
# ods.orders per dt: (order_id, amount)
ODS_ORDERS = {
    "2024-01-01": [(i, float(i) * 2) for i in range(1, 12)],
    "2024-01-02": [(100, 1.0), (101, 2.0), (102, 3.0)],
}
TABLES = {
    "dwd.user_dim": {"user_id": "bigint", "dt": "string"},
    "ods.orders": {"order_id": "bigint", "amount": "double", "dt": "string"},
}
SCHEMAS = {ASSET: ORDERS_SCHEMA, "dwd/user_dim": TABLES["dwd.user_dim"]}


def col(name: str) -> list[Any]:
    i = COLUMNS.index(name)
    return [r[i] for r in ORDERS]


def make_rule(**raw: Any):
    """A validated rule from keyword fields (asset defaults to the order asset)."""
    from sharp_dagster.dqc.rule_validation import build_rule, known_table_schemas

    raw.setdefault("asset", ASSET)
    return build_rule(raw, SCHEMAS, known_table_schemas(SCHEMAS, TABLES), source="test")


def orders_frame(spark, rows=None):
    from pyspark.sql import functions as F

    schema = (
        "order_id bigint, line_no int, user_id bigint, status string, amount double, email string, "
        "updated_at string"
    )
    df = spark.createDataFrame(rows if rows is not None else ORDERS, schema)
    return df.withColumn("updated_at", F.to_timestamp("updated_at")).withColumn("dt", F.lit(PARTITION))


@pytest.fixture(scope="session")
def orders_view(spark) -> str:
    name = "dqc_test_orders"
    orders_frame(spark).createOrReplaceTempView(name)
    return name


@pytest.fixture(scope="session")
def _warehouse_dir(spark, tmp_path_factory):
    """dwd.user_dim and ods.orders written once as real partitioned warehouse (Iceberg) tables."""
    from sharp_dagster.spark.tables import TableRef
    from sharp_dagster_tests.conftest import fresh_tables

    folder = tmp_path_factory.mktemp("dqc_wh")
    store = fresh_tables(spark, folder)
    dim, ods = TableRef("dwd", "user_dim"), TableRef("ods", "orders")
    for dt, users in USER_DIM.items():
        store.write_partition(dim, {"dt": dt}, spark.createDataFrame([(u,) for u in users], "user_id bigint"))
    for dt, rows in ODS_ORDERS.items():
        store.write_partition(ods, {"dt": dt}, spark.createDataFrame(rows, "order_id bigint, amount double"))
    return folder


@pytest.fixture(scope="module")
def warehouse(spark, _warehouse_dir):
    """The tables of `_warehouse_dir`, their catalog made the session's current one for the module (tests of
    other modules switch it)."""
    from sharp_dagster_tests.conftest import fresh_tables

    return fresh_tables(spark, _warehouse_dir)


@pytest.fixture()
def db_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / f'dqc_{uuid.uuid4().hex[:8]}.db'}"


@pytest.fixture()
def dqc_store(db_url):
    """A DqcStore on a fresh SQLite database brought to head by the real Alembic migrations."""
    from sharp_dagster.dqc.store import DqcStore
    from sharp_dagster.joblog.migrate import ensure_schema

    return DqcStore(ensure_schema(db_url))


class FakeSink:
    """Stands in for `sharp_dagster.alerts.AlertSink`: records sends, de-duplicates per key like the real one."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, dict]] = []
        self._keys: set[str] = set()

    def send(self, kind: str, dedup_key: str, title: str, details) -> bool:
        if dedup_key in self._keys:
            return False
        self._keys.add(dedup_key)
        self.sent.append((kind, dedup_key, title, dict(details)))
        return True
