"""The CDC source configuration: which server, databases and tables are captured, and how they land.

One YAML file describes one source (a MySQL/MariaDB server the collector reads the binlog of):

    source_id: shop-mariadb          # part of every change's identity (event_uid); never change it later
    flavor: mariadb                  # mariadb (resume by GTID) or mysql (resume by file + position)
    replica_server_id: 4101          # the server id the collector registers with; unique among replicas
    lateness_minutes: 15             # an hour is done when the watermark passed hour end + this
    topic_partitions: 2              # partitions of each binlog topic the collector creates
    schema_check: strong             # a day that drops, renames or retypes a column some DWD/ADS column reads:
                                     # strong holds the day (nothing published), weak publishes and alerts
    ddl: {drop_column: keep, recreate_table: follow}   # DDL policy (config_fields.DdlPolicy); these are defaults
    start: 2024-06-01                # the first day merged into ODS (written by `cdc bootstrap`; default: the
                                     # warehouse's DEFAULT_START); its bootstrap snapshot is the day before's state
    databases:
      - name: shop                   # source database; raw table original_binlog.shop
        topic: binlog.shop           # default: binlog.<name>
        tables:
          - name: user_info          # logical table (the raw table's table_name partition)
            shard_regex: 'user_info_(\\d+)'   # physical names, matched whole; default: the name itself
            shards: 4                        # the physical tables: user_info_0 .. user_info_3 (or a list)
            primary_key: [id]
            business_key: [user_code]        # optional: the merge key when it is not the primary key
            unique_across_shards: true       # the business key is unique across the shards (see below)
            columns:                         # optional here; the warehouse needs them (ODS schemas, lineage)
              - id BIGINT NOT NULL           # <name> <MySQL type>; the Spark type follows from it
              - user_code VARCHAR(32)        #   (the one mapping: cdc/source/columns.py)
          - name: orders
            primary_key: [order_id]

The merge key of a sharded table must tell its shards apart, or rows of different shards with the same id would
be merged into one: the primary key gets `source_table` (the physical table) added; a business key must hold
`source_table`, or be declared `unique_across_shards: true` (rows that share it are one row, whichever shard
holds it). A sharded table with any other business key is refused at load, naming the table.

`shards` names a sharded table's physical tables: a count N stands for `<name>_0` .. `<name>_{N-1}`, a range
'0000..1023' for zero-padded `<name>_0000` .. `<name>_1023`, a list names them; every name must match
`shard_regex`. An unsharded table's one physical table is its name. The collector itself folds whatever physical tables match `shard_regex`; the declared ones are what the project shows (source
assets, lineage) and what a test or demo creates. Declared columns must include the primary key and business key
columns; a sharded table may not declare a column `source_table` (the merge adds it).

`load_source_config(path)` raises `ConfigError` naming the file, the field and the table (the field checks are
`config_fields.py`). `MysqlSettings` holds where the source server is; its password never appears in a repr or a
log line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from sharp_dagster.cdc.source.columns import SourceColumn
from sharp_dagster.cdc.source.config_fields import (
    ConfigError,
    DdlPolicy,
    FieldReader,
    check_shard_key,
    read_columns,
    read_ddl_policy,
    read_shards,
    read_start,
)
from sharp_dagster.cdc.source.shards import PHYSICAL_TABLE_COLUMN, ShardRule, ShardRules
from sharp_dagster.periods import day_before
from sharp_dagster.settings import source_password

PASSWORD_ENV = "SHARP_CDC_MYSQL_PASSWORD"
DEFAULT_TOPIC_TEMPLATE = "binlog.{database}"
FLAVORS = ("mariadb", "mysql")
SCHEMA_CHECKS = ("strong", "weak")  # the ODS schema check: holds the day, or publishes it and alerts
DEFAULT_SCHEMA_CHECK = "strong"  # safe: a change that breaks a downstream column holds the day

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SOURCE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


@dataclass(frozen=True)
class TableConfig:
    """A logical table: its physical shards (by regex), its primary key, and optionally a business key; its
    declared columns and physical tables when the config gives them."""

    name: str
    primary_key: tuple[str, ...]
    shard_regex: str | None = None
    business_key: tuple[str, ...] | None = None
    unique_across_shards: bool = False
    columns: tuple[SourceColumn, ...] = ()
    declared_shards: tuple[str, ...] = ()
    # Merged as its hours land (`cdc/ods/premerge.py`): for a big table whose day's merge DWD waits on; a small
    # table's whole day costs less than 23 hourly merges.
    premerge: bool = False

    @property
    def shards(self) -> tuple[str, ...]:
        """The physical tables: the declared ones, else the name itself for an unsharded table (else none)."""
        if self.declared_shards:
            return self.declared_shards
        return () if self.sharded else (self.name,)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def spark_schema(self) -> dict[str, str]:
        """The declared columns' Spark SQL types, in declaration order."""
        return {c.name: c.spark_type for c in self.columns}

    def mysql_ddl(self, physical: str) -> str:
        """`CREATE TABLE` of one physical table, from the declared columns and the primary key."""
        if not self.columns:
            raise ValueError(f"table {self.name}: no columns declared, no DDL to give")
        cols = ",\n  ".join(f"`{c.name}` {c.mysql_type}" for c in self.columns)
        pk = ", ".join(f"`{k}`" for k in self.primary_key)
        return f"CREATE TABLE `{physical}` (\n  {cols},\n  PRIMARY KEY ({pk})\n)"

    @property
    def rule(self) -> ShardRule:
        return ShardRule(self.name, self.shard_regex)

    @property
    def sharded(self) -> bool:
        return self.shard_regex is not None

    @property
    def merge_key(self) -> tuple[str, ...]:
        """The key the daily merge folds on; for a sharded table it tells the shards apart (see the module doc)."""
        if self.business_key:
            return self.business_key
        if self.sharded and PHYSICAL_TABLE_COLUMN not in {c.lower() for c in self.primary_key}:
            return (*self.primary_key, PHYSICAL_TABLE_COLUMN)
        return self.primary_key


