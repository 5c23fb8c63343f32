"""A loopback HTTP witness for confinement tests: records every request it gets (an XSD or DTD URL a query must
never fetch) and answers 404. Started on 127.0.0.1 on a free port, stopped (and its thread joined) on exit."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def http_witness() -> Iterator[tuple[str, list[str]]]:
    """(`http://127.0.0.1:<port>`, the list of request paths it received) while the block runs."""
    hits: list[str] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            hits.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
