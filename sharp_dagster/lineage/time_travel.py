"""Spark's time-travel clause (`VERSION AS OF`, `TIMESTAMP AS OF` and their synonyms), as the lineage parser reads it.

This module owns which spellings of Spark's `temporalClause` the parser accepts. Spark's grammar
(`SqlBaseParser.g4`) is `FOR? (SYSTEM_VERSION | VERSION) AS OF <version>` and
`FOR? (SYSTEM_TIME | TIMESTAMP) AS OF <timestamp>`, after the table name and before its alias:

    >>> from sharp_dagster.lineage.parser import parse_script
    >>> sql = "INSERT OVERWRITE TABLE dwd.t SELECT o.id FROM ods.orders VERSION AS OF '2024-01-03' AS o"
    >>> parse_script(sql).sources, [c.sources for c in parse_script(sql).columns]
    (['ods.orders'], [['ods.orders.id']])

A time-travel read is a read of the table itself (an Iceberg tag, branch, snapshot id or timestamp of
`ods.orders` is `ods.orders`, as Spark's analyzed plan names it too: `spark_plan.py`), so the clause changes no
table, column or dependency of the lineage; its version expression is a constant (Spark refuses column references
and subqueries in it) and is not walked.

Why a class attribute is set: sqlglot's Spark parser knows `VERSION AS OF`, `TIMESTAMP AS OF`, `FOR VERSION`,
`FOR TIMESTAMP` and `FOR SYSTEM_TIME`, but not `FOR SYSTEM_VERSION`, `SYSTEM_VERSION AS OF` nor `SYSTEM_TIME AS OF`
(they fail to parse). Its parser classes are compiled (mypyc) and refuse Python subclasses, so the missing phrases
are added to the Spark parser's own table of them, once. sqlglot consults that table only where a table name
may be followed by a time-travel clause, and the added phrases are Spark's own: the Spark dialect of this process
parses more of Spark's grammar and nothing it parsed before differently.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

__all__ = ["SPARK_ONLY_PHRASES", "misuse", "teach"]

# Spark's spellings sqlglot lacks, mapped as sqlglot maps the ones it has (`Parser.VERSION_PHRASES`): to the kind
# of the `exp.Version` they build. `FOR SYSTEM_VERSION` is followed by `AS OF`, which sqlglot then reads itself.
SPARK_ONLY_PHRASES: dict[tuple[str, ...], str] = {
    ("FOR", "SYSTEM_VERSION"): "VERSION",
    ("SYSTEM_VERSION", "AS", "OF"): "VERSION",
    ("SYSTEM_TIME", "AS", "OF"): "TIMESTAMP",
}


def teach(dialect: Dialect) -> Dialect:
    """Make `dialect`'s parser (Spark's) accept every spelling of Spark's time-travel clause; returns it."""
    parser_class = dialect.parser_class
    phrases = parser_class.VERSION_PHRASES
    if not SPARK_ONLY_PHRASES.keys() <= phrases.keys():
        # A new dict on the dialect's own parser class: the base Parser's table (other dialects') stays as it is.
        parser_class.VERSION_PHRASES = {**phrases, **SPARK_ONLY_PHRASES}
    return dialect


def misuse(tables: Iterable[exp.Table]) -> tuple[str, int, int] | None:
    """The first of `tables` (read with a time-travel clause, in the order the walk met them) whose clause Spark
    would refuse, as (message, line, column of the table's name); or None.

    The walk collects them (`sources.SourceReader.add_source`) rather than this module searching the script: a
    search of the text or the tree would cost every script, most of which travel nowhere."""
    for table in tables:
        problem = _problem(table.args["version"])
        if problem is not None:
            name = ".".join(p.name for p in table.parts)
            meta = table.parts[0].meta
            line = int(meta.get("line") or 1)
            col = int(meta.get("col") or 1) - int(meta.get("end", 0)) + int(meta.get("start", 0))
            return f"time travel of {name}: {problem}", line, max(col, 1)
    return None


def _problem(version: exp.Version) -> str | None:
    kind = str(version.args.get("kind") or "")
    what = "version" if version.name.upper() == "VERSION" else "timestamp"
    value = version.args.get("expression")
    if kind != "AS OF":
        return f"Spark travels to one {what} (`AS OF`), not `{kind}`"
    if value is None:
        return f"`AS OF` names no {what}" + (
            " (a snapshot id or a tag or branch name)" if what == "version" else ""
        )
    if what == "version" and not isinstance(value, exp.Literal):
        return f"a version is a snapshot id or a tag or branch name, not `{value.sql(dialect='spark')}`"
    if what == "timestamp" and value.find(exp.Column, exp.Subquery, exp.Select) is not None:
        return f"a timestamp is a constant expression, not `{value.sql(dialect='spark')}`"
    return None
