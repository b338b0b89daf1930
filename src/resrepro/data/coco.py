"""MSCOCO 2014 with Karpathy's splits: downloads, captions, image features -> the prepared format.

Files (fetched into resources/mscoco/, checksummed by trust on first use as the translation data:
no public md5 exists; data/translation.fetch_file):
  train2014.zip, val2014.zip  the images, http://images.cocodataset.org/zips/
  caption_datasets.zip        Karpathy and Li (2015)'s splits, dataset_coco.json inside:
                              113,287 train (its "train" and "restval"), 5,000 val, 5,000 test
                              images, each with its captions already lower-cased and tokenized.
The paper (000, Sec. 4.3): "We replace caption words that occur less than 5 times in the
training set with the generic unknown word token UNK, resulting in 9,567 words"; prepared.json
says how many this preparation keeps (data/captions.py).

Features, chosen in config (`captioning.features`), both with each region's centre appended:
- grid: an ImageNet-pretrained torchvision backbone (ResNet-101, IMAGENET1K_V2), its weights read
  from the file that rule fetch_backbone downloaded (data/backbones.py; this GPU job downloads
  nothing), each image resized to size x size (no crop: a caption may name anything in the frame),
  the last stage's map as (size/32)^2 regions of 2048 values;
- bottom_up: Anderson et al. (2018)'s precomputed Faster R-CNN boxes, their TSV files
  (image_id, image_w, image_h, num_boxes, boxes, features; base64 float32), which the user
  downloads and names in config; the level the paper's CIDEr (~126-130) needs.
An image that cannot be decoded (COCO_train2014_000000167126.jpg is known to be corrupt) is left
out of its split and named in prepared.json.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from .. import files
from . import backbones, captions
from .features import grid_centres
from .translation import DEFAULT_LOCK, RemoteFile, fetch_file

COCO_FILES = (
    RemoteFile("train2014.zip", "http://images.cocodataset.org/zips/train2014.zip"),
    RemoteFile("val2014.zip", "http://images.cocodataset.org/zips/val2014.zip"),
    RemoteFile("caption_datasets.zip", "http://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip"),
)
KARPATHY_SPLITS = {"train": "train", "restval": "train", "val": "val", "test": "test"}
# What each zip must hold before its first md5 is recorded (fnmatch patterns; read_karpathy finds
# the split file by its name's end, wherever it lies in the zip)
COCO_MEMBERS = {"train2014.zip": ("train2014/*.jpg",), "val2014.zip": ("val2014/*.jpg",), "caption_datasets.zip": ("*dataset_coco.json",)}


def fetch_coco(raw_dir: str | Path, mirror: str | None = None, lock_path: str | Path = DEFAULT_LOCK,
               md5: dict[str, str] | None = None, mirrors: dict[str, list[str]] | None = None) -> list[Path]:
    """The three files into raw_dir, each verified by its pin in `md5` (by file name) or against the
    lock (or recorded there on first use); `mirrors`: more sources per file, tried in order."""
    md5, mirrors = md5 or {}, mirrors or {}
    return [fetch_file(f, raw_dir, key=f"mscoco/{f.name}", lock_path=lock_path, md5=md5.get(f.name), mirror=mirror,
                       members=COCO_MEMBERS[f.name], mirrors=mirrors.get(f.name, ())) for f in COCO_FILES]


@dataclass(frozen=True)
class Image:
    split: str  # train (Karpathy's train and restval), val or test
    member: str  # its path inside the image zips, e.g. val2014/COCO_val2014_000000391895.jpg
    cocoid: int
    captions: tuple[tuple[str, ...], ...]  # words


def read_karpathy(path: str | Path) -> dict[str, list[Image]]:
    """Karpathy's dataset_coco.json (or caption_datasets.zip holding it) -> split -> its images, in file order."""
    path = Path(path)
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            text = z.read(next(n for n in z.namelist() if n.endswith("dataset_coco.json")))
    else:
        text = path.read_bytes()
    splits: dict[str, list[Image]] = {"train": [], "val": [], "test": []}
    for entry in json.loads(text)["images"]:
        split = KARPATHY_SPLITS[entry["split"]]
        words = tuple(tuple(s["tokens"]) for s in entry["sentences"])
        splits[split].append(Image(split, f"{entry['filepath']}/{entry['filename']}", int(entry["cocoid"]), words))
    return splits


