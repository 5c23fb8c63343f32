"""Snapshot bootstrap: the first full copy of a source table, stamped with the binlog position it starts from.

Order matters (Debezium's hand-off, without the lock):
1. read the GTID position (`@@gtid_binlog_pos` on MariaDB), then the binlog file + position
   (`SHOW MASTER STATUS`): the collector may start from that GTID; the stamp is the file + position;
2. only then read the table(s) with Spark's JDBC source (all shards of a sharded table, each row tagged with its
   `source_table`), stamped with `_binlog_seq` = binlog_seq(file, position, 0) and `_is_deleted` = false.
Every change that committed before the position is in the snapshot (the read starts later); every change after
it has a larger binlog_seq (the position is where the next event starts, and a row or query event always follows
its GTID/BEGIN event, so none starts exactly there), and the merge applies it over the snapshot. Changes between
the position and the read are both in the snapshot and applied again, which converges because each change
carries the full row image. The GTID is read before the file position so that the collector, if it starts from
that GTID, starts no later than the stamp.

JDBC: Debian's MariaDB Connector/J (`/usr/share/java/mariadb-java-client.jar`, put on `spark.jars` by
`build_spark_session`), driver `org.mariadb.jdbc.Driver`, URL `jdbc:mysql://host:port/db?permitMysqlScheme`:
with a `jdbc:mariadb:` URL Spark picks no MySQL dialect and quotes names wrongly. The server session's time zone
is set to UTC so TIMESTAMP columns read as the same instants the binlog carries (python-mysql-replication
decodes them as UTC). Columns keep their JDBC types, except temporal ones; binlog images carry canonical strings
(see `messages.py`).

Temporal values never pass through `java.sql.Timestamp` / `java.sql.Date`: JDBC builds those from the wall clock
in the JVM's default time zone, and Spark turns them back into instants, so on a machine in Asia/Shanghai a
DATETIME came out 8 hours early (8:05:43 in year 1000, the zone's local mean time), and a wall-clock time that
does not exist in the JVM's zone (a daylight-saving gap) moved by an hour. Instead the server computes each
DATETIME / TIMESTAMP as microseconds since 1970-01-01 00:00:00 and each DATE as days since 1970-01-01 (proleptic
Gregorian, like both MySQL and Spark), and Spark rebuilds them with `timestamp_micros` / `date_from_unix_date`:
exact whatever the JVM's, the machine's or Spark's session time zone. DATETIMEs are wall-clock values read as UTC,
as the binlog path reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import reduce

import pymysql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sharp_dagster.cdc.change import binlog_schema as bs
from sharp_dagster.cdc.source.config import MysqlSettings, TableConfig
from sharp_dagster.cdc.source.shards import ShardRules

JDBC_DRIVER = "org.mariadb.jdbc.Driver"
SNAPSHOT_COLUMNS = ("source_table", "_binlog_seq", "_is_deleted")


class SnapshotError(RuntimeError):
    """The snapshot cannot be taken (no such table, binlog off, ...)."""


@dataclass(frozen=True)
class BinlogPosition:
    """Where the binlog stood when the snapshot started: the next event's file + position, and the GTID state."""

    binlog_file: str
    binlog_pos: int
    gtid_pos: str | None = None

    @property
    def binlog_seq(self) -> int:
        return bs.binlog_seq(bs.binlog_file_seq(self.binlog_file), self.binlog_pos, 0)


@dataclass
class SnapshotResult:
    df: DataFrame
    position: BinlogPosition
    shards: list[str]


def connect(mysql: MysqlSettings, database: str | None = None) -> pymysql.Connection:
    """A PyMySQL connection to the source in autocommit; `SnapshotError` naming the server when it fails."""
    try:
        return pymysql.connect(
            **mysql.pymysql_kwargs(), database=database, connect_timeout=10, autocommit=True
        )
    except pymysql.err.Error as exc:
        raise SnapshotError(f"cannot connect to {mysql.describe()}: {exc.args[-1]}") from exc


def read_binlog_position(mysql: MysqlSettings) -> BinlogPosition:
    """The GTID state, then the binlog file + position (in that order, see the module docstring)."""
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            is_mariadb = "MARIADB" in cur.fetchone()[0].upper()
            gtid = None
            if is_mariadb:
                cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
                gtid = cur.fetchone()[0] or None
            try:
                cur.execute("SHOW MASTER STATUS")
            except pymysql.err.ProgrammingError:
                cur.execute("SHOW BINARY LOG STATUS")  # MySQL 8.4 removed SHOW MASTER STATUS
            row = cur.fetchone()
    finally:
        conn.close()
    if row is None:
        raise SnapshotError(f"{mysql.describe()}: SHOW MASTER STATUS is empty: the binary log is off")
    if not is_mariadb and len(row) >= 5 and row[4]:
        gtid = str(row[4]).replace("\n", "")
    return BinlogPosition(binlog_file=row[0], binlog_pos=int(row[1]), gtid_pos=gtid)


