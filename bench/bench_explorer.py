"""Benchmark of the lineage explorer's API under a local load (issue 17: p99 < 10 ms for a 10,000-table graph).

A synthetic warehouse of 10,000 tables (100 domains x (10 MySQL sources, 20 ods, 50 dwd, 20 ads), each table of
6 columns; every warehouse table reads 5 tables of earlier layers of its domain, 10% of them from domain 0's shared
dwd tables; each column is computed from 1-2 columns of the tables read, and one column per table filters its
rows) is built in memory as a `LineageGraph` in a server process (`sharp_dagster.lineage.explorer.server`, the
same server as `sharp-dagster lineage serve`, on a free loopback port). This process then sends requests from a
bounded pool of client threads, each on its own keep-alive connection, and times each request end to end:

- cold: each request is new (the server has neither the traversal nor the encoded answer cached): the page's
  three calls for 1,000 random tables (graph both ways depth 2, the table's columns, one column's path/impact);
- warm: the same requests again, in random order (what users hitting the same pages see).

Run: `.venv/bin/python bench/bench_explorer.py [--quick]`; prints a summary and the result dict as JSON.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DOMAINS = 100
LAYOUT = [("src", 10), ("ods", 20), ("dwd", 50), ("ads", 20)]
COLUMNS = [f"c{i}" for i in range(6)]
TARGET_P99_MS = 10.0


def table_names(domains: int = DOMAINS) -> dict[str, list[str]]:
    """Every table's qualified name by layer (deterministic: the client rebuilds them without the graph)."""
    out: dict[str, list[str]] = {layer: [] for layer, _ in LAYOUT}
    for d in range(domains):
        for layer, count in LAYOUT:
            out[layer] += [
                f"{layer}.d{d}_t{i}" if layer != "src" else f"mysql:db{d}.t{i}" for i in range(count)
            ]
    return out


def synthetic_graph(domains: int = DOMAINS, seed: int = 17):
    """The benchmark's LineageGraph (see the module docstring) and its number of table and column edges."""
    from sharp_dagster.lineage.graph import Dataset, LineageGraph

    rng = random.Random(seed)
    datasets = []
    domain_tables: list[dict[str, list[str]]] = []
    for d in range(domains):
        tables: dict[str, list[str]] = {}
        for layer, count in LAYOUT:
            names = [f"{layer}.d{d}_t{i}" if layer != "src" else f"mysql:db{d}.t{i}" for i in range(count)]
            tables[layer] = names
            datasets += [
                Dataset.from_qualified(n, kind="external" if layer == "src" else "asset") for n in names
            ]
        domain_tables.append(tables)
    urn = {d.qualified: d.urn for d in datasets}
    shared = domain_tables[0]["dwd"]
    edges: set[tuple[str, str]] = set()
    column_edges: list[tuple[tuple[str, str], tuple[str, str]]] = []
    dependency_edges: list[tuple[tuple[str, str], str]] = []
    for tables in domain_tables:
        for layer, allowed in (("ods", ["src"]), ("dwd", ["ods", "dwd"]), ("ads", ["dwd", "ads"])):
            for i, t in enumerate(tables[layer]):
                pool = [u for a in allowed if a != layer for u in tables[a]] + tables[layer][:i]
                reads = set()
                for _ in range(5):
                    src = rng.choice(shared) if layer != "ods" and rng.random() < 0.1 else rng.choice(pool)
                    if src != t:
                        reads.add(src)
                        edges.add((urn[src], urn[t]))
                read = sorted(reads)
                for c in COLUMNS:
                    for _ in range(rng.choice((1, 2))):
                        column_edges.append(((urn[rng.choice(read)], rng.choice(COLUMNS)), (urn[t], c)))
                dependency_edges.append(((urn[rng.choice(read)], rng.choice(COLUMNS)), urn[t]))
    graph = LineageGraph(datasets, sorted(edges), column_edges, dependency_edges)
    return graph, len(edges), len(column_edges)