def read_images(raw_dir: str | Path, images: list[Image]) -> Iterator[tuple[Image, "PIL.Image.Image | None"]]:  # noqa: F821
    """Each image decoded from the zips (RGB), or None where it cannot be."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    archives: dict[str, zipfile.ZipFile] = {}
    try:
        for image in images:
            folder = image.member.split("/")[0]
            if folder not in archives:
                archives[folder] = zipfile.ZipFile(Path(raw_dir) / f"{folder}.zip")
            try:
                with archives[folder].open(image.member) as f:
                    decoded = PILImage.open(io.BytesIO(f.read()))
                    decoded.load()
                yield image, decoded.convert("RGB")
            except (OSError, UnidentifiedImageError, KeyError, SyntaxError) as err:
                print(f"{image.member}: cannot be read ({type(err).__name__}: {err}); left out", file=sys.stderr)
                yield image, None
    finally:
        for z in archives.values():
            z.close()


class GridBackbone:
    """A torchvision classifier's last convolutional map as a grid of region features."""

    def __init__(self, name: str = "resnet101", weights: str | None = "IMAGENET1K_V2", size: int = 224, device: str = "auto",
                 weights_file: str | Path | None = None):
        import torch

        from ..devices import pick_device

        self.device = pick_device(device)
        net = backbones.load_backbone(name, weights, weights_file)
        self.body = torch.nn.Sequential(*list(net.children())[:-2]).eval().to(self.device)  # drop pooling and classifier
        self.size = size
        # ImageNet's normalisation, as the weights' own transforms use it
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225], device=self.device).view(1, 3, 1, 1)

    def __call__(self, images: list) -> np.ndarray:
        """PIL images -> (N, regions, channels + 2) float32, row-major grid, centres appended."""
        import torch
        from torchvision.transforms.functional import pil_to_tensor, resize

        batch = torch.stack([resize(pil_to_tensor(im), [self.size, self.size], antialias=True) for im in images])
        batch = (batch.to(self.device, non_blocking=True).float() / 255 - self.mean) / self.std
        with torch.inference_mode():
            maps = self.body(batch).float()  # (N, C, g, g)
        n, c, g, _ = maps.shape
        regions = maps.flatten(2).transpose(1, 2).cpu().numpy()  # (N, g*g, C), row-major
        return np.concatenate([regions, np.broadcast_to(grid_centres(g), (n, g * g, 2))], axis=2).astype(np.float32)


TSV_FIELDS = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features")


def read_bottom_up(paths: list[str | Path]) -> dict[int, np.ndarray]:
    """Anderson et al. (2018)'s TSV files -> cocoid -> (boxes, 2048 + 2): each box's features and
    its centre (row, column) as fractions of the image's height and width."""
    csv.field_size_limit(sys.maxsize)
    out = {}
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f, delimiter="\t", fieldnames=TSV_FIELDS):
                n, w, h = int(row["num_boxes"]), float(row["image_w"]), float(row["image_h"])
                boxes = np.frombuffer(base64.b64decode(row["boxes"]), dtype=np.float32).reshape(n, 4)  # x1, y1, x2, y2
                feats = np.frombuffer(base64.b64decode(row["features"]), dtype=np.float32).reshape(n, -1)
                centres = np.stack([(boxes[:, 1] + boxes[:, 3]) / 2 / h, (boxes[:, 0] + boxes[:, 2]) / 2 / w], axis=1)
                out[int(row["image_id"])] = np.concatenate([feats, centres], axis=1)
    return out


def prepare_coco(raw_dir: str | Path, out_dir: str | Path, features: str = "grid", bottom_up: list[str] | None = None,
                 backbone: dict | None = None, min_count: int = 5, batch: int = 64, device: str = "auto",
                 weights_file: str | Path | None = None) -> dict:
    """Karpathy's splits of the fetched files -> the prepared format (data/captions.py). Features
    are written split by split into memory-mapped .npy files (COCO's train split is ~20 GB).
    `weights_file`: the backbone's weights (grid features with weights; backbones.fetch_backbone)."""
    raw_dir, out = Path(raw_dir), Path(out_dir)
    splits = read_karpathy(raw_dir / "caption_datasets.zip")
    if features == "grid":
        backbone = backbones.with_defaults(backbone)
        extract = GridBackbone(**backbone, device=device, weights_file=weights_file)
        info = {"kind": "grid", **backbone, "weights_file": Path(weights_file).name if weights_file else None,
                "made_by": "data/coco.GridBackbone: the backbone's last map, the image resized to size x size"}
    elif features == "bottom_up":
        if not bottom_up:
            raise ValueError("captioning.features is bottom_up: name the TSV files in captioning.bottom_up_tsv")
        boxes = read_bottom_up(bottom_up)
        info = {"kind": "bottom_up", "files": [Path(p).name for p in bottom_up],
                "made_by": "Anderson et al. 2018's Faster R-CNN boxes (their TSV), each box's centre appended"}
    else:
        raise ValueError(f"captioning.features {features!r} unknown; allowed: grid, bottom_up")

    kept, left_out = {}, []
    for split, images in splits.items():
        writer = FeatureWriter(out / f"{split}.features.npy", len(images))
        if features == "grid":
            ids, caps = _grid_features(raw_dir, images, extract, batch, writer, left_out, split)
        else:
            ids, caps = _bottom_up_features(images, boxes, writer, left_out)
        writer.close()
        kept[split] = (ids, caps)
    dims = np.load(out / "train.features.npy", mmap_mode="r").shape
    _write_test_thumbnails(raw_dir, out, splits["test"], left_out)
    return captions.write_captions(out, "mscoco", kept, min_count, {**info, "regions": int(dims[1]), "dim": int(dims[2])},
                                   {"left_out": left_out, "source": "Karpathy and Li 2015, dataset_coco.json"})


