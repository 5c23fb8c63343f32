"""The explorer's JSON answers, computed from one immutable `LineageGraph` (no HTTP here).

This module owns what the page asks for:

- `tables()`: every dataset, with its layer and how many governance rules it breaks;
- `graph(table, direction, depth, columns)`: the lineage graph's JSON (`vertices`, `edges`, optionally `column_edges`),
  exactly what `sharp-dagster lineage graph` prints, plus the `root` it was asked about;
- `table(table)`: a table's page: its vertex, direct up/downstream tables, its columns (each with its direct
  sources) and its governance warnings;
- `column(table, column)`: a column's path to its sources (the column edges walked upstream, and the columns
  at the end of the path), and what dropping it breaks (downstream columns and tables, each with the SQL file and
  line reading it, and their path);
- `impact(column)`: what a change to `table.column` breaks, exactly as `sharp-dagster lineage impact --json`
  prints it (both call `lineage.impact.impact`);
- `governance()`: every violation of the layer and naming rules.

Bad requests raise `ApiError` with an HTTP status and a message naming what is wrong; the server turns it into a
JSON error. Tables are accepted as the graph accepts them (`ads/gmv_daily`, `ads.gmv_daily`, a URN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sharp_dagster.lineage.explorer.links import table_path
from sharp_dagster.lineage.governance import DEFAULT_RULES, GovernanceRules, check, layer_of
from sharp_dagster.lineage.graph import LineageGraph
from sharp_dagster.lineage.impact import SqlText, impact, impact_json

__all__ = ["ApiError", "ExplorerApi"]

DIRECTIONS = ("up", "down", "both")


class ApiError(Exception):
    """A request the API cannot answer: `status` is the HTTP status to send (400 bad input, 404 unknown)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _flag(params: Mapping[str, str], name: str) -> bool:
    value = params.get(name, "0").lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no", ""):
        return False
    raise ApiError(400, f"{name} must be 1 or 0, not {value!r}")


