"""Table- and column-level lineage of a SQL script, read statically from sqlglot's AST.

This module owns `parse_script`: it parses a Spark / Hive / ANSI / MySQL script with sqlglot and walks each
query's scopes itself (FROM sources, CTEs, subqueries, lateral views, set operations) to map every written column
to the source columns its value is computed from. Columns that only steer which rows arrive (WHERE, JOIN ON,
GROUP BY, HAVING, ORDER BY, window PARTITION BY / ORDER BY) are kept apart as dataset-level dependencies, like
OpenLineage's INDIRECT lineage. Tables that a script creates and drops again (temporary views, CACHE TABLE,
CREATE TABLE tmp ... DROP TABLE tmp, Spark's global temporary views read as global_temp.<name>) are hidden and their
lineage passes through to the real targets: a temporary table is never a final node.

Statements besides queries: `CREATE TABLE` without a query is a target with no sources (its columns listed);
`CREATE TABLE t LIKE s` / `CLONE s` make `t` depend on `s` column by column under the same names; `ALTER TABLE a
RENAME TO b` (and MySQL's `RENAME TABLE`) gives `b` the lineage of `a` (see `_Engine.rename`; listed in
`ScriptLineage.renames`); `ALTER TABLE d EXCHANGE PARTITION (...) WITH TABLE s` moves `s`'s rows into `d` (both
ways in MySQL, where it is a swap); the subqueries of `INSERT ... VALUES` are sources. Statements sqlglot keeps as
opaque Commands are read in `commands`. A CTE wins over a same-named table inside its statement (not inside its own
body, and not after the statement); a CTE nothing selects from is no source.

Why not `sqlglot.lineage.lineage()`: it needs `qualify()` and works one output column at a time, which costs
milliseconds to seconds per query; a single walk over the AST costs a fraction of the parse itself.

    >>> r = parse_script("INSERT OVERWRITE TABLE dwd.t SELECT o.id, o.amt * 2 AS amt FROM ods.o o WHERE o.ok")
    >>> r.sources, r.targets, [(c.target, c.sources) for c in r.columns], r.dataset_dependencies
    (['ods.o'], ['dwd.t'], [('dwd.t.id', ['ods.o.id']), ('dwd.t.amt', ['ods.o.amt'])], ['ods.o.ok'])

No Dagster import; nothing is cached between calls except sqlglot's (immutable) dialect objects. The cyclic GC is
kept out of each call (`gc_quiet`), which is what kept the slowest calls from tens of milliseconds.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from sharp_dagster.lineage.commands import command_moves
from sharp_dagster.lineage.gc_quiet import paused, release

__all__ = ["ColumnLineage", "LineageParseError", "ScriptLineage", "parse_script", "SUPPORTED_DIALECTS"]

# Our dialect names -> sqlglot's. ANSI is sqlglot's base dialect ("").
SUPPORTED_DIALECTS: dict[str, str] = {"spark": "spark", "hive": "hive", "ansi": "", "": "", "mysql": "mysql"}
# Spark and Hive resolve identifiers case-insensitively, so names are lower-cased there.
_CASE_INSENSITIVE = {"spark", "hive"}


class LineageParseError(ValueError):
    """The script could not be parsed; `line` and `col` (1-based) locate the offending token."""

    def __init__(self, message: str, line: int, col: int):
        super().__init__(f"line {line}, column {col}: {message}")
        self.message = message
        self.line = line
        self.col = col


@dataclass
class ColumnLineage:
    """One written column (`table.column`) and the source columns its value is computed from (sorted)."""

    target: str
    sources: list[str]


@dataclass
class ScriptLineage:
    """Lineage of one script.

    `sources`/`targets` are the real tables read/written (temporary ones hidden), sorted. `columns` lists each
    target column once. `dataset_dependencies` holds the columns that filter, join, group, order or partition the
    rows written (dataset-level, not value-level). `target_sources`/`target_dependencies` give the same per target
    (for scripts writing several tables); `renames` lists the script's table renames as (old, new), in order. These
    three are not part of `to_dict()`.
    """

    sources: list[str]
    targets: list[str]
    columns: list[ColumnLineage]
    dataset_dependencies: list[str]
    elapsed_ms: float
    target_sources: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    target_dependencies: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    renames: list[tuple[str, str]] = field(default_factory=list, repr=False, compare=False)

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
# A source column inside the engine is (table_key, column): table_key is a real table name (str) or the index
# (int) of a table version written earlier in the same script, resolved when the script ends (hidden or not).
Key = str | int
Src = tuple  # (Key, str)

_Column = exp.Column
_Identifier = exp.Identifier
_Star = exp.Star
_Window = exp.Window
_Expr = exp.Expr
_Table = exp.Table
_Subquery = exp.Subquery
_Select = exp.Select
_Literal = exp.Literal
_Ordered = exp.Ordered
_QUERY_TYPES = (exp.Select, exp.Union, exp.Except, exp.Intersect, exp.Subquery)
_SETOP_TYPES = (exp.Union, exp.Except, exp.Intersect)
_EMPTY: frozenset = frozenset()
# Default column names Spark/Hive give generator outputs when a LATERAL VIEW lists no column aliases.
_LATERAL_DEFAULTS = {"explode": ["col"], "posexplode": ["pos", "col"], "inline": [], "explode_outer": ["col"]}


class _Rel:
    """The output of a query (or a derived source): ordered columns, each with its source-column set."""

    __slots__ = ("names", "sources", "index", "deps", "tables", "stars", "synthetic")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.sources: list[set] = []
        self.index: dict[str, int] = {}
        self.deps: set = set()
        self.tables: set = set()
        self.stars: set | None = None  # (key, "*") of unexpanded stars: unknown columns pass through to them
        self.synthetic = False  # columns named by us (VALUES rows), not by the SQL

    def add(self, name: str, srcs: set) -> None:
        if name not in self.index:
            self.index[name] = len(self.names)
        self.names.append(name)
        self.sources.append(srcs)
        if name == "*":
            if self.stars is None:
                self.stars = set()
            self.stars |= srcs

    # lookup -> (sources, certain). certain=False: guessed through an unexpanded star.
    def lookup(self, name: str) -> tuple[set | None, bool]:
        i = self.index.get(name)
        if i is not None:
            return self.sources[i], True
        if self.stars:
            return {(k, name) for k, _ in self.stars}, False
        return None, False

    def expand(self) -> list[tuple[str, set]]:
        return list(zip(self.names, self.sources, strict=True))


class _TableSource:
    """A real table (or a table written earlier in the script) in a FROM clause."""

    __slots__ = ("key", "cols", "colset")

    def __init__(self, key: Key, cols: tuple[list[str], frozenset] | None):
        self.key = key
        # known column names (ordered, and as a set), or None when no schema knows the table
        self.cols, self.colset = cols if cols is not None else (None, None)

    def lookup(self, name: str) -> tuple[set | None, bool]:
        colset = self.colset
        if colset is None:
            return {(self.key, name)}, False
        if name in colset:
            return {(self.key, name)}, True
        return None, False

    def expand(self) -> list[tuple[str, set]]:
        if self.cols is None:
            return [("*", {(self.key, "*")})]
        key = self.key
        return [(c, {(key, c)}) for c in self.cols]


class _Scope:
    __slots__ = ("sources", "parent", "ctes", "tables")

    def __init__(self, parent: _Scope | None, ctes: dict[str, _Rel]):
        self.sources: dict[str, Any] = {}  # alias -> _TableSource | _Rel, in FROM order
        self.parent = parent  # the enclosing query's scope, for correlated subqueries
        self.ctes = ctes
        self.tables: set = set()  # tables read by subqueries inside expressions


class _Write:
    """One version of a table written by the script (CREATE starts a version, INSERT adds to the current one)."""

    __slots__ = ("name", "cols", "deps", "tables", "hidden")

    def __init__(self, name: str, hidden: bool):
        self.name = name
        self.cols: dict[str, set] = {}
        self.deps: set = set()
        self.tables: set = set()
        self.hidden = hidden

    def known_columns(self) -> list[str] | None:
        if not self.cols or "*" in self.cols:
            return None
        return list(self.cols)


def _with_set(cols: list[str] | None) -> tuple[list[str], frozenset] | None:
    return None if cols is None else (cols, frozenset(cols))


class _Engine:
    """State of one parse_script call: the script's writes and the scope walk."""

    def __init__(self, dialect: str, dialect_obj: Dialect, schema: Mapping[str, Mapping[str, str]] | None):
        self.ci = dialect in _CASE_INSENSITIVE
        self.dialect = dialect
        self.dialect_obj = dialect_obj
        self.renames: list[tuple[str, str]] = []
        self.schema = schema or {}
        self._schema_ci: dict[str, Mapping[str, str]] | None = None
        self._schema_cache: dict[str, tuple[list[str], frozenset] | None] = {}
        self.writes: list[_Write] = []
        self.current: dict[str, int] = {}
        self.reads: set = set()

    # ---- names -------------------------------------------------------------------------------------------------
    def norm(self, name: str) -> str:
        return name.lower() if self.ci else name

    def table_name(self, t: exp.Table) -> str:
        args = t.args
        name = args["this"].name if args.get("this") is not None else ""
        db = args.get("db")
        if db is not None:
            cat = args.get("catalog")
            name = f"{cat.name}.{db.name}.{name}" if cat is not None else f"{db.name}.{name}"
        return name.lower() if self.ci else name

    def schema_columns(self, name: str) -> tuple[list[str], frozenset] | None:
        if name in self._schema_cache:
            return self._schema_cache[name]
        cols = self.schema.get(name)
        if cols is None and self.ci:
            if self._schema_ci is None:
                self._schema_ci = {k.lower(): v for k, v in self.schema.items()}
            cols = self._schema_ci.get(name)
        found = None
        if cols is not None:
            names = [c.lower() for c in cols] if self.ci else list(cols)
            found = (names, frozenset(names))
        self._schema_cache[name] = found
        return found

    def resolve_table(self, name: str) -> tuple[Key, tuple[list[str], frozenset] | None]:
        idx = self.current.get(name)
        if idx is not None:
            return idx, _with_set(self.writes[idx].known_columns())
        return name, self.schema_columns(name)

    # ---- query walk --------------------------------------------------------------------------------------------
    def ctes(self, node: exp.Expression, ctes: dict[str, _Rel], parent: _Scope | None) -> dict[str, _Rel]:
        w = node.args.get("with_")
        if w is None:
            return ctes
        ctes = dict(ctes)
        recursive = bool(w.args.get("recursive"))
        for cte in w.expressions:
            body = cte.this
            if recursive and type(body) is exp.Union:
                # The recursive branch reads the CTE itself: let it see the anchor branch's columns.
                ctes[self.norm(cte.alias)] = self.query(body.this, ctes, parent)
            rel = self.query(body, ctes, parent)
            alias = cte.args.get("alias")
            cols = alias.columns if alias is not None else None
            if cols:
                rel = _renamed(rel, [self.norm(c.name) for c in cols])
            ctes[self.norm(cte.alias)] = rel
        return ctes

    def query(
        self, node: exp.Expression, ctes: dict[str, _Rel], parent: _Scope | None, from_override: Any = None
    ) -> _Rel:
        t = type(node)
        if t is _Select:
            return self.select(node, ctes, parent, from_override)
        if t is _Subquery:
            ctes = self.ctes(node, ctes, parent)
            return self.query(node.this, ctes, parent)
        if t in _SETOP_TYPES:
            return self.setop(node, ctes, parent)
        if t is exp.Values:
            return self.values(node, ctes, parent)
        # Anything else in query position (a bare table in FROM-less forms, a function): value columns only.
        rel = _Rel()
        srcs: set = set()
        self.walk(node, _Scope(parent, ctes), srcs, rel.deps, None)
        rel.add("_c0", srcs)
        return rel

    def values(self, node: exp.Values, ctes: dict[str, _Rel], parent: _Scope | None) -> _Rel:
        """VALUES rows: column i reads what the rows' i-th values read (scalar subqueries, correlated columns);
        tables read by those subqueries are sources, their filters dependencies."""
        rel = _Rel()
        rel.synthetic = True
        alias = node.args.get("alias")
        names = [self.norm(c.name) for c in alias.columns] if alias is not None and alias.columns else None
        rows = [r.expressions if type(r) is exp.Tuple else [r] for r in node.expressions]
        width = max((len(r) for r in rows), default=0)
        for i in range(width):
            rel.add(names[i] if names and i < len(names) else f"col{i + 1}", set())
        if names:
            rel.synthetic = False
        scope = _Scope(parent, ctes)
        for row in rows:
            for i, value in enumerate(row):
                if type(value) is not _Literal:
                    self.walk(value, scope, rel.sources[i], rel.deps, None)
        rel.tables |= scope.tables
        return rel

    def setop(self, node: exp.Expression, ctes: dict[str, _Rel], parent: _Scope | None) -> _Rel:
        ctes = self.ctes(node, ctes, parent)
        left = self.query(node.this, ctes, parent)
        right = self.query(node.expression, ctes, parent)
        rel = _Rel()
        rel.deps = left.deps | right.deps
        rel.tables = left.tables | right.tables
        if type(node) is exp.Union:
            rs = right.sources
            for i, name in enumerate(left.names):
                srcs = set(left.sources[i])
                if i < len(rs):
                    srcs |= rs[i]
                rel.add(name, srcs)
        else:
            # EXCEPT / INTERSECT: the right side only decides which left rows survive.
            for name, srcs in zip(left.names, left.sources, strict=True):
                rel.add(name, srcs)
            for srcs in right.sources:
                rel.deps |= srcs
        order = node.args.get("order")
        if order is not None:
            self.clause(order, _Scope(parent, ctes), rel.deps, rel)
        return rel

    def select(
        self, sel: exp.Select, ctes: dict[str, _Rel], parent: _Scope | None, from_override: Any = None
    ) -> _Rel:
        args = sel.args
        ctes = self.ctes(sel, ctes, parent)
        scope = _Scope(parent, ctes)
        rel = _Rel()
        deps = rel.deps
        frm = args.get("from_")
        src_node = frm.this if frm is not None else from_override
        if src_node is not None:
            self.add_source(scope, src_node, rel)
        for j in args.get("joins") or ():
            self.join(scope, j, rel)
        for lat in args.get("laterals") or ():
            self.add_source(scope, lat, rel)

        norm = self.norm
        for i, e in enumerate(sel.expressions):
            t = type(e)
            if t is _Star:
                for src in scope.sources.values():
                    for name, srcs in src.expand():
                        rel.add(name, srcs)
                continue
            if t is _Column and type(e.this) is _Star:
                src = self.find_source(scope, norm(e.table))
                if src is not None:
                    for name, srcs in src.expand():
                        rel.add(name, srcs)
                continue
            out: set = set()
            self.walk(e, scope, out, deps, rel, False)
            name = e.output_name
            rel.add(norm(name) if name else f"_c{i}", out)

        for key in ("where", "group", "having", "qualify", "order", "sort", "distribute", "cluster"):
            node = args.get(key)
            if node is not None:
                self.clause(node, scope, deps, rel)
        for w in args.get("windows") or ():
            self.walk(w, scope, deps, deps, rel)
        tables = rel.tables
        tables |= scope.tables
        for src in scope.sources.values():
            if type(src) is _Rel:
                tables |= src.tables
            else:
                tables.add(src.key)
        return rel

    def join(self, scope: _Scope, j: exp.Join, rel: _Rel) -> None:
        self.add_source(scope, j.this, rel)
        on = j.args.get("on")
        if on is not None:
            self.walk(on, scope, rel.deps, rel.deps, None)
        for ident in j.args.get("using") or ():
            name = self.norm(ident.name)
            for src in scope.sources.values():
                srcs, certain = src.lookup(name)
                if srcs is not None:
                    rel.deps |= srcs

    def add_source(self, scope: _Scope, node: exp.Expression, rel: _Rel) -> None:
        t = type(node)
        norm = self.norm
        if t is _Table and isinstance(node.this, exp.Func):
            # A table-valued function (`range(1000)`, `explode(array(...))`): it yields rows but reads no table;
            # columns of its arguments are dependencies of whatever selects from it.
            fn = _Rel()
            fn.synthetic = True
            self.walk(node.this, scope, rel.deps, rel.deps, None)
            alias = node.args.get("alias")
            for c in alias.columns if alias is not None else ():
                fn.add(norm(c.name), set())
            name = norm(alias.name) if alias is not None and alias.name else f"_fn{len(scope.sources)}"
            scope.sources[name] = fn
            for j in node.args.get("joins") or ():
                self.join(scope, j, rel)
            return
        if t is _Table:
            name = self.table_name(node)
            alias = node.args.get("alias")
            alias_name = norm(alias.name) if alias is not None and alias.name else norm(node.name)
            cte = scope.ctes.get(name) if node.args.get("db") is None else None
            src: Any
            if cte is not None:
                src = cte
                rel.deps |= cte.deps
            else:
                key, cols = self.resolve_table(name)
                src = _TableSource(key, cols)
            if alias is not None and alias.columns:
                src = _renamed(
                    src if type(src) is _Rel else _rel_of(src), [norm(c.name) for c in alias.columns]
                )
            scope.sources[alias_name] = src
            for j in node.args.get("joins") or ():
                self.join(scope, j, rel)
            for lat in node.args.get("laterals") or ():
                self.add_source(scope, lat, rel)
            return
        if t is _Subquery or t in _SETOP_TYPES or t is _Select or t is exp.Values:
            sub = self.query(node, scope.ctes, scope.parent)
            rel.deps |= sub.deps
            alias = node.args.get("alias")
            if alias is not None and alias.columns:
                sub = _renamed(sub, [norm(c.name) for c in alias.columns])
            scope.sources[norm(node.alias) or f"_sub{len(scope.sources)}"] = sub
            for j in node.args.get("joins") or ():
                self.join(scope, j, rel)
            return
        if t is exp.Lateral and isinstance(node.this, _QUERY_TYPES):
            sub = self.query(node.this, scope.ctes, scope)  # LATERAL (subquery) sees the sources before it
            rel.deps |= sub.deps
            scope.sources[norm(node.alias) or f"_sub{len(scope.sources)}"] = sub
            return
        # LATERAL VIEW f(...), UNNEST, table functions: every generated column comes from the function's inputs.
        func = node.this if t is exp.Lateral else node
        srcs: set = set()
        self.walk(func, scope, srcs, rel.deps, None)
        alias = node.args.get("alias")
        cols = [norm(c.name) for c in alias.columns] if alias is not None and alias.columns else None
        if not cols:
            if type(func) is exp.Anonymous:
                fname = func.name.lower()
            else:
                fname = func.sql_name().lower() if isinstance(func, exp.Func) else ""
            if fname == "json_tuple":
                cols = [f"c{i}" for i in range(len(func.expressions) - 1)]
            else:
                cols = _LATERAL_DEFAULTS.get(fname, ["col"])
        gen = _Rel()
        for c in cols:
            gen.add(c, srcs)
        alias_name = norm(alias.name) if alias is not None and alias.name else f"_gen{len(scope.sources)}"
        scope.sources[alias_name] = gen

    def find_source(self, scope: _Scope | None, qualifier: str) -> Any:
        while scope is not None:
            src = scope.sources.get(qualifier)
            if src is not None:
                return src
            scope = scope.parent
        return None

    def resolve(self, col: exp.Column, scope: _Scope, aliases: _Rel | None, alias_first: bool) -> set:
        """Source columns a column reference stands for.

        Unqualified names: a source known to have the column wins; then an output alias (first in ORDER BY /
        GROUP BY / HAVING, after guesses in the select list); then the first source whose columns are unknown;
        then the enclosing query (correlated subqueries)."""
        args = col.args
        ident = args["this"]
        name = ident.this if type(ident) is _Identifier else col.name
        qual = args.get("table")
        qualifier = qual.this if type(qual) is _Identifier else (col.table if qual is not None else "")
        norm = self.norm
        if self.ci:
            name = name.lower()
        if qualifier:
            qualifier = norm(qualifier)
            src = self.find_source(scope, qualifier)
            if src is not None:
                srcs, _ = src.lookup(name)
                return (
                    srcs if srcs is not None else {(src.key, name)} if type(src) is _TableSource else _EMPTY
                )
            db = col.args.get("db")
            if db is not None:
                # `alias.struct_col.field`: sqlglot reads the alias as db and the struct column as table.
                src = self.find_source(scope, norm(db.name))
                if src is not None:
                    srcs, _ = src.lookup(qualifier)
                    return srcs if srcs is not None else _EMPTY
            # `struct_col.field` with no alias: the qualifier is really a column.
            name = qualifier
        s: _Scope | None = scope
        while s is not None:
            guess = None
            for src in s.sources.values():
                srcs, certain = src.lookup(name)
                if srcs is not None:
                    if certain:
                        return srcs
                    if guess is None:
                        guess = srcs
            if aliases is not None and s is scope and (alias_first or guess is None):
                i = aliases.index.get(name)
                if i is not None:
                    return aliases.sources[i]
            if guess is not None:
                # No schema tells which source holds the column: the first source that might is taken.
                return guess
            s = s.parent
        return _EMPTY

    def walk(
        self,
        node: exp.Expression,
        scope: _Scope,
        out: set,
        deps: set,
        aliases: _Rel | None,
        alias_first: bool = True,
    ) -> None:
        """Add the source columns of `node`'s value to `out` and its row-steering columns to `deps`."""
        stack = [node]
        pop = stack.pop
        push = stack.append
        while stack:
            n = pop()
            t = type(n)
            if t is _Column:
                if type(n.this) is not _Star:
                    out |= self.resolve(n, scope, aliases, alias_first)
                continue
            if t is _Window:
                push(n.this)
                for p in n.args.get("partition_by") or ():
                    self.walk(p, scope, deps, deps, aliases)
                order = n.args.get("order")
                if order is not None:
                    self.walk(order, scope, deps, deps, aliases)
                continue
            if t in _QUERY_TYPES:
                sub = self.query(n, scope.ctes, scope)
                for srcs in sub.sources:
                    out |= srcs
                deps |= sub.deps
                scope.tables |= sub.tables
                continue
            for v in n.args.values():
                if type(v) is list:
                    for x in v:
                        if isinstance(x, _Expr):
                            push(x)
                elif isinstance(v, _Expr):
                    push(v)

    def clause(self, node: exp.Expression, scope: _Scope, deps: set, rel: _Rel) -> None:
        """WHERE / GROUP BY / ORDER BY ...: everything goes to deps; ordinals and output aliases resolve to outputs."""
        if isinstance(node, (exp.Group, exp.Order, exp.Sort, exp.Distribute, exp.Cluster)):
            for e in node.expressions:
                x = e.this if type(e) is _Ordered else e
                if type(x) is _Literal and x.is_int:
                    i = int(x.this) - 1
                    if 0 <= i < len(rel.sources):
                        deps |= rel.sources[i]
                    continue
                self.walk(x, scope, deps, deps, rel)
            for key in ("rollup", "cube", "grouping_sets"):
                for e in node.args.get(key) or ():
                    self.walk(e, scope, deps, deps, rel)
            return
        self.walk(node, scope, deps, deps, rel)

    # ---- statements --------------------------------------------------------------------------------------------
    def new_write(self, name: str, hidden: bool) -> _Write:
        w = _Write(name, hidden)
        self.current[name] = len(self.writes)
        self.writes.append(w)
        return w

    def target_write(self, name: str) -> _Write:
        idx = self.current.get(name)
        return self.writes[idx] if idx is not None else self.new_write(name, hidden=False)

    def target_columns(self, name: str) -> list[str] | None:
        idx = self.current.get(name)
        if idx is not None:
            return self.writes[idx].known_columns()
        found = self.schema_columns(name)
        return None if found is None else found[0]

    def write_rel(
        self,
        w: _Write,
        rel: _Rel,
        target_cols: list[str] | None,
        static: Sequence[str] = (),
        dynamic: Sequence[str] = (),
    ) -> None:
        """Record `rel` written into `w`: outputs map by position to `target_cols` (else by their own names),
        then to the dynamic partition columns; static partition columns get a constant (no source)."""
        w.deps |= rel.deps
        w.tables |= rel.tables
        n_out = len(rel.names)
        n_dyn = min(len(dynamic), n_out)
        n_base = n_out - n_dyn
        if "*" in rel.index:
            target_cols = None  # an unexpanded star hides the positions: keep the output names
        if target_cols is None:
            names = [] if rel.synthetic else rel.names[:n_base]
        else:
            names = list(target_cols[:n_base])
            if len(names) < n_base and not rel.synthetic:
                names += rel.names[len(names) : n_base]
        cols = w.cols
        for i, name in enumerate(names):
            _merge(cols, name, rel.sources[i])
        for j in range(n_dyn):
            _merge(cols, dynamic[j], rel.sources[n_base + j])
        for name in static:
            _merge(cols, name, _EMPTY)

    def statement(self, st: exp.Expression, default_target: str | None) -> None:
        t = type(st)
        if t is exp.Insert:
            self.insert(st)
        elif t is _Select or t in _SETOP_TYPES or t is _Subquery:
            rel = self.query(st, {}, None)
            if default_target is not None:
                name = self.norm(default_target)
                self.write_rel(self.target_write(name), rel, self.target_columns(name))
            else:
                self.reads |= rel.tables
        elif t is exp.Create:
            self.create(st)
        elif t is exp.Cache:
            q = st.args.get("expression")
            if q is not None:
                rel = self.query(q, {}, None)
                self.write_rel(self.new_write(self.table_name(st.this), hidden=True), rel, None)
        elif t is exp.Drop:
            if str(st.args.get("kind") or "").upper() in ("TABLE", "VIEW"):
                for tbl in st.args.get("tables") or ([st.this] if st.this is not None else []):
                    if type(tbl) is _Table:
                        idx = self.current.pop(self.table_name(tbl), None)
                        if idx is not None:
                            self.writes[idx].hidden = True
        elif t is exp.MultitableInserts:
            source = st.args.get("source")
            for ins in st.expressions:
                if type(ins) is exp.Insert:
                    self.insert(ins, from_override=source)
        elif t is exp.Merge:
            self.merge(st)
        elif t is exp.Update:
            self.update(st)
        elif t is exp.Alter:
            for action in st.args.get("actions") or ():
                if type(action) is exp.AlterRename and type(action.this) is _Table:
                    self.rename(self.table_name(st.this), self.table_name(action.this))
        elif t is exp.Command:
            for move in command_moves(st, self.dialect_obj):
                self.move(move.kind, self.table_name(move.target), self.table_name(move.source))
        # USE, SET, ADD JAR (Command), ANALYZE, DROP FUNCTION, DELETE, RENAME COLUMN, ...: no lineage.

    def insert(self, ins: exp.Insert, from_override: Any = None) -> None:
        target = ins.this
        explicit: list[str] | None = None
        if type(target) is exp.Schema:
            explicit = [self.norm(i.name) for i in target.expressions]
            target = target.this
        q = ins.args.get("expression")
        ctes = self.ctes(ins, {}, None)
        if q is None and type(ins.args.get("source")) is _Table:
            # Spark's `INSERT INTO t TABLE s` is `INSERT INTO t SELECT * FROM s`.
            q = exp.Select(expressions=[exp.Star()]).from_(ins.args["source"].copy(), copy=False)
            rel = self.query(q, ctes, None, from_override)
            release([q])
        else:
            rel = self.query(q, ctes, None, from_override) if q is not None else _Rel()
        if type(target) is not _Table:  # INSERT OVERWRITE DIRECTORY: reads only
            self.reads |= rel.tables
            return
        name = self.table_name(target)
        static: list[str] = []
        dynamic: list[str] = []
        part = target.args.get("partition") or ins.args.get("partition")
        if isinstance(part, exp.Partition):
            for e in part.expressions:
                if type(e) is exp.EQ:
                    static.append(self.norm(e.this.name))
                else:
                    dynamic.append(self.norm(e.name))
        if explicit is None:
            cols = self.target_columns(name)
            if cols is not None and (static or dynamic):
                parts = set(static) | set(dynamic)
                cols = [c for c in cols if c not in parts]
        else:
            cols = explicit
        self.write_rel(self.target_write(name), rel, cols, static, dynamic)

    def create(self, st: exp.Create) -> None:
        kind = str(st.args.get("kind") or "").upper()
        if kind not in ("TABLE", "VIEW"):
            return
        target = st.this
        coldefs: list[str] | None = None
        if type(target) is exp.Schema:
            coldefs = [
                self.norm(c.name)
                for c in target.expressions
                if isinstance(c, (exp.ColumnDef, exp.Identifier))
            ]
            target = target.this
        if type(target) is not _Table:
            return
        props = st.args.get("properties")
        temporary = is_global = False
        part_cols: list[str] = []
        like: exp.Expression | None = None
        file_format = path = None
        for p in props.expressions if props is not None else ():
            tp = type(p)
            if tp is exp.TemporaryProperty:
                temporary = True
            elif tp is exp.FileFormatProperty:
                file_format = p.name.lower()
            elif tp is exp.OptionsProperty:
                path = next((o.text("value") for o in p.expressions if o.name.lower() == "path"), path)
            elif tp is exp.GlobalProperty:
                is_global = True
            elif tp is exp.LikeProperty:
                like = p.this
            elif tp is exp.PartitionedByProperty:
                schema = p.this
                items = schema.expressions if isinstance(schema, (exp.Schema, exp.Tuple)) else [schema]
                part_cols = [self.norm(c.name) for c in items]
        if st.this is not target:  # MySQL `CREATE TABLE t (LIKE s)` puts LIKE among the column definitions
            like = next((c.this for c in st.this.expressions if type(c) is exp.LikeProperty), like)
        name = self.table_name(target)
        if is_global and temporary:
            name = f"global_temp.{name}"  # Spark's global temporary views are read as global_temp.<name>
        clone = st.args.get("clone")
        if type(clone) is exp.Clone and type(clone.this) is _Table:
            self.move("clone", name, self.table_name(clone.this), hidden=temporary)
            return
        if type(like) is _Table:
            self.move("like", name, self.table_name(like), hidden=temporary)
            return
        q = st.args.get("expression")
        if q is not None and isinstance(q, _QUERY_TYPES):
            rel = self.query(q, self.ctes(st, {}, None), None)
            self.write_rel(self.new_write(name, hidden=temporary), rel, coldefs)
            return
        # DDL only: a target with no sources yet. Its columns name INSERT targets and expand SELECT * later on.
        w = self.new_write(name, hidden=temporary)
        if temporary and file_format and path:
            # `CREATE TEMPORARY VIEW v USING parquet OPTIONS (path '...')`: the view reads those files, named
            # as Spark SQL names a path table (parquet.`/data/x`), so lineage passes through the view to them.
            files = f"{file_format}.{path}"
            w.tables.add(files)
            if not coldefs:
                w.cols["*"] = {(files, "*")}
        for c in (coldefs or []) + part_cols:
            w.cols.setdefault(c, set())

    def same_name_columns(self, key: Key) -> dict[str, set]:
        """Each column of a table (or of a version written earlier in the script) mapped to itself; a `*` column
        when no schema knows them."""
        if type(key) is int:
            cols: list[str] | None = list(self.writes[key].cols) or None
        else:
            found = self.schema_columns(key)
            cols = None if found is None else found[0]
        if not cols:
            return {"*": {(key, "*")}}
        return {c: {(key, c)} for c in cols}

    def move(self, kind: str, target: str, source: str, hidden: bool = False) -> None:
        """A statement that lands `source`'s rows (or, for LIKE, its column layout) in `target`, column by
        column under the same names.

        like / clone: `target` is a new table. rename: see `rename`. exchange: a partition of `source` moves
        into `target` (Hive: `ALTER TABLE target EXCHANGE PARTITION (..) WITH TABLE source`); MySQL's EXCHANGE
        swaps the partition's rows with the other table's, so there the data moves both ways."""
        if kind == "rename":
            self.rename(source, target)
            return
        src_key, _ = self.resolve_table(source)
        if kind == "exchange":
            if self.dialect == "mysql":
                dst_key, _ = self.resolve_table(target)
                self._land(self.target_write(target), src_key)
                self._land(self.target_write(source), dst_key)
            else:
                self._land(self.target_write(target), src_key)
            return
        self._land(self.new_write(target, hidden=hidden), src_key)

    def _land(self, w: _Write, src_key: Key) -> None:
        if src_key == w.name or src_key == self.current.get(w.name):
            return  # a table moved onto itself: no lineage edge
        w.tables.add(src_key)
        for c, srcs in self.same_name_columns(src_key).items():
            _merge(w.cols, c, srcs)

    def rename(self, old: str, new: str) -> None:
        """`ALTER TABLE old RENAME TO new`: `new` holds what `old` held, so it inherits `old`'s lineage.

        A table the script itself wrote under `old` (the "build into staging, then rename" pattern) no longer
        exists under that name: like a dropped one it is hidden, and `new` is reported with the real sources and
        column lineage of what was written. A table that existed before the script is a source of `new` (a
        dataset edge, with same-name column edges), as a lineage graph needs to connect `old`'s history to
        `new`. Either way the rename is listed in `ScriptLineage.renames`."""
        self.renames.append((old, new))
        idx = self.current.pop(old, None)
        if idx is None:
            self._land(self.new_write(new, hidden=False), old)
            return
        was_hidden = self.writes[idx].hidden
        self.writes[idx].hidden = True
        self._land(self.new_write(new, hidden=was_hidden), idx)

    def merge(self, st: exp.Merge) -> None:
        target = st.this
        name = self.table_name(target)
        scope = _Scope(None, self.ctes(st, {}, None))
        rel = _Rel()
        self.add_source(scope, st.args["using"], rel)
        using_src = list(scope.sources.values())[0] if scope.sources else None
        t_alias = self.norm(target.alias) or self.norm(target.name)
        # Self-references resolve to the target's own name; they are dropped below (no self-loops).
        scope.sources[t_alias] = _TableSource(name, None)
        deps: set = set()
        self.walk(st.args["on"], scope, deps, deps, None)
        known_target = self.target_columns(name)
        w = self.target_write(name)
        cols = w.cols
        whens = st.args.get("whens")
        for when in whens.expressions if whens is not None else ():
            cond = when.args.get("condition")
            if cond is not None:
                self.walk(cond, scope, deps, deps, None)
            then = when.args.get("then")
            if type(then) is exp.Update:
                for eq in then.expressions:
                    if type(eq) is _Star:
                        self._merge_star(cols, using_src)
                        continue
                    out: set = set()
                    self.walk(eq.expression, scope, out, deps, None)
                    col = self.norm(eq.this.name)
                    out.discard((name, col))
                    _merge(cols, col, out)
            elif type(then) is exp.Insert:
                names = then.this
                values = then.expression.expressions if then.expression is not None else []
                if type(names) is _Star or (names is None and not values):
                    self._merge_star(cols, using_src)
                    continue
                if names is not None:
                    targets: list[str | None] = [self.norm(i.name) for i in names.expressions]
                else:
                    # INSERT VALUES (...) without a column list: the target's columns by position when known,
                    # else the name of a plain column value (VALUES (s.id, s.v) -> id, v).
                    known = known_target or []
                    targets = [
                        known[i] if i < len(known) else (self.norm(v.name) if type(v) is _Column else None)
                        for i, v in enumerate(values)
                    ]
                for tname, val in zip(targets, values, strict=False):
                    out = set()
                    self.walk(val, scope, out, deps, None)
                    if tname is not None:
                        _merge(cols, tname, out)
        w.deps |= {d for d in deps if d[0] != name} | rel.deps
        w.tables |= scope.tables
        if using_src is not None:
            w.tables |= using_src.tables if type(using_src) is _Rel else {using_src.key}

    def _merge_star(self, cols: dict[str, set], src: Any) -> None:
        if src is not None:
            for n, srcs in src.expand():
                _merge(cols, n, srcs)

    def update(self, st: exp.Update) -> None:
        target = st.this
        name = self.table_name(target)
        scope = _Scope(None, {})
        rel = _Rel()
        t_alias = self.norm(target.alias) or self.norm(target.name)
        scope.sources[t_alias] = _TableSource(name, self.target_columns(name))
        for j in target.args.get("joins") or ():
            self.join(scope, j, rel)
        frm = st.args.get("from_")
        if frm is not None:
            self.add_source(scope, frm.this, rel)
        for j in st.args.get("joins") or ():
            self.join(scope, j, rel)
        deps = rel.deps
        w = self.target_write(name)
        for eq in st.expressions:
            out: set = set()
            self.walk(eq.expression, scope, out, deps, None)
            col = self.norm(eq.this.name)
            out.discard((name, col))
            _merge(w.cols, col, out)
        where = st.args.get("where")
        if where is not None:
            self.walk(where, scope, deps, deps, None)
        w.deps |= {d for d in deps if d[0] != name}
        w.tables |= scope.tables
        for alias, src in scope.sources.items():
            if alias != t_alias:
                w.tables |= src.tables if type(src) is _Rel else {src.key}

    # ---- end of script -----------------------------------------------------------------------------------------
    def expand(self, src: Src, memo: dict) -> set:
        key, col = src
        if type(key) is str:
            return {src}
        w = self.writes[key]
        if not w.hidden:
            return {(w.name, col)}
        got = memo.get(src)
        if got is not None:
            return got
        memo[src] = _EMPTY  # a version reading itself must not loop
        srcs: Iterable = w.cols.get(col) or ()
        if col == "*":
            srcs = set().union(*w.cols.values()) if w.cols else ()
        elif col not in w.cols and "*" in w.cols:
            srcs = {(k, col) for k, _ in w.cols["*"]}
        out: set = set()
        for s in srcs:
            out |= self.expand(s, memo)
        memo[src] = out
        return out

    def hidden_closure(self, keys: Iterable[Key]) -> tuple[set, set]:
        """Real tables behind `keys`, and the dependencies of the hidden tables passed through on the way."""
        tables: set = set()
        deps: set = set()
        seen: set = set()
        stack = list(keys)
        while stack:
            k = stack.pop()
            if type(k) is str:
                tables.add(k)
                continue
            w = self.writes[k]
            if not w.hidden:
                tables.add(w.name)
                continue
            if k in seen:
                continue
            seen.add(k)
            deps |= w.deps
            stack.extend(w.tables)
        return tables, deps

    def result(self, started: float) -> ScriptLineage:
        memo: dict = {}
        by_target: dict[str, dict[str, set]] = {}
        t_sources: dict[str, set] = {}
        t_deps: dict[str, set] = {}
        all_sources, _ = self.hidden_closure(self.reads)
        for w in self.writes:
            if w.hidden:
                tables, _ = self.hidden_closure(w.tables)
                all_sources |= tables
                continue
            tables, hidden_deps = self.hidden_closure(w.tables)
            all_sources |= tables
            cols = by_target.setdefault(w.name, {})
            for c, srcs in w.cols.items():
                acc = cols.setdefault(c, set())
                for s in srcs:
                    acc |= self.expand(s, memo)
            deps = t_deps.setdefault(w.name, set())
            for d in w.deps | hidden_deps:
                deps |= self.expand(d, memo)
            t_sources.setdefault(w.name, set()).update(tables)
        targets = sorted(by_target)
        columns = [
            ColumnLineage(f"{tname}.{c}", sorted(f"{k}.{n}" for k, n in srcs))
            for tname in targets
            for c, srcs in by_target[tname].items()
        ]
        all_deps = set().union(*t_deps.values()) if t_deps else set()
        return ScriptLineage(
            sources=sorted(all_sources),
            targets=targets,
            columns=columns,
            dataset_dependencies=sorted(f"{k}.{n}" for k, n in all_deps),
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
            target_sources={t: sorted(t_sources[t]) for t in targets},
            target_dependencies={t: sorted(f"{k}.{n}" for k, n in t_deps[t]) for t in targets},
            renames=list(self.renames),
        )


