"""LineageGraph: traversal up / down / both, depth, cycles, column edges, impact."""

from __future__ import annotations

import json

import pytest

from sharp_dagster.lineage.graph import Dataset, LineageGraph, dataset_urn


def u(name: str) -> str:
    return dataset_urn(name)


@pytest.fixture()
def graph() -> LineageGraph:
    r"""
    mysql:shop.orders -> ods.a -> dwd.b -> dwd.d -> ads.c
                          ods.x -/       \_______/^
    dwd.e <-> dwd.f (a cycle), dwd.f -> ads.g
    """
    names = ["ods.a", "ods.x", "dwd.b", "dwd.d", "ads.c", "dwd.e", "dwd.f", "ads.g"]
    datasets = [Dataset.from_qualified(n, writer={"name": n.replace(".", "/"), "id": n}) for n in names]
    datasets.append(Dataset.from_qualified("mysql:shop.orders", kind="external"))
    edges = [
        ("mysql:shop.orders", "ods.a"),
        ("ods.a", "dwd.b"),
        ("ods.x", "dwd.b"),
        ("dwd.b", "dwd.d"),
        ("dwd.b", "ads.c"),
        ("dwd.d", "ads.c"),
        ("dwd.e", "dwd.f"),
        ("dwd.f", "dwd.e"),
        ("dwd.f", "ads.g"),
    ]
    column_edges = [
        ((u("mysql:shop.orders"), "id"), (u("ods.a"), "id")),
        ((u("ods.a"), "id"), (u("dwd.b"), "id")),
        ((u("ods.x"), "amt"), (u("dwd.b"), "amt")),
        ((u("dwd.b"), "id"), (u("ads.c"), "id")),
        ((u("dwd.b"), "amt"), (u("dwd.d"), "amt2")),
        ((u("dwd.d"), "amt2"), (u("ads.c"), "total")),
        ((u("dwd.e"), "k"), (u("dwd.f"), "k")),
        ((u("dwd.f"), "k"), (u("dwd.e"), "k")),
    ]
    dependency_edges = [((u("dwd.b"), "id"), u("dwd.d")), ((u("ods.x"), "flag"), u("dwd.b"))]
    return LineageGraph(
        datasets,
        [(u(a), u(b)) for a, b in edges],
        column_edges,
        dependency_edges,
    )


def vertices(result: dict) -> set[str]:
    return {v.split(":")[-1] for v in result["vertices"]}


def edge_names(result: dict) -> set[tuple[str, str]]:
    return {(e["source"]["id"].split(":")[-1], e["target"]["id"].split(":")[-1]) for e in result["edges"]}


def test_urns_are_stable_and_name_the_platform():
    assert dataset_urn("dwd.order_detail") == "urn:sharp:dataset:spark:dwd.order_detail"
    assert dataset_urn("mysql:shop.orders") == "urn:sharp:dataset:mysql:shop.orders"
    assert dataset_urn(dataset_urn("ods.a")) == dataset_urn("ods.a")


def test_upstream_of_a_leaf(graph):
    r = graph.traverse("ads.c", "up")
    assert r["vertices"][0] == u("ads.c")
    assert vertices(r) == {"ads.c", "dwd.b", "dwd.d", "ods.a", "ods.x", "shop.orders"}
    assert edge_names(r) == {
        ("dwd.b", "ads.c"),
        ("dwd.d", "ads.c"),
        ("dwd.b", "dwd.d"),
        ("ods.a", "dwd.b"),
        ("ods.x", "dwd.b"),
        ("shop.orders", "ods.a"),
    }
    # Every edge is listed once, source = upstream (read), target = downstream (written).
    assert len(r["edges"]) == len(edge_names(r))


def test_edge_vertices_follow_the_seed_shape(graph):
    r = graph.traverse("ads/c", "up", depth=1)
    edge = next(e for e in r["edges"] if e["source"]["name"] == "b")
    assert edge["source"] == {
        "database_name": "dwd",
        "name": "b",
        "id": u("dwd.b"),
        "kind": "asset",
        "job": {"name": "dwd/b", "id": "dwd.b"},
    }
    assert edge["target"]["id"] == u("ads.c")
    ext = graph.traverse("ods.a", "up")["edges"][0]["source"]
    assert ext["kind"] == "external" and ext["job"] is None and ext["database_name"] == "shop"
    json.dumps(r)  # plain JSON


def test_downstream_and_both(graph):
    down = graph.traverse("ods.a", "down")
    assert vertices(down) == {"ods.a", "dwd.b", "dwd.d", "ads.c"}
    assert ("ods.a", "dwd.b") in edge_names(down) and ("dwd.d", "ads.c") in edge_names(down)
    both = graph.traverse("dwd.d", "both")
    assert vertices(both) == {"dwd.d", "dwd.b", "ods.a", "ods.x", "shop.orders", "ads.c"}
    assert ("dwd.d", "ads.c") in edge_names(both) and ("ods.a", "dwd.b") in edge_names(both)
    # 'both' is ancestors plus descendants, not the whole connected component: ads.c's other parent path
    # (dwd.b -> ads.c) is not walked from dwd.d downward.
    assert ("dwd.b", "ads.c") not in edge_names(both)


