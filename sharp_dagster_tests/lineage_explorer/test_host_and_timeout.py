"""The explorer answers only requests addressed to its loopback names (DNS rebinding: a page of another site whose
name resolves to 127.0.0.1 still sends its own name in the Host header), and closes connections that stay idle.
Against real servers on free loopback ports, through raw HTTP connections and sockets."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from sharp_dagster.lineage.explorer.server import ExplorerServer, make_server
from sharp_dagster_tests.lineage_explorer.conftest import made_graph

WAIT_S = 60  # the longest a test waits for the server to close a connection (the machine is shared)


@pytest.fixture(scope="module")
def server() -> Iterator[ExplorerServer]:
    """One server with a short idle timeout and one configured extra name, served in a thread of this process."""
    srv = make_server(made_graph(), "127.0.0.1", 0, allowed_hosts=["lineage.corp.example"], idle_timeout=1.0)
    thread = threading.Thread(target=srv.serve_forever, name="explorer-host-test", daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def _get(server: ExplorerServer, hosts: list[str], path: str = "/api/tables") -> tuple[int, dict]:
    """GET `path` with exactly these Host headers (none, one or several)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        for host in hosts:
            conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_loopback_names_with_the_port_are_answered(server):
    port = server.server_address[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}", "127.0.0.1"):
        status, body = _get(server, [host])
        assert status == 200 and "tables" in json.dumps(body), host
    status, _ = _get(server, ["lineage.corp.example"])  # configured with allowed_hosts (--allow-host)
    assert status == 200


@pytest.mark.parametrize(
    "hosts",
    [
        ["attacker.example:{port}"],
        ["attacker.example"],
        ["127.0.0.1.attacker.example:{port}"],
        ["localhost.:{port}"],
        ["localhost:{other}"],
        ["lineage.corp.example.attacker.example"],
        [],
        ["127.0.0.1:{port}", "attacker.example"],
        [""],
    ],
)
def test_other_host_headers_are_refused(server, hosts):
    port = server.server_address[1]
    status, body = _get(server, [h.format(port=port, other=port + 1) for h in hosts])
    assert status == 403 and "--allow-host" in body["error"]
    status, _ = _get(server, [h.format(port=port, other=port + 1) for h in hosts], "/table/ods/a")
    assert status == 403


def test_an_idle_connection_is_closed(server):
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=WAIT_S) as sock:
        started = time.monotonic()
        assert sock.recv(1024) == b""  # the server closed it without a request
        assert time.monotonic() - started < WAIT_S
    # A keep-alive connection that answered a request is closed once idle too.
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=WAIT_S) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.server_address[1]}\r\n\r\n".encode())
        received = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
        assert received.startswith(b"HTTP/1.1 200") and received.endswith(b'{"ok": true}')