def serve_main(domains: int) -> None:
    """The server process: build the graph, serve it on a free loopback port, print where, serve until killed."""
    from sharp_dagster.lineage.explorer.server import make_server, tune_process

    start = time.perf_counter()
    graph, n_edges, n_cols = synthetic_graph(domains)
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    server = make_server(graph, "127.0.0.1", 0)
    api_s = time.perf_counter() - start  # the API's start-up: governance rules, column index
    tune_process()  # as `sharp-dagster lineage serve` does
    print(
        json.dumps(
            {
                "url": server.url,
                "tables": len(graph),
                "edges": n_edges,
                "column_edges": n_cols,
                "build_s": round(build_s, 3),
                "api_start_s": round(api_s, 3),
            }
        ),
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "requests": len(values),
        "p50_ms": round(statistics.median(values), 3),
        "p99_ms": round(_pct(values, 0.99), 3),
        "max_ms": round(max(values), 3),
    }


def _server_timing(header: str) -> dict[str, float]:
    """'app;dur=0.412, cpu;dur=0.388' -> {'app': 0.412, 'cpu': 0.388}."""
    out = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            out[name] = float(dur)
    return out


def run_load(
    url: str, requests: list[tuple[str, str]], threads: int
) -> tuple[dict[str, list[float]], float, int, list[dict[str, float]]]:
    """Send `requests` ((kind, path)) from `threads` keep-alive clients; latencies (ms) by kind, wall seconds,
    bytes received, and the server's own timings (Server-Timing). Any non-200 answer stops the benchmark."""
    parts = urlsplit(url)
    work: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
    for r in requests:
        work.put(r)
    for _ in range(threads):
        work.put(None)
    results: dict[str, list[float]] = {}
    server_side: list[dict[str, float]] = []  # list.append is atomic: no lock needed
    lock = threading.Lock()
    received = [0]
    failures: list[str] = []

    def client() -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        mine: list[tuple[str, float]] = []
        size = 0
        while (item := work.get()) is not None:
            kind, path = item
            start = time.perf_counter()
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            mine.append((kind, (time.perf_counter() - start) * 1000))
            server_side.append(_server_timing(resp.getheader("Server-Timing", "")))
            size += len(body)
            if resp.status != 200:
                failures.append(f"{path}: {resp.status} {body[:200]!r}")
                break
        conn.close()
        with lock:
            for kind, ms in mine:
                results.setdefault(kind, []).append(ms)
            received[0] += size

    pool = [threading.Thread(target=client) for _ in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"{len(failures)} request(s) failed, e.g. {failures[0]}")
    return results, wall, received[0], server_side


def page_requests(n_tables: int, seed: int = 5) -> list[tuple[str, str]]:
    """The three calls a table page makes (graph both ways depth 2, the table, one column), for random tables."""
    rng = random.Random(seed)
    names = table_names()
    pool = names["ods"] + names["dwd"] + names["ads"]
    out = []
    for t in rng.sample(pool, n_tables):
        out.append(("graph", "/api/graph?" + urlencode({"table": t, "direction": "both", "depth": "2"})))
        out.append(("table", "/api/table?" + urlencode({"table": t})))
        out.append(("column", "/api/column?" + urlencode({"table": t, "column": rng.choice(COLUMNS)})))
    return out


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(url: str, requests: list[tuple[str, str]], threads: int, server_pid: int) -> dict[str, Any]:
    cpu0 = cpu_seconds(server_pid)
    lat, wall, size, server_side = run_load(url, requests, threads)
    cpu = cpu_seconds(server_pid) - cpu0
    every = [ms for v in lat.values() for ms in v]
    app = [t["app"] for t in server_side if "app" in t]
    thread_cpu = [t["cpu"] for t in server_side if "cpu" in t]
    return {
        **_stats(every),
        # Inside the server, from its Server-Timing header: the time answering took (including waits for the
        # GIL or a core) and the CPU time it took. The end-to-end figures above add the socket and the client.
        "server_answer_ms": {"p50": round(statistics.median(app), 3), "p99": round(_pct(app, 0.99), 3)},
        "server_answer_cpu_ms": {
            "p50": round(statistics.median(thread_cpu), 3),
            "p99": round(_pct(thread_cpu, 0.99), 3),
        },
        # The server's own CPU per request: what a request costs whatever else the machine is doing.
        "server_cpu_ms_per_request": round(cpu * 1000 / len(every), 3),
        "by_endpoint": {k: _stats(v) for k, v in sorted(lat.items())},
        "throughput_rps": round(len(every) / wall, 1),
        "mean_answer_kb": round(size / len(every) / 1024, 2),
    }


