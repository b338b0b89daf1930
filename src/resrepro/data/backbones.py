"""The captioning backbone's ImageNet weights: downloaded by a local rule, loaded from that file.

Compute nodes often have no internet, so the GPU job that extracts grid features (data/coco.py)
never downloads. `fetch_backbone` (rule fetch_backbone, run where Snakemake runs) gets torchvision's
weight file into resources/backbones/<name>.<weights>.pth, verified by the sha256 prefix that
torchvision puts in the file's name (resnet101-cd907fc2.pth), and `load_backbone` builds the net
from that file. A mirror (config download_urls, under the backbone's name) is a base URL or a local
folder holding torchvision's file by its own name, e.g. a copy of ~/.cache/torch/hub/checkpoints/.

Torch and the download code are imported inside the functions: the workflow reads the file names
at parse time.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

DEFAULT = {"name": "resnet101", "weights": "IMAGENET1K_V2", "size": 224}
FOLDER = Path("resources/backbones")


def with_defaults(backbone: dict | None) -> dict:
    """The backbone config (captioning.features.backbone) with DEFAULT's values where it has none."""
    return {**DEFAULT, **(backbone or {})}


def weights_path(backbone: dict | None, folder: str | Path = FOLDER) -> Path | None:
    """Where fetch_backbone puts the backbone's weights; None for a backbone without weights."""
    backbone = with_defaults(backbone)
    if backbone["weights"] is None:
        return None
    weights = backbone["weights"].rsplit(".", 1)[-1]  # "ResNet101_Weights.IMAGENET1K_V2" names IMAGENET1K_V2 too
    return Path(folder) / f"{backbone['name']}.{weights}.pth"


def weights_url(name: str, weights: str) -> str:
    """torchvision's URL of these weights, e.g. resnet101 IMAGENET1K_V2 -> .../resnet101-cd907fc2.pth."""
    import torchvision

    return torchvision.models.get_model_weights(name).verify(weights).url


def fetch_backbone(name: str, weights: str, dest: str | Path, mirror: str | None = None, md5: dict[str, str] | None = None) -> Path:
    """Download the weights to `dest` unless a file with the right sha256 prefix is there; return `dest`.

    Raises ChecksumError naming the file when the download's sha256 does not start with the prefix
    in torchvision's file name (the download is removed). A pin in `md5` under that file name
    (config download_md5) replaces the prefix: the file is verified by its md5 instead.
    """
    from .download import ChecksumError, downloaded, fetch

    dest = Path(dest)
    url = weights_url(name, weights)
    file_name = url.rsplit("/", 1)[-1]
    if mirror:
        url = mirror.rstrip("/") + "/" + file_name
    if pinned := (md5 or {}).get(file_name):
        return fetch(url, dest, pinned)
    prefix = _hash_prefix(file_name)
    if dest.exists():
        if _sha256(dest).startswith(prefix):
            return dest
        print(f"removing {dest}: its sha256 does not start with {prefix}; downloading again", file=sys.stderr)
        dest.unlink()
    with downloaded(url, dest) as tmp:
        actual = _sha256(tmp)
        if not actual.startswith(prefix):
            raise ChecksumError(dest, f"{prefix}...", actual, f" (downloaded from {url}; removed)", algorithm="sha256")
        os.replace(tmp, dest)
    return dest


def load_backbone(name: str, weights: str | None, weights_file: str | Path | None):
    """torchvision's classifier `name` with the weights in `weights_file` (never downloaded);
    randomly initialised when `weights` is None."""
    import torch
    import torchvision

    if weights is None:
        return torchvision.models.get_model(name, weights=None)
    if weights_file is None:
        raise ValueError(f"backbone {name} {weights}: no weight file given; download it first "
                         "(rule fetch_backbone, or `resrepro fetch-backbone`)")
    classes = len(torchvision.models.get_model_weights(name).verify(weights).meta["categories"])
    net = torchvision.models.get_model(name, weights=None, num_classes=classes)
    net.load_state_dict(torch.load(weights_file, map_location="cpu", weights_only=True))
    return net


def _hash_prefix(file_name: str) -> str:
    """The sha256 prefix in a torchvision weight file's name, as torch.hub reads it."""
    from torch.hub import HASH_REGEX

    match = HASH_REGEX.search(file_name)
    if match is None or not match.group(1):
        raise ValueError(f"{file_name}: no sha256 prefix in the name to verify the download by")
    return match.group(1)


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


__all__ = ["DEFAULT", "FOLDER", "fetch_backbone", "load_backbone", "weights_path", "weights_url", "with_defaults"]
