"""The Iceberg catalog's Spark conf: data under the warehouse folder, the catalog in the job log's database (JDBC)
when that is SQLite or PostgreSQL, else a Hadoop (path-based) catalog."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from sqlalchemy.engine import make_url

from sharp_dagster.settings import warehouse_uri

DEFAULT_CATALOG = "sharp"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_catalog_name(catalog: str) -> None:
    """`ValueError` unless `catalog` is a plain identifier."""
    if not _IDENT.match(catalog):
        raise ValueError(f"catalog name must be a plain identifier, got {catalog!r}")


def jdbc_catalog_props(log_db_url: str) -> dict[str, str] | None:
    """Iceberg JDBC catalog properties for the job log's SQLAlchemy URL, or None when its database is neither SQLite
    nor PostgreSQL (or SQLite in memory, which another process cannot share)."""

    url = make_url(log_db_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            return None
        path = Path(url.database).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)  # SQLite creates the file, not its folder
        # Writers of the job log and of the catalog queue on SQLite's one write lock; wait instead of failing fast
        # (the driver's default is 3 s).
        return {"uri": f"jdbc:sqlite:{path}", "jdbc.busy_timeout": "30000"}
    if backend == "postgresql":
        host = url.host or "localhost"
        port = f":{url.port}" if url.port else ""
        props = {"uri": f"jdbc:postgresql://{host}{port}/{url.database or ''}"}
        if url.username:
            props["jdbc.user"] = url.username
        if url.password:
            # Spark redacts conf keys matching "password" in its UI and logs (spark.redaction.regex).
            props["jdbc.password"] = str(url.password)
        return props
    return None


def catalog_conf(settings: Any, catalog: str = DEFAULT_CATALOG, make_default: bool = False) -> dict[str, str]:
    """Spark conf for the Iceberg catalog `catalog`: data under `settings.warehouse_dir`, the catalog in the job
    log's database (JDBC) when that is SQLite or PostgreSQL, else a Hadoop (path-based) catalog.

    `make_default` also makes it Spark's default catalog, so SQL can name tables `database.table`.
    """
    check_catalog_name(catalog)
    prefix = f"spark.sql.catalog.{catalog}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        # Any Hadoop file system: Iceberg's HadoopFileIO writes where the URI points (file://, hdfs://, s3a://).
        f"{prefix}.warehouse": warehouse_uri(settings.warehouse_dir),
        # Other processes and machines commit to the same tables: every query reads the table's current metadata
        # (Iceberg's catalog cache would serve a table as it was up to 30 s ago).
        f"{prefix}.cache-enabled": "false",
    }
    jdbc = jdbc_catalog_props(settings.log_db_url)
    if jdbc is None:
        conf[f"{prefix}.type"] = "hadoop"
    else:
        conf[f"{prefix}.catalog-impl"] = "org.apache.iceberg.jdbc.JdbcCatalog"
        # V1 keeps views too (V0 only tables); branches live in table metadata and need no catalog support.
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
        conf.update({f"{prefix}.{k}": v for k, v in jdbc.items()})
    if make_default:
        conf["spark.sql.defaultCatalog"] = catalog
    return conf


def apply_catalog_conf(spark: SparkSession, conf: Mapping[str, str]) -> None:
    """Add a catalog to a running session: catalogs are runtime SQL conf, loaded on first use."""
    for key, value in conf.items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)


def use_warehouse(spark: SparkSession, settings: Any) -> str:
    """Make the Iceberg catalog `sharp` of `settings` (its warehouse folder and job-log database) the session's
    current catalog, so SQL names tables `database.table`; return the catalog's name.

    The session's build (`spark/session.py`) configures `sharp` for the warehouse of its settings. The name is the
    same for every warehouse because the JDBC catalog keys its rows by it (a table registered through `sharp` is
    only found through `sharp`, by any process). A process that moves to another warehouse (a test, the demo after
    a reset) re-points the conf and drops Spark's loaded catalogs, which are built again, from the new conf, on
    first use; temporary views stay.
    """
    name = DEFAULT_CATALOG
    prefix = f"spark.sql.catalog.{name}"
    wanted = catalog_conf(settings, name)
    wanted = {k: v for k, v in wanted.items() if k == prefix or k.startswith(prefix + ".")}
    current = {k: v for k, v in spark.conf.getAll.items() if k == prefix or k.startswith(prefix + ".")}
    if current != wanted:
        for key in set(current) - set(wanted):
            spark.conf.unset(key)
        apply_catalog_conf(spark, wanted)
        if current:  # a loaded catalog keeps its old conf for the session's life: drop it
            spark._jsparkSession.sessionState().catalogManager().reset()
    spark.catalog.setCurrentCatalog(name)  # (asking for the current one would load it: the session's default)
    return name