def run_level(threads: int, n_tables: int, warm_rounds: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """One load level on a fresh server process (so its first phase is really cold): (graph info, result)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        info = json.loads(proc.stdout.readline())
        url = info.pop("url")
        cold_requests = page_requests(n_tables)
        cold = phase(url, cold_requests, threads, proc.pid)
        warm_requests = cold_requests * warm_rounds
        random.Random(9).shuffle(warm_requests)
        warm = phase(url, warm_requests, threads, proc.pid)
    finally:
        os.kill(proc.pid, signal.SIGTERM)  # our own server process, by its pid
        proc.wait(timeout=30)
    level = {
        "threads": threads,
        "cold": cold,
        "warm": warm,
        "meets_target_cold": cold["p99_ms"] < TARGET_P99_MS,
        "meets_target_warm": warm["p99_ms"] < TARGET_P99_MS,
    }
    print(
        f"explorer API on {info['tables']} tables, {threads} clients: cold p50 {cold['p50_ms']} ms "
        f"p99 {cold['p99_ms']} ms; warm p50 {warm['p50_ms']} ms p99 {warm['p99_ms']} ms "
        f"({warm['throughput_rps']} req/s)",
        file=sys.stderr,
    )
    return info, level


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (< 1 minute)")
    parser.add_argument(
        "--threads",
        default="1,4,8",
        help="concurrent client connections, one load level each (default 1,4,8; the first above 1 is the "
        "headline: a few users, each page making its three calls)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args(argv)
    if args.serve:
        serve_main(DOMAINS)
        return {}
    try:
        levels_wanted = [int(t) for t in args.threads.split(",") if t]
    except ValueError:
        parser.error(f"--threads must be numbers separated by commas, not {args.threads!r}")
    if not levels_wanted or min(levels_wanted) < 1:
        parser.error("--threads needs at least one level, each 1 or more")
    # The clients are threads of this process: a thread whose answer has arrived must not wait up to 5 ms for
    # this process's GIL before it stops its clock (that would be the load generator's latency, not the server's).
    sys.setswitchinterval(0.0002)
    n_tables = 200 if args.quick else 1000
    warm_rounds = 2 if args.quick else 4
    info: dict[str, Any] = {}
    levels = {}
    for threads in levels_wanted:
        info, levels[str(threads)] = run_level(threads, n_tables, warm_rounds)
    headline = next((t for t in levels_wanted if t > 1), levels_wanted[0])
    main_level = levels[str(headline)]
    result = {
        "graph": info,
        "server": "stdlib ThreadingHTTPServer, HTTP/1.1 keep-alive, its own process on loopback",
        "requests": "cold: graph (both ways, depth 2) + table + one column for each of "
        f"{n_tables} random tables, first time each; warm: the same {warm_rounds}x, shuffled",
        "threads": headline,
        "cold": main_level["cold"],
        "warm": main_level["warm"],
        "levels": levels,
        "target_p99_ms": TARGET_P99_MS,
        "meets_target_cold": main_level["meets_target_cold"],
        "meets_target_warm": main_level["meets_target_warm"],
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