@dataclass(frozen=True)
class DatabaseConfig:
    name: str
    topic: str
    tables: tuple[TableConfig, ...]

    @property
    def shard_rules(self) -> ShardRules:
        return ShardRules(t.rule for t in self.tables)

    def table(self, logical: str) -> TableConfig:
        for t in self.tables:
            if t.name == logical:
                return t
        raise KeyError(f"database {self.name}: no table {logical!r} configured")


@dataclass(frozen=True)
class SourceConfig:
    source_id: str
    databases: tuple[DatabaseConfig, ...]
    flavor: str = "mariadb"
    replica_server_id: int = 4101
    lateness_minutes: int = 15
    topic_partitions: int = 1
    path: Path | None = field(default=None, compare=False)
    start: str | None = None  # YYYY-MM-DD: the first merged day, where the bootstrap put it
    schema_check: str = (
        DEFAULT_SCHEMA_CHECK  # strong or weak: the ODS assets' check (assets/ods_schema_check.py)
    )
    ddl: DdlPolicy = (
        DdlPolicy()
    )  # what the daily merge does with the source's DDL (`config_fields.DdlPolicy`)

    def database(self, name: str) -> DatabaseConfig:
        for db in self.databases:
            if db.name == name:
                return db
        raise KeyError(f"{self.path or 'CDC config'}: no database {name!r} configured")

    @property
    def database_names(self) -> list[str]:
        return [db.name for db in self.databases]

    def only(self, names: list[str] | None) -> SourceConfig:
        """The same source restricted to some of its databases (all when `names` is empty)."""
        if not names:
            return self
        missing = [n for n in names if n not in self.database_names]
        if missing:
            raise ConfigError(f"{self.path or 'CDC config'}: databases not configured: {', '.join(missing)}")
        kept = tuple(db for db in self.databases if db.name in names)
        return SourceConfig(
            self.source_id,
            kept,
            self.flavor,
            self.replica_server_id,
            self.lateness_minutes,
            self.topic_partitions,
            self.path,
            self.start,
            self.schema_check,
            self.ddl,
        )


