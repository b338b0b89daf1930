"""A local HTTP server (127.0.0.1) that promises a whole body in Content-Length and, for its
first responses, sends only half of it and closes the connection: a download cut short."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


class CuttingServer(ThreadingHTTPServer):
    def __init__(self, body: bytes, cut: int | None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.body, self.cut, self.requests = body, cut, 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.requests += 1
        cut_now = self.server.cut is None or self.server.requests <= self.server.cut
        body = self.server.body
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if cut_now else body)
        self.close_connection = True

    def log_message(self, format: str, *args) -> None:
        pass


@contextmanager
def serving(body: bytes, cut: int | None) -> Iterator[CuttingServer]:
    """Serve `body` at any path; the first `cut` responses (None: every one) are cut short."""
    server = CuttingServer(body, cut)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
