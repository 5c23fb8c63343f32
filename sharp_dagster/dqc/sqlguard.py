"""The early, Spark-free check of a `custom_sql` rule: one SELECT over the staged rows and the declared tables.

A rule file is code a data engineer writes, but it runs inside the pipeline's Spark session, which can reach the
JVM, the file system and the environment. **The verdict is not this module's**: sqlglot's tokenizer is not Spark's
(a `--` line comment ending in a backslash goes on over the next line in Spark, not in sqlglot), so before a rule's
query runs, `plan_guard.py` judges Spark's own parsed and analysed plan of it against `allowlist.py`. This module
only gives the friendly message at load, where the code location has no Spark session: its sqlglot AST is walked and
everything outside this list is rejected, naming what and where (line of the SQL); any failure of sqlglot itself (a
tokenizer error, too deep a nesting) is a one-line refusal too:

* exactly one statement, a query (SELECT / set operation / CTE), no DDL, DML, SET, ADD JAR or the like;
* relations: the staged rows (`${table}`), the query's own CTEs, and `db.table` names listed in the rule's
  `reads:` declaration (plain identifiers). Everything else is refused, in particular path-based relations such as
  ``text.`/etc/passwd` `` or ``parquet.`s3://...` `` (a table qualified by a data-source name, or a quoted path),
  three-part names, and table-valued functions other than the row generators in `TABLE_FUNCTIONS`;
* functions that reach the JVM, the file system or a secret store (`DENIED_FUNCTIONS`: `reflect`,
  `java_method`, `try_reflect`, `read_files`, `IDENTIFIER(...)`, ...) and `TRANSFORM ... USING` (runs a shell
  command) are refused wherever they appear.

CTE names count only in their scope (a CTE sees the ones defined before it, a query's body all of its own). What
remains trusted, and the session settings a rule runs under, are in `plan_guard.py`'s docstring.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import sqlglot
from sqlglot import exp

from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.quoting import CONTEXT_VARIABLES, PLACEHOLDER

# A name that stands for `${table}` while the SQL is parsed; a rule that writes it itself is refused.
STAGED_PROBE = "__dqc_staged_rows__"

DENIED_FUNCTIONS: dict[str, str] = {
    "reflect": "calls a Java method in the Spark JVM",
    "java_method": "calls a Java method in the Spark JVM",
    "try_reflect": "calls a Java method in the Spark JVM",
    "read_files": "reads files from a path",
    "identifier": "names a relation at run time (IDENTIFIER clause), out of reach of the table allow-list",
    "secret": "reads a secret store",
    "from_protobuf": "loads a descriptor file from a path",
    "to_protobuf": "loads a descriptor file from a path",
    "xpath": "runs the JVM's XML parser (external entities)",
    "xpath_boolean": "runs the JVM's XML parser (external entities)",
    "xpath_double": "runs the JVM's XML parser (external entities)",
    "xpath_float": "runs the JVM's XML parser (external entities)",
    "xpath_int": "runs the JVM's XML parser (external entities)",
    "xpath_long": "runs the JVM's XML parser (external entities)",
    "xpath_number": "runs the JVM's XML parser (external entities)",
    "xpath_short": "runs the JVM's XML parser (external entities)",
    "xpath_string": "runs the JVM's XML parser (external entities)",
}
# Spark data-source short names: `<source>.`<path>`` reads a path, and so would `<source>.name` (a relative path)
# when no such table exists.
DATA_SOURCES = frozenset(
    {
        "avro", "binaryfile", "console", "csv", "delta", "file", "hive", "hudi", "iceberg", "image", "jdbc",
        "json", "kafka", "libsvm", "noop", "orc", "parquet", "protobuf", "rate", "socket", "text", "textfile",
        "xml",
    }
)  # fmt: skip
# Table-valued functions that only generate rows from their arguments.
TABLE_FUNCTIONS = frozenset(
    {"range", "explode", "explode_outer", "posexplode", "posexplode_outer", "inline", "inline_outer", "stack"}
)
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SqlRejected(ParamError):
    """A custom SQL uses something outside the allow-list; `line` is the line of the SQL text (1-based) and
    `token` the text that was refused, for the caller to point at the rule file's line."""

    def __init__(self, message: str, line: int | None = None, token: str | None = None):
        super().__init__(message if line is None else f"{message} (line {line} of the SQL)")
        self.line = line
        self.token = token


def check_declared_table(name: object) -> str:
    """One entry of a rule's `reads:` list: `db.table` of plain identifiers, `db` not a data-source name."""
    if not isinstance(name, str) or name.count(".") != 1:
        raise SqlRejected(f"'reads' entries must be table names db.table, got {name!r}")
    db, _, table = name.partition(".")
    if not (_PLAIN.fullmatch(db) and _PLAIN.fullmatch(table)):
        raise SqlRejected(f"'reads' entries must be db.table of plain identifiers, got {name!r}")
    if db.lower() in DATA_SOURCES:
        raise SqlRejected(
            f"'reads' entry {name!r}: {db!r} is a Spark data source, {db}.{table} would read a path"
        )
    return name


def _line(node, text: str, token: str) -> int | None:
    meta = getattr(node, "meta", None) or {}
    if "line" in meta:
        return int(meta["line"])
    for child in node.walk() if hasattr(node, "walk") else ():
        meta = getattr(child, "meta", None) or {}
        if "line" in meta:
            return int(meta["line"])
    at = text.lower().find(token.lower())
    return None if at < 0 else text.count("\n", 0, at) + 1


