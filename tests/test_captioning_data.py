"""Captioning data: the synthetic scenes, words and vocabulary, patch features, the prepared format,
and MSCOCO's path (Karpathy's json, images in COCO's zips, a backbone's grid, bottom-up TSV files)
on fixtures in the real formats."""

import base64
import io
import json
import zipfile

import numpy as np
import pytest

from resrepro.data import backbones, captions, coco, features, scenes
from resrepro.data.download import ChecksumError


def test_scenes_are_seeded_and_captions_name_what_is_drawn():
    images, caps, things = scenes.generate(30, seed=7)
    again, caps_again, _ = scenes.generate(30, seed=7)
    assert images.shape == (30, 32, 32, 3) and images.dtype == np.uint8
    assert np.array_equal(images, again) and caps == caps_again
    assert not np.array_equal(images, scenes.generate(30, seed=8)[0])
    for image_caps, scene in zip(caps, things):
        assert len(image_caps) == 5 and len(set(image_caps)) == 5  # five templates, no two alike
        words = " ".join(image_caps).split()
        for thing in scene:  # every shape is named by its colour or a synonym of its noun somewhere
            assert thing.colour in words or any(n in words for n in scenes.NOUNS[thing.shape])


def test_a_drawn_shape_has_its_colour_where_it_is_placed():
    rng = np.random.Generator(np.random.PCG64(0))
    image = scenes.draw([scenes.Thing("square", "red", "large", "left")], rng).astype(float)
    left, right = image[12:20, 5:12].mean(axis=(0, 1)), image[12:20, 20:28].mean(axis=(0, 1))
    assert left[0] > 180 and left[1] < 90 and left[2] < 90  # red on the left
    assert right.max() < 80  # dark background on the right


def test_tokenize_vocabulary_encode_decode():
    assert captions.tokenize("A man, riding a Horse.") == ["a", "man", "riding", "a", "horse"]
    caps = [["a", "dog"], ["a", "cat"], ["a", "dog", "runs"]]
    # a: 3, dog: 2, cat: 1, runs: 1 -> min_count 2 keeps a, dog (most frequent first)
    vocab = captions.build_vocabulary(caps, min_count=2)
    assert vocab == ["<pad>", "<s>", "</s>", "<unk>", "a", "dog"]
    assert captions.build_vocabulary(caps, min_count=1)[4:] == ["a", "dog", "cat", "runs"]  # ties alphabetical
    index = {w: i for i, w in enumerate(vocab)}
    assert captions.encode(["a", "cat", "dog"], index) == [4, 3, 5]
    assert captions.decode([1, 4, 3, 5, 2, 4], vocab) == "a <unk> dog"  # BOS dropped, stops at EOS


def test_patch_grid_by_hand():
    image = np.arange(4 * 4 * 1, dtype=np.uint8).reshape(1, 4, 4, 1)  # one channel, values 0..15
    grid = features.patch_grid(image, 2)
    assert grid.shape == (1, 4, 4 + 2)
    # patch (0, 0): pixels 0, 1, 4, 5; patch (0, 1): 2, 3, 6, 7; centres (0.25, 0.25), (0.25, 0.75)
    assert np.allclose(grid[0, 0], [0 / 255, 1 / 255, 4 / 255, 5 / 255, 0.25, 0.25])
    assert np.allclose(grid[0, 1], [2 / 255, 3 / 255, 6 / 255, 7 / 255, 0.25, 0.75])
    assert np.allclose(grid[0, 2, -2:], [0.75, 0.25]) and np.allclose(grid[0, 3, :4], np.array([10, 11, 14, 15]) / 255)
    with pytest.raises(ValueError, match="does not cut"):
        features.patch_grid(np.zeros((1, 5, 5, 3), np.uint8), 2)
    pooled = features.patch_grid(image, 2, pool=2)  # 2x2 means: 2.5, 4.5, 10.5, 12.5, one pixel a patch
    assert pooled.shape == (1, 4, 1 + 2) and np.allclose(pooled[0, :, 0] * 255, [2.5, 4.5, 10.5, 12.5])
    with pytest.raises(ValueError, match="does not pool"):
        features.patch_grid(np.zeros((1, 6, 6, 3), np.uint8), 3, pool=4)