class ExplorerApi:
    """Answers for one graph. Thread-safe: the graph and the column index built here never change."""

    def __init__(
        self,
        graph: LineageGraph,
        rules: GovernanceRules = DEFAULT_RULES,
        sql: Mapping[str, SqlText] | None = None,
    ):
        self.graph = graph
        self.rules = rules
        self.sql = dict(sql or {})  # each SQL table's file, where the impact finds the lines reading a column
        self._violations: dict[str, list[dict[str, str]]] = {}
        for v in check(graph, rules):
            self._violations.setdefault(v.table, []).append({"rule": v.rule, "message": v.message})
        self._qualified = {d.urn: d.qualified for d in graph.datasets}
        self._columns = self._index_columns()

    # ---- helpers -----------------------------------------------------------------------------------------------
    def _vertex(self, qualified: str) -> dict[str, Any]:
        ds = self.graph.dataset(qualified)
        return {
            "id": ds.urn,
            "qualified": ds.qualified,
            "database_name": ds.database,
            "name": ds.name,
            "kind": ds.kind,
            "job": dict(ds.writer) if ds.writer else None,
            "layer": layer_of(ds.qualified, self.rules),
            "path": table_path(ds.qualified),
        }

    def _index_columns(self) -> dict[str, dict[str, dict[str, list[tuple[str, str]]]]]:
        """{table: {column: {"sources": [(table, column)], "targets": [(table, column)]}}} for every column
        edge of the graph, gathered once from each table's one-hop downstream traversal (the graph's public
        answer): a column's path is then walked by dictionary lookups, touching only the columns on it."""
        by_table: dict[str, dict[str, dict[str, list[tuple[str, str]]]]] = {}
        q = self._qualified

        def entry(table: str, column: str) -> dict[str, list[tuple[str, str]]]:
            cols = by_table.setdefault(table, {})
            found = cols.get(column)
            if found is None:
                found = cols[column] = {"sources": [], "targets": []}
            return found

        for ds in self.graph.datasets:
            for e in self.graph.traverse(ds.urn, direction="down", depth=1, columns=True)["column_edges"]:
                s = (q[e["source"]["id"]], e["source"]["column"])
                t = (q[e["target"]["id"]], e["target"]["column"])
                entry(*s)["targets"].append(t)
                entry(*t)["sources"].append(s)
        return by_table

    def _walk(self, qualified: str, column: str, upstream: bool) -> list[dict[str, Any]]:
        """The column edges reachable from `qualified.column`, against (upstream) or along the edge direction,
        each once. Cycles end because each column is expanded once."""
        start = (qualified, column)
        seen = {start}
        stack = [start]
        out: list[dict[str, Any]] = []
        side = "sources" if upstream else "targets"
        while stack:
            table, col = node = stack.pop()
            for nxt in self._columns.get(table, {}).get(col, {}).get(side, ()):
                a, b = (nxt, node) if upstream else (node, nxt)
                out.append(
                    {"source": {"table": a[0], "column": a[1]}, "target": {"table": b[0], "column": b[1]}}
                )
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return out

    def _lookup(self, table: str | None) -> str:
        """The table's name as the SQL names it, from any name the graph accepts."""
        if not table:
            raise ApiError(400, "the table parameter is missing (e.g. table=ads/gmv_by_category)")
        try:
            return self.graph.dataset(table).qualified
        except KeyError:
            raise ApiError(404, f"unknown table {table!r}: not in the lineage graph") from None

    # ---- answers -----------------------------------------------------------------------------------------------
    def tables(self) -> dict[str, Any]:
        out = []
        for ds in self.graph.datasets:
            out.append(
                {
                    "id": ds.urn,
                    "qualified": ds.qualified,
                    "kind": ds.kind,
                    "layer": layer_of(ds.qualified, self.rules),
                    "path": table_path(ds.qualified),
                    "violations": len(self._violations.get(ds.qualified, ())),
                }
            )
        out.sort(key=lambda t: t["qualified"])
        return {"tables": out}

    def graph_json(self, params: Mapping[str, str]) -> dict[str, Any]:
        """The lineage graph's JSON (vertices, edges) for `table` (params: table, direction=up|down|both, depth=N|all, columns=0|1)."""
        qualified = self._lookup(params.get("table"))
        direction = params.get("direction", "up")
        if direction not in DIRECTIONS:
            raise ApiError(400, f"direction must be one of {', '.join(DIRECTIONS)}, not {direction!r}")
        raw_depth = params.get("depth", "all")
        depth: int | None
        if raw_depth in ("", "all"):
            depth = None
        else:
            try:
                depth = int(raw_depth)
            except ValueError:
                raise ApiError(400, f"depth must be a whole number or 'all', not {raw_depth!r}") from None
            if depth < 0:
                raise ApiError(400, f"depth must be 0 or more, not {depth}")
        result = self.graph.traverse(
            qualified, direction=direction, depth=depth, columns=_flag(params, "columns")
        )
        result["root"] = self.graph.dataset(qualified).urn
        return result

    def table(self, params: Mapping[str, str]) -> dict[str, Any]:
        qualified = self._lookup(params.get("table"))
        columns = [
            {
                "name": name,
                "sources": [{"table": t, "column": c} for t, c in edges["sources"]],
                "read_downstream": bool(edges["targets"]),
            }
            for name, edges in sorted(self._columns.get(qualified, {}).items())
        ]
        return {
            "table": self._vertex(qualified),
            "upstream": sorted(self._qualified[u] for u in self.graph.upstream(qualified)),
            "downstream": sorted(self._qualified[d] for d in self.graph.downstream(qualified)),
            "columns": columns,
            "governance": list(self._violations.get(qualified, ())),
        }

    def column(self, params: Mapping[str, str]) -> dict[str, Any]:
        """A column's upstream path and its drop impact (params: table, column)."""
        qualified = self._lookup(params.get("table"))
        column = params.get("column")
        if not column:
            raise ApiError(400, "the column parameter is missing (e.g. column=gmv)")
        known = self._columns.get(qualified, {})
        if column not in known:
            raise ApiError(
                404,
                f"unknown column {column!r} of {qualified}: no lineage edge names it "
                f"(known: {', '.join(sorted(known)) or 'none'})",
            )
        path = self._walk(qualified, column, upstream=True)
        impact_path = self._walk(qualified, column, upstream=False)
        feeding = {(e["target"]["table"], e["target"]["column"]) for e in path}
        ends = sorted({(e["source"]["table"], e["source"]["column"]) for e in path} - feeding)
        return {
            "table": qualified,
            "column": column,
            "path": path,
            "sources": [{"table": t, "column": c} for t, c in self.graph.column_sources(qualified, column)],
            "origins": [{"table": t, "column": c} for t, c in ends],
            "impact": impact_json(impact(self.graph, self.sql, qualified, column)),
            "impact_path": impact_path,
        }

    def impact(self, params: Mapping[str, str]) -> dict[str, Any]:
        """What a change to a column breaks (params: column=TABLE.COLUMN, as `lineage impact` takes it)."""
        ref = params.get("column")
        if not ref:
            raise ApiError(400, "the column parameter is missing (e.g. column=ods.orders.order_status)")
        try:
            table, column = self.graph.column_ref(ref)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        except KeyError as exc:
            raise ApiError(404, str(exc.args[0])) from None
        qualified = self.graph.dataset(table).qualified
        if column not in self._columns.get(qualified, {}):
            raise ApiError(404, f"unknown column {column!r} of {qualified}: no lineage edge names it")
        return {
            "table": qualified,
            "column": column,
            "impact": impact_json(impact(self.graph, self.sql, table, column)),
        }

    def governance(self) -> dict[str, Any]:
        return {"violations": [{"table": t, **v} for t, vs in sorted(self._violations.items()) for v in vs]}
