"""Table- and column-level lineage of a SQL script, read statically from sqlglot's AST.

This module owns `parse_script`: it parses a Spark / Hive / ANSI / MySQL script with sqlglot and walks each
query's scopes itself (FROM sources, CTEs, subqueries, lateral views, set operations) to map every written column
to the source columns its value is computed from.

Conventions. Names resolve as Spark resolves them: aliases, CTE and subquery names, qualifiers and schema columns
compare case-insensitively in Spark and Hive unless `spark.sql.caseSensitive` is on (`case_sensitive=True`, or a
`SET` in the script; table names stay case-insensitive, as in Spark's session catalog). A column's sources are the
columns its value is computed from, the conditions of a CASE / IF in it included (they pick the value). Columns
that only steer which rows arrive are never column sources but dataset-level dependencies of the target: WHERE /
HAVING / QUALIFY (FILTER), JOIN ON / USING (JOIN), GROUP BY (GROUP_BY), ORDER BY / SORT BY / DISTRIBUTE BY /
CLUSTER BY (SORT), a window's PARTITION BY / ORDER BY (WINDOW); a column used both ways is in both. Each edge is
typed as OpenLineage's transformation types: DIRECT IDENTITY / TRANSFORMATION / AGGREGATION, INDIRECT CONDITIONAL
for a source read only in a condition (`ColumnLineage.transformations`), and the dependency subtypes above
(`ScriptLineage.dependency_kinds`). An unqualified column that several schema-less sources might hold is
unresolved (`ScriptLineage.unresolved`), never guessed; an earlier output alias wins over a guess (Spark's lateral
column aliases). An unaliased expression is named as Spark names it (`names.py`). A union whose later branch has
more columns keeps the extra ones under their names. Files read as `parquet.`/path`` and directories written by
INSERT OVERWRITE DIRECTORY are path datasets (`ScriptLineage.paths`), named `<format>.<location>`. A time-travel read
(`FROM t VERSION AS OF '2024-01-03' AS o`, `TIMESTAMP AS OF`, `FOR SYSTEM_VERSION` ...) reads `t` (`time_travel.py`). Tables that a script creates and drops again (temporary views, CACHE TABLE,
CREATE TABLE tmp ... DROP TABLE tmp, Spark's global temporary views read as global_temp.<name>) are hidden and their
lineage passes through to the real targets: a temporary table is never a final node.

Statements besides queries: `CREATE TABLE` without a query is a target with no sources (its columns listed);
`CREATE TABLE t LIKE s` / `CLONE s` make `t` depend on `s` column by column under the same names; `ALTER TABLE a
RENAME TO b` (and MySQL's `RENAME TABLE`) gives `b` the lineage of `a` (see `StatementReader.rename`; listed
in `ScriptLineage.renames`); `ALTER TABLE d EXCHANGE PARTITION (...) WITH TABLE s` moves `s`'s rows into `d` (both
ways in MySQL, where it is a swap); the subqueries of `INSERT ... VALUES` are sources. Statements sqlglot keeps as
opaque Commands are read in `commands`. A CTE wins over a same-named table inside its statement (not inside its own
body, and not after the statement); a CTE nothing selects from is no source.

Why not `sqlglot.lineage.lineage()`: it needs `qualify()` and works one output column at a time, which costs
milliseconds to seconds per query; a single walk over the AST costs a fraction of the parse itself.

    >>> r = parse_script("INSERT OVERWRITE TABLE dwd.t SELECT o.id, o.amt * 2 AS amt FROM ods.o o WHERE o.ok")
    >>> r.sources, r.targets, [(c.target, c.sources) for c in r.columns], r.dataset_dependencies
    (['ods.o'], ['dwd.t'], [('dwd.t.id', ['ods.o.id']), ('dwd.t.amt', ['ods.o.amt'])], ['ods.o.ok'])

Where the work is done: this module parses the script, hands its statements in order to `statements.py`
(`StatementReader`: what each statement writes), which walks queries with `queries.py` (`QueryWalker`: scopes and
column resolution; FROM sources in `sources.py`) into the script's table versions of `tables.py` (`ScriptTables`; the walk's data in
`relations.py`); at the end `_result` resolves the hidden versions into the `ScriptLineage` returned.

No Dagster import; nothing is cached between calls except sqlglot's (immutable) dialect objects. The cyclic GC is
kept out of each call (`gc_quiet`), which is what kept the slowest calls from tens of milliseconds.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from sharp_dagster.lineage.gc_quiet import paused, release
from sharp_dagster.lineage.relations import direct_subtypes
from sharp_dagster.lineage.statements import StatementReader
from sharp_dagster.lineage.tables import ScriptTables
from sharp_dagster.lineage.time_travel import misuse, teach

__all__ = ["ColumnLineage", "LineageParseError", "ScriptLineage", "parse_script", "SUPPORTED_DIALECTS"]

# Our dialect names -> sqlglot's. ANSI is sqlglot's base dialect ("").
SUPPORTED_DIALECTS: dict[str, str] = {"spark": "spark", "hive": "hive", "ansi": "", "": "", "mysql": "mysql"}


class LineageParseError(ValueError):
    """The script could not be parsed; `line` and `col` (1-based) locate the offending token."""

    def __init__(self, message: str, line: int, col: int):
        super().__init__(f"line {line}, column {col}: {message}")
        self.message = message
        self.line = line
        self.col = col


@dataclass
class ColumnLineage:
    """One written column (`table.column`) and the source columns its value is computed from (sorted).

    `table`/`column` split `target` and `refs` each source into (table, column), since a name may hold a dot
    (`` `a.b` ``, a path). `transformations` gives each source's OpenLineage subtypes: DIRECT's IDENTITY,
    TRANSFORMATION, AGGREGATION, or INDIRECT's CONDITIONAL for a column read only in a CASE / IF condition."""

    target: str
    sources: list[str]
    table: str = field(default="", repr=False, compare=False)
    column: str = field(default="", repr=False, compare=False)
    refs: list[tuple[str, str]] = field(default_factory=list, repr=False, compare=False)
    transformations: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class ScriptLineage:
    """Lineage of one script.

    `sources`/`targets` are the real tables read/written (temporary ones hidden), sorted. `columns` lists each
    target column once. `dataset_dependencies` holds the columns that filter, join, group, order or partition the
    rows written (dataset-level, not value-level). `target_sources`/`target_dependencies` give the same per target
    (for scripts writing several tables); `renames` lists the script's table renames as (old, new), in order.
    `dependency_kinds` gives each dependency's OpenLineage INDIRECT subtypes (FILTER, JOIN, GROUP_BY, SORT,
    WINDOW) and `target_dependency_refs` each target's dependencies as (table, column, subtypes).
    `unresolved` lists the unqualified column names that several schema-less sources of a query might hold (they
    get no source rather than a guess); `paths` maps each path dataset among `sources`/`targets` (files read as
    `parquet.`/x``, directories written by INSERT OVERWRITE DIRECTORY) to its location. These are not part of
    `to_dict()`.
    """

    sources: list[str]
    targets: list[str]
    columns: list[ColumnLineage]
    dataset_dependencies: list[str]
    elapsed_ms: float
    target_sources: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    target_dependencies: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    renames: list[tuple[str, str]] = field(default_factory=list, repr=False, compare=False)
    dependency_kinds: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    target_dependency_refs: dict[str, list[tuple[str, str, list[str]]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    unresolved: list[str] = field(default_factory=list, repr=False, compare=False)
    paths: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": list(self.sources),
            "targets": list(self.targets),
            "columns": [{"target": c.target, "sources": list(c.sources)} for c in self.columns],
            "dataset_dependencies": list(self.dataset_dependencies),
            "elapsed_ms": self.elapsed_ms,
        }


# --------------------------------------------------------------------------------------------------------------
# sqlglot logs a warning for every statement it keeps as an opaque Command (ADD JAR, MSCK, ...). Those are normal
# in ETL scripts and carry no lineage, so the warning is dropped, but only while parse_script runs in this thread.
_quiet = threading.local()


class _DropCommandFallbackWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            getattr(_quiet, "on", False) and "Falling back to parsing as a 'Command'" in record.getMessage()
        )


