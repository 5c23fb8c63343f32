"""What a change to a column breaks downstream, and where each downstream SQL file reads it.

This module owns `impact`: from one lineage graph (the one the explorer and `sharp-dagster lineage graph` show) and
the SQL text of the tables the project builds, every column computed from a changed column, transitively, and
every table whose rows it filters, joins, groups or orders, each with the SQL file and line(s) where it is read.
`sharp-dagster lineage impact`, the explorer's column view and the ODS asset's schema check all call it, so they
name the same columns.

An impacted column is `Impact(changed, table, column, kind, via, reads)`: `kind` is "value" when the column's
value is computed from `via` (the column one hop up the path, `changed` itself for the first hop), "rows" when
`via` only steers which rows `table` gets (column `*`, OpenLineage's INDIRECT). `reads` are the lines of the
table's SQL file where `via` is read: for a value, inside the output column's own expression when it is written
there, else every read of `via` in the file; for rows, the reads outside the output expressions (WHERE, JOIN ON,
GROUP BY...); a `SELECT *` that names no column gives the line of the FROM that reads the table.

Locating reads parses each file once with sqlglot (Spark's dialect with its time-travel clause): a column
reference is a read of `table.column` when its qualifier is an alias or the name of `table` in its own SELECT, or
when it is unqualified and `table` is one of that SELECT's tables. No Dagster import.

    >>> from sharp_dagster.lineage.graph import Dataset, LineageGraph, dataset_urn as u
    >>> g = LineageGraph([Dataset.from_qualified("ods.o"), Dataset.from_qualified("dwd.d")],
    ...                  column_edges=[((u("ods.o"), "a"), (u("dwd.d"), "a"))])
    >>> [(i.table, i.column, i.reads) for i in impact(g, {"dwd.d": SqlText("dwd/d.sql", "SELECT\\n a\\nFROM ods.o")}, "ods.o", "a")]
    [('dwd.d', 'a', (Read(file='dwd/d.sql', line=2),))]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from sharp_dagster.lineage.graph import LineageGraph
from sharp_dagster.lineage.time_travel import teach

__all__ = ["Impact", "Read", "SqlText", "impact", "impact_json"]


@dataclass(frozen=True)
class SqlText:
    """A table's SQL file: the name to show (`dwd/order_detail.sql`) and its text, lines as in the file."""

    file: str
    text: str


