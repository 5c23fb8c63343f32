"""The project's lineage graph, built from the warehouse catalog.

This module owns the glue between `sharp_dagster.warehouse.catalog` and the lineage engine: every SQL table's
rendered SELECT is parsed as `INSERT OVERWRITE <its table>`, in dependency order so that `SELECT *` over an upstream
SQL table expands to that table's output columns; the catalog's non-SQL edges (the CDC path from MySQL through the
raw binlog tables) are added; and the result is one `LineageGraph` with table, column and dataset-dependency edges.

The catalog is only used through the attributes below, so any object with them works (the tests use a fake):
`catalog.tables[i].{qualified, asset_key_str, rendered, path}`, `catalog.external_schemas`, `catalog.extra_edges`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sharp_dagster.lineage.graph import Dataset, LineageGraph, split_qualified
from sharp_dagster.lineage.impact import SqlText
from sharp_dagster.lineage.openlineage import JobLineage
from sharp_dagster.lineage.parser import LineageParseError, ScriptLineage, parse_script
from sharp_dagster.naming import key_str
from sharp_dagster.settings import warehouse_sql_dir
from sharp_dagster.warehouse.catalog import load_catalog

if TYPE_CHECKING:  # the OpenLineage client is imported only by what sends events
    from sharp_dagster.lineage.openlineage import JobLineage

__all__ = ["build_project_graph", "job_lineage", "project_lineage", "sql_texts"]

log = logging.getLogger(__name__)


def _parse(table: Any, schema: Mapping[str, Mapping[str, str]]) -> ScriptLineage:
    try:
        return parse_script(table.rendered, dialect="spark", schema=schema, default_target=table.qualified)
    except LineageParseError as exc:
        raise ValueError(
            f"{table.path}:{exc.line}:{exc.col}: SQL of {table.qualified}: {exc.message}"
        ) from exc


def _dependency_order(names: list[str], upstream: Mapping[str, set[str]]) -> list[str]:
    """Kahn's order, ties by name; tables caught in a cycle come last, by name (their SELECT * stays unexpanded)."""
    remaining = {n: set(upstream[n]) for n in names}
    order: list[str] = []
    ready = sorted(n for n, ups in remaining.items() if not ups)
    while ready:
        n = ready.pop(0)
        order.append(n)
        del remaining[n]
        for m, ups in remaining.items():
            if n in ups:
                ups.discard(n)
                if not ups:
                    ready.append(m)
        ready.sort()
    return order + sorted(remaining)


def project_lineage(catalog: Any) -> dict[str, ScriptLineage]:
    """Lineage of every SQL table of the catalog, by qualified name, in dependency order."""
    tables = {t.qualified: t for t in catalog.tables}
    external: dict[str, Mapping[str, str]] = dict(catalog.external_schemas or {})
    # First pass, table level only: which SQL tables each one reads, to parse upstream tables first.
    first = {q: _parse(t, external) for q, t in tables.items()}
    upstream = {q: {s for s in first[q].sources if s in tables and s != q} for q in tables}
    schema: dict[str, Mapping[str, str]] = dict(external)
    results: dict[str, ScriptLineage] = {}
    for q in _dependency_order(sorted(tables), upstream):
        # Reading no SQL table means the schema the first pass used was already complete.
        result = first[q] if not upstream[q] else _parse(tables[q], schema)
        results[q] = result
        known = sql_table_schema(tables[q], result)
        if known:
            schema[q] = known
    return results


def sql_table_schema(table: Any, result: ScriptLineage) -> dict[str, str] | None:
    """The columns a reader of a SQL table resolves against (None when its output is `*`, i.e. unknown).

    A table's SQL selects its data columns; its partition columns (`dt`, and `hour` when hourly) are written
    beside them and are what downstream SQL filters on, so they belong to the schema too.
    """
    q = table.qualified
    cols = [c.column for c in result.columns if c.table == q]
    if not cols or "*" in cols:
        return None
    partition_cols = ("dt", "hour") if getattr(table, "grain", "daily") == "hourly" else ("dt",)
    return {c: "" for c in (*cols, *partition_cols)}


def project_schemas(catalog: Any, results: Mapping[str, ScriptLineage]) -> dict[str, Mapping[str, str]]:
    """Every table's known columns: the catalog's external schemas and each SQL table's (`sql_table_schema`)."""
    schema: dict[str, Mapping[str, str]] = dict(catalog.external_schemas or {})
    for t in catalog.tables:
        known = sql_table_schema(t, results[t.qualified]) if t.qualified in results else None
        if known:
            schema[t.qualified] = known
    return schema


