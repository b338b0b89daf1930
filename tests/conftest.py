"""Shared fixtures: tiny CIFAR archives written at test time in the real format (a .tar.gz of
Python 2 style protocol-2 pickles with bytes keys, as the Toronto files are; written by
resrepro.data.fake_sources, whose known pixel values here catch any axis mix-up). Nothing is
downloaded. And torch's process-wide settings restored after every test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from resrepro.data.fake_sources import CIFAR10_LABEL_NAMES, write_cifar_archive

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one torch thread a test worker, in it and in the processes its tests start: with torch's
    # default, a thread per core, the workers' threads wait on each other (make test on 2 cores:
    # 13.3 min, 10.5 with one thread; small float64 kernels 20-100x slower)
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
from resrepro.data.fake_sources import py2_pickle as _py2_pickle  # noqa: F401  (tests/test_data.py imports it from here)

# --------------------------------------------------------------------------- the live config

LIVE_CONFIG = str(Path(__file__).resolve().parents[1] / "config") + os.sep
MAY_READ_LIVE_CONFIG = ("config", "integration", "slurm", "rehearsal", "gpu")
_refusing: list = []  # the running test's reads of config/ (a list while it may not read it, else empty)


class LiveConfigRead(AssertionError):
    """Not an OSError: pathlib's glob would swallow one and find no tables."""


def _refuse_live_config(event: str, args: tuple) -> None:
    """An audit hook: a unit test reads tests/fixtures/config, so that editing the papers' data or a
    scale breaks only the tests marked `config`; and it starts no Snakemake."""
    if not _refusing:
        return
    if event in ("open", "os.listdir", "os.scandir") and isinstance(args[0], (str, bytes, os.PathLike)):
        if os.path.abspath(os.fsdecode(args[0])).startswith(LIVE_CONFIG):
            _refusing.append(os.fsdecode(args[0]))
            raise LiveConfigRead(f"a unit test read the live config ({os.fsdecode(args[0])}): read tests/fixtures/config, "
                                 "or mark the test `config` if it checks the project's own files")
    elif event == "subprocess.Popen" and _program(args[0], args[1]) == "snakemake":
        _refusing.append("snakemake")
        raise LiveConfigRead("a unit test started Snakemake: mark it `integration`")


def _program(executable, argv) -> str:
    first = executable or (argv.split()[0] if isinstance(argv, (str, bytes)) else argv[0])
    return Path(os.fsdecode(first)).name


sys.addaudithook(_refuse_live_config)


def _may_read_live_config(item) -> bool:
    return any(item.get_closest_marker(m) for m in MAY_READ_LIVE_CONFIG)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """From the setup of a test not marked `config` (or integration, slurm, rehearsal, gpu), module
    fixtures included, to its teardown, config/ is refused."""
    if not _may_read_live_config(item):
        _refusing.append(None)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Fails the test where the code that read config/ caught the error."""
    result = yield
    reads = [r for r in _refusing if r]
    assert not reads, f"read the live config: {reads[:3]}"
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        _refusing.clear()


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


def _pixel(n: np.ndarray, c: np.ndarray, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A known value for image n, channel c, row h, column w: catches any axis mix-up."""
    return (n * 37 + c * 101 + h * 7 + w * 3) % 256


def _images(first: int, count: int) -> np.ndarray:
    """`count` images (numbered from `first`) as the archives store them: uint8 (count, 3072)."""
    n, c, h, w = np.meshgrid(np.arange(first, first + count), np.arange(3), np.arange(32),
                             np.arange(32), indexing="ij")
    return _pixel(n, c, h, w).astype(np.uint8).reshape(count, 3072)


PER_BATCH = 4
CIFAR10_NAMES = [n.encode() for n in CIFAR10_LABEL_NAMES]


def _cifar10_label(i: int) -> int:
    return (3 * i + 1) % 10


def _cifar100_label(i: int) -> int:
    return (7 * i + 5) % 100


@pytest.fixture
def cifar10_archive(tmp_path: Path) -> Path:
    train = [(_images(k * PER_BATCH, PER_BATCH), [_cifar10_label(i) for i in range(k * PER_BATCH, (k + 1) * PER_BATCH)])
             for k in range(5)]
    test = (_images(5 * PER_BATCH, PER_BATCH), [_cifar10_label(i) for i in range(5 * PER_BATCH, 6 * PER_BATCH)])
    return write_cifar_archive(tmp_path / "cifar-10-python.tar.gz", "cifar10", train, test,
                               [n.decode() for n in CIFAR10_NAMES])


@pytest.fixture
def cifar100_archive(tmp_path: Path) -> Path:
    train, test = [(_images(0, 6), [_cifar100_label(i) for i in range(6)])], (_images(6, 3), [_cifar100_label(i) for i in range(6, 9)])
    return write_cifar_archive(tmp_path / "cifar-100-python.tar.gz", "cifar100", train, test, [f"fine{i}" for i in range(100)],
                               coarse_label_names=[f"coarse{i}" for i in range(20)], coarse_of=[i // 5 for i in range(100)])
