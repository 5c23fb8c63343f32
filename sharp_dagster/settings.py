"""Where things live and how to reach them: every path and URL the project uses comes from here.

All settings come from environment variables with embedded defaults under the repository's `data/` folder,
so a fresh clone runs with nothing configured. Nothing here imports Dagster or Spark.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_ROOT = Path(__file__).resolve().parent
WAREHOUSE_SQL_DIR = PACKAGE_ROOT / "warehouse"
# The warehouse's first day: every asset starts there unless its SQL file says `@start`.
DEFAULT_START = "2024-01-01"


def warehouse_sql_dir() -> Path:
    """The folder of the warehouse's SQL files: `SHARP_WAREHOUSE_SQL_DIR`, or the package's own `warehouse/`."""
    value = os.environ.get("SHARP_WAREHOUSE_SQL_DIR")
    return Path(value).expanduser().resolve() if value else WAREHOUSE_SQL_DIR


def _path(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value).expanduser().resolve() if value else default


@dataclass(frozen=True)
class Settings:
    """A snapshot of the environment; build it with `Settings.from_env()`."""

    data_dir: Path
    warehouse_dir: Path
    sample_dir: Path
    dagster_home: Path
    log_db_url: str
    spark_master: str
    spark_conf: dict[str, str]

    @classmethod
    def from_env(cls) -> Settings:
        data_dir = _path("SHARP_DATA_DIR", REPO_ROOT / "data")
        warehouse_dir = _path("SHARP_WAREHOUSE_DIR", data_dir / "warehouse")
        sample_dir = _path("SHARP_SAMPLE_DIR", data_dir / "sample")
        dagster_home = _path("DAGSTER_HOME", data_dir / "dagster_home")
        log_db_url = os.environ.get("SHARP_LOG_DB_URL") or f"sqlite:///{data_dir / 'sharp_log.db'}"
        spark_master = os.environ.get("SHARP_SPARK_MASTER", "local[2]")
        return cls(
            data_dir=data_dir,
            warehouse_dir=warehouse_dir,
            sample_dir=sample_dir,
            dagster_home=dagster_home,
            log_db_url=log_db_url,
            spark_master=spark_master,
            spark_conf=parse_spark_conf(os.environ.get("SHARP_SPARK_CONF", "")),
        )


def parse_spark_conf(text: str) -> dict[str, str]:
    """Parse `SHARP_SPARK_CONF`: `key=value` pairs separated by commas or newlines.

    >>> parse_spark_conf("spark.executor.memory=1g, spark.sql.shuffle.partitions=8")
    {'spark.executor.memory': '1g', 'spark.sql.shuffle.partitions': '8'}
    """
    conf: dict[str, str] = {}
    for raw in text.replace("\n", ",").split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"SHARP_SPARK_CONF: expected key=value, got {item!r}")
        conf[key.strip()] = value.strip()
    return conf


def redact_url(url: str) -> str:
    """Hide the secrets of a database URL for messages and logs (password, `?password=`-like parameters).

    The one implementation is `sharp_dagster.redact.redact_url` (SQLAlchemy's URL parsing); imported here
    lazily so that reading settings does not import SQLAlchemy.

    >>> redact_url("postgresql://etl:s3cret@db:5432/log")
    'postgresql://etl:***@db:5432/log'
    """
    from sharp_dagster.redact import redact_url as _redact_url

    return _redact_url(url)