logging.getLogger("sqlglot").addFilter(_DropCommandFallbackWarnings())


# --------------------------------------------------------------------------------------------------------------
def _result(script: ScriptTables, started: float, unresolved: set[str]) -> ScriptLineage:
    """The script's lineage once its last statement was read: hidden versions resolved to what they read."""
    memo: dict = {}
    kind_memo: dict = {}
    by_target: dict[str, dict[str, tuple[set, list[int], set]]] = {}
    t_sources: dict[str, set] = {}
    t_deps: dict[str, set] = {}
    all_sources, _ = script.hidden_closure(script.reads)
    for w in script.writes:
        if w.hidden:
            tables, _ = script.hidden_closure(w.tables)
            all_sources |= tables
            continue
        tables, hidden_deps = script.hidden_closure(w.tables)
        all_sources |= tables
        cols = by_target.setdefault(w.name, {})
        for c, srcs in w.cols.items():
            acc, kind, conds = cols.setdefault(c, (set(), [0], set()))
            kind[0] |= w.kinds.get(c, 0)
            for s in srcs:
                acc |= script.expand(s, memo)
                if type(s[0]) is int:
                    k, cs = script.expand_kind(s, kind_memo)
                    kind[0] |= k
                    conds |= cs
            for s in w.conds.get(c, ()):
                conds |= script.expand(s, memo)
        deps = t_deps.setdefault(w.name, set())
        for key, col, dep_kind in w.deps | hidden_deps:
            for k, n in script.expand((key, col), memo):
                deps.add((k, n, dep_kind))
        t_sources.setdefault(w.name, set()).update(tables)
    targets = sorted(by_target)
    columns = [_column(tname, c, *by_target[tname][c]) for tname in targets for c in by_target[tname]]
    t_refs = {t: _dependencies(t_deps[t]) for t in targets}
    all_kinds: dict[str, set] = {}
    for refs in t_refs.values():
        for k, n, kinds in refs:
            all_kinds.setdefault(f"{k}.{n}", set()).update(kinds)
    return ScriptLineage(
        sources=sorted(all_sources),
        targets=targets,
        columns=columns,
        dataset_dependencies=sorted(all_kinds),
        elapsed_ms=(time.perf_counter() - started) * 1000.0,
        target_sources={t: sorted(t_sources[t]) for t in targets},
        target_dependencies={t: [f"{k}.{n}" for k, n, _ in t_refs[t]] for t in targets},
        renames=list(script.renames),
        dependency_kinds={d: sorted(k) for d, k in sorted(all_kinds.items())},
        target_dependency_refs=t_refs,
        unresolved=sorted(unresolved),
        paths={n: p for n, p in script.paths.items() if n in all_sources or n in by_target},
    )


