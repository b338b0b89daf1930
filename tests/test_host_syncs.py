"""What the classification loops read back from their tensors a step: on a GPU each read waits for
the step's kernels (a host sync). Counted on the CPU by patching torch.Tensor's readers."""

from __future__ import annotations

import collections
import sys

import pytest
import torch

from resrepro.train import classification, stacked, translation
from test_train import digits, spec  # noqa: F401 (digits: a fixture, the prepared digits dataset)

READERS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy")


@pytest.fixture
def reads(monkeypatch):
    """Counts tensor reads, except inside the per-epoch evaluation (its own batches, not the step's)
    and the epoch's batching (a CPU generator's draw, on the host on any device)."""
    counted = collections.Counter()
    paused = []
    for name in READERS:
        reader = getattr(torch.Tensor, name)

        def counting(self, *args, _reader=reader, _name=name, **kwargs):
            if not paused:
                counted[_name] += 1
            return _reader(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    for module, name in ((classification, "evaluate"), (stacked, "evaluate_stacked"), (translation, "token_batches")):
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


@pytest.fixture
def copies(monkeypatch):
    """Counts the training loops' Tensor.to calls that name a device (those in resrepro's train/ and
    data/, not torch's moving a module): on a GPU, a copy from pageable host memory waits for the
    device, so each index or augmentation tensor copied a step was a host sync."""
    counted = []
    to = torch.Tensor.to

    def counting(self, *args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
        if ("resrepro/train/" in caller or "resrepro/data/" in caller) and any(
                isinstance(a, (torch.device, str)) for a in (*args, kwargs.get("device"))):
            counted.append(tuple(self.shape))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", counting)
    return counted


def test_a_run_copies_its_batches_indices_and_augmentation_once_an_epoch(digits, tmp_path, copies):  # noqa: F811
    """The dataset's four tensors once, then one copy an epoch (1,297 examples: their indices and
    crop offsets and flip coins, packed): before, three copies a step."""
    classification.train(spec(epochs=2, variant="add", args={}, augment_flip=True), digits, tmp_path / "run", device="cpu", progress=False)
    assert copies.count((1297, 4)) == 2 and len(copies) == 4 + 2, copies


def test_runs_stacked_copy_their_draws_once_an_epoch_each(digits, tmp_path, copies):  # noqa: F811
    specs = [spec(epochs=2, variant="add", args={}, seed=seed, augment_flip=True) for seed in (0, 1)]
    stacked.train_stacked(specs, digits, [tmp_path / "0", tmp_path / "1"], device="cpu", progress=False)
    assert copies.count((1297, 4)) == 2 * 2, copies


@pytest.fixture
def tiny_transformer(monkeypatch):
    from resrepro.models import transformer

    monkeypatch.setitem(transformer.PRESETS, "base_2block", dict(d_model=32, heads=4, ffn=64, encoder_layers=2, decoder_layers=2, dropout=0.1))


@pytest.fixture
def pairs():
    from test_train_translation import corpus

    return corpus(300, 0), corpus(30, 1)


def test_a_translation_run_reads_its_tensors_once_an_update(tmp_path, tiny_transformer, pairs, reads):
    """The divergence check once an update, whatever its batches (update_freq 2); at each of the
    3 checkpoints the loss sum and the dev loss once each. The token counts come from the lengths.
    With the fused Adam a GPU run takes by default (torch's other Adams read their step counter)."""
    from test_train_translation import spec as translation_spec

    recipe = translation_spec(max_updates=12, checkpoint_every=4, variant="add", args={}, fused_optimizer=True)
    translation.train(recipe, *pairs, 26,
                      tmp_path / "run", device="cpu", progress=False)
    assert sum(reads.values()) == 12 + 3 * 2, reads


def test_self_critical_decodes_greedy_and_sampled_captions_reading_one_flag_pair_a_step(reads):
    """Both decodes as one batch: the sources' lengths once, the running flags once a step (9 steps:
    nothing reaches EOS in an untrained captioner), the tokens once at the end."""
    from test_captioning import captioner
    from resrepro.evaluate.beam_search import greedy_and_sample

    model, feats = captioner(), torch.rand(4, 5, 10) + 0.1
    reads.clear()
    greedy_caps, samples = greedy_and_sample(model, feats, 1, 2, 0.0, 9, torch.Generator().manual_seed(0))
    assert {len(c) for c in greedy_caps + samples} == {9}
    assert sum(reads.values()) == 1 + 9 + 1, reads


def test_an_evaluation_reads_its_sums_once_whatever_its_batches():
    """The loss and error sums stay on the device: two reads an evaluation (before: two a batch)."""
    from resrepro.evaluate.classification import evaluate

    counted = collections.Counter()
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 10))
    x, y = torch.randint(0, 256, (50, 3, 2, 2), dtype=torch.uint8), torch.randint(0, 10, (50,))
    with pytest.MonkeyPatch.context() as patch:
        for name in READERS:
            patch.setattr(torch.Tensor, name, lambda self, *a, _name=name, _reader=getattr(torch.Tensor, name), **k:
                          counted.update([_name]) or _reader(self, *a, **k))
        evaluate(model, x, y, [0.5] * 3, [0.25] * 3, batch_size=8)
    assert sum(counted.values()) == 2, counted