def sql_texts(catalog: Any) -> dict[str, SqlText]:
    """Each SQL table's file as `lineage.impact` locates reads in it: named `<layer>/<table>.sql` (the folder the
    project keeps it in) with its rendered text (variables substituted in place, so its lines are the file's)."""
    return {t.qualified: SqlText(f"{t.path.parent.name}/{t.path.name}", t.rendered) for t in catalog.tables}


def _asset_key_str(qualified: str) -> str:
    platform, database, name = split_qualified(qualified)
    return f"{database}/{name}" if database else name


def build_project_graph(catalog: Any, results: Mapping[str, ScriptLineage] | None = None) -> LineageGraph:
    """One LineageGraph for the whole project: SQL assets, the datasets they read, and the catalog's extra edges.

    Vertices: each SQL table (kind 'asset', writer = its asset key); each target of an extra edge (a non-SQL asset,
    e.g. a raw binlog table); every other table read (kind 'external'). Extra edges between tables whose schemas
    are both known also get column edges between same-named columns (those paths copy rows as they are)."""
    results = project_lineage(catalog) if results is None else results
    tables = {t.qualified: t for t in catalog.tables}
    datasets: dict[str, Dataset] = {}
    for q, t in tables.items():
        key = t.asset_key_str
        datasets[q] = Dataset.from_qualified(q, kind="asset", writer={"name": key, "id": key})
    extra = [(s, d) for s, d in (catalog.extra_edges or [])]
    for _, dst in extra:
        if dst not in datasets:
            key = _asset_key_str(dst)
            datasets[dst] = Dataset.from_qualified(dst, kind="asset", writer={"name": key, "id": key})

    def ensure(name: str) -> None:
        if name not in datasets:
            datasets[name] = Dataset.from_qualified(name, kind="external")

    edges: list[tuple[str, str]] = []
    column_edges: list[tuple[tuple[str, str], tuple[str, str]]] = []
    dependency_edges: list[tuple[tuple[str, str], str]] = []
    for src, dst in extra:
        ensure(src)
        edges.append((datasets[src].urn, datasets[dst].urn))
    schemas = catalog.external_schemas or {}
    for src, dst in extra:
        src_cols, dst_cols = schemas.get(src), schemas.get(dst)
        if src_cols and dst_cols:
            for c in src_cols:
                if c in dst_cols:
                    column_edges.append(((datasets[src].urn, c), (datasets[dst].urn, c)))
    for result in results.values():
        for target in result.targets:
            ensure(target)
            turn = datasets[target].urn
            for s in result.target_sources.get(target, result.sources):
                ensure(s)
                edges.append((datasets[s].urn, turn))
            # The parser's (table, column) pairs, not `table.column` strings split again: a column alias may hold a
            # dot (`` AS `a.b` ``), which Spark allows.
            for table, column, _ in result.target_dependency_refs.get(target, ()):
                ensure(table)
                dependency_edges.append(((datasets[table].urn, column), turn))
        for col in result.columns:
            for table, scol in col.refs:
                ensure(table)
                column_edges.append(((datasets[table].urn, scol), (datasets[col.table].urn, col.column)))
    return LineageGraph(datasets.values(), edges, column_edges, dependency_edges)


@lru_cache(maxsize=4)
def _job_lineages(sql_dir: str) -> dict[str, JobLineage]:
    """Every job's lineage as the project knows it: SQL tables parsed, other assets from the catalog's edges."""

    catalog = load_catalog(sql_dir)
    results = project_lineage(catalog)
    schemas = project_schemas(catalog, results)
    jobs = {
        t.asset_key_str: JobLineage.from_script(results[t.qualified], t.qualified, schemas, t.rendered)
        for t in catalog.tables
    }
    by_target: dict[str, list[str]] = {}
    for src, dst in catalog.extra_edges or []:
        by_target.setdefault(dst, []).append(src)
    for dst, srcs in by_target.items():
        out_cols = schemas.get(dst) or {}
        columns = {c: [f"{s}.{c}" for s in srcs if c in (schemas.get(s) or {})] for c in out_cols}
        kept = {c: s for c, s in columns.items() if s}
        jobs[key_str(dst)] = JobLineage(
            target=dst,
            inputs=sorted(set(srcs)),
            columns=kept,
            input_schemas={s: list(schemas[s]) for s in srcs if s in schemas},
            # The CDC path copies each column's values as they are.
            transformations={c: {ref: ["IDENTITY"] for ref in refs} for c, refs in kept.items()},
        )
    return jobs


def job_lineage(job_name: str) -> JobLineage | None:
    """The project's lineage of one job (`layer/table`), for its OpenLineage events; None when unknown."""
    try:
        return _job_lineages(str(warehouse_sql_dir())).get(job_name)
    except Exception as exc:  # lineage is best effort: a bad catalog fails loading elsewhere, with its file
        log.warning("no lineage for %s: %s: %s", job_name, type(exc).__name__, exc)
        return None