@dataclass(frozen=True)
class Read:
    file: str
    line: int | None  # None: the file does not parse, or names neither the column nor the table

    def __str__(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Impact:
    """A downstream column (`column` '*' for a table's rows) that a change to `changed` breaks, read through
    `via` (one hop up) at `reads`."""

    changed: tuple[str, str]
    table: str
    column: str
    kind: str  # "value" or "rows"
    via: tuple[str, str]
    reads: tuple[Read, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "changed": {"table": self.changed[0], "column": self.changed[1]},
            "table": self.table,
            "column": self.column,
            "kind": self.kind,
            "via": {"table": self.via[0], "column": self.via[1]},
            "reads": [{"file": r.file, "line": r.line} for r in self.reads],
        }


def impact(graph: LineageGraph, sql: Mapping[str, SqlText], table: str, column: str) -> list[Impact]:
    """Every column computed from `table.column`, transitively, and every table whose rows one of them steers;
    each once (the first path found, breadth first), sorted by table then column (rows last). `sql` maps a table
    (as the SQL names it) to its file; a table without one (not built by SQL) has no reads. `KeyError` for an
    unknown table; a column nothing reads gives []."""
    start = (graph.dataset(table).qualified, column)
    seen = {start}
    frontier = [start]
    found: dict[tuple[str, str], Impact] = {}
    while frontier:
        nxt = []
        for node in frontier:
            columns, row_tables = graph.column_readers(*node)
            for hit in columns:
                if hit not in seen:
                    seen.add(hit)
                    nxt.append(hit)
                    found[hit] = Impact(start, *hit, "value", node, _reads(sql, hit, node, "value"))
            for user in row_tables:
                hit = (user, "*")
                if hit not in found:
                    found[hit] = Impact(start, user, "*", "rows", node, _reads(sql, hit, node, "rows"))
        frontier = nxt
    return sorted(found.values(), key=lambda i: (i.table, i.column == "*", i.column))


def impact_json(impacts: Iterable[Impact]) -> list[dict[str, Any]]:
    return [i.to_dict() for i in impacts]


def _reads(
    sql: Mapping[str, SqlText], hit: tuple[str, str], via: tuple[str, str], kind: str
) -> tuple[Read, ...]:
    text = sql.get(hit[0])
    if text is None:
        return ()
    refs = _references(text.text, via[0].lower(), via[1].lower())
    if refs is None:
        return (Read(text.file, None),)
    columns, tables = refs
    if kind == "value":
        chosen = [line for line, output in columns if output == hit[1].lower()]
    else:
        chosen = [line for line, output in columns if output is None]
    lines = sorted(set(chosen or [line for line, _ in columns] or tables))
    return tuple(Read(text.file, line) for line in lines) or (Read(text.file, None),)


@lru_cache(maxsize=1)
def _spark() -> Dialect:
    return teach(Dialect.get_or_raise("spark"))


@lru_cache(maxsize=256)
def _parsed(text: str) -> tuple[exp.Expression, ...] | None:
    try:
        return tuple(s for s in _spark().parse(text) if s is not None)
    except (ParseError, TokenError):
        return None


def _references(text: str, table: str, column: str) -> tuple[list[tuple[int, str | None]], list[int]] | None:
    """The reads of `table.column` in a script as (line, output column of the outermost SELECT whose expression
    holds it, or None), and the lines of the FROMs that read `table`; None when the script does not parse."""
    statements = _parsed(text)
    if statements is None:
        return None
    columns: list[tuple[int, str | None]] = []
    tables: list[int] = []
    for statement in statements:
        for select in statement.find_all(exp.Select):
            names = _tables_of(select)
            tables += [line for name, _, line in names if name == table]
            aliases = {alias for name, alias, _ in names if name == table}
            if not aliases:
                continue
            for col in select.find_all(exp.Column):
                if col.find_ancestor(exp.Select) is not select or col.name.lower() != column:
                    continue
                qualifier = col.table.lower()
                if qualifier in aliases or not qualifier:
                    output = _output_of(col, select) if select is _outermost(statement) else None
                    columns.append((col.this.meta.get("line", 0), output))
    return columns, tables


def _tables_of(select: exp.Select) -> list[tuple[str, str, int]]:
    """(db.table, alias or name, line) of every table this SELECT reads in its own FROM and JOINs."""
    out = []
    for source in [select.args.get("from_"), *(select.args.get("joins") or [])]:
        node = source.this if source is not None else None
        if isinstance(node, exp.Table):
            name = ".".join(p for p in (node.db, node.name) if p).lower()
            out.append((name, node.alias_or_name.lower(), node.this.meta.get("line", 0)))
            if node.alias:
                out.append((name, node.name.lower(), node.this.meta.get("line", 0)))
    return out


def _outermost(statement: exp.Expression) -> exp.Expression | None:
    """The SELECT whose output columns the statement writes (an INSERT's query, or the statement itself)."""
    node = statement.expression if isinstance(statement, exp.Insert) else statement
    while isinstance(node, exp.Subquery):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _output_of(col: exp.Column, select: exp.Select) -> str | None:
    """The output column whose expression holds `col`, or None when `col` is in another clause of `select`."""
    node: exp.Expression = col
    while node.parent is not None and node.parent is not select:
        if isinstance(node.parent, exp.Window) and node.arg_key in ("partition_by", "order"):
            return None  # a window's PARTITION BY / ORDER BY steers rows, not the value
        node = node.parent
    if node.arg_key != "expressions":
        return None
    return node.alias_or_name.lower()
