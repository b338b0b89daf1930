"""Before any job: is every download the scale needs reachable, the disk big enough, Java there?

`resrepro preflight --configfile config/paper.yaml` asks each source of each file the selected
tables need for its headers only (HEAD; where a server refuses HEAD, a GET of its first byte)
and the first bytes of its body (a range of SNIFF bytes, to tell an HTML page from an archive),
in the order the fetch rules try them (data/translation.fetch_file): its own URL or the
dataset's download_urls mirror, then download_mirrors. A file passes when one source answers
with the size the project knows (the lock file's bytes, recorded on first use, or the source's
declared size; unknown before first use) and no HTML. Then the free disk under downloads_dir
against the downloads' sizes plus the scale's peak disk (analysis/disk.py), and, where a
captioning table is selected, the scorers' Java and pycocoevalcap. One table is printed (file,
source, size, status) and any failure makes the exit status 1: a refusal on the login node in the
first minute rather than after a day of queued jobs.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .data.download import BROWSER_USER_AGENT, url_of

SNIFF = 512  # bytes of a body read to tell an HTML page from the file
TIMEOUT_S = 20.0


@dataclass
class Check:
    file: str  # e.g. wmt14_en_de/training-parallel-commoncrawl.tgz, or "disk", "java"
    source: str
    size: int | None  # bytes the source declares (or the disk's free bytes)
    status: str  # "ok ..." or "FAIL: ..."

    @property
    def failed(self) -> bool:
        return self.status.startswith("FAIL")


def files_needed(config: dict, plan) -> list[tuple[str, list[str], int | None]]:
    """(key, its sources in order, its known size) for each file the plan's datasets download."""
    from .data import backbones, cifar, coco
    from .data.translation import SOURCES, file_location, read_lock, source_url

    lock = read_lock(Path(config.get("downloads_dir", "resources")) / "checksums.lock.json")
    urls, extra = config.get("download_urls", {}), config.get("download_mirrors", {})
    needed = []
    for dataset in plan.datasets():
        if dataset in cifar.SOURCES:
            source = cifar.SOURCES[dataset]
            needed.append((f"{dataset}/{source['filename']}", [urls.get(dataset) or source["url"]], None))
        elif dataset in SOURCES:
            for f in SOURCES[dataset].files:
                key = f"{dataset}/{f.name}"
                sources = [source_url(f, urls.get(dataset)), *(file_location(m, f.name) for m in extra.get(key, []))]
                needed.append((key, sources, f.size or lock.get(key, {}).get("bytes")))
        elif dataset == "mscoco":
            for f in coco.COCO_FILES:
                key = f"mscoco/{f.name}"
                sources = [source_url(f, urls.get("mscoco")), *(file_location(m, f.name) for m in extra.get(key, []))]
                needed.append((key, sources, f.size or lock.get(key, {}).get("bytes")))
            backbone = backbones.with_defaults(config.get("captioning", {}).get("features", {}).get("backbone"))
            if config.get("captioning", {}).get("features", {}).get("kind", "grid") == "grid" and backbone.get("weights"):
                url = backbones.weights_url(backbone["name"], backbone["weights"])
                name = url.rsplit("/", 1)[1]
                mirror = urls.get(backbone["name"])
                needed.append((f"{backbone['name']}/{name}", [mirror.rstrip("/") + "/" + name if mirror else url], None))
    return needed


def probe(url: str, known: int | None, timeout: float = TIMEOUT_S) -> tuple[int | None, str]:
    """(the size `url` declares, "ok ..." or "FAIL: ...") from its headers and first SNIFF bytes."""
    location = url_of(url)
    if location.startswith("file:"):
        path = Path(urllib.request.url2pathname(location.removeprefix("file:").removeprefix("//")))
        if not path.is_file():
            return None, f"FAIL: no file {path}"
        size, head = path.stat().st_size, path.open("rb").read(SNIFF)
    else:
        headers = {"User-Agent": BROWSER_USER_AGENT, "Range": f"bytes=0-{SNIFF - 1}"}
        try:
            with urllib.request.urlopen(urllib.request.Request(location, headers=headers), timeout=timeout) as response:
                head = response.read(SNIFF)
                size = _declared_size(response)
                kind = response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            return None, f"FAIL: HTTP {err.code} {err.reason}"
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            return None, f"FAIL: {'no answer within ' + format(timeout, 'g') + ' s' if 'timed out' in str(reason) else reason}"
        if kind.startswith("text/html"):
            return size, f"FAIL: an HTML page (Content-Type {kind}), not the file"
    if head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        return size, "FAIL: an HTML page, not the file"
    if known is not None and size is not None and size != known:
        return size, f"FAIL: {size:,} bytes, the file recorded is {known:,}"
    return size, "ok" if known is not None else "ok (size not known before its first download)"


def _declared_size(response) -> int | None:
    """The whole file's size: a 206's Content-Range total, or a 200's Content-Length."""
    content_range = response.headers.get("Content-Range") or ""
    if response.status == 206 and "/" in content_range and content_range.rsplit("/", 1)[1].isdigit():
        return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() and response.status != 206 else None


def preflight(config: dict, plan, timeout: float = TIMEOUT_S) -> list[Check]:
    """Every check, in the order the table prints them."""
    checks = []
    download_bytes = 0
    for key, sources, known in files_needed(config, plan):
        tried = []
        for url in sources:
            size, status = probe(url, known, timeout)
            tried.append(Check(key, url, size, status))
            if not tried[-1].failed:
                break
        chosen = next((c for c in tried if not c.failed), None)
        checks += [chosen] if chosen else tried
        download_bytes += (chosen.size or 0) if chosen else 0
    checks.append(disk_check(config, plan, download_bytes))
    if any(run.task == "captioning" for run in plan.runs.values()):
        checks.append(scorer_check(config))
    return checks


def disk_check(config: dict, plan, download_bytes: int) -> Check:
    """The free bytes under downloads_dir against the downloads plus the scale's peak disk."""
    from .analysis.disk import copies_of, scale_disk

    where = Path(config.get("downloads_dir", "resources")).absolute()
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free
    need = download_bytes + scale_disk(plan, config, copies_of(config))["peak"]
    status = "ok" if free >= need else "FAIL"
    return Check("disk", str(where), free, f"{status}: {free / 1e9:,.1f} GB free, the downloads and the runs' peak need {need / 1e9:,.1f} GB")


def scorer_check(config: dict) -> Check:
    import importlib.util

    from .evaluate import java as java_runtime

    choice = config.get("java", "bundled")
    problems = [p for p in (java_runtime.problem(choice), None if importlib.util.find_spec("pycocoevalcap") else "pycocoevalcap is not installed") if p]
    java = java_runtime.executable(choice)
    return Check("captioning scorers", f"java: {choice}", None,
                 f"FAIL: {'; '.join(problems)}" if problems else f"ok: {java_runtime.version(java)}, pycocoevalcap")


def table(checks: list[Check]) -> str:
    """The checks as a plain-text table."""
    rows = [("file", "source", "size", "status")] + [(c.file, c.source, "" if c.size is None else f"{c.size:,}", c.status) for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {s:>{widths[2]}}  {t}" for a, b, s, t in rows)
