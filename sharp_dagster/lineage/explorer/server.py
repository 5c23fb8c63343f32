"""The explorer's HTTP server: the stdlib `ThreadingHTTPServer`, serving the API, the page and its libraries.

Routes (GET only):
- `/` and `/table/<layer>/<table>`: the single page (`static/index.html`); its script reads the table from the URL;
- `/static/<file>`: the page's own files; `/static/vendor/echarts.min.js`: Apache ECharts from
  `static/node_modules` (installed by `npm ci`), so the page loads nothing from another host;
- `/api/tables`, `/api/graph`, `/api/table`, `/api/column`, `/api/impact`, `/api/governance`: JSON from
  `ExplorerApi`.

Only requests whose Host header names a loopback address (`127.0.0.1`, `localhost`, `[::1]`, with the server's
port), the address the server is bound to, or a name given with `allowed_hosts` (`lineage serve --allow-host`)
are answered; any other gets 403. A web page from another site can make a browser send requests here by pointing
its own DNS name at 127.0.0.1 (DNS rebinding): its Host header still carries that site's name. A connection idle
for `idle_timeout` seconds (default 30) is closed, so clients that connect and send nothing cannot hold threads.

The graph never changes while the server runs, so each API answer is encoded once and its bytes kept in a
bounded LRU keyed by the request's path and query: repeated requests cost a dictionary lookup and a socket write.
HTTP/1.1 keep-alive lets a client reuse its connection.
"""

from __future__ import annotations

import gc
import json
import mimetypes
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sharp_dagster.lineage.explorer.api import ApiError, ExplorerApi
from sharp_dagster.lineage.explorer.links import DEFAULT_HOST, DEFAULT_PORT
from sharp_dagster.lineage.graph import LineageGraph
from sharp_dagster.lineage.impact import SqlText

