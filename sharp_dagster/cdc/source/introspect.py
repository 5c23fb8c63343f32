"""`cdc init`'s engine: a live server's schema as a CDC source YAML, and what the server or the user lacks.

The schema comes from `information_schema` (COLUMNS, KEY_COLUMN_USAGE, TABLES), the checks from the server's
global variables and the privileges `information_schema` lists for the connected user:

- settings: `log_bin` ON, `binlog_format` ROW, `binlog_row_image` FULL, `binlog_row_metadata` FULL (without it
  row events carry no column names), a `server_id` other than the collector's `replica_server_id`; on MySQL
  `gtid_mode` ON is only advised (the collector resumes by file + position there);
- privileges: REPLICATION SLAVE (the binlog dump), REPLICATION CLIENT or, on MariaDB 10.5+, BINLOG MONITOR
  (`SHOW MASTER STATUS`, `SHOW BINARY LOGS`), SELECT on every captured table (the snapshot). Privileges held only
  through a role are not listed by `information_schema` and count as missing.

Shard groups are found by name: tables named `<base>_<digits>[_<digits>...]` (`orders_0`, `t_2024_01`) with the
same number of digit groups form one logical table `<base>` with `shard_regex` `<base>_(\\d+)...`, when there are
at least two of them, no table is named `<base>` itself, and all have the same columns and primary key (else
they stay separate tables, with a note). Shards `<base>_0 .. <base>_{N-1}` are written as a count, others as a
list. Column types are written the way `source_columns.py` reads them (`BIGINT NOT NULL`, integer display widths
dropped); a type it has no exact Spark type for is a problem naming the column.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pymysql
import yaml

from sharp_dagster.cdc.source.columns import ColumnTypeError, spark_type_of
from sharp_dagster.cdc.source.config import (
    DEFAULT_SCHEMA_CHECK,
    DEFAULT_TOPIC_TEMPLATE,
    MysqlSettings,
    source_config_from_dict,
)

_SHARD_NAME = re.compile(r"^(?P<base>[A-Za-z_][A-Za-z0-9_]*?[A-Za-z])_(?P<suffix>\d+(?:_\d+)*)$")
_INT_WIDTH = re.compile(r"^(tinyint|smallint|mediumint|int|integer|bigint)\(\d+\)", re.IGNORECASE)
HEADER = (
    "# Written by `sharp-dagster cdc init` from the server's information_schema; see cdc/source/config.py.\n"
)


class IntrospectError(RuntimeError):
    """The server cannot be read (connection refused, no such database)."""


@dataclass(frozen=True)
class PhysicalTable:
    name: str
    columns: tuple[str, ...]  # `<name> <MySQL type>` declarations, in ordinal order
    primary_key: tuple[str, ...]


@dataclass
class InitResult:
    config: dict[str, Any]  # the source YAML's content
    problems: list[str] = field(default_factory=list)  # what blocks the capture: one line each
    notes: list[str] = field(default_factory=list)  # what the user should know but need not fix

    @property
    def yaml(self) -> str:
        return HEADER + yaml.safe_dump(self.config, sort_keys=False, default_flow_style=False, width=120)


def introspect(
    mysql: MysqlSettings,
    databases: list[str],
    source_id: str | None = None,
    replica_server_id: int = 4101,
    lateness_minutes: int = 15,
    topic_partitions: int = 1,
    exclude: list[str] | None = None,
) -> InitResult:
    """The source YAML of `databases` on the server, with the server's and the user's problems."""
    try:
        conn = pymysql.connect(**mysql.pymysql_kwargs(), connect_timeout=10, autocommit=True)
    except pymysql.err.Error as exc:
        raise IntrospectError(f"cannot connect to {mysql.describe()}: {exc.args[-1]}") from exc
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            flavor = "mariadb" if "MARIADB" in cur.fetchone()[0].upper() else "mysql"
            problems, notes = check_settings(cur, flavor, replica_server_id, mysql.describe())
            tables_by_db = {db: read_tables(cur, db, exclude or []) for db in databases}
            problems += check_grants(cur, tables_by_db, mysql.user)
    finally:
        conn.close()
    config: dict[str, Any] = {
        "source_id": source_id or f"{databases[0]}-{flavor}".replace("_", "-"),
        "flavor": flavor,
        "replica_server_id": replica_server_id,
        "lateness_minutes": lateness_minutes,
        "topic_partitions": topic_partitions,
        "schema_check": DEFAULT_SCHEMA_CHECK,  # stated, so the reviewer sees it
        "databases": [],
    }
    for db, tables in tables_by_db.items():
        entries, db_notes, db_problems = logical_tables(db, tables)
        notes += db_notes
        problems += db_problems
        if not entries:
            problems.append(f"database {db}: no table to capture (none found, or all excluded)")
        config["databases"].append(
            {"name": db, "topic": DEFAULT_TOPIC_TEMPLATE.format(database=db), "tables": entries}
        )
    if not problems:
        source_config_from_dict(config, origin="cdc init")  # what init writes must load
    return InitResult(config, problems, notes)


def check_settings(cur, flavor: str, replica_server_id: int, where: str) -> tuple[list[str], list[str]]:
    """The binlog settings the capture needs (problems) and advises (notes), one line each."""
    cur.execute(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image', "
        "'binlog_row_metadata', 'server_id', 'gtid_mode')"
    )
    values = {name.lower(): str(value).upper() for name, value in cur.fetchall()}
    problems, notes = [], []
    wanted = {
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
    }
    why = {
        "log_bin": "the binary log is off (start the server with log_bin)",
        "binlog_format": "row events are needed",
        "binlog_row_image": "updates and deletes must carry every column",
        "binlog_row_metadata": "row events must carry column names (MariaDB 10.5+, MySQL 8.0.1+)",
    }
    for name, value in wanted.items():
        actual = values.get(name)
        if actual != value:
            shown = "missing (server too old)" if actual is None else actual
            problems.append(f"{where}: {name} is {shown}, need {value}: {why[name]}")
    server_id = int(values.get("server_id") or 0)
    if server_id == 0:
        problems.append(f"{where}: server_id is 0, need a non-zero server_id for a binlog client to attach")
    elif server_id == replica_server_id:
        problems.append(
            f"{where}: server_id is {server_id}, the same as replica_server_id: choose another replica_server_id"
        )
    if flavor == "mysql" and values.get("gtid_mode") != "ON":
        notes.append(
            f"{where}: gtid_mode is {values.get('gtid_mode')}: the collector resumes by file + position; "
            "a failover to a replica needs gtid_mode=ON"
        )
    return problems, notes


def check_grants(cur, tables_by_db: dict[str, list[PhysicalTable]], user: str) -> list[str]:
    """The privileges the collector and the snapshot need that the connected user lacks, one line each."""
    grantee = (
        "CONCAT(\"'\", SUBSTRING_INDEX(CURRENT_USER(), '@', 1), \"'@'\", "
        "SUBSTRING_INDEX(CURRENT_USER(), '@', -1), \"'\")"
    )
    cur.execute(f"SELECT privilege_type FROM information_schema.user_privileges WHERE grantee = {grantee}")
    global_privs = {r[0].upper() for r in cur.fetchall()}
    cur.execute(
        "SELECT table_schema, privilege_type FROM information_schema.schema_privileges "
        f"WHERE grantee = {grantee}"
    )
    schema_privs = {(r[0], r[1].upper()) for r in cur.fetchall()}
    cur.execute(
        f"SELECT table_schema, table_name FROM information_schema.table_privileges WHERE grantee = {grantee} "
        "AND privilege_type = 'SELECT'"
    )
    table_select = {(r[0], r[1]) for r in cur.fetchall()}
    problems = []
    if "REPLICATION SLAVE" not in global_privs:
        problems.append(f"user {user}: lacks REPLICATION SLAVE ON *.* (needed to read the binlog)")
    if not global_privs & {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}:
        problems.append(
            f"user {user}: lacks REPLICATION CLIENT ON *.* (BINLOG MONITOR on MariaDB 10.5+; needed for "
            "SHOW MASTER STATUS and SHOW BINARY LOGS)"
        )
    if "SELECT" in global_privs:
        return problems
    for db, tables in tables_by_db.items():
        if (db, "SELECT") in schema_privs:
            continue
        missing = [t.name for t in tables if (db, t.name) not in table_select]
        if missing or not tables:
            names = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            problems.append(
                f"user {user}: lacks SELECT ON {db}.* (needed for the snapshot"
                + (f"; tables without it: {names})" if missing else ")")
            )
    return problems


def read_tables(cur, database: str, exclude: list[str]) -> list[PhysicalTable]:
    """The base tables of `database` with their column declarations and primary keys, by name."""
    cur.execute("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = %s", (database,))
    if not cur.fetchone()[0]:
        raise IntrospectError(f"no database {database!r} on the server (or no privilege on it)")
    cur.execute(
        "SELECT c.table_name, c.column_name, c.column_type, c.is_nullable FROM information_schema.columns c "
        "JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
        "WHERE c.table_schema = %s AND t.table_type = 'BASE TABLE' ORDER BY c.table_name, c.ordinal_position",
        (database,),
    )
    columns: dict[str, list[str]] = defaultdict(list)
    for table, column, column_type, nullable in cur.fetchall():
        declaration = f"{column} {mysql_type(column_type)}" + (" NOT NULL" if nullable == "NO" else "")
        columns[table].append(declaration)
    cur.execute(
        "SELECT table_name, column_name FROM information_schema.key_column_usage WHERE table_schema = %s "
        "AND constraint_name = 'PRIMARY' ORDER BY table_name, ordinal_position",
        (database,),
    )
    keys: dict[str, list[str]] = defaultdict(list)
    for table, column in cur.fetchall():
        keys[table].append(column)
    skip = [re.compile(p) for p in exclude]
    return [
        PhysicalTable(name, tuple(cols), tuple(keys.get(name, ())))
        for name, cols in sorted(columns.items())
        if not any(p.fullmatch(name) for p in skip)
    ]


def mysql_type(column_type: str) -> str:
    """information_schema's COLUMN_TYPE as the config writes it: upper case, integer display widths dropped
    (MariaDB and MySQL before 8.0.19 report `bigint(20)`; the width changes nothing)."""
    return _INT_WIDTH.sub(lambda m: m.group(1), column_type.strip()).upper()


def logical_tables(database: str, tables: list[PhysicalTable]) -> tuple[list[dict], list[str], list[str]]:
    """The config's table entries (shard groups folded), notes, and problems (no primary key, unsupported types)."""
    groups, notes = shard_groups(database, tables)
    grouped = {t.name for members in groups.values() for t in members}
    entries: list[tuple[str, dict]] = []
    problems: list[str] = []
    for base, members in groups.items():
        entries.append((base, _entry(base, members[0], shards=[t.name for t in members])))
    for t in tables:
        if t.name not in grouped:
            entries.append((t.name, _entry(t.name, t)))
    for name, entry in sorted(entries, key=lambda e: e[0]):
        if not entry["primary_key"]:
            problems.append(
                f"table {database}.{name}: no primary key; the merge needs one (add it, or leave the table "
                "out with --exclude)"
            )
        for declaration in entry["columns"]:
            column, _, typ = declaration.partition(" ")
            try:
                spark_type_of(typ)
            except ColumnTypeError as exc:
                problems.append(
                    f"table {database}.{name}, column {column}: {exc} (or leave it out with --exclude)"
                )
    return [e for _, e in sorted(entries, key=lambda e: e[0])], notes, problems


