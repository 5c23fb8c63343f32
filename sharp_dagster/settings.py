"""Where things live and how to reach them: every path and URL the project uses comes from here.

All settings come from environment variables with embedded defaults under the repository's `data/` folder,
so a fresh clone runs with nothing configured. Nothing here imports Dagster or Spark.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sharp_dagster.redact import redact_url as _redact_url

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_ROOT = Path(__file__).resolve().parent
WAREHOUSE_SQL_DIR = PACKAGE_ROOT / "warehouse"
# The warehouse's first day: every asset starts there unless its SQL file says `@start`.
DEFAULT_START = "2024-01-01"


def warehouse_sql_dir() -> Path:
    """The folder of the warehouse's SQL files: `SHARP_WAREHOUSE_SQL_DIR`, or the package's own `warehouse/`."""
    value = os.environ.get("SHARP_WAREHOUSE_SQL_DIR")
    return Path(value).expanduser().resolve() if value else WAREHOUSE_SQL_DIR


# ODS upkeep (issue 33): how many published days keep their tag, when the upkeep runs, what compaction rewrites.
ODS_TAG_RETENTION_ENV = "SHARP_ODS_TAG_RETENTION_DAYS"
DEFAULT_ODS_TAG_RETENTION_DAYS = 30
ODS_UPKEEP_CRON_ENV = "SHARP_ODS_UPKEEP_CRON"
DEFAULT_ODS_UPKEEP_CRON = "30 4 * * *"


def ods_tag_retention_days() -> int:
    """`SHARP_ODS_TAG_RETENTION_DAYS`: the published days of an ODS table whose tag the upkeep keeps (the newest
    day and the days before it, counted by calendar day); default 30."""
    return parse_retention_days(os.environ.get(ODS_TAG_RETENTION_ENV, ""))


def parse_retention_days(text: str) -> int:
    """A retention in days as `SHARP_ODS_TAG_RETENTION_DAYS` spells it (empty: the default).

    >>> parse_retention_days("7"), parse_retention_days("")
    (7, 30)
    """
    return parse_whole_number(ODS_TAG_RETENTION_ENV, text, DEFAULT_ODS_TAG_RETENTION_DAYS, "days")


def parse_whole_number(variable: str, text: str, default: int, unit: str) -> int:
    """A whole number >= 1 of `unit` as the environment variable `variable` spells it (empty: `default`).

    >>> parse_whole_number("THREADS", " 3 ", 2, "threads"), parse_whole_number("THREADS", "", 2, "threads")
    (3, 2)
    """
    text = text.strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{variable}: expected a whole number of {unit} >= 1, got {text!r}")
    return int(text)


ODS_COMPACT_OPTIONS_ENV = "SHARP_ODS_COMPACT_OPTIONS"
# What the ODS compaction rewrites besides Iceberg's defaults (files with >= 30 % of their rows deleted, files over
# 180 % of the target size): files under 1 MiB only, not every file under 75 % of the 512 MiB target. A kept day
# tag holds the files it was published with, so each rewrite of a still-live file adds a copy of it until the
# tags before it expire: with Iceberg's default, a table of files under 384 MiB was rewritten whole every few days
# (bench/RESULTS.md `ods_storage_policy`: 16x one copy after 30 days at 0.16 % of the rows changed a day). The
# bound is low so that the day files are packed about once: Iceberg packs the small files once 5 gather
# (`min-input-files`), and a pack of a few days' files is no longer small, so it is not packed again each time
# more day files come (with 16 MiB it was, every second day: 1.61x after those 30 days).
DEFAULT_ODS_COMPACT_OPTIONS = {"min-file-size-bytes": str(1024 * 1024)}


def ods_compact_options() -> dict[str, str]:
    """`SHARP_ODS_COMPACT_OPTIONS`: options of Iceberg's `rewrite_data_files` for the ODS compaction, `key=value`
    pairs separated by commas (e.g. `delete-file-threshold=1`), over `DEFAULT_ODS_COMPACT_OPTIONS` (a key given
    here wins)."""
    try:
        given = parse_spark_conf(os.environ.get(ODS_COMPACT_OPTIONS_ENV, ""))
    except ValueError as exc:
        raise ValueError(str(exc).replace("SHARP_SPARK_CONF", ODS_COMPACT_OPTIONS_ENV)) from None
    return DEFAULT_ODS_COMPACT_OPTIONS | given


ODS_SOURCE_THREADS_ENV = "SHARP_ODS_SOURCE_THREADS"
# How many ODS tables of a source's day run at once in its run (`assets/ods_source.py`): Spark runs the jobs of
# several threads together; measured in bench/RESULTS.md `source_day`.
DEFAULT_ODS_SOURCE_THREADS = 2


def ods_source_threads() -> int:
    """`SHARP_ODS_SOURCE_THREADS`: how many ODS tables one source's run works on at once; default 2."""
    return parse_whole_number(
        ODS_SOURCE_THREADS_ENV,
        os.environ.get(ODS_SOURCE_THREADS_ENV, ""),
        DEFAULT_ODS_SOURCE_THREADS,
        "threads",
    )


def ods_upkeep_cron() -> str:
    """`SHARP_ODS_UPKEEP_CRON`: when the ODS upkeep runs (a cron expression, UTC); default 04:30 every day."""
    return os.environ.get(ODS_UPKEEP_CRON_ENV, "").strip() or DEFAULT_ODS_UPKEEP_CRON


def _path(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value).expanduser().resolve() if value else default