def test_prepared_scenes_round_trip(tmp_path):
    meta = captions.prepare_scenes(tmp_path, seed=3, images={"train": 60, "val": 5, "test": 6}, min_count=3)
    assert meta["splits"] == {"train": 60, "val": 5, "test": 6} and meta["captions"]["train"] == 300
    assert meta["features"] == {**meta["features"], "kind": "patch_grid", "regions": 16, "dim": 4 * 4 * 3 + 2}
    vocab = captions.load_vocabulary(tmp_path)
    assert vocab[:4] == ["<pad>", "<s>", "</s>", "<unk>"] and len(vocab) == meta["vocab_size"]
    test = captions.load_split(tmp_path, "test")
    assert test.features.shape == (6, 16, 50) and test.features.dtype == np.float16
    pixels, caps, _ = scenes.generate(6, 3 * 1000 + 2)  # the test split's own seed
    assert np.allclose(test.features, features.patch_grid(pixels, 4, pool=2), atol=1e-3)
    assert test.captions[0] == [captions.tokenize(c) for c in caps[0]]
    pairs = captions.training_pairs(test, vocab)
    assert len(pairs) == 30 and pairs[5][0] == 1  # five captions an image, in image order
    thumbs = captions.load_thumbnails(tmp_path, "test")
    assert list(thumbs) == [f"test{i:05d}" for i in range(6)] and captions.load_thumbnails(tmp_path, "train") == {}
    picture = picture_of(thumbs["test00002"])
    assert picture.format == "PNG" and picture.size == (96, 96)
    assert np.array_equal(np.asarray(picture)[::3, ::3], pixels[2])  # the scene itself, each pixel drawn 3 x 3


def picture_of(uri: str):
    from PIL import Image

    kind, data = uri.split(",", 1)
    assert kind in ("data:image/png;base64", "data:image/jpeg;base64")
    return Image.open(io.BytesIO(base64.b64decode(data)))


# ---------------------------------------------------------------------------------- MSCOCO


