"""Translation training contracts: token batching, the schedule, resume bit-identically, divergence."""

import pytest
import torch

from resrepro import models
from resrepro.models import transformer
from resrepro.train import translation
from resrepro.train.translation import collate, inverse_sqrt_lr, token_batches, train


@pytest.fixture(autouse=True)
def tiny_preset(monkeypatch):
    monkeypatch.setitem(transformer.PRESETS, "base_2block", dict(d_model=32, heads=4, ffn=64, encoder_layers=2, decoder_layers=2, dropout=0.1))


def corpus(n, seed):
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        length = int(torch.randint(3, 10, (1,), generator=g))
        src = torch.randint(4, 24, (length,), generator=g).tolist()
        pairs.append((src, [x + 1 for x in reversed(src)]))  # a reversing "language"
    return pairs


def spec(**over):
    base = dict(task="translation", model="transformer", size="base_2block", variant="rskip_ln", args={"lam": 2}, seed=0, max_tokens=300,
                update_freq=2, warmup=50, lr_scale=1.0, label_smoothing=0.1, max_updates=24, checkpoint_every=8,
                keep_checkpoints=2, pad_id=0, bos_id=1, eos_id=2)
    return {**base, **over}


def test_inverse_sqrt_schedule():
    d, warmup = 512, 4000
    assert inverse_sqrt_lr(1, d, warmup) == pytest.approx(d**-0.5 * warmup**-1.5)
    assert inverse_sqrt_lr(warmup, d, warmup) == pytest.approx(d**-0.5 * warmup**-0.5)  # the peak
    assert inverse_sqrt_lr(4 * warmup, d, warmup) == pytest.approx(inverse_sqrt_lr(warmup, d, warmup) / 2)
    assert inverse_sqrt_lr(warmup, d, warmup, scale=0.5) == pytest.approx(0.5 * d**-0.5 * warmup**-0.5)  # lr_scale
    assert inverse_sqrt_lr(0, d, warmup) == inverse_sqrt_lr(1, d, warmup)  # steps count from 1


def test_token_batches_respect_the_budget_and_cover_every_sentence():
    lengths = [(int(a), int(b)) for a, b in torch.randint(1, 40, (500, 2)).tolist()]
    batches = token_batches(lengths, 200, torch.Generator().manual_seed(0))
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        assert len(b) == 1 or max(max(lengths[i]) for i in b) * len(b) <= 200
    assert batches == token_batches(lengths, 200, torch.Generator().manual_seed(0))


def test_token_batches_pack_sentences_in_length_order_up_to_the_budget_inclusive():
    # by longest side: 1 (1,1), 0 (3,2), then 2 and 4 (longest 4), 3 (5,5). 1+0: 3 x 2 = 6 <= 8;
    # adding 2 would make 4 x 3 = 12; 2+4: 4 x 2 = 8, exactly the budget; 3 alone.
    lengths = [(3, 2), (1, 1), (2, 4), (5, 5), (4, 1)]
    batches = token_batches(lengths, 8, torch.Generator().manual_seed(0))
    assert sorted(batches) == [[1, 0], [2, 4], [3]]


def test_collate_appends_eos_to_sources_and_shifts_targets_for_teacher_forcing():
    pad, bos, eos = 0, 1, 2
    pairs = [([5, 6, 7], [8]), ([9], [10, 11])]
    src, tgt_in, tgt_out = collate(pairs, [1, 0], pad, bos, eos)
    assert src.tolist() == [[9, 2, 0, 0], [5, 6, 7, 2]]
    assert tgt_in.tolist() == [[1, 10, 11], [1, 8, 0]]
    assert tgt_out.tolist() == [[10, 11, 2], [8, 2, 0]]