def _merge(cols: dict[str, set], name: str, srcs: Iterable) -> None:
    acc = cols.get(name)
    if acc is None:
        cols[name] = set(srcs)
    else:
        acc |= srcs


def _rel_of(src: _TableSource) -> _Rel:
    rel = _Rel()
    for name, srcs in src.expand():
        rel.add(name, srcs)
    rel.tables.add(src.key)
    return rel


def _renamed(rel: _Rel, names: list[str]) -> _Rel:
    """`alias(c1, c2)` renames a derived table's columns by position."""
    out = _Rel()
    out.deps = rel.deps
    out.tables = rel.tables
    for i, srcs in enumerate(rel.sources):
        out.add(names[i] if i < len(names) else rel.names[i], srcs)
    return out


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


_DIALECTS: dict[str, Dialect] = {}


def _dialect(name: str) -> Dialect:
    d = _DIALECTS.get(name)
    if d is None:
        d = _DIALECTS[name] = Dialect.get_or_raise(name)
    return d


def parse_script(
    sql: str,
    dialect: str | None = "spark",
    schema: Mapping[str, Mapping[str, str]] | None = None,
    default_target: str | None = None,
) -> ScriptLineage:
    """Lineage of a SQL script of one or more statements.

    `schema` maps a table (as the SQL names it) to its columns, used to expand `SELECT *` and to map INSERT
    outputs by position. With `default_target`, a final bare SELECT is read as INSERT OVERWRITE into that table.
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
            statements = _dialect(name).parse(sql)
        except (ParseError, TokenError) as exc:
            raise _parse_error(sql, exc) from exc
        finally:
            _quiet.on = False
        engine = _Engine(name, _dialect(name), schema)
        live = [s for s in statements if s is not None]
        last = len(live) - 1
        try:
            for i, st in enumerate(live):
                engine.statement(st, default_target if i == last else None)
        finally:
            release(live)
        return engine.result(started)
