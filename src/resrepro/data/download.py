"""Checksummed downloads.

Every file the pipeline gets from the internet comes through `downloaded`: it writes to a
temporary file next to the destination and hands it over only when it is whole (as long as its
Content-Length, or the size its source declares). A body cut short is resumed from its last byte
with an HTTP range request where the server accepts one (a 206 from that byte), else downloaded
again from the start; after ATTEMPTS tries in a row that bring no new byte, the error names the
URL and both sizes. The caller checks it and renames it,
so a killed, short or corrupt download never leaves anything that looks finished. `fetch` does
that with an md5, and skips the download when a file with the right md5 is already there.
A location may be a URL or a local file path.
"""

from __future__ import annotations

import http.client
import hashlib
import os
import re
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from tqdm import tqdm

# Some hosts (e.g. nlp.stanford.edu) answer HTTP 403 to urllib's default User-Agent.
BROWSER_USER_AGENT = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36"
)
_CHUNK = 1 << 20  # bytes read per step of the progress bar
ATTEMPTS = 3  # tries in a row that bring no new byte of a file that arrives short, within one call

# Errors that mean "the remote side failed"; disk errors (OSError) still propagate as they are.
_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)


class ChecksumError(RuntimeError):
    """A file's md5 (or sha256) is not the expected one; the message names the file and both."""

    def __init__(self, path: str | Path, expected: str, actual: str, note: str = "", algorithm: str = "md5") -> None:
        self.path, self.expected, self.actual, self.note = Path(path), expected, actual, note
        super().__init__(f"{path}: {algorithm} is {actual}, expected {expected}{note}")


class IncompleteDownload(RuntimeError):
    """A body that arrived short of its Content-Length (or of the size its source declares)."""

    def __init__(self, url: str, expected: int | None, received: int, note: str = "") -> None:
        self.url, self.expected, self.received = url, expected, received
        promised = f"{expected:,} bytes" if expected is not None else "more bytes (the connection closed early)"
        super().__init__(f"{url}: expected {promised}, received {received:,}{note}")


def md5_of(path: str | Path) -> str:
    """The file's md5, in hex (the checksums that datasets publish)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, lambda: hashlib.md5(usedforsecurity=False)).hexdigest()


def verify(path: str | Path, md5: str) -> None:
    """Raise ChecksumError unless the file at `path` has this md5."""
    actual = md5_of(path)
    if actual != md5.lower():
        raise ChecksumError(path, md5.lower(), actual)


def fetch(
    url: str,
    dest: str | Path,
    md5: str,
    user_agent: str = BROWSER_USER_AGENT,
    timeout: float = 60.0,
    size: int | None = None,
) -> Path:
    """Download `url` to `dest` unless a file with this md5 is already there; return `dest`.

    Raises ChecksumError if the downloaded file has the wrong md5 (the file is deleted) and
    RuntimeError, naming the URL, if the download itself fails or keeps arriving short.
    """
    dest = Path(dest)
    if dest.exists():
        try:
            verify(dest, md5)
            return dest
        except ChecksumError as err:
            # A truncated earlier download, or a stale file: never keep it.
            print(f"removing bad file ({err}); downloading again", file=sys.stderr)
            dest.unlink()

    with downloaded(url, dest, user_agent=user_agent, timeout=timeout, size=size) as tmp:
        try:
            verify(tmp, md5)
        except ChecksumError as err:
            # Name the destination, not the temporary file, which is deleted.
            note = f" (downloaded from {url}; removed)"
            raise ChecksumError(dest, err.expected, err.actual, note) from None
        os.replace(tmp, dest)
    return dest


@contextmanager
def downloaded(
    url: str,
    dest: str | Path,
    *,
    user_agent: str = BROWSER_USER_AGENT,
    timeout: float = 60.0,
    size: int | None = None,
) -> Iterator[Path]:
    """The whole body of `url` in a temporary file next to `dest`, deleted on leaving unless the
    caller has moved it to `dest` by then. `size`: the bytes the source declares, if it does."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _download_whole(url, tmp, user_agent, timeout, size, desc=dest.name)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make the finished file private
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def url_of(location: str) -> str:
    """A URL as it is; a local file path as its file:// URL."""
    return location if urllib.parse.urlsplit(location).scheme else Path(location).absolute().as_uri()


def _download_whole(url: str, path: Path, user_agent: str, timeout: float, size: int | None, desc: str) -> None:
    """Download `url` into `path` until it arrives whole, resuming where it was cut; fail after
    ATTEMPTS tries in a row that bring no new byte."""
    path.write_bytes(b"")
    stalled = 0
    while True:
        have = path.stat().st_size
        try:
            with open(path, "r+b") as out:
                _download(url, out, user_agent, timeout, desc, start=have)
            received = path.stat().st_size
            if size is not None and received != size:
                path.write_bytes(b"")  # a whole body of the wrong size: resuming cannot mend it
                raise IncompleteDownload(url, size, received)
            return
        except IncompleteDownload as err:
            last = err
            stalled = 0 if path.stat().st_size > have else stalled + 1
            print(f"{err} ({'no new byte, try ' + str(stalled) + ' of ' + str(ATTEMPTS) if stalled else 'resuming from there'})", file=sys.stderr)
            if stalled >= ATTEMPTS:
                break
    raise IncompleteDownload(url, last.expected, last.received,
                             f" (no new byte in the last {ATTEMPTS} tries; removed). If the host keeps cutting the "
                             "connection, download the file by hand or set a mirror URL for it in the config.")


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def _download(url: str, out: BinaryIO, user_agent: str, timeout: float, desc: str, start: int = 0) -> None:
    """Copy the body of `url` into the open binary file `out` from byte `start` (a range request;
    a server that answers with the whole file instead overwrites it from the start), with a
    progress bar on stderr. Raises IncompleteDownload when the file ends short of the size the
    response promised (its Content-Length, or the total of its Content-Range)."""
    headers = {"User-Agent": user_agent, **({"Range": f"bytes={start}-"} if start else {})}
    request = urllib.request.Request(url_of(url), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            resumed = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range") or "") if start and response.status == 206 else None
            if resumed and int(resumed[1]) == start:
                total = int(resumed[3]) if resumed[3] != "*" else None
            else:  # the whole body, from its first byte
                start = 0
            out.seek(start)
            out.truncate()
            received = start
            with tqdm(total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                      desc=desc, file=sys.stderr) as bar:
                try:
                    # read(n) ends quietly when the connection closes early: count the bytes.
                    while chunk := response.read(_CHUNK):
                        out.write(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
                except http.client.IncompleteRead as err:
                    raise IncompleteDownload(url, total, received) from err
            if total is not None and received != total:
                raise IncompleteDownload(url, total, received)
    except _NETWORK_ERRORS as err:
        raise RuntimeError(
            f"could not download {url}: {err}. If the host is down or refuses this client, "
            "download the file by hand or set a mirror URL for it in the config."
        ) from err


__all__ = ["ATTEMPTS", "BROWSER_USER_AGENT", "ChecksumError", "IncompleteDownload", "downloaded", "fetch", "url_of", "verify"]
