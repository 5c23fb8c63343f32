"""The FROM sources of a query: tables, derived tables, joins, parenthesised relations, lateral views and table
functions, each added to the query's scope under its alias.

This module owns `SourceReader.add_source` and what it calls: a table resolves through the script's tables (a CTE of
that name wins inside its statement; a time-travel clause reads the table itself), a derived table is walked as a
query of its own (`QueryWalker.query`), `JOIN ... ON` / `USING` columns become JOIN dependencies, a generator's
columns come from the function's inputs. `QueryWalker` (`queries.py`) inherits it; the walk's expression methods
(`query`, `walk`, `steer`) are the walker's.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from sharp_dagster.lineage.relations import (
    FILTER,
    JOIN,
    TRANSFORMATION,
    Rel,
    Scope,
    TableSource,
    joined,
    rel_of,
    renamed,
    tagged,
)

__all__ = ["QUERY_TYPES", "SETOP_TYPES", "SourceReader"]

QUERY_TYPES = (exp.Select, exp.Union, exp.Except, exp.Intersect, exp.Subquery)
SETOP_TYPES = (exp.Union, exp.Except, exp.Intersect)
# Default column names Spark/Hive give generator outputs when a LATERAL VIEW lists no column aliases.
_LATERAL_DEFAULTS = {"explode": ["col"], "posexplode": ["pos", "col"], "inline": [], "explode_outer": ["col"]}


class SourceReader:
    """Adds a query's FROM sources to its scope; the query walk (`QueryWalker`) it is part of supplies `norm`,
    `table_name`, `resolve_table`, `travels` (the time-travel reads seen) and the walk's `query`, `walk` and
    `steer`."""

    norm: Any
    travels: list[exp.Table]
    table_name: Any
    resolve_table: Any
    query: Any
    walk: Any
    steer: Any

    def join(self, scope: Scope, j: exp.Join, rel: Rel) -> None:
        self.add_source(scope, j.this, rel)
        on = j.args.get("on")
        if on is not None:
            self.steer(on, scope, rel.deps, None, JOIN)
        using = j.args.get("using")
        if not using:
            return
        sources = list(scope.sources.values())
        side = str(j.args.get("side") or "").upper()
        for ident in using:
            name = self.norm(ident.name)
            found = []
            for src in sources:
                srcs, certain = src.lookup(name)
                if srcs is not None:
                    tagged(srcs, JOIN, rel.deps)
                    found.append(srcs)
            if found:
                # The unqualified USING column is one column (Spark: the left side's, the right's in a RIGHT JOIN,
                # either in a FULL JOIN), not an ambiguous one.
                if scope.using is None:
                    scope.using = {}
                left = scope.using.get(name, found[0])
                scope.using[name] = (
                    found[-1] if side == "RIGHT" else set().union(left, found[-1]) if side == "FULL" else left
                )

    def add_source(self, scope: Scope, node: exp.Expression, rel: Rel) -> None:
        t = type(node)
        norm = self.norm
        if t is exp.Table and isinstance(node.this, exp.Func):
            # A table-valued function (`range(1000)`, `explode(array(...))`): it yields rows but reads no table;
            # columns of its arguments are dependencies of whatever selects from it.
            fn = Rel()
            fn.synthetic = True
            self.steer(node.this, scope, rel.deps, None, FILTER)
            alias = node.args.get("alias")
            for c in alias.columns if alias is not None else ():
                fn.add(norm(c.name), set())
            name = norm(alias.name) if alias is not None and alias.name else f"_fn{len(scope.sources)}"
            scope.sources[name] = fn
            for j in node.args.get("joins") or ():
                self.join(scope, j, rel)
            return
        if t is exp.Table:
            if node.args.get("version") is not None:
                self.travels.append(
                    node
                )  # read as the table itself; checked at the script's end (time_travel)
            name = self.table_name(node)
            alias = node.args.get("alias")
            alias_name = norm(alias.name) if alias is not None and alias.name else norm(node.name)
            cte = scope.ctes.get(norm(node.name)) if node.args.get("db") is None else None
            src: Any
            if cte is not None:
                src = cte
                rel.deps |= cte.deps
            else:
                key, cols = self.resolve_table(name)
                src = TableSource(key, cols)
            if alias is not None and alias.columns:
                src = renamed(src if type(src) is Rel else rel_of(src), [norm(c.name) for c in alias.columns])
            scope.sources[alias_name] = src
            for j in node.args.get("joins") or ():
                self.join(scope, j, rel)
            for lat in node.args.get("laterals") or ():
                self.add_source(scope, lat, rel)
            return
        if t is exp.Subquery and (
            not isinstance(node.this, QUERY_TYPES + (exp.Values,))
            or (not node.alias and type(node.this) is exp.Subquery)
        ):
            self.parenthesised(scope, node, rel)
            return
        if t is exp.Subquery or t in SETOP_TYPES or t is exp.Select or t is exp.Values:
            sub = self.query(node, scope.ctes, scope.parent)
            rel.deps |= sub.deps
            alias = node.args.get("alias")
            if alias is not None and alias.columns:
                sub = renamed(sub, [norm(c.name) for c in alias.columns])
            scope.sources[norm(node.alias) or f"_sub{len(scope.sources)}"] = sub
            for j in node.args.get("joins") or ():
                self.join(scope, j, rel)
            return
        if t is exp.Lateral and isinstance(node.this, QUERY_TYPES):
            sub = self.query(node.this, scope.ctes, scope)  # LATERAL (subquery) sees the sources before it
            rel.deps |= sub.deps
            scope.sources[norm(node.alias) or f"_sub{len(scope.sources)}"] = sub
            return
        self.generator(scope, node, rel)

    def parenthesised(self, scope: Scope, node: exp.Subquery, rel: Rel) -> None:
        """A parenthesised relation, `FROM (tab1)`, `FROM ((a JOIN b ON ...))` or `((SELECT ...) s)`: the relation
        itself; with an alias (`FROM (a JOIN b ON ...) AS x`) its columns are all those of the relations inside."""
        if not node.alias:
            self.add_source(scope, node.this, rel)
        else:
            inner = Scope(scope.parent, scope.ctes)
            self.add_source(inner, node.this, rel)
            scope.tables |= inner.tables
            scope.sources[self.norm(node.alias)] = joined(list(inner.sources.values()))
        for j in node.args.get("joins") or ():
            self.join(scope, j, rel)

    def generator(self, scope: Scope, node: exp.Expression, rel: Rel) -> None:
        """LATERAL VIEW f(...), UNNEST, table functions: every generated column comes from the function's inputs."""
        norm = self.norm
        func = node.this if type(node) is exp.Lateral else node
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
        gen = Rel()
        for c in cols:
            gen.add(c, srcs, TRANSFORMATION)
        alias_name = norm(alias.name) if alias is not None and alias.name else f"_gen{len(scope.sources)}"
        scope.sources[alias_name] = gen