@dataclass(frozen=True)
class MysqlSettings:
    """Where the source server is. Build it with `from_env` so the password comes from `SHARP_CDC_MYSQL_PASSWORD`."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)

    @classmethod
    def from_env(cls, host: str, port: int, user: str, env: str = PASSWORD_ENV) -> MysqlSettings:
        return cls(host=host, port=int(port), user=user, password=source_password(env))

    def replication_settings(self) -> dict[str, Any]:
        """Connection settings in python-mysql-replication's form."""
        return {"host": self.host, "port": self.port, "user": self.user, "passwd": self.password}

    def pymysql_kwargs(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password}

    def describe(self) -> str:
        """`user@host:port`, for messages (never the password)."""
        return f"{self.user}@{self.host}:{self.port}"


# ---------------------------------------------------------------------------------------------------- loading
def load_source_config(path: str | Path) -> SourceConfig:
    """Read and validate a source YAML file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the CDC config: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: a date-like scalar that is no date (2026-13-01)
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return source_config_from_dict(data, origin=str(path), path=path)


def write_start(path: str | Path, day: str) -> None:
    """Set the source YAML's top-level `start:` to `day` in place, keeping the rest of the file (and its comments)
    as written: the line is replaced, or added after `source_id:`. The result must load."""
    path = Path(path)
    lines = path.read_text().splitlines(keepends=True)
    line = f"start: {date.fromisoformat(day).isoformat()}\n"
    at = next((i for i, text in enumerate(lines) if re.match(r"start\s*:", text)), None)
    if at is not None:
        lines[at] = line
    else:
        after = next((i for i, text in enumerate(lines) if re.match(r"source_id\s*:", text)), None)
        if after is None:
            raise ConfigError(f"{path}: no top-level source_id line to put start: after")
        lines.insert(after + 1, line)
    text = "".join(lines)
    source_config_from_dict(yaml.safe_load(text), origin=str(path))
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


SOURCE_FIELDS = {
    "source_id",
    "flavor",
    "replica_server_id",
    "lateness_minutes",
    "topic_partitions",
    "databases",
    "start",
    "schema_check",
    "ddl",
}
DATABASE_FIELDS = {"name", "topic", "tables"}
TABLE_FIELDS = {
    "name",
    "premerge",
    "shard_regex",
    "shards",
    "primary_key",
    "business_key",
    "unique_across_shards",
    "columns",
}


def source_config_from_dict(
    data: Any, origin: str = "<CDC config>", path: Path | None = None
) -> SourceConfig:
    """Validate a source's YAML, already parsed; `origin` names it in errors."""
    r = FieldReader(origin)
    top = r.mapping(data, "")
    r.no_unknown(top, "", SOURCE_FIELDS)
    start = read_start(r, top.get("start"))
    source_id = r.string(top, "source_id", pattern=_SOURCE_ID, hint="letters, digits and _.:-")
    flavor = r.string(top, "flavor", default="mariadb")
    if flavor not in FLAVORS:
        r.fail("flavor", f"expected one of {', '.join(FLAVORS)}, got {flavor!r}")
    replica_server_id = r.integer(top, "replica_server_id", default=4101, minimum=1, maximum=2**32 - 1)
    lateness = r.integer(top, "lateness_minutes", default=15, minimum=0, maximum=7 * 24 * 60)
    partitions = r.integer(top, "topic_partitions", default=1, minimum=1, maximum=1000)
    schema_check = r.string(top, "schema_check", default=DEFAULT_SCHEMA_CHECK)
    if schema_check not in SCHEMA_CHECKS:
        r.fail("schema_check", f"expected one of {', '.join(SCHEMA_CHECKS)}, got {schema_check!r}")
    raw_dbs = top.get("databases")
    if not isinstance(raw_dbs, list) or not raw_dbs:
        r.fail("databases", "expected a non-empty list of databases")
    seen: set[str] = set()
    databases = [_database(r, raw_db, f"databases[{i}]", seen) for i, raw_db in enumerate(raw_dbs)]
    topics = [db.topic for db in databases]
    if len(set(topics)) != len(topics):
        r.fail("databases", "two databases share one topic; each source database has its own topic")
    ddl = read_ddl_policy(r, top.get("ddl"))
    return SourceConfig(
        source_id,
        tuple(databases),
        flavor,
        replica_server_id,
        lateness,
        partitions,
        path,
        start,
        schema_check,
        ddl,
    )


