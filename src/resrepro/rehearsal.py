"""`resrepro rehearse`: the paper scale's DAG on fake data in the real formats (config/rehearsal.yaml).

It writes the fake sources once (data/fake_sources.py) into resources/rehearsal/mirror/, serves
IWSLT15's files over HTTP with the first response for train.en cut short (the download code must
notice and fetch it again), and runs Snakemake on config/rehearsal.yaml with a second config file,
resources/rehearsal/sources.yaml, that points IWSLT15 at the server and pins the md5 of every fake
file whose real one has a published checksum (the CIFAR archives, the WMT test sets, ResNet-101's
weights): those are verified by their pins, the rest by trust on first use in the rehearsal's own
lock file (downloads_dir). The port is kept in sources.yaml across runs, so that a second run finds
its mirror unchanged and reruns nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import yaml

ROOT = Path("resources/rehearsal")
MIRROR = ROOT / "mirror"
SOURCES_FILE = ROOT / "sources.yaml"
PROFILE = Path("config/rehearsal.yaml")
SERVED = "iwslt15_en_vi"  # served over HTTP; the others are read from the mirror folder
CUT_SHORT = ("iwslt15_en_vi/train.en",)
# Targets that between them run every rule of the DAG but aggregate, judge, report and all (which need the
# whole of it), with the models at their paper sizes: what the rehearsal through Slurm (limits
# enforced) and the rehearsal on a GPU run first.
EVERY_RULE_ONCE = (
    # the paper's base Transformer with SAS: the download over HTTP (cut short once), 32k vocabularies, averaging, beam
    "results/rehearsal/translation/iwslt15_en_vi/transformer_base/default/sas-bias_a0-bias_b0/seeds0/evaluated.json",
    # paper 003's shared ResNet-110 at its paper size, measured per stage
    "results/rehearsal/classification/cifar10/shared_resnet_naive_110/iter-resnet110+iter-shared+iter-snapshots+iter-init/add/seed0/measure/stage_norms.csv",
    # paper 002's float64 net and its noise measurement; its job trains seeds 0 and 1 side by side (processes)
    "results/rehearsal/classification/cifar10/simple_net32/noise/add/seed0/measure/layer_cushion.csv",
    # ResNet-101 features, the captioner's cross-entropy and self-critical stages, then METEOR (Java)
    "results/rehearsal/captioning/mscoco/captioner_paper/default/sas-bias_a0-bias_b0/seeds0/evaluated.json",
    "results/rehearsal/aggregate/gpu_hours.csv",
    "results/rehearsal/plan.json",
    "results/rehearsal/checks.json",
    # every table row's model at its paper size, counted on the meta device
    "results/rehearsal/aggregate/parameters.csv",
)


def mirror_files(mirror: Path = MIRROR) -> dict[str, str]:
    """{download key: path} of the fake sources, written unless the mirror's manifest (written last)
    says they were written at the rehearsal's sizes already."""
    from dataclasses import asdict

    from .data import fake_sources

    manifest = mirror / "manifest.json"
    sizes = asdict(fake_sources.REHEARSAL_SIZES)
    if not manifest.exists() or json.loads(manifest.read_text()).get("sizes") != sizes:
        files = fake_sources.write_fake_sources(mirror, sizes=fake_sources.REHEARSAL_SIZES)
        manifest.write_text(json.dumps({"sizes": sizes, "files": {key: str(path) for key, path in files.items()}}, indent=1, sort_keys=True))
    return json.loads(manifest.read_text())["files"]


def published_checksum(key: str) -> bool:
    """Whether the real file behind a download key has a published checksum (so the fake must be pinned)."""
    from .data import cifar, translation

    download, file_name = key.split("/", 1)
    if download in cifar.SOURCES or download == "resnet101":
        return True
    if download in translation.SOURCES:
        return any(f.name == file_name and f.md5 for f in translation.SOURCES[download].files)
    return False


def pins(files: dict[str, str]) -> dict[str, str]:
    from .data.download import md5_of

    return {key: md5_of(path) for key, path in sorted(files.items()) if published_checksum(key)}


def previous_port(path: Path = SOURCES_FILE) -> int:
    if not path.exists():
        return 0
    url = yaml.safe_load(path.read_text()).get("download_urls", {}).get(SERVED, "")
    return int(url.rsplit(":", 1)[1].split("/")[0]) if url.startswith("http://") else 0


def write_sources(path: Path, server_url: str, md5: dict[str, str]) -> None:
    """The second config file: IWSLT15 through the server, the pins. Rewritten only when it changes
    (Snakemake reruns a download whose mirror or pins change)."""
    text = "# written by `resrepro rehearse` (resrepro.rehearsal); config/rehearsal.yaml's other half\n" + yaml.safe_dump(
        {"download_urls": {SERVED: f"{server_url}{SERVED}/"}, "download_md5": md5}, sort_keys=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def serve_mirror(stack: ExitStack, port: int):
    """The mirror's server on `port` (the earlier run's), or on a free one if that is taken (the
    download then reruns)."""
    from .data.mirror_server import serving

    try:
        return stack.enter_context(serving(MIRROR, cut_short=CUT_SHORT, port=port))
    except OSError:
        return stack.enter_context(serving(MIRROR, cut_short=CUT_SHORT, port=0))


def rehearse(snakemake_args: list[str]) -> int:
    """Write the mirror, serve it, run Snakemake on the rehearsal profile; Snakemake's exit code."""
    files = mirror_files()
    md5 = pins(files)
    with ExitStack() as stack:
        server = serve_mirror(stack, previous_port())
        write_sources(SOURCES_FILE, server.url, md5)
        command = [sys.executable, "-m", "snakemake", "--configfile", str(PROFILE), str(SOURCES_FILE), *snakemake_args]
        print("rehearse:", " ".join(command), file=sys.stderr)
        return subprocess.run(command).returncode
