"""Shared fixtures: tiny CIFAR archives written at test time in the real format (a .tar.gz of
Python 2 style protocol-2 pickles with bytes keys, as the Toronto files are). Nothing is downloaded.
And torch's process-wide settings restored after every test."""

from __future__ import annotations

import io
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def torch_process_settings():
    """torch keeps the thread count and the GPU's float32 matmul precision per process: a test
    that sets them (a benchmark's --threads, speed_of for a GPU) must not change the tests after it.
    test_train's in-process training compared with its subprocesses fails on 1 thread of 2."""
    threads, precision = torch.get_num_threads(), torch.backends.cuda.matmul.fp32_precision
    yield
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.fp32_precision = precision


class _Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 `str` opcodes (SHORT_BINSTRING/BINSTRING), as the real
    CIFAR files do; they load as bytes only with encoding="bytes"."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def _py2_pickle(obj) -> bytes:
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def _pixel(n: np.ndarray, c: np.ndarray, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A known value for image n, channel c, row h, column w: catches any axis mix-up."""
    return (n * 37 + c * 101 + h * 7 + w * 3) % 256


def _images(first: int, count: int) -> np.ndarray:
    """`count` images (numbered from `first`) as the archives store them: uint8 (count, 3072)."""
    n, c, h, w = np.meshgrid(np.arange(first, first + count), np.arange(3), np.arange(32),
                             np.arange(32), indexing="ij")
    return _pixel(n, c, h, w).astype(np.uint8).reshape(count, 3072)


def _add(tar: tarfile.TarFile, name: str, obj) -> None:
    payload = _py2_pickle(obj)
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))


PER_BATCH = 4
CIFAR10_NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer",
                 b"dog", b"frog", b"horse", b"ship", b"truck"]


def _cifar10_label(i: int) -> int:
    return (3 * i + 1) % 10


def _cifar100_label(i: int) -> int:
    return (7 * i + 5) % 100


@pytest.fixture
def cifar10_archive(tmp_path: Path) -> Path:
    path = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        names = [f"data_batch_{b}" for b in range(1, 6)] + ["test_batch"]
        for k, batch in enumerate(names):
            first = k * PER_BATCH
            _add(tar, f"cifar-10-batches-py/{batch}", {
                b"batch_label": f"batch {k + 1} of 5".encode(),
                b"labels": [_cifar10_label(i) for i in range(first, first + PER_BATCH)],
                b"data": _images(first, PER_BATCH),
                b"filenames": [f"img_{i}.png".encode() for i in range(first, first + PER_BATCH)],
            })
        _add(tar, "cifar-10-batches-py/batches.meta", {
            b"num_cases_per_batch": PER_BATCH, b"label_names": CIFAR10_NAMES, b"num_vis": 3072,
        })
    return path


@pytest.fixture
def cifar100_archive(tmp_path: Path) -> Path:
    path = tmp_path / "cifar-100-python.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for split, first, count in [("train", 0, 6), ("test", 6, 3)]:
            idx = range(first, first + count)
            _add(tar, f"cifar-100-python/{split}", {
                b"filenames": [f"img_{i}.png".encode() for i in idx],
                b"batch_label": f"{split}ing batch 1 of 1".encode(),
                b"fine_labels": [_cifar100_label(i) for i in idx],
                b"coarse_labels": [_cifar100_label(i) // 5 for i in idx],
                b"data": _images(first, count),
            })
        _add(tar, "cifar-100-python/meta", {
            b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
        })
    return path
