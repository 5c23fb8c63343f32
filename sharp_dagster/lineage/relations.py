"""The data model of the lineage walk (`parser.py`): what a query's output, a FROM source and a scope look like.

A source column is a pair (table_key, column): table_key is a real table name (str) or the index (int) of a table
version the script wrote earlier (`tables.ScriptTables.writes`), resolved when the script ends, hidden or not. The
walk (`queries.py`) builds these objects; the statements (`statements.py`) write them into the script's tables.

How an output column is computed (OpenLineage's DIRECT subtypes) is a bit set per column: 0 is IDENTITY (a column
copied as it is), `TRANSFORMATION` and `AGGREGATION` (both for `sum(a) * 2`). A column's `conds` are the sources
read only in a CASE / IF condition of its value (OpenLineage's INDIRECT CONDITIONAL). A query's `deps` are
(table_key, column, subtype) triples, the subtype one of `DEPENDENCY_KINDS` (which clause steers the rows).
"""

from __future__ import annotations

from typing import Any

Key = str | int
Src = tuple  # (Key, str)

EMPTY: frozenset = frozenset()
TRANSFORMATION = 1
AGGREGATION = 2
FILTER, JOIN, GROUP_BY, SORT, WINDOW = "FILTER", "JOIN", "GROUP_BY", "SORT", "WINDOW"
DEPENDENCY_KINDS = (FILTER, JOIN, GROUP_BY, SORT, WINDOW)


def direct_subtypes(kind: int) -> list[str]:
    """OpenLineage's DIRECT subtypes of a column computed the way `kind` (a bit set) says."""
    if not kind:
        return ["IDENTITY"]
    return (["TRANSFORMATION"] if kind & TRANSFORMATION else []) + (
        ["AGGREGATION"] if kind & AGGREGATION else []
    )


def tagged(srcs: set, kind: str, into: set) -> None:
    """Add source columns (pairs) to a dependency set as triples of `kind`; triples keep their own kind."""
    for s in srcs:
        into.add(s if len(s) == 3 else (s[0], s[1], kind))


class Rel:
    """The output of a query (or a derived source): ordered columns, each with its source-column set."""

    __slots__ = ("names", "sources", "index", "deps", "tables", "stars", "synthetic", "kinds", "conds")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.sources: list[set] = []
        self.index: dict[str, int] = {}
        self.deps: set = set()
        self.tables: set = set()
        self.stars: set | None = None  # (key, "*") of unexpanded stars: unknown columns pass through to them
        self.synthetic = False  # columns named by us (VALUES rows), not by the SQL
        self.kinds: list[int] = []  # per column: how it is computed (module docstring)
        self.conds: list = []  # per column: its sources read only in a CASE / IF condition

    def add(self, name: str, srcs: set, kind: int = 0, conds: Any = EMPTY) -> None:
        if name not in self.index:
            self.index[name] = len(self.names)
        self.names.append(name)
        self.sources.append(srcs)
        self.kinds.append(kind)
        self.conds.append(conds)
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


class TableSource:
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


class Scope:
    """One query's FROM sources by alias, the CTEs it sees, and its enclosing query's scope."""

    __slots__ = ("sources", "parent", "ctes", "tables", "using")

    def __init__(self, parent: Scope | None, ctes: dict[str, Rel]):
        self.sources: dict[str, Any] = {}  # alias -> TableSource | Rel, in FROM order
        self.parent = parent  # the enclosing query's scope, for correlated subqueries
        self.ctes = ctes
        self.tables: set = set()  # tables read by subqueries inside expressions
        self.using: dict[str, Any] | None = None  # JOIN ... USING columns: name -> the sources it stands for


def joined(sources: list) -> Any:
    """The one relation an aliased parenthesised relation stands for: its only source, or all columns of them."""
    if len(sources) == 1:
        return sources[0]
    out = Rel()
    for src in sources:
        add_all(out, src)
        if type(src) is Rel:
            out.tables |= src.tables
            out.deps |= src.deps
        else:
            out.tables.add(src.key)
    return out


def add_all(rel: Rel, src: Any) -> None:
    """`*` / `t.*`: every column of a source, computed as it is there."""
    if type(src) is Rel:
        for i, name in enumerate(src.names):
            rel.add(name, src.sources[i], src.kinds[i], src.conds[i])
    else:
        for name, srcs in src.expand():
            rel.add(name, srcs)


def rel_of(src: TableSource) -> Rel:
    rel = Rel()
    for name, srcs in src.expand():
        rel.add(name, srcs)
    rel.tables.add(src.key)
    return rel


def renamed(rel: Rel, names: list[str]) -> Rel:
    """`alias(c1, c2)` renames a derived table's columns by position."""
    out = Rel()
    out.deps = rel.deps
    out.tables = rel.tables
    for i, srcs in enumerate(rel.sources):
        out.add(names[i] if i < len(names) else rel.names[i], srcs, rel.kinds[i], rel.conds[i])
    return out
