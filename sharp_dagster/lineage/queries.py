"""The scope walk of one query: which source columns each output column of a query is computed from.

This module owns reading a query's AST (SELECT, set operations, VALUES, CTEs, scalar and IN subqueries) scope by
scope, and resolving each column reference to the source columns it stands for (`QueryWalker.resolve`: qualified
names, output aliases, unknown schemas, correlated subqueries). Columns of a value go to the output column; columns
that only steer which rows arrive (WHERE, JOIN ON, GROUP BY, HAVING, ORDER BY, window PARTITION BY / ORDER BY) go to
the query's dependencies. The FROM clause's sources (tables, derived tables, joins, lateral views, table-valued
functions) are added to the scope by `sources.SourceReader`, which the walker inherits; table names resolve through
the script's tables (`tables.ScriptTables`): a table the script wrote earlier is read as that version.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from sharp_dagster.lineage.kinds import AGG_TYPES, CLAUSE_KINDS, own_kind
from sharp_dagster.lineage.names import spark_name
from sharp_dagster.lineage.relations import (
    AGGREGATION,
    EMPTY,
    FILTER,
    WINDOW,
    Rel,
    Scope,
    TableSource,
    add_all,
    renamed,
    tagged,
)
from sharp_dagster.lineage.sources import QUERY_TYPES, SETOP_TYPES, SourceReader
from sharp_dagster.lineage.tables import ScriptTables

__all__ = ["QUERY_TYPES", "SETOP_TYPES", "QueryWalker"]

_Column = exp.Column
_Identifier = exp.Identifier
_Star = exp.Star
_Window = exp.Window
_Expr = exp.Expr
_Subquery = exp.Subquery
_Select = exp.Select
_Literal = exp.Literal
_Ordered = exp.Ordered
_If = exp.If


class QueryWalker(SourceReader):
    """The query walk of one parse_script call, over the script's tables as they stand when a statement is read.

    Holds no state of its own between queries; `ci`, `norm`, `table_name` and `resolve_table` are the script
    tables' (bound once: they are called for every column and table of the walk).
    """

    def __init__(self, script: ScriptTables):
        self.ci = script.ci
        self.norm = script.norm
        self.table_name = script.table_name
        self.resolve_table = script.resolve_table
        self.unresolved: set[str] = set()  # unqualified columns more than one schema-less source might hold
        self.travels: list[exp.Table] = []  # tables read with a time-travel clause (`time_travel.misuse`)
        # How the value being walked is computed: bits of the columns it reads (`relations` docstring) and the
        # sources they read only in conditions; `value` sets and reads them around each walk.
        self.kinds_seen = 0
        self.conds_seen: set | None = None

    def ctes(self, node: exp.Expression, ctes: dict[str, Rel], parent: Scope | None) -> dict[str, Rel]:
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
                rel = renamed(rel, [self.norm(c.name) for c in cols])
            ctes[self.norm(cte.alias)] = rel
        return ctes

    def query(
        self, node: exp.Expression, ctes: dict[str, Rel], parent: Scope | None, from_override: Any = None
    ) -> Rel:
        t = type(node)
        if t is _Select:
            return self.select(node, ctes, parent, from_override)
        if t is _Subquery:
            ctes = self.ctes(node, ctes, parent)
            return self.query(node.this, ctes, parent)
        if t in SETOP_TYPES:
            return self.setop(node, ctes, parent)
        if t is exp.Values:
            return self.values(node, ctes, parent)
        # Anything else in query position (a bare table in FROM-less forms, a function): value columns only.
        rel = Rel()
        srcs: set = set()
        self.walk(node, Scope(parent, ctes), srcs, rel.deps, None)
        rel.add("_c0", srcs)
        return rel

    def values(self, node: exp.Values, ctes: dict[str, Rel], parent: Scope | None) -> Rel:
        """VALUES rows: column i reads what the rows' i-th values read (scalar subqueries, correlated columns);
        tables read by those subqueries are sources, their filters dependencies."""
        rel = Rel()
        rel.synthetic = True
        alias = node.args.get("alias")
        names = [self.norm(c.name) for c in alias.columns] if alias is not None and alias.columns else None
        rows = [r.expressions if type(r) is exp.Tuple else [r] for r in node.expressions]
        width = max((len(r) for r in rows), default=0)
        for i in range(width):
            rel.add(names[i] if names and i < len(names) else f"col{i + 1}", set())
        if names:
            rel.synthetic = False
        scope = Scope(parent, ctes)
        for row in rows:
            for i, value in enumerate(row):
                if type(value) is not _Literal:
                    self.walk(value, scope, rel.sources[i], rel.deps, None)
        rel.tables |= scope.tables
        return rel

    def setop(self, node: exp.Expression, ctes: dict[str, Rel], parent: Scope | None) -> Rel:
        ctes = self.ctes(node, ctes, parent)
        left = self.query(node.this, ctes, parent)
        right = self.query(node.expression, ctes, parent)
        rel = Rel()
        rel.deps = left.deps | right.deps
        rel.tables = left.tables | right.tables
        if type(node) is exp.Union:
            rs = right.sources
            for i, name in enumerate(left.names):
                srcs = set(left.sources[i])
                kind, conds = left.kinds[i], left.conds[i]
                if i < len(rs):
                    srcs |= rs[i]
                    kind |= right.kinds[i]
                    conds = conds | right.conds[i]
                rel.add(name, srcs, kind, conds)
            # A later branch with more columns (Spark refuses it; other engines and scripts in the wild do not):
            # its extra columns are outputs under their own names rather than lost.
            for j in range(len(left.names), len(rs)):
                rel.add(right.names[j], set(rs[j]), right.kinds[j], right.conds[j])
        else:
            # EXCEPT / INTERSECT: the right side only decides which left rows survive.
            for i, name in enumerate(left.names):
                rel.add(name, left.sources[i], left.kinds[i], left.conds[i])
            for srcs in right.sources:
                tagged(srcs, FILTER, rel.deps)
        order = node.args.get("order")
        if order is not None:
            self.clause(order, Scope(parent, ctes), rel.deps, rel)
        return rel

    def select(
        self, sel: exp.Select, ctes: dict[str, Rel], parent: Scope | None, from_override: Any = None
    ) -> Rel:
        args = sel.args
        ctes = self.ctes(sel, ctes, parent)
        scope = Scope(parent, ctes)
        rel = Rel()
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
                    add_all(rel, src)
                continue
            if t is _Column and type(e.this) is _Star:
                src = self.find_source(scope, norm(e.table))
                if src is not None:
                    add_all(rel, src)
                continue
            out, kind, conds = self.value(e, scope, deps, rel)
            name = e.output_name if t is exp.Alias or t is _Column or t is exp.Dot else spark_name(e)
            rel.add(norm(name) if name else f"_c{i}", out, kind, conds)

        for key in ("where", "group", "having", "qualify", "order", "sort", "distribute", "cluster"):
            node = args.get(key)
            if node is not None:
                self.clause(node, scope, deps, rel)
        for w in args.get("windows") or ():
            self.steer(w, scope, deps, rel, WINDOW)
        tables = rel.tables
        tables |= scope.tables
        for src in scope.sources.values():
            if type(src) is Rel:
                tables |= src.tables
            else:
                tables.add(src.key)
        return rel

    def find_source(self, scope: Scope | None, qualifier: str) -> Any:
        while scope is not None:
            src = scope.sources.get(qualifier)
            if src is not None:
                return src
            scope = scope.parent
        return None

    def resolve(self, col: exp.Column, scope: Scope, aliases: Rel | None) -> set:
        """Source columns a column reference stands for.

        Qualifiers, aliases and names compare as the script's names do (`ScriptTables.norm`: Spark's default
        case-insensitive resolution unless `spark.sql.caseSensitive`). Unqualified names: a source known to have the
        column wins; then an earlier output alias (a lateral column alias in the select list, an output name in
        ORDER BY / GROUP BY / HAVING); then the only source whose columns are unknown (several such sources: the
        column is unresolved, listed in `unresolved`, never guessed); then the enclosing query (correlated
        subqueries)."""
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
                if type(src) is Rel:
                    self.note(src, name)
                srcs, _ = src.lookup(name)
                return srcs if srcs is not None else {(src.key, name)} if type(src) is TableSource else EMPTY
            db = col.args.get("db")
            if db is not None:
                # `alias.struct_col.field`: sqlglot reads the alias as db and the struct column as table.
                src = self.find_source(scope, norm(db.name))
                if src is not None:
                    if type(src) is Rel:
                        self.note(src, qualifier)
                    srcs, _ = src.lookup(qualifier)
                    return srcs if srcs is not None else EMPTY
            # `struct_col.field` with no alias: the qualifier is really a column.
            name = qualifier
        s: Scope | None = scope
        while s is not None:
            guess = None
            guesses = 0
            for src in s.sources.values():
                srcs, certain = src.lookup(name)
                if srcs is not None:
                    if certain:
                        if type(src) is Rel:
                            self.note(src, name)
                        return srcs
                    guesses += 1
                    if guess is None:
                        guess = srcs
            if s.using is not None and name in s.using:
                return s.using[name]
            if aliases is not None and s is scope:
                # An earlier output alias beats a guess: a lateral column alias (`a + 1 AS b, b * 2 AS c`) in the
                # select list, an output name in GROUP BY / ORDER BY / HAVING.
                i = aliases.index.get(name)
                if i is not None:
                    self.note(aliases, name)
                    return aliases.sources[i]
            if guesses == 1:
                # One source whose columns are unknown: it is the only one that can hold the column.
                return guess
            if guesses > 1:
                # Several schema-less sources might hold it: reported as unresolved rather than guessed.
                self.unresolved.add(name)
                return EMPTY
            s = s.parent
        return EMPTY

    def walk(
        self,
        node: exp.Expression,
        scope: Scope,
        out: set,
        deps: set,
        aliases: Rel | None,
        cond: set | None = None,
    ) -> None:
        """Add the source columns of `node`'s value to `out` and its row-steering columns to `deps`; with `cond`,
        the columns of CASE / IF conditions go there instead of `out`."""
        stack = [node]
        pop = stack.pop
        push = stack.append
        while stack:
            n = pop()
            t = type(n)
            if t is _Column:
                if type(n.this) is not _Star:
                    out |= self.resolve(n, scope, aliases)
                continue
            if t is _Window:
                push(n.this)
                for p in n.args.get("partition_by") or ():
                    self.steer(p, scope, deps, aliases, WINDOW)
                order = n.args.get("order")
                if order is not None:
                    self.steer(order, scope, deps, aliases, WINDOW)
                continue
            if t is _If and cond is not None:
                self.walk(n.this, scope, cond, deps, aliases, cond)
                for key in ("true", "false"):
                    v = n.args.get(key)
                    if v is not None:
                        push(v)
                continue
            if t in AGG_TYPES:
                self.kinds_seen |= AGGREGATION
            if t in QUERY_TYPES:
                sub = self.query(n, scope.ctes, scope)
                for i, srcs in enumerate(sub.sources):
                    out |= srcs
                    self.kinds_seen |= sub.kinds[i]
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

    def value(self, e: exp.Expression, scope: Scope, deps: set, aliases: Rel | None) -> tuple[set, int, Any]:
        """One output value: (its source columns, how it is computed, the sources read only in its conditions)."""
        saved = self.kinds_seen, self.conds_seen
        self.kinds_seen = 0
        self.conds_seen = None
        out: set = set()
        cond: set = set()
        try:
            self.walk(e, scope, out, deps, aliases, cond)
            kind = self.kinds_seen | own_kind(e)
            seen = self.conds_seen
        finally:
            self.kinds_seen, self.conds_seen = saved
        if seen:
            cond |= seen
            value_part = out - seen
        else:
            value_part = out
        only_cond = cond - value_part if cond else EMPTY
        if cond:
            out |= cond
        return out, kind, only_cond

    def note(self, src: Rel, name: str) -> None:
        """A value reads column `name` of a derived source: it is computed at least the way that column is."""
        i = src.index.get(name)
        if i is not None:
            self.kinds_seen |= src.kinds[i]
            c = src.conds[i]
            if c:
                if self.conds_seen is None:
                    self.conds_seen = set(c)
                else:
                    self.conds_seen |= c

    def steer(self, node: exp.Expression, scope: Scope, deps: set, aliases: Rel | None, kind: str) -> None:
        """Columns of `node` that steer rows (`kind`: FILTER, JOIN, ...) into `deps`; how the value being walked
        meanwhile is computed is not theirs to change."""
        saved = self.kinds_seen, self.conds_seen
        found: set = set()
        try:
            self.walk(node, scope, found, found, aliases)
        finally:
            self.kinds_seen, self.conds_seen = saved
        tagged(found, kind, deps)

    def clause(self, node: exp.Expression, scope: Scope, deps: set, rel: Rel) -> None:
        """WHERE / GROUP BY / ORDER BY ...: everything goes to deps; ordinals and output aliases resolve to outputs."""
        kind = CLAUSE_KINDS.get(type(node), FILTER)
        if isinstance(node, (exp.Group, exp.Order, exp.Sort, exp.Distribute, exp.Cluster)):
            for e in node.expressions:
                x = e.this if type(e) is _Ordered else e
                if type(x) is _Literal and x.is_int:
                    i = int(x.this) - 1
                    if 0 <= i < len(rel.sources):
                        tagged(rel.sources[i], kind, deps)
                    continue
                self.steer(x, scope, deps, rel, kind)
            for key in ("rollup", "cube", "grouping_sets"):
                for e in node.args.get(key) or ():
                    self.steer(e, scope, deps, rel, kind)
            return
        self.steer(node, scope, deps, rel, kind)
