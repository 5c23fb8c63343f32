"""Columns that a table gains through DDL in its binlog: `ALTER TABLE t ADD [COLUMN] c TYPE ...` to Spark types.

The daily merge reads the day's `ddl` events, and every column they add joins the table's column list. Rows that
existed before the ALTER get the value MySQL gave them: the column's literal DEFAULT, or for a NOT NULL column
without one MySQL's implicit default (0, '' ...), else null. The other DDL kinds (RENAME, CHANGE, MODIFY, DROP,
DROP + CREATE, indexes) are interpreted by `ddl_changes.py`, which the merge and the landing call.

>>> [(c.name, c.spark_type, c.default) for c in parse_added_columns("ALTER TABLE t ADD COLUMN note varchar(20)")]
[('note', 'string', None)]
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

DType = exp.DataType.Type

_INTEGERS = {
    DType.TINYINT: "int",
    DType.UTINYINT: "int",
    DType.SMALLINT: "int",
    DType.USMALLINT: "int",
    DType.MEDIUMINT: "int",
    DType.UMEDIUMINT: "int",
    DType.INT: "int",
    DType.UINT: "bigint",
    DType.BIGINT: "bigint",
    DType.UBIGINT: "decimal(20,0)",
    DType.YEAR: "int",
}
_SIMPLE = {
    DType.FLOAT: "float",
    DType.DOUBLE: "double",
    DType.DATE: "date",
    DType.DATETIME: "timestamp",
    DType.DATETIME64: "timestamp",
    DType.TIMESTAMP: "timestamp",
    DType.TIMESTAMPTZ: "timestamp",
    DType.TIMESTAMPLTZ: "timestamp",
    DType.BOOLEAN: "boolean",
}
_BINARY = {
    DType.BINARY,
    DType.VARBINARY,
    DType.BLOB,
    DType.TINYBLOB,
    DType.MEDIUMBLOB,
    DType.LONGBLOB,
}
# MySQL's implicit default for a NOT NULL column without DEFAULT, by Spark type: what ALTER gives old rows.
_IMPLICIT_DEFAULT = {
    "int": "0",
    "bigint": "0",
    "float": "0",
    "double": "0",
    "string": "''",
    "boolean": "false",
}

_ADD_LIST = re.compile(
    r"^\s*ALTER\s+TABLE\s+(?P<table>\S+)\s+ADD\s+(?:COLUMN\s+)?\((?P<body>.*)\)\s*;?\s*$", re.I | re.S
)


@dataclass(frozen=True)
class AddedColumn:
    """A column added by DDL: its name, Spark type, and the Spark SQL literal old rows get (None: null)."""

    name: str
    spark_type: str
    default: str | None = None


def spark_type(datatype: exp.DataType) -> str:
    """The Spark type of a MySQL column type as sqlglot parsed it (text and unknown types become string).

    >>> spark_type(exp.DataType.build("decimal(10,2)", dialect="mysql"))
    'decimal(10,2)'
    """
    dtype = datatype.this
    params = [p.sql() for p in datatype.expressions]
    if dtype == DType.TINYINT and params == ["1"]:
        return "boolean"  # MySQL JDBC drivers read tinyint(1) as BIT: keep snapshots and merges alike
    if dtype == DType.BIT:
        return "boolean" if params in ([], ["1"]) else "bigint"
    if dtype in _INTEGERS:
        return _INTEGERS[dtype]
    if dtype == DType.DECIMAL or dtype == DType.UDECIMAL:
        precision = int(params[0]) if params else 10
        scale = int(params[1]) if len(params) > 1 else 0
        return f"decimal({min(precision, 38)},{scale})"
    if dtype in _SIMPLE:
        return _SIMPLE[dtype]
    if dtype in _BINARY:
        return "binary"
    return "string"


def parse_added_columns(ddl_sql: str) -> list[AddedColumn]:
    """The columns an `ALTER TABLE ... ADD [COLUMN] ...` statement adds (empty for any other statement).

    >>> parse_added_columns("ALTER TABLE t ADD COLUMN n INT NOT NULL DEFAULT 7, ADD b tinyint(1)")
    [AddedColumn(name='n', spark_type='int', default='7'), AddedColumn(name='b', spark_type='boolean', default=None)]
    """
    if not ddl_sql or not re.search(r"\bALTER\b", ddl_sql, re.I) or not re.search(r"\bADD\b", ddl_sql, re.I):
        return []
    listed = _ADD_LIST.match(ddl_sql)
    if listed:
        # `ADD (a int, b text)` is valid MySQL that sqlglot parses as an opaque command: rewrite it as ADD COLUMNs.
        parts = _split_top_level(listed.group("body"))
        ddl_sql = f"ALTER TABLE {listed.group('table')} " + ", ".join(f"ADD COLUMN {p}" for p in parts)
    try:
        statement = parse_quietly(ddl_sql)
    except sqlglot.errors.ParseError as err:
        raise ValueError(f"cannot parse DDL from the binlog: {ddl_sql!r}: {err}") from err
    if not isinstance(statement, exp.Alter):
        return []
    added = []
    for action in statement.args.get("actions") or []:
        if not isinstance(action, exp.ColumnDef) or not isinstance(action.args.get("kind"), exp.DataType):
            continue
        typ = spark_type(action.args["kind"])
        added.append(AddedColumn(action.name, typ, _default_literal(action, typ)))
    return added


def parse_created_columns(ddl_sql: str) -> list[tuple[str, str]]:
    """The columns (name, Spark type) a `CREATE TABLE t (...)` statement defines; empty for any other statement.

    Used for a table's first merged day without a base: the DDL types beat types guessed from row images. A CREATE
    that sqlglot cannot read gives nothing (the images still name the columns), it is not an error.

    >>> parse_created_columns("CREATE TABLE t (id bigint PRIMARY KEY, price decimal(10,2), KEY k (price))")
    [('id', 'bigint'), ('price', 'decimal(10,2)')]
    """
    if not ddl_sql or not re.match(r"^\s*CREATE\s+(?:TEMPORARY\s+)?TABLE\b", ddl_sql, re.I):
        return []
    try:
        statement = parse_quietly(ddl_sql)
    except sqlglot.errors.ParseError:
        return []
    if not isinstance(statement, exp.Create) or not isinstance(statement.this, exp.Schema):
        return []  # CREATE TABLE ... LIKE / AS SELECT: no column list
    return [
        (column.name, spark_type(column.args["kind"]))
        for column in statement.this.expressions
        if isinstance(column, exp.ColumnDef) and isinstance(column.args.get("kind"), exp.DataType)
    ]


def parse_quietly(sql: str) -> exp.Expression:
    # sqlglot logs a warning when it falls back to an opaque Command; that case is handled by the caller.
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return sqlglot.parse_one(sql, read="mysql")
    finally:
        logger.setLevel(level)


def _default_literal(column: exp.ColumnDef, typ: str) -> str | None:
    not_null = False
    for constraint in column.args.get("constraints") or []:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
            not_null = True
        if isinstance(kind, exp.DefaultColumnConstraint):
            value = kind.this
            if isinstance(value, exp.Null):
                return None
            if isinstance(value, exp.Literal):
                return f"'{_escape(value.this)}'" if value.is_string else str(value.this)
            if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal):
                return f"-{value.this.this}"
            if isinstance(value, exp.Boolean):
                return "true" if value.this else "false"
            # CURRENT_TIMESTAMP and other expressions: the value MySQL computed is not in the binlog.
            return None
    if not_null:
        if typ.startswith("decimal"):
            return "0"
        return _IMPLICIT_DEFAULT.get(typ)
    return None


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _split_top_level(body: str) -> list[str]:
    parts, depth, quote, current = [], 0, "", []
    for char in body:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts
