"""The columns of a source table as its CDC config declares them, and their one MySQL -> Spark type mapping.

A column is declared as `<name> <MySQL column type>`, the way DDL writes it (`user_id BIGINT NOT NULL`,
`price DECIMAL(10,2)`); its Spark SQL type is derived from the MySQL type by this table, the only mapping the
project uses (source table DDL, ODS schemas, the lineage graph):

    MySQL                                Spark
    SMALLINT                             smallint
    INT, INTEGER                         int
    BIGINT                               bigint
    DECIMAL(p,s), NUMERIC(p,s)           decimal(p,s)       p <= 38, precision and scale both given
    DOUBLE                               double
    CHAR(n), VARCHAR(n), TEXT            string
    DATE                                 date
    DATETIME[(fsp)], TIMESTAMP[(fsp)]    timestamp          wall-clock values read as UTC

Each of these is exact (every value of the MySQL type is one value of the Spark type). Types outside the table
(UNSIGNED integers, FLOAT, TINYINT which JDBC reads as boolean, ...) are refused with the list above, rather
than mapped approximately. After the type, a declaration may say `NOT NULL`, `NULL`, `AUTO_INCREMENT` or
`DEFAULT <literal>`; the declaration (without its name) is the column's MySQL DDL as is.

>>> parse_column("price DECIMAL(10,2)")
SourceColumn(name='price', mysql_type='DECIMAL(10,2)', spark_type='decimal(10,2)')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DECLARATION = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s+(?P<type>\S.*?)\s*$")
_TYPE = re.compile(
    r"^(?P<base>[A-Za-z]+)\s*(?:\(\s*(?P<a>\d+)\s*(?:,\s*(?P<b>\d+)\s*)?\))?(?P<rest>.*)$", re.DOTALL
)
_MODIFIERS = re.compile(
    r"^\s*(?:(?:NOT\s+NULL|NULL|AUTO_INCREMENT|DEFAULT\s+(?:'[^']*'|[A-Za-z0-9_.+-]+))(?:\s+|$))*$",
    re.IGNORECASE,
)
# base type -> (Spark type, what its parenthesised arguments may be: none, "width" (ignored display width or a
# required length), "fsp" (fractional seconds 0..6) or "decimal" (precision, scale))
_TYPES: dict[str, tuple[str, str]] = {
    "SMALLINT": ("smallint", "width?"),
    "INT": ("int", "width?"),
    "INTEGER": ("int", "width?"),
    "BIGINT": ("bigint", "width?"),
    "DECIMAL": ("decimal", "decimal"),
    "NUMERIC": ("decimal", "decimal"),
    "DOUBLE": ("double", "none"),
    "CHAR": ("string", "width"),
    "VARCHAR": ("string", "width"),
    "TEXT": ("string", "none"),
    "DATE": ("date", "none"),
    "DATETIME": ("timestamp", "fsp?"),
    "TIMESTAMP": ("timestamp", "fsp?"),
}
SUPPORTED = (
    "SMALLINT, INT, BIGINT, DECIMAL(p,s), NUMERIC(p,s), DOUBLE, CHAR(n), VARCHAR(n), TEXT, DATE, "
    "DATETIME, TIMESTAMP"
)
MAX_DECIMAL_PRECISION = 38


class ColumnTypeError(ValueError):
    """A column declaration that is malformed or has no exact Spark type; the message says which and why."""


@dataclass(frozen=True)
class SourceColumn:
    name: str
    mysql_type: str  # the declaration after the name, as written: `BIGINT NOT NULL`
    spark_type: str  # derived by `spark_type_of`


def parse_column(declaration: str) -> SourceColumn:
    """`<name> <MySQL type>` -> the column with its Spark type; `ColumnTypeError` when it has none."""
    match = _DECLARATION.match(declaration)
    if match is None:
        raise ColumnTypeError(f"expected '<column name> <MySQL type>', got {declaration!r}")
    mysql_type = match["type"]
    return SourceColumn(match["name"], mysql_type, spark_type_of(mysql_type))


def spark_type_of(mysql_type: str) -> str:
    """The Spark SQL type of a MySQL column type (see the module's table)."""
    match = _TYPE.match(mysql_type.strip())
    base = match["base"].upper() if match else ""
    if base not in _TYPES:
        raise ColumnTypeError(
            f"MySQL type {mysql_type!r} has no exact Spark type here; supported: {SUPPORTED}"
        )
    spark, args = _TYPES[base]
    a, b, rest = match["a"], match["b"], match["rest"]
    if re.search(r"\b(UNSIGNED|ZEROFILL)\b", rest, re.IGNORECASE):
        raise ColumnTypeError(
            f"MySQL type {mysql_type!r}: unsigned integers have no exact Spark type (a wider signed type or a "
            "DECIMAL would be needed)"
        )
    if not _MODIFIERS.match(rest):
        raise ColumnTypeError(
            f"MySQL type {mysql_type!r}: after the type only NOT NULL, NULL, AUTO_INCREMENT or DEFAULT <literal> "
            f"may follow, got {rest.strip()!r}"
        )
    if args == "decimal":
        if a is None or b is None:
            raise ColumnTypeError(
                f"MySQL type {mysql_type!r}: give both precision and scale, e.g. DECIMAL(10,2)"
            )
        precision, scale = int(a), int(b)
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
            raise ColumnTypeError(
                f"MySQL type {mysql_type!r}: Spark's decimal holds precision 1..{MAX_DECIMAL_PRECISION} with "
                "scale <= precision"
            )
        return f"decimal({precision},{scale})"
    if b is not None or (a is not None and args == "none"):
        raise ColumnTypeError(f"MySQL type {mysql_type!r}: {base} takes no such arguments")
    if args == "width" and a is None:
        raise ColumnTypeError(f"MySQL type {mysql_type!r}: {base} needs a length, e.g. {base}(32)")
    if args == "fsp?" and a is not None and int(a) > 6:
        raise ColumnTypeError(f"MySQL type {mysql_type!r}: fractional seconds precision is 0..6")
    return spark
