"""Captioning data: words, vocabulary, and the prepared format every captioning job reads.

Captions are lower-cased and split into words, punctuation dropped (Karpathy's dataset_coco.json
ships them so; `tokenize` does the same to raw text). Words seen fewer than `min_count` times in
the training captions become UNK: the papers' convention (paper 000 Sec. 4.3: "less than 5
times", 9,567 words on COCO). Ids 0-3 are PAD, BOS, EOS and UNK, as in the translation track, so
the decoder and beam search are shared.

A prepared dataset is a folder (results/data/<name>/):
- prepared.json: name, splits and their image counts, vocabulary size, which features (kind,
  regions, dimension and how they were made);
- vocab.txt: one word per line, line i = id i;
- <split>.features.npy: float16 (images, regions, dimension), a row of zeros = padding (fewer
  regions); memory-mapped when read, as COCO's train split is about 20 GB;
- <split>.captions.json: per image its id and its captions as words (all of them: the references).
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import files

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPLITS = ("train", "val", "test")
_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased words of letters and digits: "A man, riding." -> ["a", "man", "riding"]."""
    return _WORD.findall(text.lower())


def build_vocabulary(captions: list[list[str]], min_count: int) -> list[str]:
    """The specials, then every word seen at least `min_count` times, most frequent first (ties
    alphabetical, so the order is the same on every machine)."""
    counts = Counter(word for caption in captions for word in caption)
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return [PAD, BOS, EOS, UNK, *kept]


def encode(words: list[str], index: dict[str, int]) -> list[int]:
    return [index.get(w, UNK_ID) for w in words]


def decode(ids: list[int], vocabulary: list[str]) -> str:
    """Words of the ids up to the first EOS, specials other than UNK dropped."""
    out = []
    for i in ids:
        if i == EOS_ID:
            break
        if i not in (PAD_ID, BOS_ID):
            out.append(vocabulary[i])
    return " ".join(out)


@dataclass
class CaptionSplit:
    """One split: features (images, regions, dim) and each image's captions as words."""

    features: np.ndarray  # (images, regions, dim)
    image_ids: list[str]
    captions: list[list[list[str]]]


def write_prepared(out_dir: str | Path, name: str, splits: dict[str, CaptionSplit], min_count: int, features_info: dict) -> dict:
    """Write the prepared folder (module docstring) from splits held in memory; the vocabulary from train."""
    out = Path(out_dir)
    for split, data in splits.items():
        files.save_numpy(out / f"{split}.features.npy", np.asarray(data.features, dtype=np.float16))
    return write_captions(out, name, {s: (d.image_ids, d.captions) for s, d in splits.items()}, min_count,
                          {**features_info, "regions": int(splits["train"].features.shape[1]), "dim": int(splits["train"].features.shape[2])})


def write_captions(out_dir: str | Path, name: str, splits: dict[str, tuple[list[str], list[list[list[str]]]]], min_count: int,
                   features_info: dict, extra: dict | None = None) -> dict:
    """Everything but the features (written before, one .npy per split): vocabulary from the training
    captions, each split's captions, and prepared.json last, so that a killed job leaves nothing
    that looks finished. `splits`: split -> (image ids, captions as words)."""
    out = Path(out_dir)
    train_captions = [c for image in splits["train"][1] for c in image]
    vocabulary = build_vocabulary(train_captions, min_count)
    files.write_text(out / "vocab.txt", "\n".join(vocabulary) + "\n")
    for split, (image_ids, image_captions) in splits.items():
        files.write_json(out / f"{split}.captions.json", [{"id": i, "captions": [" ".join(c) for c in caps]}
                                                          for i, caps in zip(image_ids, image_captions)])
    meta = {"name": name, "task": "captioning", "min_count": min_count, "vocab_size": len(vocabulary),
            "words_in_train": len({w for c in train_captions for w in c}), "words_kept": len(vocabulary) - 4,
            "splits": {s: len(ids) for s, (ids, _) in splits.items()},
            "captions": {s: sum(len(c) for c in caps) for s, (_, caps) in splits.items()},
            "features": features_info, **(extra or {})}
    files.write_json(out / "prepared.json", meta)
    return meta


def load_meta(data_dir: str | Path) -> dict:
    import json

    path = Path(data_dir) / "prepared.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: prepare the captioning dataset first (resrepro prepare-captioning)")
    return json.loads(path.read_text())


def load_vocabulary(data_dir: str | Path) -> list[str]:
    return (Path(data_dir) / "vocab.txt").read_text().splitlines()


def load_split(data_dir: str | Path, split: str) -> CaptionSplit:
    import json

    data_dir = Path(data_dir)
    features = np.load(data_dir / f"{split}.features.npy", mmap_mode="r")
    entries = json.loads((data_dir / f"{split}.captions.json").read_text())
    return CaptionSplit(features, [e["id"] for e in entries], [[c.split() for c in e["captions"]] for e in entries])


THUMBNAILS = 6  # test images the report shows beside the captions each model gave them


def write_thumbnails(out_dir: str | Path, split: str, pictures: dict, image_format: str = "PNG") -> None:
    """{split}.thumbnails.json: image id -> the picture as a data URI, for the report's gallery."""
    import base64

    uris = {}
    for image_id, picture in pictures.items():
        buf = io.BytesIO()
        picture.save(buf, format=image_format)
        uris[image_id] = f"data:image/{image_format.lower()};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"
    files.write_json(Path(out_dir) / f"{split}.thumbnails.json", uris)


def load_thumbnails(data_dir: str | Path, split: str) -> dict[str, str]:
    """The split's thumbnails (image id -> data URI); none for a dataset prepared without them."""
    path = Path(data_dir) / f"{split}.thumbnails.json"
    return json.loads(path.read_text()) if path.exists() else {}


def training_pairs(split: CaptionSplit, vocabulary: list[str]) -> list[tuple[int, np.ndarray]]:
    """(image index, caption ids) for every caption of every image: each is one training example."""
    index = {w: i for i, w in enumerate(vocabulary)}
    return [(k, np.asarray(encode(c, index), dtype=np.int64)) for k, image in enumerate(split.captions) for c in image]


def prepare_scenes(out_dir: str | Path, seed: int = 0, images: dict[str, int] | None = None, grid: int = 4, pool: int = 2,
                   min_count: int = 5) -> dict:
    """The mini scale's dataset: seeded synthetic scenes (data/scenes.py), patch-grid features
    (data/features.py), each split from its own seed so that no test scene is a training scene."""
    from PIL import Image

    from . import features, scenes

    images = images or {"train": 2000, "val": 100, "test": 200}
    splits = {}
    for k, (split, n) in enumerate(images.items()):
        pixels, captions, _ = scenes.generate(n, seed * 1000 + k)
        ids = [f"{split}{i:05d}" for i in range(n)]
        splits[split] = CaptionSplit(features.patch_grid(pixels, grid, pool), ids, [[tokenize(c) for c in caps] for caps in captions])
        if split == "test":  # 32 pixels drawn 3 times larger, unblurred
            write_thumbnails(out_dir, split, {ids[i]: Image.fromarray(pixels[i]).resize((96, 96), Image.NEAREST)
                                              for i in range(min(THUMBNAILS, n))})
    info = {"kind": "patch_grid", "grid": grid, "pool": pool, "made_by": f"data/features.patch_grid: the 32x32 image averaged over "
            f"{pool}x{pool} pixels, {grid}x{grid} patches, pixels in [0, 1] and the patch's centre (row, column)"}
    return write_prepared(out_dir, "scenes", splits, min_count, info)