__all__ = ["STATIC_DIR", "ExplorerServer", "make_server", "serve", "tune_process"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
# The page's own files, by URL name: an explicit list, so no request can reach any other file on disk.
PAGE_FILES = {"index.html", "app.js", "app.css"}
VENDOR_FILES = {"echarts.min.js": Path("node_modules/echarts/dist/echarts.min.js")}
NPM_HINT = f"run `npm ci --prefix {STATIC_DIR}` to install the explorer's browser libraries"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
IDLE_TIMEOUT_S = 30.0


def host_names(bound_host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host header values a server bound to (bound_host, port) answers: each name with its port, and bare
    (a client omits port 80). Configured names may carry their own port (a proxy's); a wildcard bind address
    names no host.

    >>> sorted(host_names("127.0.0.1", 8080))[:3]
    ['127.0.0.1', '127.0.0.1:8080', '[::1]']
    """
    names = {*LOOPBACK_NAMES, *(n.strip().lower() for n in extra if n.strip())}
    if bound_host not in ("", "0.0.0.0", "::"):
        names.add(f"[{bound_host}]" if ":" in bound_host else bound_host.lower())
    return frozenset(names | {f"{n}:{port}" for n in names if not n.rsplit("]", 1)[-1].count(":")})


class ResponseCache:
    """LRU of encoded API answers, bounded by their total size in bytes."""

    def __init__(self, max_bytes: int = 64 << 20):
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._max = max_bytes
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            body = self._items.get(key)
            if body is not None:
                self._items.move_to_end(key)
            return body

    def put(self, key: str, body: bytes) -> None:
        if len(body) > self._max // 8:  # one huge answer must not flush everything else
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = body
            self._bytes += len(body)
            while self._bytes > self._max:
                _, old = self._items.popitem(last=False)
                self._bytes -= len(old)


class ExplorerServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that carries the API and the response cache its handlers use."""

    daemon_threads = True  # a stuck client must not keep the process alive at shutdown
    # socketserver's default backlog is 5: a page's parallel requests plus a few users overflow it, and a dropped
    # SYN is only retried after 1 s.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        api: ExplorerApi,
        allowed_hosts: Iterable[str] = (),
        idle_timeout: float = IDLE_TIMEOUT_S,
    ):
        self.api = api
        self.idle_timeout = idle_timeout
        self.cache = ResponseCache()
        self.routes: dict[str, Callable[[dict[str, str]], dict[str, Any]]] = {
            "/api/tables": lambda _: api.tables(),
            "/api/graph": api.graph_json,
            "/api/table": api.table,
            "/api/column": api.column,
            "/api/impact": api.impact,
            "/api/governance": lambda _: api.governance(),
        }
        super().__init__(address, ExplorerHandler)
        self.allowed_hosts = host_names(str(self.server_address[0]), self.server_address[1], allowed_hosts)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class ExplorerHandler(BaseHTTPRequestHandler):
    server: ExplorerServer
    protocol_version = "HTTP/1.1"  # keep-alive: every response sends Content-Length
    # Headers and body go out as two writes: with Nagle's algorithm on, the body waits for the client's delayed
    # ACK of the headers (~40 ms on Linux) on every keep-alive request.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        # StreamRequestHandler applies `timeout` to the socket: a read waiting longer (an idle keep-alive
        # connection, a client that sends nothing) ends the connection instead of holding this thread.
        self.timeout = self.server.idle_timeout
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        # One line per request on stderr would swamp a terminal under load; errors are still answered in JSON.
        pass

    def _send(
        self, status: int, body: bytes, content_type: str, cache: str = "no-cache", timing: str | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.send_header("X-Content-Type-Options", "nosniff")
        if timing:
            self.send_header("Server-Timing", timing)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json_error(self, status: int, message: str) -> None:
        body = json.dumps({"error": message, "status": status}).encode()
        self._send(status, body, "application/json; charset=utf-8")

    def _file(self, path: Path, cache: str = "no-cache") -> None:
        try:
            body = path.read_bytes()
        except OSError:
            self._json_error(HTTPStatus.NOT_FOUND, f"{path.name} is missing: {NPM_HINT}")
            return
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            ctype += "; charset=utf-8"
        self._send(HTTPStatus.OK, body, ctype, cache)

    def do_HEAD(self) -> None:  # noqa: N802 (the stdlib's name)
        self.do_GET()

    def _host_allowed(self) -> bool:
        hosts = self.headers.get_all("Host") or []
        return len(hosts) == 1 and hosts[0].strip().lower() in self.server.allowed_hosts

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if not self._host_allowed():
            self._json_error(
                HTTPStatus.FORBIDDEN,
                "this Host header is not answered: the explorer serves its loopback address "
                "(start it with --allow-host NAME to serve another name)",
            )
            return
        parts = urlsplit(self.path)
        route = parts.path
        handler = self.server.routes.get(route)
        if handler is not None:
            self._api(handler, route, parts.query)
        elif route == "/" or route.startswith("/table/"):
            self._file(STATIC_DIR / "index.html")
        elif route.startswith("/static/vendor/") and route[len("/static/vendor/") :] in VENDOR_FILES:
            self._file(STATIC_DIR / VENDOR_FILES[route[len("/static/vendor/") :]], "max-age=86400")
        elif route.startswith("/static/") and route[len("/static/") :] in PAGE_FILES:
            self._file(STATIC_DIR / route[len("/static/") :])
        elif route == "/favicon.ico":  # browsers ask for it; there is none
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        elif route == "/healthz":
            self._send(HTTPStatus.OK, b'{"ok": true}', "application/json")
        else:
            self._json_error(HTTPStatus.NOT_FOUND, f"no such page or API: {route}")

    def _api(self, handler: Callable[[dict[str, str]], dict[str, Any]], route: str, query: str) -> None:
        started, cpu_started = time.perf_counter(), time.thread_time()
        key = f"{route}?{query}"
        body = self.server.cache.get(key)
        if body is None:
            try:
                params = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=False))
                answer = handler(params)
            except ApiError as exc:
                self._json_error(exc.status, exc.message)
                return
            body = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
            self.server.cache.put(key, body)
        # Server-Timing (a standard header browsers' dev tools show): time spent answering, and CPU time of this
        # thread for it; the difference is time spent waiting for the interpreter lock or a core.
        timing = (
            f"app;dur={(time.perf_counter() - started) * 1000:.3f}, "
            f"cpu;dur={(time.thread_time() - cpu_started) * 1000:.3f}"
        )
        self._send(HTTPStatus.OK, body, "application/json; charset=utf-8", timing=timing)


def make_server(
    graph: LineageGraph,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    allowed_hosts: Iterable[str] = (),
    idle_timeout: float = IDLE_TIMEOUT_S,
    sql: Mapping[str, SqlText] | None = None,
) -> ExplorerServer:
    """A bound, not yet serving server (port 0 picks a free port: read it from `server.url`); `sql`: each SQL
    table's file, for the lines a column's impact names."""
    try:
        return ExplorerServer((host, port), ExplorerApi(graph, sql=sql), allowed_hosts, idle_timeout)
    except OSError as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def tune_process() -> None:
    """Process-wide settings for a process that only serves (`serve()` calls it once the graph is built).

    - Everything built so far (the graph, the API's index) is exempted from the cyclic garbage collector: it
      lives as long as the process and holds millions of objects on a large graph, and a full collection would
      rescan them all (~0.5 s on 10,000 tables) in the middle of some request.
    - The interpreter's thread switch interval goes from 5 ms to 0.5 ms: requests are short (~0.3 ms of CPU),
      and with several in flight a thread otherwise waits up to 5 ms for the GIL behind another one's answer."""
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(0.0005)


def serve(
    graph: LineageGraph,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    allowed_hosts: Iterable[str] = (),
    sql: Mapping[str, SqlText] | None = None,
) -> None:
    """Serve until interrupted; prints the URL first (a caller passing port 0 reads the port from it)."""
    server = make_server(graph, host, port, allowed_hosts, sql=sql)
    tune_process()
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: listening on {host}, beyond loopback: the explorer has no login; it answers only requests "
            f"whose Host header is a loopback name, {host} or a name given with --allow-host",
            file=sys.stderr,
        )
    if not (STATIC_DIR / VENDOR_FILES["echarts.min.js"]).is_file():
        print(f"warning: the page cannot draw graphs yet: {NPM_HINT}", file=sys.stderr, flush=True)
    print(f"lineage explorer serving {len(graph)} datasets on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