def local_path(location: str | Path) -> Path | None:
    """The local path of a location (a plain path or a `file://` URI), None for another file system's URI.

    >>> local_path("file:///srv/warehouse"), local_path("hdfs://nn:8020/warehouse")
    (PosixPath('/srv/warehouse'), None)
    """
    if isinstance(location, Path):
        return location
    if location.startswith("file:"):
        # file:///x and file:/x (Hadoop's own spelling) alike
        return Path("/" + location.removeprefix("file:").lstrip("/"))
    return None if "://" in location else Path(location)


def warehouse_location(value: str | Path) -> Path | str:
    """`SHARP_WAREHOUSE_DIR` as the code uses it: a resolved local `Path` for a plain path or a `file://` URI (the
    fast local code path), else the Hadoop file system URI itself (`hdfs://nn:8020/w`, `s3a://bucket/w`)."""
    local = local_path(value)
    if local is not None:
        return local.expanduser().resolve()
    text = str(value).rstrip("/")
    scheme, _, rest = text.partition("://")
    if not scheme.isidentifier() or not rest:
        raise ValueError(f"SHARP_WAREHOUSE_DIR: expected a path or a file system URI, got {value!r}")
    return text


def warehouse_uri(location: str | Path) -> str:
    """The warehouse as a URI for Spark and Iceberg: `file:///abs/path` for a local folder, else itself."""
    located = warehouse_location(location)
    return f"file://{located}" if isinstance(located, Path) else located


@dataclass(frozen=True)
class Settings:
    """A snapshot of the environment; build it with `Settings.from_env()`."""

    data_dir: Path
    # A local Path, or the URI of another Hadoop file system (see `warehouse_location`).
    warehouse_dir: Path | str
    sample_dir: Path
    dagster_home: Path
    log_db_url: str
    spark_master: str
    spark_conf: dict[str, str]

    @classmethod
    def from_env(cls) -> Settings:
        data_dir = _path("SHARP_DATA_DIR", REPO_ROOT / "data")
        warehouse_dir = warehouse_location(os.environ.get("SHARP_WAREHOUSE_DIR") or data_dir / "warehouse")
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

    return _redact_url(url)


# The Kafka cluster of the binlog topics (`resources/kafka.py`), read when a landing or the Kafka sensor needs it.
KAFKA_ENV = "SHARP_KAFKA_BOOTSTRAP"


def kafka_bootstrap() -> str | None:
    """`SHARP_KAFKA_BOOTSTRAP`: the Kafka bootstrap servers of the binlog topics (`host:port,...`); None when unset."""
    return os.environ.get(KAFKA_ENV) or None


# Every other variable the product reads, each by its own function (`sharp_dagster_tests/house/
# test_environment_in_settings.py` keeps every read here). Where a value is checked or parsed, the module that uses
# it does that and names the variable in its errors.


def claim_timeout_text() -> str:
    """`SHARP_CLAIM_TIMEOUT_S` as given, stripped (`joblog/heartbeat.claim_timeout_s` parses it)."""
    return os.environ.get("SHARP_CLAIM_TIMEOUT_S", "").strip()


def heartbeat_interval_text() -> str:
    """`SHARP_HEARTBEAT_INTERVAL_S` as given, stripped (`joblog/heartbeat.heartbeat_interval_s` parses it)."""
    return os.environ.get("SHARP_HEARTBEAT_INTERVAL_S", "").strip()


def spark_log_level() -> str:
    """`SHARP_SPARK_LOG_LEVEL`: Spark's log level, upper case; default ERROR."""
    return os.environ.get("SHARP_SPARK_LOG_LEVEL", "ERROR").upper()


def spark_driver_host() -> str:
    """`SHARP_SPARK_DRIVER_HOST`: where a cluster's executors reach the driver; default loopback."""
    return os.environ.get("SHARP_SPARK_DRIVER_HOST", "127.0.0.1")


def spark_jars() -> list[str]:
    """`SHARP_SPARK_JARS`: extra jars for Spark, separated by commas."""
    return [j for j in os.environ.get("SHARP_SPARK_JARS", "").split(",") if j]


def jvm_lib_dir() -> Path:
    """`SHARP_JVM_LIB_DIR`: the folder of the Maven-fetched jars; default the repository's `jvm/lib`."""
    return _path("SHARP_JVM_LIB_DIR", REPO_ROOT / "jvm" / "lib")


def lineage_url() -> str | None:
    """`SHARP_LINEAGE_URL`: the lineage explorer's base URL, stripped; None when unset."""
    return os.environ.get("SHARP_LINEAGE_URL", "").strip() or None


def openlineage_environment() -> dict[str, str]:
    """The OpenLineage client's own variables (`OPENLINEAGE_*`), which the client reads itself: whether and how it
    is configured, and the namespace of the events."""
    return {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE")}


def alert_webhook_url() -> str | None:
    """`SHARP_ALERT_WEBHOOK_URL`: where alerts are posted, stripped; None (alerts go to the log) when unset."""
    return os.environ.get("SHARP_ALERT_WEBHOOK_URL", "").strip() or None


FAILPOINTS_ENV = "SHARP_FAILPOINTS"


def failpoints_spec() -> str | None:
    """`SHARP_FAILPOINTS` as given (`failpoints.armed` parses it); None when the variable is not set at all."""
    return os.environ.get(FAILPOINTS_ENV)


def source_password(env: str) -> str:
    """A source server's password, from the variable its config names (default `SHARP_CDC_MYSQL_PASSWORD`)."""
    return os.environ.get(env, "")


def dagster_home_given() -> str | None:
    """`DAGSTER_HOME` as given (Dagster's own variable), None when unset or empty; `Settings.dagster_home` is the
    resolved folder with its default."""
    return os.environ.get("DAGSTER_HOME") or None
