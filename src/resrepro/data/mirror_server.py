"""A local HTTP mirror: serves a folder's files by path, and can cut chosen downloads short.

`serving(root)` serves every file under `root` on 127.0.0.1 (GET and HEAD; `GET /iwslt15_en_vi/train.en`
answers root/iwslt15_en_vi/train.en, with its Content-Length), so the rehearsal's fake sources
(resrepro.data.fake_sources) go through the real download code: a config's mirror URL is
`server.url + "<folder>/"`, and every file is fetched by its own name under it.

Ranges: a GET with `Range: bytes=N-` (or `bytes=N-M`) is answered 206 with the file from byte N
(to M; Content-Range `bytes N-M/size`), as statmt.org's and COCO's servers do; `ranges=False` makes a server that
ignores it and answers 200 with the whole file.

Cutting short: for each relative path in `cut_short`, the first response that reaches byte
`cut_at` x the file's size (half by default) announces its whole Content-Length but stops there and
closes the connection, as a host that drops a download does; later requests for it are answered in full. A
mapping {path: responses} cuts that many first responses instead (None: every one, each at the
same byte: a resumed request from there gets nothing more). resrepro.data.download then sees an
IncompleteDownload and resumes the file (or downloads it again where ranges are ignored).

`delay_s` holds every answer back that long: a slow server, for the preflight's timeout.

`server.requests` records each request as Request(path, sent, status, start), sent being the body
bytes written and start the byte its range asked to start at. It is complete once the `with serving(...)` block has ended (the server waits
for its handler threads when it closes); within the block the last response may still be
being recorded.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator, Mapping, NamedTuple

_CHUNK = 1 << 20


class Request(NamedTuple):
    path: str  # relative to the served folder, e.g. "iwslt15_en_vi/train.en"
    sent: int  # body bytes written
    status: int = 200
    start: int = 0  # the first byte a range request asked for


class MirrorServer(ThreadingHTTPServer):
    """Serves the files under `root` on 127.0.0.1:`port` (0: any free port)."""

    daemon_threads = False  # server_close() waits for the handlers: `requests` is whole afterwards

    def __init__(self, root: str | Path, cut_short: Iterable[str] | Mapping[str, int | None] = (), port: int = 0,
                 ranges: bool = True, cut_at: float = 0.5, delay_s: float = 0.0):
        self.root = Path(root).resolve()
        self.ranges, self.cut_at, self.delay_s = ranges, cut_at, delay_s
        if not self.root.is_dir():
            raise FileNotFoundError(f"{root}: no such folder to serve")
        if isinstance(cut_short, Mapping):
            cuts = {_relative(p): n for p, n in cut_short.items()}
        else:
            cuts = {_relative(p): 1 for p in cut_short}
        self._cuts: dict[str, int | None] = cuts
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def url(self) -> str:
        """The base URL, ending in "/": url + "iwslt15_en_vi/train.en" is that file."""
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def file_for(self, path: str) -> Path | None:
        """The file that `path` (relative, "/"-separated) names under root; None if there is none."""
        parts = path.split("/")
        if not path or any(part in ("", ".", "..") for part in parts):
            return None  # nothing above root; a symbolic link inside root is followed
        candidate = self.root.joinpath(*parts)
        return candidate if candidate.is_file() else None

    def take_cut(self, path: str) -> bool:
        """Whether this response for `path` is to be cut short (counting it if so)."""
        with self._lock:
            if path not in self._cuts:
                return False
            left = self._cuts[path]
            if left is None:
                return True
            if left <= 0:
                return False
            self._cuts[path] = left - 1
            return True

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)


def _relative(path: str | PurePosixPath) -> str:
    return str(PurePosixPath(str(path).lstrip("/")))


class _Handler(BaseHTTPRequestHandler):
    server: MirrorServer

    def do_GET(self) -> None:
        self._respond(body=True)

    def do_HEAD(self) -> None:
        self._respond(body=False)

    def _respond(self, body: bool) -> None:
        self.close_connection = True
        if self.server.delay_s:
            time.sleep(self.server.delay_s)
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        file = self.server.file_for(path)
        if file is None:
            self.send_error(404, f"no file {path!r} in this mirror")
            self.server.record(Request(path, 0, 404))
            return
        size = file.stat().st_size
        asked = self._range() if self.server.ranges else None
        if asked is not None and asked[0] >= size > 0:
            self.send_error(416, f"range from byte {asked[0]} of {size}")
            self.server.record(Request(path, 0, 416, asked[0]))
            return
        status = 206 if asked is not None else 200
        start, stop = (asked[0], min(size, asked[1])) if asked is not None else (0, size)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes" if self.server.ranges else "none")
        self.send_header("Content-Length", str(stop - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.end_headers()
        if not body:
            self.server.record(Request(path, 0, status, start))
            return
        # A cut falls inside this response or not at all: a probe of the first bytes neither
        # overruns its range nor spends the cut meant for the download after it.
        cut = max(start, int(size * self.server.cut_at))
        end = cut if cut < stop and self.server.take_cut(path) else stop
        sent = 0
        try:
            with open(file, "rb") as f:
                f.seek(start)
                while start + sent < end and (chunk := f.read(min(_CHUNK, end - start - sent))):
                    self.wfile.write(chunk)
                    sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):  # the client went away
            pass
        finally:
            self.server.record(Request(path, sent, status, start))

    def _range(self) -> tuple[int, int] | None:
        """(first byte, last byte + 1) of a `Range: bytes=N-` or `bytes=N-M` header, the forms the
        downloads and the preflight send; None without one."""
        first, _, last = self.headers.get("Range", "").removeprefix("bytes=").partition("-")
        if not self.headers.get("Range", "").startswith("bytes=") or not first.isdigit() or not (last.isdigit() or last == ""):
            return None
        return int(first), int(last) + 1 if last else 1 << 62

    def log_message(self, format: str, *args) -> None:
        pass


@contextmanager
def serving(root: str | Path, cut_short: Iterable[str] | Mapping[str, int | None] = (), port: int = 0,
            ranges: bool = True, cut_at: float = 0.5, delay_s: float = 0.0) -> Iterator[MirrorServer]:
    """Serve the files under `root` while the block runs; yield the server (.url, .requests)."""
    server = MirrorServer(root, cut_short, port, ranges, cut_at, delay_s)
    thread = threading.Thread(target=server.serve_forever, name="mirror-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


__all__ = ["MirrorServer", "Request", "serving"]