def _jpeg(seed: int) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (40, 56, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG")
    return buf.getvalue()


@pytest.fixture
def coco_raw(tmp_path):
    """COCO's layout: train2014.zip / val2014.zip of JPEGs (one corrupt) and caption_datasets.zip
    holding a dataset_coco.json with every Karpathy split (restval included)."""
    entries = []
    layout = [("train2014", "train", 9), ("train2014", "restval", 30), ("train2014", "train", 167126),  # the corrupt one
              ("val2014", "val", 42), ("val2014", "test", 73), ("val2014", "test", 74)]
    zips = {"train2014": zipfile.ZipFile(tmp_path / "train2014.zip", "w"), "val2014": zipfile.ZipFile(tmp_path / "val2014.zip", "w")}
    for k, (folder, split, cocoid) in enumerate(layout):
        name = f"COCO_{folder}_{cocoid:012d}.jpg"
        zips[folder].writestr(f"{folder}/{name}", b"not a jpeg" if cocoid == 167126 else _jpeg(k))
        sentences = [{"tokens": ["a", "dog", "on", "grass"]}, {"tokens": ["a", "dog", "running"]}, {"tokens": [f"word{k}"]},
                     {"tokens": ["a", "dog"]}, {"tokens": ["a", "brown", "dog"]}]
        entries.append({"filepath": folder, "filename": name, "cocoid": cocoid, "split": split, "sentences": sentences, "imgid": k})
    for z in zips.values():
        z.close()
    with zipfile.ZipFile(tmp_path / "caption_datasets.zip", "w") as z:
        z.writestr("dataset_coco.json", json.dumps({"images": entries, "dataset": "coco"}))
    return tmp_path


def test_fetch_coco_looks_inside_each_zip_before_recording_it(coco_raw, tmp_path):
    """caption_datasets.zip answers 404 at its original address: a mirror that serves an HTML page,
    or a zip without dataset_coco.json, must not become the trusted file."""
    from resrepro.data.translation import read_lock

    lock, raw = tmp_path / "lock.json", tmp_path / "raw"
    coco.fetch_coco(raw, mirror=str(coco_raw), lock_path=lock)
    assert sorted(read_lock(lock)) == ["mscoco/caption_datasets.zip", "mscoco/train2014.zip", "mscoco/val2014.zip"]
    for bad, why in ((b"<html><body>404 Not Found</body></html>", "not a readable tar or zip archive"),
                     (None, r"no member \*dataset_coco.json inside")):
        mirror = tmp_path / f"mirror-{why[:6]}"
        mirror.mkdir()
        for name in ("train2014.zip", "val2014.zip"):
            (mirror / name).write_bytes((coco_raw / name).read_bytes())
        if bad is None:
            with zipfile.ZipFile(mirror / "caption_datasets.zip", "w") as z:
                z.writestr("dataset_flickr8k.json", "{}")
        else:
            (mirror / "caption_datasets.zip").write_bytes(bad)
        fresh_lock = tmp_path / f"lock-{why[:6]}.json"
        with pytest.raises(ValueError, match=f"caption_datasets.zip \\(downloaded from .*; removed, nothing recorded\\): {why}"):
            coco.fetch_coco(tmp_path / f"raw-{why[:6]}", mirror=str(mirror), lock_path=fresh_lock)
        assert "mscoco/caption_datasets.zip" not in read_lock(fresh_lock)


def test_karpathy_splits_fold_restval_into_train(coco_raw):
    splits = coco.read_karpathy(coco_raw / "caption_datasets.zip")
    assert [i.cocoid for i in splits["train"]] == [9, 30, 167126]
    assert [i.cocoid for i in splits["val"]] == [42] and [i.cocoid for i in splits["test"]] == [73, 74]
    assert splits["val"][0].member == "val2014/COCO_val2014_000000000042.jpg"
    assert splits["train"][0].captions[0] == ("a", "dog", "on", "grass")


def test_prepare_coco_with_a_backbone_grid_leaves_out_what_cannot_be_read(coco_raw, tmp_path):
    import torch

    out = tmp_path / "prepared"
    # resnet18 without weights (no download in a test) at 64 px: a 2 x 2 grid of 512 channels
    torch.manual_seed(0)
    meta = coco.prepare_coco(coco_raw, out, features="grid", backbone={"name": "resnet18", "weights": None, "size": 64},
                             min_count=3, batch=2, device="cpu")
    assert meta["splits"] == {"train": 2, "val": 1, "test": 2}
    assert meta["left_out"] == ["train2014/COCO_train2014_000000167126.jpg"]
    assert meta["features"]["regions"] == 4 and meta["features"]["dim"] == 512 + 2
    thumbs = captions.load_thumbnails(out, "test")  # the readable test images, at most 160 pixels a side
    assert list(thumbs) == captions.load_split(out, "test").image_ids
    assert all(picture_of(u).format == "JPEG" and max(picture_of(u).size) <= 160 for u in thumbs.values())
    train = captions.load_split(out, "train")
    assert train.image_ids == ["9", "30"] and train.features.shape == (2, 4, 514)
    assert np.allclose(train.features[0, :, -2:], [[0.25, 0.25], [0.25, 0.75], [0.75, 0.25], [0.75, 0.75]])
    # words of the 2 kept train images (10 captions): a and dog 8 times, on, grass, running, brown
    # twice, word0 and word1 once (the corrupt image's word2 is not counted); at least 3: a, dog
    assert captions.load_vocabulary(out)[4:] == ["a", "dog"]
    assert meta["words_in_train"] == 8 and meta["words_kept"] == 2
    # the features are the backbone's last map: the same image through the same (seeded) net
    torch.manual_seed(0)
    backbone = coco.GridBackbone("resnet18", None, 64, "cpu")
    (_, image), = list(coco.read_images(coco_raw, coco.read_karpathy(coco_raw / "caption_datasets.zip")["train"][:1]))
    assert np.allclose(train.features[0], backbone([image])[0], rtol=2e-3, atol=2e-3)


def test_features_that_float16_cannot_hold_stop_the_preparation_naming_the_images(coco_raw, tmp_path, monkeypatch):
    """Stored as float16, a feature over 65,504 becomes inf: the rehearsal's first fake ResNet-101
    (random weights) gave 11% non-finite features and captioners that diverged at their first update."""
    import torch

    real_call = coco.GridBackbone.__call__
    monkeypatch.setattr(coco.GridBackbone, "__call__", lambda self, images: real_call(self, images) * 1e6)
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"features not finite in float16 .* for 2 of 2 images, e\.g\. train2014/COCO_train2014_000000000009\.jpg"):
        coco.prepare_coco(coco_raw, tmp_path / "prepared", features="grid", backbone={"name": "resnet18", "weights": None, "size": 64},
                          min_count=3, batch=2, device="cpu")
    assert not (tmp_path / "prepared" / "prepared.json").exists()


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No network, and an empty torch hub cache: any download attempt fails."""
    import socket

    def refuse(*args, **kwargs):
        raise OSError("this test has no network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))


def test_prepare_coco_reads_the_backbone_weights_from_the_fetched_file_offline(coco_raw, tmp_path, offline):
    import torch
    import torchvision

    backbone = {"name": "resnet18", "weights": "IMAGENET1K_V1", "size": 64}
    weights = backbones.weights_path(backbone, tmp_path / "backbones")
    assert weights.name == "resnet18.IMAGENET1K_V1.pth"
    weights.parent.mkdir()
    torch.manual_seed(1)
    state = torchvision.models.resnet18().state_dict()  # random, in place of ImageNet's
    torch.save(state, weights)
    meta = coco.prepare_coco(coco_raw, tmp_path / "prepared", features="grid", backbone=backbone, min_count=3, batch=2,
                             device="cpu", weights_file=weights)
    assert meta["features"]["weights_file"] == weights.name and meta["features"]["dim"] == 512 + 2
    loaded = backbones.load_backbone("resnet18", "IMAGENET1K_V1", weights).state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    with pytest.raises(ValueError, match="fetch_backbone"):  # pretrained weights without their file: no download
        coco.GridBackbone("resnet18", "IMAGENET1K_V1", 64, "cpu")


def test_fetch_backbone_verifies_the_hash_prefix_in_the_file_name(tmp_path, monkeypatch, offline):
    import hashlib

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    content = b"weights" * 1000
    name = f"resnet18-{hashlib.sha256(content).hexdigest()[:8]}.pth"  # torchvision's naming
    (mirror / name).write_bytes(content)
    monkeypatch.setattr(backbones, "weights_url", lambda model, weights: f"https://download.pytorch.org/models/{name}")
    dest = tmp_path / "backbones" / "resnet18.IMAGENET1K_V1.pth"
    assert backbones.fetch_backbone("resnet18", "IMAGENET1K_V1", dest, mirror=str(mirror)) == dest
    assert dest.read_bytes() == content
    dest.unlink()
    (mirror / name).write_bytes(b"something else")
    with pytest.raises(ChecksumError, match="sha256") as err:
        backbones.fetch_backbone("resnet18", "IMAGENET1K_V1", dest, mirror=str(mirror))
    assert str(dest) in str(err.value) and not list(dest.parent.iterdir())


def _tsv_row(cocoid: int, boxes: np.ndarray, feats: np.ndarray, w: int, h: int) -> str:
    b64 = lambda a: base64.b64encode(np.ascontiguousarray(a, dtype=np.float32).tobytes()).decode()  # noqa: E731
    return "\t".join([str(cocoid), str(w), str(h), str(len(boxes)), b64(boxes), b64(feats)]) + "\n"


def test_bottom_up_tsv_features_get_box_centres_and_padding(coco_raw, tmp_path):
    rng = np.random.default_rng(0)
    tsv = tmp_path / "trainval.tsv"
    rows = []
    for cocoid, n in ((9, 3), (30, 2), (42, 3), (73, 1), (74, 2)):  # 167126 has no boxes: left out
        boxes = np.array([[0, 0, 50, 100]] * n, dtype=np.float32)  # x1, y1, x2, y2 in a 200 x 100 (w x h) image
        rows.append(_tsv_row(cocoid, boxes, rng.normal(size=(n, 6)), 200, 100))
    tsv.write_text("".join(rows))
    read = coco.read_bottom_up([tsv])
    assert read[9].shape == (3, 8) and np.allclose(read[9][0, -2:], [0.5, 0.125])  # centre row 50/100, column 25/200
    meta = coco.prepare_coco(coco_raw, tmp_path / "bu", features="bottom_up", bottom_up=[str(tsv)], min_count=2)
    assert meta["features"]["regions"] == 3 and meta["features"]["dim"] == 8
    assert meta["left_out"] == ["train2014/COCO_train2014_000000167126.jpg"]
    test = captions.load_split(tmp_path / "bu", "test")
    assert np.allclose(test.features[0, 0], read[73][0], atol=1e-2) and not test.features[0, 1:].any()  # padded with zeros
    with pytest.raises(ValueError, match="bottom_up_tsv|TSV"):
        coco.prepare_coco(coco_raw, tmp_path / "none", features="bottom_up")