def list_tables(mysql: MysqlSettings, database: str) -> list[str]:
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = 'BASE TABLE'",
                (database,),
            )
            return sorted(r[0] for r in cur.fetchall())
    finally:
        conn.close()


def jdbc_url(mysql: MysqlSettings, database: str) -> str:
    return f"jdbc:mysql://{mysql.host}:{mysql.port}/{database}?permitMysqlScheme&sessionVariables=time_zone='+00:00'"


def snapshot_table(
    spark: SparkSession,
    mysql: MysqlSettings,
    database: str,
    table: TableConfig,
    position: BinlogPosition | None = None,
    fetch_size: int = 10_000,
    num_partitions: int = 1,
) -> SnapshotResult:
    """All shards of `table` as one DataFrame with `source_table`, `_binlog_seq` and `_is_deleted` added.

    `position` defaults to the position read now, before any row is read. With `num_partitions` > 1 each shard is
    read in ranges of its first primary-key column (which must be numeric).
    """
    position = position or read_binlog_position(mysql)
    rules = ShardRules([table.rule])
    shards = rules.shards_of(table.name, list_tables(mysql, database))
    if not shards:
        raise SnapshotError(
            f"{mysql.describe()}/{database}: no table matches {table.name} (pattern {table.rule.pattern or table.name!r})"
        )
    frames = [
        _read_shard(spark, mysql, database, shard, table, fetch_size, num_partitions) for shard in shards
    ]
    df = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    df = df.withColumn("_binlog_seq", F.lit(Decimal(position.binlog_seq)).cast("decimal(38,0)")).withColumn(
        "_is_deleted", F.lit(False)
    )
    return SnapshotResult(df=df, position=position, shards=shards)


def _read_shard(
    spark: SparkSession,
    mysql: MysqlSettings,
    database: str,
    shard: str,
    table: TableConfig,
    fetch_size: int,
    num_partitions: int,
) -> DataFrame:
    columns = _column_types(mysql, database, shard)
    reader = (
        spark.read.format("jdbc")
        .option("url", jdbc_url(mysql, database))
        .option("driver", JDBC_DRIVER)
        .option("dbtable", _select_shard(shard, columns))
        .option("user", mysql.user)
        .option("password", mysql.password)
        .option("fetchsize", str(fetch_size))
    )
    if num_partitions > 1:
        key = table.primary_key[0]
        conn = connect(mysql, database)
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT MIN(`{key}`), MAX(`{key}`) FROM `{shard}`")
                low, high = cur.fetchone()
        finally:
            conn.close()
        if low is not None and high is not None and high > low:
            reader = (
                reader.option("partitionColumn", key)
                .option("lowerBound", str(low))
                .option("upperBound", str(high))
                .option("numPartitions", str(num_partitions))
            )
    try:
        df = reader.load()
    except Exception as exc:
        if "ClassNotFoundException" in str(exc) and JDBC_DRIVER in str(exc):
            raise SnapshotError(
                f"the JDBC driver {JDBC_DRIVER} is not on Spark's class path: install Debian's libmariadb-java "
                "(/usr/share/java/mariadb-java-client.jar, which the session picks up) or put the jar in "
                "SHARP_SPARK_JARS"
            ) from None
        raise
    return df.select(*[_spark_value(name, kind) for name, kind in columns]).withColumn(
        "source_table", F.lit(shard)
    )


_EPOCH = "'1970-01-01 00:00:00'"
_TEMPORAL = {"datetime": "timestamp", "timestamp": "timestamp", "date": "date"}


def _column_types(mysql: MysqlSettings, database: str, shard: str) -> list[tuple[str, str | None]]:
    """The shard's columns in order, each with its temporal kind (`timestamp`, `date`) or None."""
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = %s ORDER BY ordinal_position",
                (database, shard),
            )
            return [(name, _TEMPORAL.get(str(kind).lower())) for name, kind in cur.fetchall()]
    finally:
        conn.close()


def _select_shard(shard: str, columns: list[tuple[str, str | None]]) -> str:
    """The JDBC `dbtable`: the shard with its temporal columns as numbers (see the module docstring)."""

    def value(name: str, kind: str | None) -> str:
        if kind == "timestamp":
            return f"TIMESTAMPDIFF(MICROSECOND, {_EPOCH}, `{name}`) AS `{name}`"
        if kind == "date":
            return f"DATEDIFF(`{name}`, {_EPOCH}) AS `{name}`"
        return f"`{name}`"

    if not any(kind for _, kind in columns):
        return f"`{shard}`"
    return f"(SELECT {', '.join(value(n, k) for n, k in columns)} FROM `{shard}`) AS `s`"


def _spark_value(name: str, kind: str | None):
    col = F.col(f"`{name}`")
    if kind == "timestamp":
        return F.timestamp_micros(col).alias(name)
    if kind == "date":
        return F.date_from_unix_date(col.cast("int")).alias(name)
    return col
