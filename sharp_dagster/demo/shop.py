"""The sample business: an online shop's source database `shop`, as the project's CDC config declares it.

The declaration (tables, columns with their MySQL and Spark types, keys, shards) is `warehouse/cdc/shop.yaml`,
read through `sharp_dagster.warehouse.cdc_layout` like any user's source; this module is the demo's view of it for the
generator, the replay and the tests' MariaDB set-up. `user_info` is physically sharded into its declared
shards, a user's row living in shard number `user_id % <shard count>`.
"""

from __future__ import annotations

from sharp_dagster.cdc.source.config import ConfigError, DatabaseConfig, TableConfig
from sharp_dagster.warehouse.cdc_layout import cdc_dir, sources

SOURCE_DB = "shop"


def shop_database() -> DatabaseConfig:
    """The `shop` database of the project's CDC sources (`ConfigError` when no source declares it)."""
    for source in sources():
        if SOURCE_DB in source.database_names:
            return source.database(SOURCE_DB)
    raise ConfigError(f"{cdc_dir()}: no CDC source declares the demo's database {SOURCE_DB!r}")


TABLES: dict[str, TableConfig] = {t.name: t for t in shop_database().tables}


def shard_of_user(user_id: int) -> str:
    shards = TABLES["user_info"].shards
    return shards[user_id % len(shards)]
