"""Fixtures of the lineage explorer's tests: the project's lineage graph, a small hand-made graph that breaks the
governance rules and has a cycle, and explorer servers on free loopback ports (started and stopped here)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from sharp_dagster.lineage.explorer.server import ExplorerServer, make_server
from sharp_dagster.lineage.graph import Dataset, LineageGraph, dataset_urn


@pytest.fixture(scope="session")
def project_graph() -> LineageGraph:
    """The demo project's graph, built from the catalog exactly as `sharp-dagster lineage graph` builds it."""
    from sharp_dagster.warehouse.catalog import load_catalog
    from sharp_dagster.warehouse.catalog_lineage import build_project_graph

    return build_project_graph(load_catalog())


def made_graph() -> LineageGraph:
    """ods.a -> dwd.b -> ads.c, plus ads.BadName reading ods.a directly (a layer and a naming violation) and a
    cycle dwd.b <-> dwd.loop."""
    u = dataset_urn
    names = ["ods.a", "dwd.b", "ads.c", "ads.BadName", "dwd.loop"]
    return LineageGraph(
        [
            Dataset.from_qualified(n, writer={"name": n.replace(".", "/"), "id": n.replace(".", "/")})
            for n in names
        ],
        column_edges=[
            ((u("ods.a"), "x"), (u("dwd.b"), "x2")),
            ((u("dwd.b"), "x2"), (u("ads.c"), "total")),
            ((u("ods.a"), "x"), (u("ads.BadName"), "x")),
            ((u("dwd.b"), "x2"), (u("dwd.loop"), "y")),
            ((u("dwd.loop"), "y"), (u("dwd.b"), "y")),
        ],
        dependency_edges=[((u("dwd.b"), "x2"), u("ads.BadName"))],
    )


def _serve(graph: LineageGraph, sql=None) -> Iterator[ExplorerServer]:
    server = make_server(graph, "127.0.0.1", 0, sql=sql)
    thread = threading.Thread(target=server.serve_forever, name="explorer-test", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def project_server(project_graph: LineageGraph) -> Iterator[ExplorerServer]:
    """The project's graph served as `lineage serve` serves it: with the SQL files, for the impact's lines."""
    from sharp_dagster.warehouse.catalog import load_catalog
    from sharp_dagster.warehouse.catalog_lineage import sql_texts

    yield from _serve(project_graph, sql_texts(load_catalog()))


@pytest.fixture(scope="module")
def made_server() -> Iterator[ExplorerServer]:
    yield from _serve(made_graph())


def get(url: str) -> tuple[int, Any, dict[str, str]]:
    """(status, decoded JSON or text, headers) of a GET, errors included."""
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            status, body, headers = resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        status, body, headers = exc.code, exc.read(), dict(exc.headers)
    text = body.decode("utf-8")
    if headers.get("Content-Type", "").startswith("application/json"):
        return status, json.loads(text), headers
    return status, text, headers
