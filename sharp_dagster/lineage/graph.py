"""In-memory lineage graph of datasets: table edges, column edges, traversal and column impact.

This module owns `LineageGraph`, an immutable graph built once (from parsed SQL and the non-SQL edges of the
project) and then queried many times. Vertices are datasets named by stable URNs
(`urn:sharp:dataset:spark:dwd.order_detail`, `urn:sharp:dataset:mysql:shop.orders`); adjacency is kept as lists
of ints so a traversal touches no strings until it builds its answer, and answers are cached because the graph
never changes after construction.

Edge direction everywhere: `source` is the upstream dataset (read), `target` the downstream one (written).
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Dataset", "LineageGraph", "dataset_urn", "split_qualified"]

URN_PREFIX = "urn:sharp:dataset:"
DEFAULT_PLATFORM = "spark"


def split_qualified(qualified: str) -> tuple[str, str, str]:
    """'dwd.order_detail' -> ('spark', 'dwd', 'order_detail'); 'mysql:shop.orders' -> ('mysql', 'shop', 'orders');
    a path dataset 'parquet./data/x.v2' -> ('spark', 'parquet', '/data/x.v2') (its path may hold dots and colons)."""
    fmt, dot, path = qualified.partition(".")
    if dot and (path.startswith("/") or "://" in path or path.startswith("file:")) and ":" not in fmt:
        return DEFAULT_PLATFORM, fmt, path
    platform, _, rest = qualified.rpartition(":")
    database, _, name = rest.rpartition(".")
    return platform or DEFAULT_PLATFORM, database, name


def dataset_urn(qualified: str) -> str:
    """Stable id of a dataset named as the catalog names it (`db.table`, or `platform:db.table`)."""
    if qualified.startswith(URN_PREFIX):
        return qualified
    platform, database, name = split_qualified(qualified)
    return f"{URN_PREFIX}{platform}:{database + '.' if database else ''}{name}"


@dataclass(frozen=True)
class Dataset:
    """A vertex. `kind` is 'asset' (built by this project) or 'external'; `writer` the job that writes it."""

    urn: str
    database: str
    name: str
    kind: str = "asset"
    writer: dict[str, Any] | None = None

    @property
    def platform(self) -> str:
        return (
            self.urn[len(URN_PREFIX) :].split(":", 1)[0]
            if self.urn.startswith(URN_PREFIX)
            else DEFAULT_PLATFORM
        )

    @property
    def qualified(self) -> str:
        """The name the SQL uses: `db.table` for Spark tables, `platform:db.table` for other systems."""
        base = f"{self.database}.{self.name}" if self.database else self.name
        return base if self.platform == DEFAULT_PLATFORM else f"{self.platform}:{base}"

    @classmethod
    def from_qualified(
        cls, qualified: str, kind: str = "asset", writer: dict[str, Any] | None = None
    ) -> Dataset:
        _, database, name = split_qualified(qualified)
        return cls(dataset_urn(qualified), database, name, kind, writer)


ColumnRef = tuple[str, str]  # (dataset urn, column)


def _dotted_parts(name: str) -> list[str]:
    """`a.`b.c`.d` -> ['a', 'b.c', 'd']: split at the dots outside backticks, the backticks dropped (a doubled
    backtick inside them is one backtick, as in Spark SQL)."""
    parts, current, quoted, i = [], [], False, 0
    while i < len(name):
        ch = name[i]
        if ch == "`":
            if quoted and name.startswith("``", i):
                current.append("`")
                i += 1
            else:
                quoted = not quoted
        elif ch == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


class LineageGraph:
    """Datasets and their lineage; immutable after construction.

    Args:
        datasets: the vertices. Edges naming an unknown URN add an 'external' vertex for it.
        edges: table-level edges (source_urn, target_urn): source is read to write target.
        column_edges: ((src_urn, column), (dst_urn, column)): the value of dst column is computed from src column.
        dependency_edges: ((src_urn, column), dst_urn): dst's rows are filtered / joined / grouped / ordered by
            the column (dataset-level dependency, OpenLineage's INDIRECT).
        cache_size: how many traversal answers to keep at most.
        cache_edges: how many edges the cached answers may hold in total (bounds the cache's memory).
    """

    def __init__(
        self,
        datasets: Iterable[Dataset],
        edges: Iterable[tuple[str, str]] = (),
        column_edges: Iterable[tuple[ColumnRef, ColumnRef]] = (),
        dependency_edges: Iterable[tuple[ColumnRef, str]] = (),
        cache_size: int = 4096,
        cache_edges: int = 250_000,
    ):
        self._datasets: list[Dataset] = []
        self._index: dict[str, int] = {}
        self._aliases: dict[str, int] = {}
        # Building allocates ~10 objects per edge that all live as long as the graph: pausing the cyclic garbage
        # collector meanwhile saves it from rescanning them again and again (2-3x faster on 50k edges).
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._build(datasets, edges, column_edges, dependency_edges)
        finally:
            if was_enabled:
                gc.enable()
        self._cache: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._cache_size = cache_size
        self._cache_edges = cache_edges
        self._cached_edges = 0
        self._lock = threading.Lock()  # the cache is shared by threads (e.g. a web server's)

    # ---- construction ------------------------------------------------------------------------------------------
    def _build(
        self,
        datasets: Iterable[Dataset],
        edges: Iterable[tuple[str, str]],
        column_edges: Iterable[tuple[ColumnRef, ColumnRef]],
        dependency_edges: Iterable[tuple[ColumnRef, str]],
    ) -> None:
        for ds in datasets:
            self._add(ds)
        up: defaultdict[int, set[int]] = defaultdict(set)
        down: defaultdict[int, set[int]] = defaultdict(set)
        pair_columns: dict[tuple[int, int], dict[tuple[str, str], None]] = {}
        self._col_down: dict[tuple[int, str], list[tuple[int, str]]] = {}
        self._col_up: dict[tuple[int, str], list[tuple[int, str]]] = {}
        self._dep_users: dict[tuple[int, str], list[int]] = {}
        vertex = self._vertex
        for s, t in edges:
            a, b = vertex(s), vertex(t)
            if a != b:  # a table that rewrites itself (MERGE, UPDATE) is no edge
                up[b].add(a)
                down[a].add(b)
        for (s, sc), (t, tc) in column_edges:
            a, b = vertex(s), vertex(t)
            if a == b and sc == tc:
                continue
            if a != b:
                up[b].add(a)
                down[a].add(b)
            pair_columns.setdefault((a, b), {})[(sc, tc)] = None
            self._col_down.setdefault((a, sc), []).append((b, tc))
            self._col_up.setdefault((b, tc), []).append((a, sc))
        for (s, sc), t in dependency_edges:
            a, b = vertex(s), vertex(t)
            if a != b:
                up[b].add(a)
                down[a].add(b)
                self._dep_users.setdefault((a, sc), []).append(b)
        n = len(self._datasets)
        # Sorted int lists: deterministic answers, and iteration over a list is the cheapest loop Python has.
        self._up: list[list[int]] = [sorted(up[v]) if v in up else [] for v in range(n)]
        self._down: list[list[int]] = [sorted(down[v]) if v in down else [] for v in range(n)]
        self._info: list[dict[str, Any]] = [self._vertex_info(d) for d in self._datasets]
        # Every answer's edge and column-edge dicts are built once here and shared by all answers: a traversal
        # then only collects references, so it allocates (and leaves the garbage collector) almost nothing.
        info = self._info
        col_dicts = {
            (a, b): [
                {"source": {"id": info[a]["id"], "column": sc}, "target": {"id": info[b]["id"], "column": tc}}
                for sc, tc in cols
            ]
            for (a, b), cols in pair_columns.items()
        }
        edge_dicts = {
            (a, b): ({"source": info[a], "target": info[b]}, col_dicts.get((a, b), ()))
            for a, outs in enumerate(self._down)
            for b in outs
        }
        # _up_steps[v] = [(upstream u, edge u->v, its column edges)]; _down_steps[a] likewise downward.
        self._up_steps: list[list[tuple[int, dict[str, Any], Any]]] = [
            [(a, *edge_dicts[(a, v)]) for a in ups] for v, ups in enumerate(self._up)
        ]
        self._down_steps: list[list[tuple[int, dict[str, Any], Any]]] = [
            [(b, *edge_dicts[(a, b)]) for b in outs] for a, outs in enumerate(self._down)
        ]

    def _add(self, ds: Dataset) -> int:
        i = self._index.get(ds.urn)
        if i is not None:
            return i
        i = len(self._datasets)
        self._datasets.append(ds)
        self._index[ds.urn] = i
        for alias in (ds.qualified, ds.qualified.replace(".", "/", 1)):
            self._aliases.setdefault(alias.lower(), i)
        return i

    def _vertex(self, urn_or_name: str) -> int:
        i = self._index.get(urn_or_name)
        if i is not None:
            return i
        urn = dataset_urn(urn_or_name)
        i = self._index.get(urn)
        if i is None:
            ds = Dataset.from_qualified(urn[len(URN_PREFIX) :], kind="external")
            if ds.urn != urn:
                raise ValueError(f"cannot derive a dataset from URN {urn!r}")
            i = self._add(ds)
        return i

    @staticmethod
    def _vertex_info(ds: Dataset) -> dict[str, Any]:
        return {
            "database_name": ds.database,
            "name": ds.name,
            "id": ds.urn,
            "kind": ds.kind,
            "job": dict(ds.writer) if ds.writer else None,
        }

    # ---- lookup ------------------------------------------------------------------------------------------------
    @property
    def datasets(self) -> list[Dataset]:
        return list(self._datasets)

    def __len__(self) -> int:
        return len(self._datasets)

    def __contains__(self, table: str) -> bool:
        return self._find(table) is not None

    def _find(self, table: str) -> int | None:
        i = self._index.get(table)
        if i is None:
            i = self._aliases.get(table.lower())
        if i is None and not table.startswith(URN_PREFIX):
            i = self._index.get(dataset_urn(table))
        return i

    def index_of(self, table: str) -> int:
        """Vertex number of a table given as URN, `db.table`, `db/table` or `platform:db.table`."""
        i = self._find(table)
        if i is None:
            raise KeyError(f"unknown table {table!r}: not in the lineage graph")
        return i

    def dataset(self, table: str) -> Dataset:
        return self._datasets[self.index_of(table)]

    def column_ref(self, ref: str) -> tuple[str, str]:
        """(table, column) of a column named `<table>.<column>`, either part holding dots: `dwd.t.amount`,
        `dwd/t.amount`, `mysql:shop.orders.id`, a column named with a dot as `dwd.t.o.id` or as the SQL quotes it,
        ``dwd.t.`o.id` ``. The table is the longest leading part that names a table of the graph (as `index_of`
        takes it); a `KeyError` names the table part when none does, a `ValueError` a name with no column.

        >>> g = LineageGraph([Dataset.from_qualified("dwd.t")], [], [])
        >>> g.column_ref("dwd.t.o.id"), g.column_ref("dwd/t.`o.id`")
        (('dwd.t', 'o.id'), ('dwd/t', 'o.id'))
        """
        parts = _dotted_parts(ref)
        if len(parts) < 2 or not all(parts):
            raise ValueError(f"expected TABLE.COLUMN such as ods.orders.total_amount, got {ref!r}")
        for n in range(len(parts) - 1, 0, -1):
            table = ".".join(parts[:n])
            if self._find(table) is not None:
                return table, ".".join(parts[n:])
        # A table is named `db.table` (or `table`): the part that names none is the first two parts.
        unknown = ".".join(parts[: min(2, len(parts) - 1)])
        raise KeyError(f"unknown table {unknown!r} in {ref!r}: not in the lineage graph")

    def edges(self) -> list[tuple[str, str]]:
        ds = self._datasets
        return [(ds[a].urn, ds[b].urn) for a, outs in enumerate(self._down) for b in outs]

    def upstream(self, table: str) -> list[str]:
        """Direct upstream datasets (URNs)."""
        return [self._datasets[a].urn for a in self._up[self.index_of(table)]]

    def downstream(self, table: str) -> list[str]:
        """Direct downstream datasets (URNs)."""
        return [self._datasets[b].urn for b in self._down[self.index_of(table)]]

    # ---- traversal ---------------------------------------------------------------------------------------------
    @staticmethod
    def _reach(
        start: int, steps: list[list[tuple[int, dict[str, Any], Any]]], depth: int | None, columns: bool
    ) -> tuple[list[int], list[dict[str, Any]], list[dict[str, Any]]]:
        """Breadth-first from `start`: vertices in visit order, the edges walked, and (if asked) their column
        edges. Each vertex is expanded once, so cycles end."""
        seen = {start}
        order = [start]
        edges: list[dict[str, Any]] = []
        col_edges: list[dict[str, Any]] = []
        frontier = [start]
        level = 0
        while frontier and (depth is None or level < depth):
            nxt = []
            for v in frontier:
                for u, edge, cols in steps[v]:
                    edges.append(edge)
                    if columns and cols:
                        col_edges += cols
                    if u not in seen:
                        seen.add(u)
                        nxt.append(u)
            order += nxt
            frontier = nxt
            level += 1
        return order, edges, col_edges

    def traverse(
        self, table: str, direction: str = "up", depth: int | None = None, columns: bool = False
    ) -> dict[str, Any]:
        """Upstream ('up'), downstream ('down') or both lineage of `table`, as the graph JSON (vertices, edges).

        Returns `{"vertices": [urn, ...], "edges": [{"source": vertex, "target": vertex}, ...]}` where an edge's
        `source` is the upstream dataset (read) and `target` the downstream one (written), and a vertex is
        `{"database_name", "name", "id", "kind", "job": {"name", "id"} | None}`. `depth` limits the number of
        hops (None: all; 0: the table alone). Cycles are followed once. With `columns=True` the answer also has
        `"column_edges": [{"source": {"id", "column"}, "target": {"id", "column"}}]` along the edges returned.
        Answers are cached; their lists are fresh copies but the dicts inside are shared: do not mutate them.
        """
        if direction not in ("up", "down", "both"):
            raise ValueError(f"direction must be 'up', 'down' or 'both', not {direction!r}")
        if depth is not None and depth < 0:
            raise ValueError(f"depth must be >= 0, not {depth}")
        start = self.index_of(table)
        key = (start, direction, depth, columns)
        cache = self._cache
        with self._lock:
            hit = cache.get(key)
            if hit is not None:
                cache.move_to_end(key)
        if hit is None:
            hit = self._traverse(start, direction, depth, columns)
            size = len(hit["edges"]) + len(hit.get("column_edges", ()))
            if size <= self._cache_edges:
                with self._lock:
                    if key not in cache:
                        cache[key] = hit
                        self._cached_edges += size
                    while len(cache) > self._cache_size or self._cached_edges > self._cache_edges:
                        _, old = cache.popitem(last=False)
                        self._cached_edges -= len(old["edges"]) + len(old.get("column_edges", ()))
        out = {"vertices": list(hit["vertices"]), "edges": list(hit["edges"])}
        if columns:
            out["column_edges"] = list(hit["column_edges"])
        return out

    def _traverse(self, start: int, direction: str, depth: int | None, columns: bool) -> dict[str, Any]:
        if direction == "up":
            order, edges, col_edges = self._reach(start, self._up_steps, depth, columns)
        elif direction == "down":
            order, edges, col_edges = self._reach(start, self._down_steps, depth, columns)
        else:
            order, edges, col_edges = self._reach(start, self._up_steps, depth, columns)
            down_order, down_edges, down_cols = self._reach(start, self._down_steps, depth, columns)
            # A cycle through `start` reaches some edges both ways: list each once.
            known = {id(e) for e in edges}
            edges += [e for e in down_edges if id(e) not in known]
            known_cols = {id(e) for e in col_edges}
            col_edges += [e for e in down_cols if id(e) not in known_cols]
            seen = set(order)
            order += [v for v in down_order if v not in seen]
        info = self._info
        result: dict[str, Any] = {"vertices": [info[v]["id"] for v in order], "edges": edges}
        if columns:
            result["column_edges"] = col_edges
        return result

    # ---- impact ------------------------------------------------------------------------------------------------
    def column_impact(self, table: str, column: str) -> list[tuple[str, str]]:
        """What breaks if `table.column` is dropped: every downstream column whose value is computed from it,
        transitively, as (table, column); and every table whose rows it filters, joins, groups or orders
        (dataset-level dependency), as (table, '*'). Tables are named as the SQL names them."""
        start = (self.index_of(table), column)
        seen = {start}
        stack = [start]
        hits: list[tuple[int, str]] = []
        tables: dict[int, None] = {}
        col_down = self._col_down
        dep_users = self._dep_users
        while stack:
            node = stack.pop()
            for b in dep_users.get(node, ()):
                tables[b] = None
            for nxt in col_down.get(node, ()):
                if nxt not in seen:
                    seen.add(nxt)
                    hits.append(nxt)
                    stack.append(nxt)
        ds = self._datasets
        out = sorted({(ds[b].qualified, c) for b, c in hits})
        out += sorted({(ds[b].qualified, "*") for b in tables} - set(out))
        return out

    def column_readers(self, table: str, column: str) -> tuple[list[tuple[str, str]], list[str]]:
        """One hop down from `table.column`: the columns computed from it, as (table, column), and the tables whose
        rows it filters, joins, groups or orders; tables named as the SQL names them, in the graph's order.
        `column_impact` is the transitive closure of this step (`lineage/impact.py` walks it keeping the path)."""
        node = (self.index_of(table), column)
        ds = self._datasets
        columns = [(ds[b].qualified, c) for b, c in self._col_down.get(node, ())]
        return columns, [ds[b].qualified for b in self._dep_users.get(node, ())]

    def column_sources(self, table: str, column: str) -> list[tuple[str, str]]:
        """Upstream counterpart of column_impact: the columns `table.column` is computed from, transitively."""
        start = (self.index_of(table), column)
        seen = {start}
        stack = [start]
        while stack:
            for nxt in self._col_up.get(stack.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        seen.discard(start)
        ds = self._datasets
        return sorted((ds[a].qualified, c) for a, c in seen)
