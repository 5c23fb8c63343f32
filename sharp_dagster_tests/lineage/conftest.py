"""Fixtures of the lineage tests: a small fake warehouse catalog with the interface of
`sharp_dagster.warehouse.catalog.WarehouseCatalog` (only the attributes the lineage code reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class FakeTable:
    layer: str
    name: str
    rendered: str
    description: str = ""
    path: Path = Path("fake.sql")

    @property
    def qualified(self) -> str:
        return f"{self.layer}.{self.name}"

    @property
    def asset_key_str(self) -> str:
        return f"{self.layer}/{self.name}"

    @property
    def sql(self) -> str:
        return self.rendered


@dataclass
class FakeCatalog:
    tables: list[FakeTable]
    external_schemas: dict[str, dict[str, str]] = field(default_factory=dict)
    extra_edges: list[tuple[str, str]] = field(default_factory=list)


def make_catalog(**overrides: str) -> FakeCatalog:
    """ods.orders <- src.orders_changes <- mysql:shop.orders; dwd.detail <- ods.orders; ads.gmv <- dwd.detail.
    Listed out of dependency order on purpose; `overrides` replace a table's SQL by qualified name."""
    sql = {
        "ads.gmv": "SELECT category, CAST(SUM(amount) AS DECIMAL(16, 2)) AS gmv FROM dwd.detail "
        "WHERE dt = '2024-01-01' GROUP BY category",
        "dwd.detail": "SELECT *, amount * 2 AS double_amount FROM ods.orders WHERE amount > 0",
        "ods.orders": "SELECT order_id, category, amount FROM src.orders_changes WHERE _op <> 'd'",
    }
    sql.update({k.replace("__", "."): v for k, v in overrides.items()})
    tables = [
        FakeTable(q.split(".")[0], q.split(".")[1], text, path=Path(f"/warehouse/{q.replace('.', '/')}.sql"))
        for q, text in sql.items()
    ]
    return FakeCatalog(
        tables=tables,
        external_schemas={
            "src.orders_changes": {
                "order_id": "bigint",
                "category": "string",
                "amount": "decimal",
                "_op": "string",
            },
            "mysql:shop.orders": {"order_id": "bigint", "category": "varchar", "amount": "decimal"},
        },
        extra_edges=[("mysql:shop.orders", "src.orders_changes")],
    )


@pytest.fixture()
def fake_catalog() -> FakeCatalog:
    return make_catalog()