def _column(table: str, column: str, srcs: set, kind: list[int], conds: set) -> ColumnLineage:
    """A target column's lineage: sources sorted by their `table.column` names, each with its subtypes."""
    refs = sorted(srcs, key=lambda s: f"{s[0]}.{s[1]}")
    direct = direct_subtypes(kind[0])
    transformations: dict[str, list[str]] = {}
    for s in refs:
        name = f"{s[0]}.{s[1]}"
        transformations[name] = ["CONDITIONAL"] if s in conds else direct
    return ColumnLineage(
        f"{table}.{column}", [f"{k}.{n}" for k, n in refs], table, column, refs, transformations
    )


def _dependencies(deps: set) -> list[tuple[str, str, list[str]]]:
    """(table, column, subtypes) of a target's dependencies, sorted by `table.column`."""
    by_col: dict[tuple[str, str], set] = {}
    for k, n, kind in deps:
        by_col.setdefault((k, n), set()).add(kind)
    return [(k, n, sorted(by_col[(k, n)])) for k, n in sorted(by_col, key=lambda s: f"{s[0]}.{s[1]}")]


_TOKEN_POS = re.compile(r" from (\d+):(\d+)")
_TOKEN_REPR = re.compile(r"<Token token_type: [^,]*, text: (.*?), line: \d+, col: \d+, .*?>")


def _parse_error(sql: str, exc: Exception) -> LineageParseError:
    if isinstance(exc, ParseError) and exc.errors:
        err = exc.errors[0]
        desc = _TOKEN_REPR.sub(lambda m: repr(m.group(1)), str(err.get("description") or exc).split("\n")[0])
        line = int(err.get("line") or 1)
        # sqlglot's col is where the offending token ends; report where it starts.
        col = int(err.get("col") or 1) - len(err.get("highlight") or "x") + 1
        return LineageParseError(desc, line, max(col, 1))
    # Tokenizer errors: the inner error names the offending offset ("Missing ' from 1:7"), else use the context.
    offset = None
    cause = exc.__cause__ or exc.__context__ or exc  # the compiled sqlglot (sqlglotc) sets only __context__
    m = _TOKEN_POS.search(str(cause))
    if m:
        offset = int(m.group(2))
    elif isinstance(exc, TokenError) and exc.start is not None:
        offset = exc.start
    offset = min(max(offset or 0, 0), len(sql))
    line = sql.count("\n", 0, offset) + 1
    col = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    msg = _TOKEN_POS.sub("", str(cause).split("\n")[0])
    if msg.startswith("Missing "):
        msg = f"unterminated quoted text ({msg[0].lower()}{msg[1:]})"
    return LineageParseError(msg, line, col)