def _entry(name: str, table: PhysicalTable, shards: list[str] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name}
    if shards:
        suffixes = [s[len(name) + 1 :] for s in shards]
        entry["shard_regex"] = re.escape(name) + "_" + "_".join([r"(\d+)"] * (suffixes[0].count("_") + 1))
        entry["shards"] = _shard_count(suffixes) or shards
    entry["primary_key"] = list(table.primary_key)
    entry["columns"] = list(table.columns)
    return entry


def _shard_count(suffixes: list[str]) -> int | str | None:
    """The short form of numbered shards 0..N-1 (`shards: N`) or zero-padded ones ('0000..1023'), else None."""
    if not all(s.isdigit() for s in suffixes):
        return None
    numbers = sorted(int(s) for s in suffixes)
    if numbers != list(range(len(suffixes))):
        return None
    if all(s == str(int(s)) for s in suffixes):
        return len(suffixes)
    width = len(suffixes[0])
    if all(len(s) == width for s in suffixes):
        return f"{0:0{width}d}..{len(suffixes) - 1:0{width}d}"
    return None


def shard_groups(
    database: str, tables: list[PhysicalTable]
) -> tuple[dict[str, list[PhysicalTable]], list[str]]:
    """Logical name -> its shards (sorted by their numbers), for the name groups whose tables are alike."""
    names = {t.name for t in tables}
    candidates: dict[tuple[str, int], list[PhysicalTable]] = defaultdict(list)
    for t in tables:
        match = _SHARD_NAME.match(t.name)
        if match:
            candidates[(match["base"], match["suffix"].count("_"))].append(t)
    bases = defaultdict(int)
    for (base, _), members in candidates.items():
        bases[base] += len(members) >= 2
    groups: dict[str, list[PhysicalTable]] = {}
    notes = []
    for (base, _), members in sorted(candidates.items()):
        if len(members) < 2:
            continue
        listed = ", ".join(t.name for t in members[:3]) + (", ..." if len(members) > 3 else "")
        if base in names or bases[base] > 1:
            notes.append(
                f"database {database}: {listed} look like shards of {base}, but {base} names another table or "
                "group: kept as separate tables"
            )
            continue
        if len({(t.columns, t.primary_key) for t in members}) > 1:
            notes.append(
                f"database {database}: {listed} look like shards of {base}, but their columns or primary keys "
                "differ: kept as separate tables"
            )
            continue
        groups[base] = sorted(
            members, key=lambda t: tuple(int(x) for x in t.name[len(base) + 1 :].split("_"))
        )
    return groups, notes
