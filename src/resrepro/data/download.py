"""Checksummed downloads.

`fetch` is the only way the pipeline gets a file from the internet: it skips the download
when a file with the right md5 is already there, writes to a temporary file next to the
destination and renames it only once the md5 matches, so a killed or corrupt download never
leaves anything that looks finished. A bad file is deleted and named in the error.
"""

from __future__ import annotations

import http.client
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO

from torchvision.datasets.utils import calculate_md5
from tqdm import tqdm

# Some hosts (e.g. nlp.stanford.edu) answer HTTP 403 to urllib's default User-Agent.
BROWSER_USER_AGENT = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36"
)
_CHUNK = 1 << 20  # bytes read per step of the progress bar

# Errors that mean "the remote side failed"; disk errors (OSError) still propagate as they are.
_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)


class ChecksumError(RuntimeError):
    """A file's md5 is not the expected one; the message names the file and both md5s."""

    def __init__(self, path: str | Path, expected: str, actual: str, note: str = "") -> None:
        self.path, self.expected, self.actual = Path(path), expected, actual
        super().__init__(f"{path}: md5 is {actual}, expected {expected}{note}")


def verify(path: str | Path, md5: str) -> None:
    """Raise ChecksumError unless the file at `path` has this md5."""
    actual = calculate_md5(path)
    if actual != md5.lower():
        raise ChecksumError(path, md5.lower(), actual)


def fetch(
    url: str,
    dest: str | Path,
    md5: str,
    user_agent: str = BROWSER_USER_AGENT,
    timeout: float = 60.0,
) -> Path:
    """Download `url` to `dest` unless a file with this md5 is already there; return `dest`.

    Raises ChecksumError if the downloaded file has the wrong md5 (the file is deleted) and
    RuntimeError, naming the URL, if the download itself fails.
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

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            _download(url, out, user_agent, timeout, desc=dest.name)
        try:
            verify(tmp, md5)
        except ChecksumError as err:
            # Name the destination, not the temporary file, which is deleted below.
            note = f" (downloaded from {url}; removed)"
            raise ChecksumError(dest, err.expected, err.actual, note) from None
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _download(url: str, out: BinaryIO, user_agent: str, timeout: float, desc: str) -> None:
    """Copy the body of `url` into the open binary file `out`, with a progress bar on stderr."""
    request = urllib.request.Request(url, headers={"User-Agent": user_agent})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                      desc=desc, file=sys.stderr) as bar:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    bar.update(len(chunk))
    except _NETWORK_ERRORS as err:
        raise RuntimeError(
            f"could not download {url}: {err}. If the host is down or refuses this client, "
            "download the file by hand or set a mirror URL for it in the config."
        ) from err


__all__ = ["BROWSER_USER_AGENT", "ChecksumError", "fetch", "verify"]
