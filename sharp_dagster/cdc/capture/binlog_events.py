"""What the collector reads out of binlog events: DDL statements, column types, row images."""

from __future__ import annotations

import re
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE

from sharp_dagster.cdc.change.canonical_values import canonical_value
from sharp_dagster.cdc.change.messages import TRUNCATE

_NAME = r"(?:`[^`]+`|[A-Za-z0-9_$]+)(?:\s*\.\s*(?:`[^`]+`|[A-Za-z0-9_$]+))?"
_LEADING_COMMENTS = re.compile(r"^(?:\s+|/\*.*?\*/|--[^\n]*(?:\n|$)|#[^\n]*(?:\n|$))*", re.S)
_DDL_PATTERNS: list[tuple[str, re.Pattern]] = [
    ("ALTER", re.compile(rf"ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?({_NAME})", re.I)),
    (TRUNCATE, re.compile(rf"TRUNCATE\s+(?:TABLE\s+)?({_NAME})", re.I)),
    (
        "CREATE",
        re.compile(
            rf"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?({_NAME})", re.I
        ),
    ),
    (
        "ERASE",
        re.compile(
            rf"DROP\s+(?:TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?({_NAME}(?:\s*,\s*{_NAME})*)", re.I
        ),
    ),
    (
        "RENAME",
        re.compile(rf"RENAME\s+TABLES?\s+({_NAME}\s+TO\s+{_NAME}(?:\s*,\s*{_NAME}\s+TO\s+{_NAME})*)", re.I),
    ),
    (
        "CINDEX",
        re.compile(
            rf"CREATE\s+(?:OR\s+REPLACE\s+)?(?:ONLINE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+"
            rf"(?:IF\s+NOT\s+EXISTS\s+)?\S+\s+(?:USING\s+\w+\s+)?ON\s+({_NAME})",
            re.I,
        ),
    ),
    ("DINDEX", re.compile(rf"DROP\s+INDEX\s+(?:IF\s+EXISTS\s+)?\S+\s+ON\s+({_NAME})", re.I)),
]
_NAME_PARTS = re.compile(r"(?:`([^`]+)`|([A-Za-z0-9_$]+))(?:\s*\.\s*(?:`([^`]+)`|([A-Za-z0-9_$]+)))?")


def parse_ddl(sql: str, default_db: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(Canal type, [(database, table), ...]) of a DDL or TRUNCATE statement, or None for other statements.

    >>> parse_ddl("ALTER TABLE `shop`.user_info_1 ADD COLUMN x INT", "other")
    ('ALTER', [('shop', 'user_info_1')])
    >>> parse_ddl("RENAME TABLE a TO b, c TO d", "shop")
    ('RENAME', [('shop', 'a'), ('shop', 'b'), ('shop', 'c'), ('shop', 'd')])
    """
    body = _LEADING_COMMENTS.sub("", sql, count=1)
    for kind, pattern in _DDL_PATTERNS:
        match = pattern.match(body)
        if match:
            names = []
            for q1, p1, q2, p2 in _NAME_PARTS.findall(match.group(1)):
                first, second = q1 or p1, q2 or p2
                if not second and p1.upper() == "TO":
                    continue
                db, table = (first, second) if second else (default_db, first)
                if (db, table) not in names:
                    names.append((db, table))
            return kind, names
    return None


_TYPE_NAMES = {
    FIELD_TYPE.DECIMAL: "decimal",
    FIELD_TYPE.NEWDECIMAL: "decimal",
    FIELD_TYPE.TINY: "tinyint",
    FIELD_TYPE.SHORT: "smallint",
    FIELD_TYPE.INT24: "mediumint",
    FIELD_TYPE.LONG: "int",
    FIELD_TYPE.LONGLONG: "bigint",
    FIELD_TYPE.FLOAT: "float",
    FIELD_TYPE.DOUBLE: "double",
    FIELD_TYPE.TIMESTAMP: "timestamp",
    FIELD_TYPE.TIMESTAMP2: "timestamp",
    FIELD_TYPE.DATETIME: "datetime",
    FIELD_TYPE.DATETIME2: "datetime",
    FIELD_TYPE.DATE: "date",
    FIELD_TYPE.NEWDATE: "date",
    FIELD_TYPE.TIME: "time",
    FIELD_TYPE.TIME2: "time",
    FIELD_TYPE.YEAR: "year",
    FIELD_TYPE.VARCHAR: "varchar",
    FIELD_TYPE.VAR_STRING: "varchar",
    FIELD_TYPE.STRING: "char",
    FIELD_TYPE.BIT: "bit",
    FIELD_TYPE.JSON: "json",
    FIELD_TYPE.ENUM: "enum",
    FIELD_TYPE.SET: "set",
    FIELD_TYPE.TINY_BLOB: "blob",
    FIELD_TYPE.MEDIUM_BLOB: "blob",
    FIELD_TYPE.LONG_BLOB: "blob",
    FIELD_TYPE.BLOB: "blob",
    FIELD_TYPE.GEOMETRY: "geometry",
}
# java.sql.Types codes, as Canal's `sqlType` carries them (informational).
_JDBC_TYPES = {
    "tinyint": -6,
    "smallint": 5,
    "mediumint": 4,
    "int": 4,
    "bigint": -5,
    "float": 7,
    "double": 8,
    "decimal": 3,
    "date": 91,
    "time": 92,
    "datetime": 93,
    "timestamp": 93,
    "year": 12,
    "varchar": 12,
    "char": 1,
    "text": 2005,
    "blob": 2004,
    "varbinary": -3,
    "binary": -2,
    "bit": -7,
    "json": 12,
    "enum": 4,
    "set": -7,
    "geometry": -2,
}


def column_type(column: Any) -> str:
    """The MySQL type name of a binlog column (`int unsigned`, `text`, `varbinary`, ...)."""
    name = _TYPE_NAMES.get(column.type, f"type{column.type}")
    charset = (getattr(column, "character_set_name", None) or "").lower()
    if name == "blob" and charset and charset != "binary":
        name = "text"
    elif name in ("varchar", "char") and charset == "binary":
        name = "varbinary" if name == "varchar" else "binary"
    if getattr(column, "unsigned", False) and name in ("tinyint", "smallint", "mediumint", "int", "bigint"):
        name += " unsigned"
    return name


def jdbc_type(mysql_type: str) -> int:
    """The java.sql.Types code of a MySQL type name (1111, OTHER, for unknown types)."""
    return _JDBC_TYPES.get(mysql_type.split()[0], 1111)


def row_image(
    values: dict[str, Any], none_sources: dict[str, str] | None, before: dict | None = None
) -> dict:
    """A row image as canonical strings; columns the binlog did not log (MINIMAL image) are left out."""
    sources = none_sources or {}
    image = {}
    for name, value in values.items():
        source = sources.get(name)
        if source == NONE_SOURCE.COLS_BITMAP:
            continue
        if source == NONE_SOURCE.JSON_PARTIAL_UPDATE and before is not None and name in before:
            image[name] = before[name]
            continue
        image[name] = canonical_value(value)
    return image
