"""A real HTTP server on 127.0.0.1 for the tests of scrapes (`counters`, the benchmark's reads):
every GET is answered by a function of the request handler."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator

Respond = Callable[[http.server.BaseHTTPRequestHandler], None]


@contextlib.contextmanager
def local_server(respond: Respond) -> Iterator[str]:
    """A server whose every GET is `respond(handler)`: its base URL while the block runs."""

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            with contextlib.suppress(OSError):  # (the client hung up: what some tests do)
                respond(self)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        srv.server_close()
        th.join(5)


def answer(h: http.server.BaseHTTPRequestHandler, body: bytes, status: int = 200) -> None:
    h.send_response(status)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