def test_depth_limits_hops(graph):
    assert vertices(graph.traverse("ads.c", "up", depth=0)) == {"ads.c"}
    assert graph.traverse("ads.c", "up", depth=0)["edges"] == []
    assert vertices(graph.traverse("ads.c", "up", depth=1)) == {"ads.c", "dwd.b", "dwd.d"}
    assert vertices(graph.traverse("ads.c", "up", depth=2)) == {"ads.c", "dwd.b", "dwd.d", "ods.a", "ods.x"}
    with pytest.raises(ValueError, match="depth"):
        graph.traverse("ads.c", "up", depth=-1)


def test_cycles_never_loop(graph):
    r = graph.traverse("ads.g", "up")
    assert vertices(r) == {"ads.g", "dwd.f", "dwd.e"}
    assert edge_names(r) == {("dwd.f", "ads.g"), ("dwd.e", "dwd.f"), ("dwd.f", "dwd.e")}
    assert vertices(graph.traverse("dwd.e", "both")) == {"dwd.e", "dwd.f", "ads.g"}


def test_columns_adds_column_edges_along_the_traversed_edges(graph):
    r = graph.traverse("ads.c", "up", depth=1, columns=True)
    pairs = {
        (
            e["source"]["id"].split(":")[-1],
            e["source"]["column"],
            e["target"]["id"].split(":")[-1],
            e["target"]["column"],
        )
        for e in r["column_edges"]
    }
    assert pairs == {("dwd.b", "id", "ads.c", "id"), ("dwd.d", "amt2", "ads.c", "total")}
    assert "column_edges" not in graph.traverse("ads.c", "up", depth=1)


def test_cached_answers_are_equal_and_not_shared_lists(graph):
    first = graph.traverse("ads.c", "up")
    first["vertices"].append("junk")
    first["edges"].clear()
    again = graph.traverse("ads.c", "up")
    assert "junk" not in again["vertices"] and len(again["edges"]) == 6


def test_unknown_table_and_direction(graph):
    with pytest.raises(KeyError, match="unknown table 'ads.nope'"):
        graph.traverse("ads.nope")
    with pytest.raises(ValueError, match="direction"):
        graph.traverse("ads.c", "sideways")
    assert "dwd/b" in graph and "DWD.B" in graph and u("dwd.b") in graph and "dwd.zz" not in graph


def test_column_impact_is_transitive_and_includes_dependency_users(graph):
    assert graph.column_impact("mysql:shop.orders", "id") == [
        ("ads.c", "id"),
        ("dwd.b", "id"),
        ("ods.a", "id"),
        ("dwd.d", "*"),
    ]
    assert graph.column_impact("ods.x", "amt") == [("ads.c", "total"), ("dwd.b", "amt"), ("dwd.d", "amt2")]
    assert graph.column_impact("ods.x", "flag") == [("dwd.b", "*")]
    assert graph.column_impact("ads.c", "id") == []
    # A column-level cycle terminates; the column itself is not listed as its own impact.
    assert graph.column_impact("dwd.e", "k") == [("dwd.f", "k")]


def test_column_sources_is_the_upstream_counterpart(graph):
    assert graph.column_sources("ads.c", "total") == [("dwd.b", "amt"), ("dwd.d", "amt2"), ("ods.x", "amt")]


def test_edges_to_unknown_datasets_add_external_vertices():
    g = LineageGraph([Dataset.from_qualified("dwd.t")], [(u("ods.s"), u("dwd.t")), (u("dwd.t"), u("dwd.t"))])
    assert g.dataset("ods.s").kind == "external"
    assert g.upstream("dwd.t") == [u("ods.s")]  # a self edge is dropped
    assert g.downstream("dwd.t") == []


def test_synthetic_graph_traversal_is_fast():
    """A 2,000-table layered graph: a full upstream walk from every leaf stays well under a millisecond
    each once cached, and the uncached walk stays under 20 ms (loose bound for a loaded shared machine)."""
    import random
    import time

    rng = random.Random(3)
    n = 2000
    datasets = [Dataset.from_qualified(f"db{i // 100}.t{i}") for i in range(n)]
    edges = [(datasets[rng.randrange(0, i)].urn, datasets[i].urn) for i in range(1, n) for _ in range(5)]
    g = LineageGraph(datasets, edges)
    leaves = [d.urn for d in datasets if not g.downstream(d.urn)][:20]
    start = time.perf_counter()
    sizes = [len(g.traverse(leaf, "up")["vertices"]) for leaf in leaves]
    uncached = (time.perf_counter() - start) / len(leaves)
    start = time.perf_counter()
    for leaf in leaves:
        g.traverse(leaf, "up")
    cached = (time.perf_counter() - start) / len(leaves)
    assert min(sizes) > 1
    assert uncached < 0.2 and cached < 0.01


def test_cache_bounds_keep_answers_correct():
    datasets = [Dataset.from_qualified(f"dwd.t{i}") for i in range(6)]
    edges = [(datasets[i].urn, datasets[i + 1].urn) for i in range(5)]
    tiny = LineageGraph(datasets, edges, cache_size=2, cache_edges=3)
    plain = LineageGraph(datasets, edges, cache_size=0, cache_edges=0)
    for _ in range(2):
        for d in datasets:
            for direction in ("up", "down", "both"):
                assert tiny.traverse(d.urn, direction) == plain.traverse(d.urn, direction)
    assert len(tiny._cache) <= 2 and tiny._cached_edges <= 3
