"""The Iceberg catalog's Spark conf: data under the warehouse folder, the catalog in the job log's database (JDBC)
when that is SQLite or PostgreSQL, else a Hadoop (path-based) catalog."""

from __future__ import annotations

import atexit
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from sharp_dagster.db import connection_url
from sharp_dagster.settings import warehouse_uri

DEFAULT_CATALOG = "sharp"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_catalog_name(catalog: str) -> None:
    """`ValueError` unless `catalog` is a plain identifier."""
    if not _IDENT.match(catalog):
        raise ValueError(f"catalog name must be a plain identifier, got {catalog!r}")


def jdbc_catalog_props(log_db_url: str) -> dict[str, str] | None:
    """Iceberg JDBC catalog properties for the job log's SQLAlchemy URL, or None when its database is neither SQLite
    nor PostgreSQL (or SQLite in memory, which another process cannot share).

    The URL is read as the job log reads it (`db.connection_url`: `?password=` counts). The password is never a
    property: Spark conf is printed at DEBUG level (and copied into the Hadoop conf); it goes into this process's
    password file instead (`password_file`), which PostgreSQL's JDBC driver reads when no password is given."""

    url = connection_url(log_db_url)
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
            _remember_password(
                host, url.port or 5432, url.database or "", url.username or "", str(url.password)
            )
        return props
    return None


# ---------------------------------------------------------------- the catalog's password, out of Spark conf
_passwords: dict[tuple[str, str, str, str], str] = {}
_password_file: list[Path] = []
PGPASS_PROPERTY = "org.postgresql.pgpassfile"  # the JDBC driver's system property naming its password file


def _escaped(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace(":", "\\:")


def _remember_password(host: str, port: int, database: str, user: str, password: str) -> None:
    """Add the catalog's credentials to this process's password file (`.pgpass` format, mode 0600, removed when
    the process ends)."""
    key = (host, str(port), database, user)
    if _passwords.get(key) == password:
        return
    _passwords[key] = password
    if not _password_file:
        fd, name = tempfile.mkstemp(prefix="sharp_catalog_", suffix=".pgpass")
        os.close(fd)
        _password_file.append(Path(name))
        atexit.register(lambda: _password_file[0].unlink(missing_ok=True))
    path = _password_file[0]
    lines = [":".join(_escaped(p) for p in (*k, v)) for k, v in _passwords.items()]
    path.touch(mode=0o600)
    os.chmod(path, 0o600)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.environ["PGPASSFILE"] = str(path)  # a JVM started after this inherits it


def password_file() -> Path | None:
    """This process's password file of the catalog, once a URL with a password was read."""
    return _password_file[0] if _password_file else None


def provide_password_file(spark: SparkSession) -> None:
    """Point the running JVM's PostgreSQL driver at the password file (a system property, read at each connect)."""
    path = password_file()
    if path is not None:
        spark.sparkContext._jvm.java.lang.System.setProperty(PGPASS_PROPERTY, str(path))


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
    provide_password_file(spark)
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