def _write_test_thumbnails(raw_dir: Path, out: Path, test: list[Image], left_out: list[str]) -> None:
    """The first readable test images, 160 pixels wide, for the report's gallery; none when the
    image zips are absent (bottom-up features need none)."""
    candidates = [im for im in test if im.member not in left_out][: 2 * captions.THUMBNAILS]
    try:
        read = [(im, pic) for im, pic in read_images(raw_dir, candidates) if pic is not None][: captions.THUMBNAILS]
    except FileNotFoundError as err:
        print(f"no thumbnails for the report: {err}", file=sys.stderr)
        return
    for _, pic in read:
        pic.thumbnail((160, 160))
    captions.write_thumbnails(out, "test", {str(im.cocoid): pic for im, pic in read}, image_format="JPEG")


class FeatureWriter:
    """A split's features written batch by batch into a memory-mapped float16 .npy (a temp file,
    renamed when whole: a killed job leaves nothing that looks finished). Room for `capacity`
    images; when fewer are added (images left out) the file is cut to those."""

    def __init__(self, path: Path, capacity: int):
        self.path, self.capacity, self.n, self.array = Path(path), capacity, 0, None
        self.tmp = self.path.with_name(f".{self.path.name}.tmp")

    def add(self, rows: np.ndarray) -> None:
        if self.array is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.array = np.lib.format.open_memmap(self.tmp, mode="w+", dtype=np.float16, shape=(self.capacity, *rows.shape[1:]))
        self.array[self.n : self.n + len(rows)] = rows
        self.n += len(rows)

    def close(self) -> None:
        if self.array is None:
            raise ValueError(f"{self.path}: no image of this split could be read")
        self.array.flush()
        if self.n < self.capacity:
            files.save_numpy(self.path, np.asarray(self.array[: self.n]))
            self.tmp.unlink()
        else:
            self.tmp.replace(self.path)
        self.array = None


def finite_half(features: np.ndarray, members: list[str]) -> np.ndarray:
    """The features in float16, as they are stored; ValueError naming the images whose features are
    not finite there (a backbone's weights that do not fit the images, or values over float16's
    65,504): a caption model trained on them would diverge, or score as if trained."""
    with np.errstate(over="ignore"):  # the overflow is what is checked next
        half = features.astype(np.float16)
    bad = ~np.isfinite(half).reshape(len(half), -1).all(axis=1)
    if bad.any():
        named = ", ".join([member for member, is_bad in zip(members, bad) if is_bad][:3])
        raise ValueError(f"features not finite in float16 (largest magnitude {np.nanmax(np.abs(features)):.3g}) for "
                         f"{int(bad.sum())} of {len(half)} images, e.g. {named}: check the backbone's weights")
    return half


def _grid_features(raw_dir, images, extract, batch, writer, left_out, split):
    from tqdm import tqdm

    ids, caps, pending = [], [], []

    def flush():
        if pending:
            writer.add(finite_half(extract([im for _, im in pending]), [image.member for image, _ in pending]))
            ids.extend(str(image.cocoid) for image, _ in pending)
            caps.extend([list(c) for c in image.captions] for image, _ in pending)
            pending.clear()

    for image, decoded in tqdm(read_images(raw_dir, images), total=len(images), desc=f"{split} features", file=sys.stderr, mininterval=10):
        if decoded is None:
            left_out.append(image.member)
            continue
        pending.append((image, decoded))
        if len(pending) == batch:
            flush()
    flush()
    return ids, caps


def _bottom_up_features(images, boxes, writer, left_out):
    """Each image's boxes, padded with zero rows to the most any image has."""
    most, dim = max(len(b) for b in boxes.values()), next(iter(boxes.values())).shape[1]
    ids, caps = [], []
    for image in images:
        if image.cocoid not in boxes:
            left_out.append(image.member)
            continue
        padded = np.zeros((1, most, dim), dtype=np.float16)
        padded[0, : len(boxes[image.cocoid])] = boxes[image.cocoid]
        writer.add(padded)
        ids.append(str(image.cocoid))
        caps.append([list(c) for c in image.captions])
    return ids, caps