def _unique_name(
    r: FieldReader, entry: Mapping[str, Any], where: str, seen: set[str], what: str, within: str = ""
) -> str:
    """An entry's `name`: a plain identifier, not in `seen` yet (then added)."""
    name = r.string(entry, "name", where, pattern=_IDENT, hint="a plain identifier")
    if name in seen:
        r.fail(f"{where}.name", f"{what} {name!r} is listed twice{within}")
    seen.add(name)
    return name


def _database(r: FieldReader, raw_db: Any, where: str, seen: set[str]) -> DatabaseConfig:
    """One entry of `databases`: its name (not in `seen` yet, then added), topic and tables."""
    db_map = r.mapping(raw_db, where)
    r.no_unknown(db_map, where, DATABASE_FIELDS)
    name = _unique_name(r, db_map, where, seen, "database")
    topic = r.string(
        db_map,
        "topic",
        where,
        default=DEFAULT_TOPIC_TEMPLATE.format(database=name),
        pattern=_TOPIC,
        hint="a Kafka topic name",
    )
    raw_tables = db_map.get("tables")
    if not isinstance(raw_tables, list) or not raw_tables:
        r.fail(f"{where}.tables", "expected a non-empty list of tables")
    seen_tables: set[str] = set()
    tables = [
        _table(r, raw_t, f"{where}.tables[{j}]", name, seen_tables) for j, raw_t in enumerate(raw_tables)
    ]
    return DatabaseConfig(name, topic, tuple(tables))


def _table(r: FieldReader, raw_t: Any, where: str, database: str, seen: set[str]) -> TableConfig:
    """One entry of a database's `tables`: its name (not in `seen` yet, then added), shards, keys and columns."""
    t_map = r.mapping(raw_t, where)
    r.no_unknown(t_map, where, TABLE_FIELDS)
    name = _unique_name(r, t_map, where, seen, "table", f" in database {database}")
    regex = r.string(t_map, "shard_regex", where, default=None)
    if regex is not None:
        try:
            re.compile(regex)
        except re.error as exc:
            r.fail(f"{where}.shard_regex", f"bad regular expression {regex!r}: {exc}")
    pk = r.columns(t_map, "primary_key", where, required=True)
    bk = r.columns(t_map, "business_key", where, required=False)
    unique = r.boolean(t_map, "unique_across_shards", where, default=False)
    qualified = f"{database}.{name}"
    check_shard_key(r, where, qualified, regex, bk, unique)
    shards = read_shards(r, t_map, where, qualified, regex)
    columns = read_columns(r, t_map, where, qualified, regex is not None, pk, bk)
    premerge = r.boolean(t_map, "premerge", where, default=False)
    return TableConfig(name, pk, regex, bk, unique, columns, shards, premerge)


def snapshot_day(start: str) -> str:
    """The ODS state partition that holds a source's bootstrap snapshot: the day before its first merged day.

    >>> snapshot_day("2024-01-01")
    '2023-12-31'
    """
    return day_before(start)