# Spark's `INSERT OVERWRITE [LOCAL] DIRECTORY ['path'] USING fmt [OPTIONS (..., path '...')]`, which sqlglot does not
# parse, rewritten to the Hive form it does (`... DIRECTORY 'path' STORED AS fmt`); its line breaks are kept so that
# error positions in later lines stay right.
_DIRECTORY_USING = re.compile(
    r"(INSERT\s+OVERWRITE\s+(?:LOCAL\s+)?DIRECTORY)\s*('(?:[^'\\]|\\.)*')?\s*USING\s+(\w+)"
    r"(\s*OPTIONS\s*\((?:[^()']|'(?:[^'\\]|\\.)*')*\))?",
    re.IGNORECASE,
)
_OPTION_PATH = re.compile(r"""['"`]?path['"`]?\s*=?\s*('(?:[^'\\]|\\.)*')""", re.IGNORECASE)


def _directory_using(sql: str) -> str:
    if "DIRECTORY" not in sql.upper():
        return sql

    def rewrite(m: re.Match) -> str:
        location = m.group(2)
        if location is None and m.group(4):
            found = _OPTION_PATH.search(m.group(4))
            location = found.group(1) if found else None
        location = location or "''"
        return f"{m.group(1)} {location} STORED AS {m.group(3)}" + "\n" * m.group(0).count("\n")

    return _DIRECTORY_USING.sub(rewrite, sql)


_DIALECTS: dict[str, Dialect] = {}


def _dialect(name: str) -> Dialect:
    d = _DIALECTS.get(name)
    if d is None:
        d = Dialect.get_or_raise(name)
        # Spark's time-travel clause in all its spellings (`time_travel.py`): a read of the table itself.
        _DIALECTS[name] = d = teach(d) if name == "spark" else d
    return d


def parse_script(
    sql: str,
    dialect: str | None = "spark",
    schema: Mapping[str, Mapping[str, str]] | None = None,
    default_target: str | None = None,
    case_sensitive: bool | None = None,
) -> ScriptLineage:
    """Lineage of a SQL script of one or more statements.

    `schema` maps a table (as the SQL names it) to its columns, used to expand `SELECT *` and to map INSERT
    outputs by position. With `default_target`, a final bare SELECT is read as INSERT OVERWRITE into that table.
    `case_sensitive` is Spark's `spark.sql.caseSensitive` (default false: Spark and Hive compare column names,
    aliases and CTE names case-insensitively; table names always are); a `SET spark.sql.caseSensitive=...` in the
    script changes it for the statements after it.
    Raises LineageParseError (a ValueError) with line and column when the script does not parse.
    """
    started = time.perf_counter()
    key = "" if dialect is None else dialect.lower()
    if key not in SUPPORTED_DIALECTS:
        raise ValueError(f"unsupported SQL dialect {dialect!r}: use one of spark, hive, ansi, mysql")
    name = SUPPORTED_DIALECTS[key]
    # The cyclic GC is paused for the call and the AST's cycles broken at its end (see gc_quiet: full collections
    # inside a call were this function's 10-300 ms tail).
    with paused():
        _quiet.on = True
        try:
            statements = _dialect(name).parse(_directory_using(sql) if name == "spark" else sql)
        except (ParseError, TokenError) as exc:
            raise _parse_error(sql, exc) from exc
        finally:
            _quiet.on = False
        live = [s for s in statements if s is not None]
        script = ScriptTables(name, schema, case_sensitive)
        reader = StatementReader(script, _dialect(name))
        last = len(live) - 1
        try:
            for i, st in enumerate(live):
                reader.statement(st, default_target if i == last else None)
            bad = misuse(reader.walker.travels) if name == "spark" else None
            if bad is not None:
                raise LineageParseError(*bad)
        finally:
            release(live)
        return _result(script, started, reader.walker.unresolved)