def check_custom_sql(text: str, reads: Iterable[str] = ()) -> None:
    """Custom SQL must be one SELECT (no DDL/DML, no second statement) using only known placeholders, reading
    only `${table}`, its own CTEs and the `reads` tables, and calling nothing that reaches the JVM or the file
    system (`check_select`). Raises `ParamError` (a `SqlRejected` with the SQL line when it can)."""
    names = set(PLACEHOLDER.findall(text))
    unknown = sorted(names - CONTEXT_VARIABLES)
    if unknown:
        known = ", ".join("${" + n + "}" for n in sorted(CONTEXT_VARIABLES))
        raise ParamError(f"custom sql: unknown placeholder(s) {', '.join(unknown)} (known: {known})")
    if STAGED_PROBE in text.lower():
        raise ParamError(f"custom sql may not name {STAGED_PROBE}: read the partition through ${{table}}")
    probe = PLACEHOLDER.sub(lambda m: STAGED_PROBE if m.group(1) == "table" else "0", text)
    if "${" in probe:
        # e.g. ${spark.app.name}: Spark's own variable substitution would expand it; only ours are allowed.
        raise ParamError("custom sql: only ${name} placeholders of the run context are allowed")
    try:
        check_select(probe, reads)
    except ParamError:
        raise
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - sqlglot's tokenizer errors, too deep a nesting
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise SqlRejected(f"custom sql cannot be read: {type(exc).__name__}: {first}") from None


def check_select(probe: str, reads: Iterable[str] = ()) -> None:
    """Check one custom SQL whose `${table}` was replaced by `STAGED_PROBE` (other placeholders by literals).

    Raises `SqlRejected` for anything but one query over the staged rows, its CTEs and the `reads` tables.
    """

    try:
        statements = [s for s in sqlglot.parse(probe, read="spark") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise SqlRejected(f"custom sql does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise SqlRejected("custom sql must be exactly one SELECT statement returning one scalar")
    stmt = statements[0]
    if any(isinstance(n, exp.Command) for n in stmt.walk()):
        raise SqlRejected("custom sql must be one plain SELECT (a command inside it was found)")
    if not any(
        t.name == STAGED_PROBE and not t.args.get("db") and not t.args.get("catalog")
        for t in stmt.find_all(exp.Table)
    ):
        raise SqlRejected("custom sql must read the partition through ${table}")
    allowed = {t.lower() for t in reads}

    for node in stmt.find_all(exp.QueryTransform):
        raise SqlRejected(
            "custom sql may not use TRANSFORM ... USING: it runs a shell command", _line(node, probe, "using")
        )
    for node in stmt.find_all(exp.Func):
        name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
        if name in DENIED_FUNCTIONS:
            raise SqlRejected(
                f"custom sql may not call {name}(): it {DENIED_FUNCTIONS[name]}",
                _line(node, probe, name),
                name,
            )

    for table in stmt.find_all(exp.Table):
        _check_relation(table, probe, _ctes_in_scope(table), allowed)


def _ctes_in_scope(table) -> set[str]:
    """The CTE names visible where `table` stands: in a CTE's body only the CTEs defined before it (Spark does not
    let a CTE see itself or later ones), in a query's body all of its CTEs, and so on outwards."""

    names: set[str] = set()
    child, node = table, table.parent
    while node is not None:
        if isinstance(node, exp.With):
            ctes = list(node.expressions)
            upto = ctes.index(child) if child in ctes else len(ctes)
            names.update(c.alias_or_name.lower() for c in ctes[:upto])
        else:
            with_ = node.args.get("with_", node.args.get("with"))  # the key is `with_` in sqlglot >= 28
            if isinstance(with_, exp.With) and with_ is not child:
                names.update(c.alias_or_name.lower() for c in with_.expressions)
        child, node = node, node.parent
    return names


def _check_relation(table, probe: str, ctes: set[str], allowed: set[str]) -> None:

    if isinstance(table.this, exp.Func):
        func = table.this
        name = (func.name if isinstance(func, exp.Anonymous) else func.sql_name()).lower()
        if name not in TABLE_FUNCTIONS:
            raise SqlRejected(
                f"custom sql may not read from the table function {name}() (allowed: "
                f"{', '.join(sorted(TABLE_FUNCTIONS))})",
                _line(func, probe, name),
                name,
            )
        return
    parts = [p for p in (table.args.get("catalog"), table.args.get("db"), table.this) if p is not None]
    names = [p.name for p in parts]
    shown = ".".join(
        f"`{n}`" if getattr(p, "quoted", False) else n for p, n in zip(parts, names, strict=True)
    )
    line = _line(table.this, probe, names[-1])
    if names == [STAGED_PROBE]:
        return
    if any(not _PLAIN.fullmatch(n) for n in names):
        raise SqlRejected(
            f"custom sql may not read the path-based relation {shown}: only ${{table}}, its CTEs and the tables "
            "in the rule's 'reads:' list",
            line,
            names[-1],
        )
    if len(names) == 2 and names[0].lower() in DATA_SOURCES:
        raise SqlRejected(
            f"custom sql may not read {shown}: {names[0]!r} is a Spark data source, that reads a file",
            line,
            shown,
        )
    if len(names) == 1 and names[0].lower() in ctes:
        return
    if len(names) == 2 and ".".join(names).lower() in allowed:
        return
    declared = ", ".join(sorted(allowed)) or "none"
    raise SqlRejected(
        f"custom sql reads {shown}, which is neither ${{table}}, a CTE in scope, nor a table the rule declares "
        f"in 'reads:' (declared: {declared})",
        line,
        names[-1],
    )
