"""Image data layer: downloads, CIFAR/digits preparation, normalization, augmentation.

The CIFAR fixtures are tiny archives written at test time in the real format: a .tar.gz of
Python 2 style protocol-2 pickles with bytes keys (see _py2_pickle). Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import CIFAR10_NAMES, PER_BATCH, _cifar10_label, _cifar100_label, _pixel, _py2_pickle
from resrepro.data.cifar import prepare_cifar
from resrepro.data.digits import prepare_digits
from resrepro.data.download import ChecksumError, IncompleteDownload, fetch, md5_of, verify
from resrepro.data.images import (
    augment_batch,
    epoch_batches,
    iterate_batches,
    load_prepared,
    normalize,
    save_prepared,
    shifted,
)
from resrepro.data.mirror_server import serving

def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- CIFAR


def test_fixture_is_python2_style_pickle():
    # Under Python 3's default encoding the py2 str keys would come back as str, not bytes.
    blob = _py2_pickle({b"labels": [1], b"data": np.zeros((1, 3), np.uint8)})
    assert set(pickle.loads(blob, encoding="bytes")) == {b"labels", b"data"}
    assert set(pickle.loads(blob)) == {"labels", "data"}


def test_prepare_cifar10(cifar10_archive: Path, tmp_path: Path):
    out = tmp_path / "prepared" / "cifar10.pt"
    prepare_cifar(cifar10_archive, "cifar10", out)
    d = load_prepared(out)

    assert d["train_x"].shape == (5 * PER_BATCH, 3, 32, 32) and d["train_x"].dtype == torch.uint8
    assert d["test_x"].shape == (PER_BATCH, 3, 32, 32) and d["test_x"].dtype == torch.uint8
    assert d["train_y"].dtype == torch.int64 and d["test_y"].dtype == torch.int64
    assert d["train_y"].tolist() == [_cifar10_label(i) for i in range(20)]
    assert d["test_y"].tolist() == [_cifar10_label(i) for i in range(20, 24)]
    assert d["classes"] == [n.decode() for n in CIFAR10_NAMES]
    assert d["name"] == "cifar10" and "cifar-10-python.tar.gz" in d["source"]

    # Pixel layout: train image 7 (batch 2), channel 2 (blue), row 5, column 30.
    assert d["train_x"][7, 2, 5, 30].item() == _pixel(7, 2, 5, 30)
    n, c, h, w = np.meshgrid(np.arange(20), np.arange(3), np.arange(32), np.arange(32),
                             indexing="ij")
    assert np.array_equal(d["train_x"].numpy(), _pixel(n, c, h, w))
    assert d["test_x"][1, 0, 31, 0].item() == _pixel(21, 0, 31, 0)

    x = d["train_x"].double() / 255
    assert d["mean"] == pytest.approx(x.mean(dim=(0, 2, 3)).tolist())
    assert d["std"] == pytest.approx(x.std(dim=(0, 2, 3), correction=0).tolist())


def test_prepare_cifar100(cifar100_archive: Path, tmp_path: Path):
    out = tmp_path / "cifar100.pt"
    prepare_cifar(cifar100_archive, "cifar100", out)
    d = load_prepared(out)

    assert d["train_x"].shape == (6, 3, 32, 32) and d["test_x"].shape == (3, 3, 32, 32)
    assert d["train_y"].tolist() == [_cifar100_label(i) for i in range(6)]  # fine, not coarse
    assert d["test_y"].tolist() == [_cifar100_label(i) for i in range(6, 9)]
    assert d["classes"] == [f"fine{i}" for i in range(100)]
    assert d["test_x"][2, 1, 17, 4].item() == _pixel(8, 1, 17, 4)
    assert len(d["mean"]) == 3 and len(d["std"]) == 3


def test_prepare_cifar_wrong_archive_names_it(cifar10_archive: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="cifar-100-python/train"):
        prepare_cifar(cifar10_archive, "cifar100", tmp_path / "x.pt")
    with pytest.raises(ValueError, match="allowed"):
        prepare_cifar(cifar10_archive, "cifar1000", tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


# --------------------------------------------------------------------------- downloads


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "remote" / "file.tar.gz"
    path.parent.mkdir()
    path.write_bytes(bytes(range(256)) * 4096)  # 1 MiB: more than one read chunk
    return path


def test_fetch_downloads_then_reuses(source: Path, tmp_path: Path):
    md5 = _md5(source)
    dest = tmp_path / "downloads" / "file.tar.gz"
    assert fetch(source.as_uri(), dest, md5) == dest
    assert dest.read_bytes() == source.read_bytes()
    assert [p.name for p in dest.parent.iterdir()] == [dest.name]  # no temp file left

    source.unlink()  # a second call must not touch the URL
    assert fetch(source.as_uri(), dest, md5.upper()) == dest


def test_a_files_md5_is_the_published_digest(tmp_path: Path):
    """RFC 1321's test suite: md5("abc") = 900150983cd24fb0d6963f7d28e17f72; the empty file's d41d8cd9..."""
    (tmp_path / "abc").write_bytes(b"abc")
    (tmp_path / "empty").write_bytes(b"")
    assert md5_of(tmp_path / "abc") == "900150983cd24fb0d6963f7d28e17f72"
    assert md5_of(tmp_path / "empty") == "d41d8cd98f00b204e9800998ecf8427e"


def test_fetch_wrong_md5_removes_file_and_names_it(source: Path, tmp_path: Path):
    dest = tmp_path / "downloads" / "file.tar.gz"
    wrong = "0" * 32
    with pytest.raises(ChecksumError) as info:
        fetch(source.as_uri(), dest, wrong)
    message = str(info.value)
    assert str(dest) in message and wrong in message and _md5(source) in message
    assert list(dest.parent.iterdir()) == []


def test_fetch_replaces_truncated_file(source: Path, tmp_path: Path):
    dest = tmp_path / "file.tar.gz"
    dest.write_bytes(source.read_bytes()[:1000])  # an interrupted earlier download
    fetch(source.as_uri(), dest, _md5(source))
    assert dest.read_bytes() == source.read_bytes()


def test_fetch_network_error_names_url_and_mirror(tmp_path: Path):
    dest = tmp_path / "file.tar.gz"
    dest.write_bytes(b"corrupt")  # bad and unrecoverable: removed, not kept
    url = (tmp_path / "missing.tar.gz").as_uri()
    with pytest.raises(RuntimeError, match="mirror") as info:
        fetch(url, dest, "0" * 32)
    assert url in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_fetch_downloads_a_file_cut_short_again(source: Path, tmp_path: Path):
    dest = tmp_path / "downloads" / "file.tar.gz"
    with serving(source.parent, cut_short=["file.tar.gz"]) as server:
        fetch(server.url + "file.tar.gz", dest, _md5(source))
    assert len(server.requests) == 2 and dest.read_bytes() == source.read_bytes()


def test_fetch_of_a_file_short_of_its_declared_size_fails_and_leaves_nothing(source: Path, tmp_path: Path):
    dest = tmp_path / "downloads" / "file.tar.gz"
    declared = source.stat().st_size + 1
    with pytest.raises(IncompleteDownload, match=f"expected {declared:,} bytes, received {declared - 1:,}"):
        fetch(source.as_uri(), dest, _md5(source), size=declared)
    assert list(dest.parent.iterdir()) == []


def test_fetch_takes_a_local_path_as_a_url(source: Path, tmp_path: Path):
    dest = tmp_path / "downloads" / "file.tar.gz"
    fetch(str(source), dest, _md5(source))
    assert dest.read_bytes() == source.read_bytes()


def test_verify(source: Path):
    verify(source, _md5(source))
    with pytest.raises(ChecksumError, match=str(source)):
        verify(source, "f" * 32)


# --------------------------------------------------------------------------- digits


def test_prepare_digits(tmp_path: Path):
    prepare_digits(tmp_path / "a.pt")
    d = load_prepared(tmp_path / "a.pt")
    assert d["train_x"].shape == (1297, 1, 8, 8) and d["test_x"].shape == (500, 1, 8, 8)
    assert d["train_x"].dtype == torch.uint8 and d["train_y"].dtype == torch.int64
    assert d["classes"] == [str(i) for i in range(10)]
    assert set(d["train_y"].tolist()) == set(range(10))
    x = torch.cat([d["train_x"], d["test_x"]])
    assert x.max().item() == 240 and bool((x % 15 == 0).all())  # lossless value * 15
    assert len(d["mean"]) == 1 and len(d["std"]) == 1 and d["name"] == "digits"

    # All 1,797 images, once each: compare the sorted multiset of (image, label) rows.
    from sklearn.datasets import load_digits
    raw = load_digits()
    ours = torch.cat([x.flatten(1) // 15, torch.cat([d["train_y"], d["test_y"]])[:, None]], 1)
    theirs = np.concatenate([raw.data, raw.target[:, None]], 1).astype(np.int64)
    assert sorted(map(tuple, ours.tolist())) == sorted(map(tuple, theirs.tolist()))

    prepare_digits(tmp_path / "b.pt")
    again = load_prepared(tmp_path / "b.pt")
    for key in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(d[key], again[key])
    prepare_digits(tmp_path / "c.pt", split_seed=1)
    assert not torch.equal(d["test_y"], load_prepared(tmp_path / "c.pt")["test_y"])


# --------------------------------------------------------------------------- prepared format


def _tiny_fields() -> dict:
    return dict(
        train_x=torch.zeros(2, 1, 2, 2, dtype=torch.uint8), train_y=torch.tensor([0, 1]),
        test_x=torch.zeros(1, 1, 2, 2, dtype=torch.uint8), test_y=torch.tensor([1]),
        classes=["a", "b"], name="tiny", source="test",
    )


def test_save_load_roundtrip_weights_only(tmp_path: Path):
    save_prepared(tmp_path / "t.pt", **_tiny_fields())
    d = torch.load(tmp_path / "t.pt", weights_only=True)
    assert d["classes"] == ["a", "b"] and d["mean"] == [0.0] and d["std"] == [0.0]
    assert [p.name for p in tmp_path.iterdir()] == ["t.pt"]


def test_save_prepared_rejects_bad_labels(tmp_path: Path):
    fields = _tiny_fields() | {"train_y": torch.tensor([0, 2])}
    with pytest.raises(ValueError, match="train_y"):
        save_prepared(tmp_path / "t.pt", **fields)


def test_load_prepared_bad_files_name_the_file(tmp_path: Path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="garbage.pt"):
        load_prepared(garbage)

    partial = tmp_path / "partial.pt"
    torch.save({"train_x": torch.zeros(1)}, partial)
    with pytest.raises(ValueError, match=r"partial\.pt.*test_x"):
        load_prepared(partial)

    with pytest.raises(ValueError, match="absent.pt"):
        load_prepared(tmp_path / "absent.pt")


# --------------------------------------------------------------------------- normalize


def test_normalize_hand_computed():
    x = torch.tensor([[[[0, 255]], [[51, 102]]]], dtype=torch.uint8)  # (1, 2, 1, 2)
    out = normalize(x, mean=[0.5, 0.2], std=[0.5, 0.1])
    # channel 0: (0 - .5)/.5 = -1, (1 - .5)/.5 = 1;  channel 1: (.2 - .2)/.1 = 0, (.4 - .2)/.1 = 2
    assert out.dtype == torch.float32
    assert torch.allclose(out, torch.tensor([[[[-1.0, 1.0]], [[0.0, 2.0]]]]), atol=1e-6)
    assert torch.allclose(normalize(x[0], [0.5, 0.2], [0.5, 0.1]), out[0])  # (C, H, W) too


# --------------------------------------------------------------------------- augmentation


def _shifted(img: torch.Tensor, dy: int, dx: int, pad: int) -> torch.Tensor:
    """Reference crop, one pixel at a time: output (i, j) is padded input (i + dy, j + dx)."""
    c, h, w = img.shape
    out = torch.zeros_like(img)
    for i in range(h):
        for j in range(w):
            si, sj = i + dy - pad, j + dx - pad
            if 0 <= si < h and 0 <= sj < w:
                out[:, i, j] = img[:, si, sj]
    return out


def _image(c: int = 2, h: int = 3, w: int = 4) -> torch.Tensor:
    return torch.arange(1, c * h * w + 1, dtype=torch.float32).view(c, h, w)


def test_augment_identity_and_shape():
    x = torch.randn(5, 3, 6, 7)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(augment_batch(x, pad=0, flip=False, generator=g), x)
    assert augment_batch(x, pad=2, flip=True, generator=g).shape == x.shape


def test_augment_flip_gives_mirror_or_original():
    img = _image()
    x = img.expand(64, -1, -1, -1).contiguous()
    out = augment_batch(x, pad=0, flip=True, generator=torch.Generator().manual_seed(0))
    mirrored = torch.tensor([torch.equal(o, img.flip(-1)) for o in out])
    kept = torch.tensor([torch.equal(o, img) for o in out])
    assert bool((mirrored | kept).all()) and mirrored.any() and kept.any()
    # Hand-written mirror of the first row of channel 0: 1 2 3 4 -> 4 3 2 1.
    assert out[mirrored][0, 0, 0].tolist() == [4.0, 3.0, 2.0, 1.0]


def test_augment_crops_are_zero_bordered_shifts():
    pad, img = 1, _image()
    x = img.expand(200, -1, -1, -1).contiguous()
    out = augment_batch(x, pad=pad, flip=False, generator=torch.Generator().manual_seed(1))
    shifts = {(dy, dx): _shifted(img, dy, dx, pad) for dy in range(3) for dx in range(3)}
    seen = {k for o in out for k, ref in shifts.items() if torch.equal(o, ref)}
    assert len(seen) == 9  # every offset occurs, and (below) nothing else does
    assert all(any(torch.equal(o, ref) for ref in shifts.values()) for o in out)

    # Offset (0, 0): the image moves one pixel down and right, zeros enter at top and left.
    by_hand = torch.tensor([[0, 0, 0, 0],
                            [0, 1, 2, 3],
                            [0, 5, 6, 7]], dtype=torch.float32)
    assert torch.equal(shifts[(0, 0)][0], by_hand)
    assert any(torch.equal(o[0], by_hand) for o in out)


def test_augment_crop_and_flip_together():
    pad, img = 2, _image()
    x = img.expand(100, -1, -1, -1).contiguous()
    out = augment_batch(x, pad=pad, flip=True, generator=torch.Generator().manual_seed(2))
    refs = [r for dy in range(5) for dx in range(5)
            for r in (_shifted(img, dy, dx, pad), _shifted(img, dy, dx, pad).flip(-1))]
    assert all(any(torch.equal(o, r) for r in refs) for o in out)


def test_augment_deterministic_per_seed():
    x = torch.randn(16, 3, 8, 8)
    a = augment_batch(x, 2, True, torch.Generator().manual_seed(7))
    b = augment_batch(x, 2, True, torch.Generator().manual_seed(7))
    c = augment_batch(x, 2, True, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_augment_same_on_gpu():
    x = torch.randn(16, 3, 8, 8)
    cpu = augment_batch(x, 2, True, torch.Generator().manual_seed(3))
    gpu = augment_batch(x.cuda(), 2, True, torch.Generator().manual_seed(3))
    assert gpu.device.type == "cuda" and torch.equal(gpu.cpu(), cpu)


# --------------------------------------------------------------------------- batches


def test_iterate_batches():
    batches = iterate_batches(10, 4, torch.Generator().manual_seed(0))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(10))
    again = iterate_batches(10, 4, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(batches, again))
    g = torch.Generator().manual_seed(0)
    first, second = iterate_batches(10, 10, g), iterate_batches(10, 10, g)
    assert not torch.equal(first[0], second[0])  # reshuffled each epoch


@pytest.mark.parametrize("pad, flip", [(0, False), (0, True), (2, False), (4, True)])
def test_an_epochs_draws_at_once_are_those_batch_by_batch(pad, flip):
    """epoch_batches draws the permutation, then each batch's crops and flips, as a loop calling
    iterate_batches then augment_batch batch by batch did: the same batches, the same augmented
    images, and the generator where that loop left it."""
    x = torch.rand(10, 3, 8, 8)
    ahead, batchwise = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    drawn = epoch_batches(10, 4, pad, flip, ahead, torch.device("cpu"))
    for (idx, *draws), expected_idx in zip(drawn, iterate_batches(10, 4, batchwise)):
        assert torch.equal(idx, expected_idx)
        assert torch.equal(shifted(x[idx], pad, *draws), augment_batch(x[expected_idx], pad, flip, batchwise))
        assert [d is None for d in draws] == [pad == 0, pad == 0, not flip]
    assert len(drawn) == 3 and torch.equal(ahead.get_state(), batchwise.get_state())
