"""What the classification loops read back from their tensors a step: on a GPU each read waits for
the step's kernels (a host sync). Counted on the CPU by patching torch.Tensor's readers."""

from __future__ import annotations

import collections

import pytest
import torch

from resrepro.train import classification, stacked
from test_train import digits, spec  # noqa: F401 (digits: a fixture, the prepared digits dataset)

READERS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")


@pytest.fixture
def reads(monkeypatch):
    """Counts tensor reads, except inside the per-epoch evaluation (its own batches, not the step's)."""
    counted = collections.Counter()
    paused = []
    for name in READERS:
        reader = getattr(torch.Tensor, name)

        def counting(self, *args, _reader=reader, _name=name, **kwargs):
            if not paused:
                counted[_name] += 1
            return _reader(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    for module, name in ((classification, "evaluate"), (stacked, "evaluate_stacked")):
        evaluate = getattr(module, name)

        def uncounted(*args, _evaluate=evaluate, **kwargs):
            paused.append(True)
            try:
                return _evaluate(*args, **kwargs)
            finally:
                paused.pop()

        monkeypatch.setattr(module, name, uncounted)
    return counted


def test_a_run_alone_reads_its_tensors_once_a_step(digits, tmp_path, reads):  # noqa: F811
    """The divergence check, once a step (it decides before the update whether there is one); the
    epoch's loss and error sums once an epoch. 1,297 digits at batch 128: 11 steps an epoch."""
    classification.train(spec(epochs=2, variant="sas", args={}), digits, tmp_path / "run", device="cpu", progress=False)
    assert sum(reads.values()) == 2 * 11 + 2 * 2


def test_runs_stacked_read_their_tensors_once_a_step(digits, tmp_path, reads):  # noqa: F811
    specs = [spec(epochs=2, variant="sas", args={}, seed=seed) for seed in (0, 1)]
    stacked.train_stacked(specs, digits, [tmp_path / "0", tmp_path / "1"], device="cpu", progress=False)
    assert sum(reads.values()) == 2 * 11 + 2 * 2