def test_resume_after_a_kill_is_bit_identical(tmp_path, monkeypatch):
    train_pairs, dev_pairs = corpus(300, 0), corpus(30, 1)
    whole = train(spec(), train_pairs, dev_pairs, 26, tmp_path / "whole", device="cpu", progress=False)
    saved, calls = translation._save, {"n": 0}

    def killed_after_first_checkpoint(*args, **kwargs):
        saved(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt  # stands for SIGKILL right after the step-8 checkpoint

    monkeypatch.setattr(translation, "_save", killed_after_first_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        train(spec(), train_pairs, dev_pairs, 26, tmp_path / "resumed", device="cpu", progress=False)
    resumed = train(spec(), train_pairs, dev_pairs, 26, tmp_path / "resumed", device="cpu", progress=False)
    assert resumed["final"]["dev_loss"] == whole["final"]["dev_loss"]
    a = torch.load(tmp_path / "whole" / "checkpoints" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    kept = sorted(p.name for p in (tmp_path / "whole" / "checkpoints").glob("step*.pt"))
    assert kept == ["step16.pt", "step24.pt"]  # keep_checkpoints=2, the newest


def test_training_lowers_the_dev_loss_and_records_provenance(tmp_path):
    m = train(spec(max_updates=40, update_freq=1, variant="xskip_ln", args={}), corpus(300, 0), corpus(30, 1), 26, tmp_path, device="cpu", progress=False)
    log = (tmp_path / "train_log.csv").read_text().splitlines()
    first, last = float(log[1].split(",")[4]), float(log[-1].split(",")[4])
    assert last < first
    assert m["diverged"] is False and m["updates"] == 40 and "git_commit" in m["provenance"]
    # each checkpoint rebuilds its model alone (evaluation and measurement jobs read only it)
    step = torch.load(tmp_path / "checkpoints" / "step40.pt", weights_only=True)
    assert step["model_spec"] == {"arch": "transformer", "size": "base_2block", "variant": "xskip_ln", "args": {}, "pad_id": 0, "vocab_size": 26}
    assert models.count_parameters(models.from_checkpoint(step)) == m["parameters"]


def test_divergence_is_recorded(tmp_path):
    m = train(spec(lr_scale=1e12, variant="add", args={}), corpus(100, 0), corpus(10, 1), 26, tmp_path, device="cpu", progress=False)
    assert m["diverged"] is True and m["final"] is None and m["diverged_at"]["step"] >= 1


def test_deterministic_recipe_switches_torch_to_deterministic_kernels(tmp_path, monkeypatch):
    called = []
    monkeypatch.setattr(translation, "use_deterministic_algorithms", lambda: called.append(True))
    train(spec(max_updates=2, checkpoint_every=2), corpus(40, 0), corpus(5, 1), 26, tmp_path / "plain", device="cpu", progress=False)
    assert called == []
    train(spec(max_updates=2, checkpoint_every=2, deterministic=True), corpus(40, 0), corpus(5, 1), 26, tmp_path / "strict", device="cpu", progress=False)
    assert called == [True]


def test_a_fresh_admin_run_is_profiled_once_and_resumes_without_a_new_profile(tmp_path, monkeypatch):
    """Admin's w comes from one batch through the fresh model: profiled before the first update,
    not again on resume (the checkpoint holds w), and never for other variants."""
    calls = []
    real = translation.residual.initialize
    monkeypatch.setattr(translation.residual, "initialize", lambda model, forward: calls.append(real(model, forward)))
    s = spec(variant="admin", args={}, max_updates=8)
    train(s, corpus(100, 0), corpus(10, 1), 26, tmp_path, device="cpu", progress=False)
    assert calls == [True]
    first = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert first["encoder.0.res_attn.w"][0] != first["encoder.1.res_attn.w"][0]  # profiled: the second layer's w is not 1
    train(s, corpus(100, 0), corpus(10, 1), 26, tmp_path, device="cpu", progress=False)
    assert calls == [True]  # resumed from its checkpoint: no second profile
    train(spec(variant="xskip_ln", args={}, max_updates=8), corpus(100, 0), corpus(10, 1), 26, tmp_path / "ln", device="cpu", progress=False)
    assert calls == [True, False]
