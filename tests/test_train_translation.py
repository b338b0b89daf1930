"""Translation training contracts: token batching, the schedule, resume bit-identically, divergence, long pairs dropped."""

import json
import time

import numpy as np
import pytest
import torch

from resrepro import models
from resrepro.models import transformer
from resrepro.specs import TranslationTrainSpec
from resrepro import recipes
from resrepro.train import translation
from resrepro.train.translation import TokenPairs, bucketed, collate, inverse_sqrt_lr, pad_to_bucket, token_batches, train


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
    base = dict(task="translation", dataset="synthetic", arch="transformer_base_2block", model="transformer", size="base_2block",
                variant="rskip_ln", args={"lam": 2}, seed=0, world_size=1, max_tokens=300,
                update_freq=2, warmup=50, lr_scale=1.0, label_smoothing=0.1, max_updates=24, checkpoint_every=8,
                keep_checkpoints=2, pad_id=0, bos_id=1, eos_id=2)
    return {**base, **over}


def typed(**over) -> TranslationTrainSpec:
    """spec(**over) as the job parses its --spec."""
    return TranslationTrainSpec.from_dict(spec(**over))


def test_inverse_sqrt_schedule():
    d, warmup = 512, 4000
    assert inverse_sqrt_lr(1, d, warmup) == pytest.approx(d**-0.5 * warmup**-1.5)
    assert inverse_sqrt_lr(warmup, d, warmup) == pytest.approx(d**-0.5 * warmup**-0.5)  # the peak
    assert inverse_sqrt_lr(4 * warmup, d, warmup) == pytest.approx(inverse_sqrt_lr(warmup, d, warmup) / 2)
    assert inverse_sqrt_lr(warmup, d, warmup, scale=0.5) == pytest.approx(0.5 * d**-0.5 * warmup**-0.5)  # lr_scale
    assert inverse_sqrt_lr(0, d, warmup) == inverse_sqrt_lr(1, d, warmup)  # steps count from 1


def listed(batches) -> list[list[int]]:
    return [[int(i) for i in b] for b in batches]


def greedy_batches(lengths, max_tokens: int, generator: torch.Generator, bucket: int = 0) -> list[list[int]]:
    """token_batches written as the plain loop it computes: sentences in order of (longest side,
    source, target, index), each added to the open batch unless that takes it over the budget."""
    if bucket:
        lengths = [(bucketed(s, bucket), bucketed(t, bucket)) for s, t in lengths]
    order = sorted(range(len(lengths)), key=lambda i: (max(lengths[i]), lengths[i]))
    batches, current, longest = [], [], 0
    for i in order:
        longest_if_added = max(longest, *lengths[i])
        if current and longest_if_added * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest_if_added = [], max(lengths[i])
        current.append(i)
        longest = longest_if_added
    if current:
        batches.append(current)
    return [batches[p] for p in torch.randperm(len(batches), generator=generator).tolist()]


@pytest.mark.parametrize("seed", range(6))
def test_token_batches_are_the_greedy_loops_batches_in_its_order(seed):
    """Ties of length, sentences over the budget, buckets and an empty corpus included: the same
    batches, in the same order, so a run batches its epochs as before and resumes the same."""
    generator = torch.Generator().manual_seed(seed)
    n = [0, 1, 7, 300, 2000, 500][seed]
    lengths = torch.randint(1, [3, 9, 40, 120, 60, 300][seed], (n, 2), generator=generator).tolist()
    for max_tokens, bucket in ((64, 0), (200, 0), (200, 8), (37, 5), (1, 0)):
        want = greedy_batches([tuple(pair) for pair in lengths], max_tokens, torch.Generator().manual_seed(seed), bucket)
        assert listed(token_batches(lengths, max_tokens, torch.Generator().manual_seed(seed), bucket)) == want
        assert listed(token_batches(np.array(lengths, dtype=np.int32).reshape(-1, 2), max_tokens,
                                    torch.Generator().manual_seed(seed), bucket)) == want


def test_token_batches_respect_the_budget_and_cover_every_sentence():
    lengths = [(int(a), int(b)) for a, b in torch.randint(1, 40, (500, 2)).tolist()]
    batches = listed(token_batches(lengths, 200, torch.Generator().manual_seed(0)))
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        assert len(b) == 1 or max(max(lengths[i]) for i in b) * len(b) <= 200
    assert batches == listed(token_batches(lengths, 200, torch.Generator().manual_seed(0)))


def test_token_batches_pack_sentences_in_length_order_up_to_the_budget_inclusive():
    # by longest side: 1 (1,1), 0 (3,2), then 2 and 4 (longest 4), 3 (5,5). 1+0: 3 x 2 = 6 <= 8;
    # adding 2 would make 4 x 3 = 12; 2+4: 4 x 2 = 8, exactly the budget; 3 alone.
    lengths = [(3, 2), (1, 1), (2, 4), (5, 5), (4, 1)]
    batches = token_batches(lengths, 8, torch.Generator().manual_seed(0))
    assert sorted(listed(batches)) == [[1, 0], [2, 4], [3]]


@pytest.mark.parametrize("prepared", [False, True])
def test_collate_appends_eos_to_sources_and_shifts_targets_for_teacher_forcing(prepared):
    pad, bos, eos = 0, 1, 2
    pairs = [([5, 6, 7], [8]), ([9], [10, 11]), ([], [])]
    pairs = encoded(pairs) if prepared else pairs
    src, tgt_in, tgt_out = collate(pairs, [1, 0], pad, bos, eos)
    assert src.tolist() == [[9, 2, 0, 0], [5, 6, 7, 2]]
    assert tgt_in.tolist() == [[1, 10, 11], [1, 8, 0]]
    assert tgt_out.tolist() == [[10, 11, 2], [8, 2, 0]]
    src, tgt_in, tgt_out = collate(pairs, [2, 0], pad, bos, eos)  # an empty pair: EOS alone, BOS alone
    assert src.tolist() == [[2, 0, 0, 0], [5, 6, 7, 2]]
    assert tgt_in.tolist() == [[1, 0], [1, 8]]
    assert tgt_out.tolist() == [[2, 0], [8, 2]]


def test_bucketed_rounds_up_to_a_multiple_and_zero_leaves_the_length():
    assert [bucketed(n, 8) for n in (1, 7, 8, 9, 16, 17)] == [8, 8, 8, 16, 16, 24]
    assert bucketed(13, 0) == 13 and bucketed(5, 1) == 5


def test_with_a_bucket_batches_count_sentences_at_their_bucketed_length():
    lengths = [(3, 2), (1, 1), (2, 5), (5, 5), (4, 1)]
    # bucketed to 4 (ties keep index order): 0, 1 and 4 -> (4, 4), 2 -> (4, 8), 3 -> (8, 8). 0 + 1: 4 x 2 = 8;
    # adding 4 makes 12 > 10; 4 + 2: 8 x 2 = 16 > 10; each of 4, 2 and 3 alone.
    assert sorted(listed(token_batches(lengths, 10, torch.Generator().manual_seed(0), bucket=4))) == [[0, 1], [2], [3], [4]]
    # unbucketed, 4 (longest 4) and 2 (longest 5) fit together: 5 x 2 = 10
    assert sorted(listed(token_batches(lengths, 10, torch.Generator().manual_seed(0)))) == [[1, 0], [3], [4, 2]]


def test_pad_to_bucket_pads_columns_and_adds_empty_sentences():
    pad, bos, eos = 0, 1, 2
    batch = collate([([5, 6, 7], [8]), ([9], [10, 11])], [1, 0], pad, bos, eos)  # src (2, 4), targets (2, 3)
    src, tin, tout = pad_to_bucket(batch, 3, 20, pad, bos, eos)  # length 4 -> 6, rows 20 // 6 = 3
    assert src.tolist() == [[9, 2, 0, 0, 0, 0], [5, 6, 7, 2, 0, 0], [2, 0, 0, 0, 0, 0]]
    assert tin.tolist() == [[1, 10, 11, 0, 0, 0], [1, 8, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]]
    assert tout.tolist() == [[10, 11, 2, 0, 0, 0], [8, 2, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]
    assert pad_to_bucket(batch, 3, 5, pad, bos, eos)[0].shape == (2, 6)  # never fewer rows than the batch's


def test_bucketed_batches_take_one_shape_per_length_bucket_and_keep_every_token():
    pairs = corpus(400, 0)
    data = TokenPairs(pairs, typed(max_tokens=64, length_bucket=4))
    shapes, real = set(), 0
    for idx in data.batches(torch.Generator().manual_seed(0)):
        src, tin, tout = data.collate(idx)
        assert src.shape == tin.shape == tout.shape
        shapes.add(tuple(src.shape))
        real += int((tout != 0).sum())
    # sentences of 3-9 tokens plus EOS: lengths 4-11, two buckets (4, 8 -> 8, 12); rows 64 // length
    assert shapes <= {(16, 4), (8, 8), (5, 12)} and len(shapes) >= 2
    assert real == sum(len(t) + 1 for _, t in pairs)
    uneven = [([5, 6, 7], [8]), ([9], [10, 11])]  # without length_bucket, batches stay as collate makes them
    assert [t.shape for t in TokenPairs(uneven, typed(max_tokens=64)).collate([0, 1])] == [(2, 4), (2, 3), (2, 3)]


def test_padding_to_a_bucket_leaves_the_real_tokens_logits_and_the_loss_unchanged():
    torch.manual_seed(0)
    model = models.build({"arch": "transformer", "size": "base_2block", "variant": "sas", "args": {}, "pad_id": 0, "vocab_size": 26}).eval()
    batch = collate(corpus(6, 3), list(range(6)), 0, 1, 2)
    src, tin, tout = batch
    padded_src, padded_tin, padded_tout = pad_to_bucket(batch, 8, 160, 0, 1, 2)
    assert padded_src.shape[0] > src.shape[0] and padded_src.shape[1] > src.shape[1]
    with torch.no_grad():
        logits, padded = model(src, tin), model(padded_src, padded_tin)
    real = tout != 0
    torch.testing.assert_close(padded[: len(src), : tin.shape[1]][real], logits[real], rtol=1e-5, atol=1e-5)
    loss = transformer.label_smoothed_loss(logits, tout, 0)
    torch.testing.assert_close(transformer.label_smoothed_loss(padded, padded_tout, 0), loss, rtol=1e-5, atol=1e-6)


def test_a_run_with_length_buckets_trains(tmp_path):
    m = train(spec(max_updates=16, update_freq=1, length_bucket=4), corpus(300, 0), corpus(30, 1), 26, tmp_path, device="cpu", progress=False)
    log = (tmp_path / "train_log.csv").read_text().splitlines()
    assert m["diverged"] is False and float(log[-1].split(",")[4]) < float(log[1].split(",")[4])


def test_pairs_with_a_side_over_the_limit_are_no_examples():
    pairs = [([5, 6, 7], [8]), ([9] * 5, [10]), ([11], [12] * 4), ([13], [14, 15])]  # sides with EOS: (4, 2), (6, 2), (2, 5), (2, 3)
    data = TokenPairs(pairs, typed(max_tokens=64), max_len=4)
    assert data.dropped == 2 and data.lengths.tolist() == [[4, 2], [2, 3]]
    src, _, tgt_out = data.collate([1, 0])
    assert src.tolist() == [[13, 2, 0, 0], [5, 6, 7, 2]] and tgt_out.tolist() == [[14, 15, 2], [8, 2, 0]]
    everything = TokenPairs(pairs, typed(max_tokens=64))
    assert everything.dropped == 0 and len(everything.lengths) == 4


def test_a_prepared_split_gives_the_examples_of_its_pairs_read_one_by_one():
    """TokenPairs reads a prepared split's lengths from its offsets, not pair by pair."""
    pairs = [([5, 6, 7], [8]), ([9] * 5, [10]), ([11], [12] * 4), ([13], [14, 15]), ([], [16])]
    for max_len in (None, 4):
        listed_pairs, prepared = TokenPairs(pairs, typed(max_tokens=64), max_len), TokenPairs(encoded(pairs), typed(max_tokens=64), max_len)
        assert prepared.lengths.tolist() == listed_pairs.lengths.tolist() and prepared.dropped == listed_pairs.dropped
        assert prepared.kept.tolist() == listed_pairs.kept.tolist() == ([0, 1, 2, 3, 4] if max_len is None else [0, 3, 4])
        for a, b in zip(prepared.collate([2, 0]), listed_pairs.collate([2, 0])):
            assert a.tolist() == b.tolist()


def encoded(pairs):
    """`pairs` (lists of ids) in the prepared format: data/translation.EncodedPairs."""
    from resrepro.data.translation import EncodedPairs

    ids = {side: [np.array(p[k], dtype=np.int32) for p in pairs] for k, side in enumerate(("src", "tgt"))}
    return EncodedPairs(**{f"{side}_ids": np.concatenate(parts) for side, parts in ids.items()},
                        **{f"{side}_offsets": np.concatenate([[0], np.cumsum([len(a) for a in parts])]).astype(np.int64)
                           for side, parts in ids.items()})


@pytest.mark.parametrize("bucket", [0, 4])
def test_a_prepared_splits_batches_are_collated_as_its_pairs_one_by_one(bucket):
    generator = torch.Generator().manual_seed(bucket)
    pairs = [(torch.randint(3, 50, (int(n),), generator=generator).tolist(), torch.randint(3, 50, (int(m),), generator=generator).tolist())
             for n, m in torch.randint(0, 12, (200, 2), generator=generator)]
    pairs[5] = ([], [])  # empty sides: EOS alone, BOS alone
    listed_pairs, prepared = TokenPairs(pairs, typed(max_tokens=64, length_bucket=bucket)), TokenPairs(encoded(pairs), typed(max_tokens=64, length_bucket=bucket))
    batches = prepared.batches(torch.Generator().manual_seed(0))
    assert any(5 in b for b in batches)
    for idx in [*batches, [5], [7, 5, 7]]:
        for a, b in zip(prepared.collate(idx), listed_pairs.collate(idx)):
            assert a.dtype == b.dtype == torch.long and a.tolist() == b.tolist()


def test_a_training_pair_longer_than_the_model_positions_is_dropped_and_the_run_trains_and_resumes(tmp_path, monkeypatch, capsys):
    """A 1,100-subword pair (the Transformer holds 1,024 positions) is no training example: the run
    trains, resumes after a kill, ends as an uninterrupted one, and says it dropped one."""
    g = torch.Generator().manual_seed(2)
    long_source = torch.randint(4, 24, (1100,), generator=g).tolist()
    train_pairs = corpus(100, 0) + [(long_source, [x + 1 for x in reversed(long_source)])]
    run = dict(max_updates=8, update_freq=1, checkpoint_every=4)
    whole = train(spec(**run), train_pairs, corpus(10, 1), 26, tmp_path / "whole", device="cpu", progress=False)
    assert "dropped 1 training examples with a side over 1024 tokens" in capsys.readouterr().err
    saved = translation._save

    def killed_at_the_first_checkpoint(*args, **kwargs):
        saved(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(translation, "_save", killed_at_the_first_checkpoint)
    monkeypatch.setattr(recipes, "RESUME_EVERY_S", 0.0)  # a resume point at every checkpoint
    with pytest.raises(KeyboardInterrupt):
        train(spec(**run), train_pairs, corpus(10, 1), 26, tmp_path / "resumed", device="cpu", progress=False)
    monkeypatch.setattr(translation, "_save", saved)
    resumed = train(spec(**run), train_pairs, corpus(10, 1), 26, tmp_path / "resumed", device="cpu", progress=False)
    assert "(step 4)" in capsys.readouterr().err
    assert resumed["final"]["dev_loss"] == whole["final"]["dev_loss"] and resumed["updates"] == 8
    written = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert (written["dropped_long_pairs"], written["max_train_len"]) == (1, 1024)


def test_the_recipe_max_train_len_drops_every_pair_with_a_longer_side(tmp_path):
    pairs = corpus(100, 0)
    over_8 = sum(max(len(s), len(t)) + 1 > 8 for s, t in pairs)
    m = train(spec(max_updates=2, checkpoint_every=2, max_train_len=8), pairs, corpus(10, 1), 26, tmp_path, device="cpu", progress=False)
    assert 0 < over_8 < 100 and (m["dropped_long_pairs"], m["max_train_len"]) == (over_8, 8)


def test_resume_after_a_kill_is_bit_identical(tmp_path, monkeypatch, capsys):
    train_pairs, dev_pairs = corpus(300, 0), corpus(30, 1)
    whole = train(spec(), train_pairs, dev_pairs, 26, tmp_path / "whole", device="cpu", progress=False)
    saved, calls = translation._save, {"n": 0}
    monkeypatch.setattr(recipes, "RESUME_EVERY_S", 0.0)  # a resume point at every checkpoint

    def killed_after_first_checkpoint(*args, **kwargs):
        saved(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt  # stands for SIGKILL right after the step-8 checkpoint

    monkeypatch.setattr(translation, "_save", killed_after_first_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        train(spec(), train_pairs, dev_pairs, 26, tmp_path / "resumed", device="cpu", progress=False)
    resumed = train(spec(), train_pairs, dev_pairs, 26, tmp_path / "resumed", device="cpu", progress=False)
    assert "(step 8)" in capsys.readouterr().err
    assert resumed["final"]["dev_loss"] == whole["final"]["dev_loss"]
    a = torch.load(tmp_path / "whole" / "checkpoints" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    kept = sorted(p.name for p in (tmp_path / "whole" / "checkpoints").glob("step*.pt"))
    assert kept == ["step16.pt", "step24.pt"]  # keep_checkpoints=2, the newest


def test_last_pt_is_written_at_the_end_and_not_at_checkpoints_before_resume_every_s(tmp_path, monkeypatch, capsys):
    """A resume point (last.pt, three copies of the weights) at the checkpoints RESUME_EVERY_S apart
    and at the end; the step files averaging reads at their checkpoints all the same. A kill before
    the first resume point loses the run so far: it trains again from the start, to the same end."""
    train_pairs, dev_pairs = corpus(100, 0), corpus(10, 1)
    real_save, written = translation.save, []

    def counted(path, model, opt, run_spec, state, *rest):
        written.append(state.step)
        real_save(path, model, opt, run_spec, state, *rest)

    monkeypatch.setattr(translation, "save", counted)
    whole = train(spec(), train_pairs, dev_pairs, 26, tmp_path / "whole", device="cpu", progress=False)
    assert written == [24]  # 3 checkpoints (8, 16, 24) within a few seconds of training
    assert sorted(p.name for p in (tmp_path / "whole" / "checkpoints").glob("step*.pt")) == ["step16.pt", "step24.pt"]
    monkeypatch.setattr(recipes, "RESUME_EVERY_S", 0.0)
    written.clear()
    train(spec(), train_pairs, dev_pairs, 26, tmp_path / "every", device="cpu", progress=False)
    assert written == [8, 16, 24]

    monkeypatch.setattr(recipes, "RESUME_EVERY_S", 600.0)
    saved = translation._save

    def killed_after_the_second_checkpoint(*args, **kwargs):
        saved(*args, **kwargs)
        if args[4].step == 16:
            raise KeyboardInterrupt

    monkeypatch.setattr(translation, "_save", killed_after_the_second_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        train(spec(), train_pairs, dev_pairs, 26, tmp_path / "killed", device="cpu", progress=False)
    assert not (tmp_path / "killed" / "checkpoints" / "last.pt").exists()
    monkeypatch.setattr(translation, "_save", saved)
    capsys.readouterr()
    again = train(spec(), train_pairs, dev_pairs, 26, tmp_path / "killed", device="cpu", progress=False)
    assert "resuming from" not in capsys.readouterr().err
    assert again["final"]["dev_loss"] == whole["final"]["dev_loss"]


def test_a_resume_point_comes_resume_every_s_after_the_last_one(tmp_path, monkeypatch):
    """The loop's clock jumps 1,000 s at each checkpoint: with a resume point due after 1,500 s,
    checkpoints 8 and 16 (0 and 1,000 s after the start) write none, 24 (2,000 s) one, 32 (1,000 s
    after it) none, 40 the run's end."""

    class JumpingClock:
        offset = 0.0

        def perf_counter(self):
            return time.perf_counter() + self.offset

    clock, saved, written = JumpingClock(), translation._save, []

    def checkpointed(ckpt_dir, model, opt, run_spec, state, model_spec, random_states):
        saved(ckpt_dir, model, opt, run_spec, state, model_spec, random_states)
        written.append((state.step, random_states is not None))
        clock.offset += 1000.0

    monkeypatch.setattr(translation, "time", clock)
    monkeypatch.setattr(translation, "_save", checkpointed)
    monkeypatch.setattr(recipes, "RESUME_EVERY_S", 1500.0)
    train(spec(max_updates=40), corpus(100, 0), corpus(10, 1), 26, tmp_path, device="cpu", progress=False)
    assert written == [(8, False), (16, False), (24, True), (32, False), (40, True)]


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


def test_a_rerun_with_another_spec_starts_afresh_and_averages_only_its_own_steps(tmp_path):
    """A changed recipe (here max_updates 24 -> 20) reruns in the same folder: the earlier run's
    step24.pt and step22.pt must not be averaged with the new run's steps."""
    from resrepro.jobs import average_newest

    train_pairs, dev_pairs = corpus(100, 0), corpus(10, 1)
    every = dict(update_freq=1, checkpoint_every=2, keep_checkpoints=10)
    train(spec(max_updates=24, **every), train_pairs, dev_pairs, 26, tmp_path, device="cpu", progress=False)
    train(spec(max_updates=20, **every), train_pairs, dev_pairs, 26, tmp_path, device="cpu", progress=False)
    average_newest(tmp_path / "checkpoints", 10, tmp_path / "averaged.pt")
    averaged = torch.load(tmp_path / "averaged.pt", weights_only=True)
    assert averaged["averaged_from"] == [f"step{s}.pt" for s in range(2, 21, 2)]
    assert averaged["step"] == 20
    last = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    assert averaged["run_id"] == last["run_id"] is not None


def test_a_resumed_run_keeps_its_run_id(tmp_path):
    train_pairs, dev_pairs = corpus(100, 0), corpus(10, 1)
    train(spec(max_updates=8, update_freq=1, checkpoint_every=4), train_pairs, dev_pairs, 26, tmp_path, device="cpu", progress=False)
    first = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)["run_id"]
    train(spec(max_updates=8, update_freq=1, checkpoint_every=4), train_pairs, dev_pairs, 26, tmp_path, device="cpu", progress=False)
    steps = [torch.load(p, weights_only=True)["run_id"] for p in (tmp_path / "checkpoints").glob("step*.pt")]
    assert torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)["run_id"] == first
    assert steps == [first, first]


def test_the_dev_loss_reads_only_the_first_dev_sentences(tmp_path):
    """dev_sentences: N gives the dev loss of a dev set holding only its first N pairs, at every
    checkpoint; training itself is untouched."""
    train_pairs, dev_pairs = corpus(200, 0), corpus(30, 1)
    cut = train(spec(dev_sentences=6), train_pairs, dev_pairs, 26, tmp_path / "cut", device="cpu", progress=False)
    alone = train(spec(), train_pairs, dev_pairs[:6], 26, tmp_path / "alone", device="cpu", progress=False)
    whole = train(spec(), train_pairs, dev_pairs, 26, tmp_path / "whole", device="cpu", progress=False)

    def dev_losses(run):
        return [row.split(",")[4] for row in (tmp_path / run / "train_log.csv").read_text().splitlines()[1:]]

    assert dev_losses("cut") == dev_losses("alone") and len(dev_losses("cut")) == 3
    assert dev_losses("cut") != dev_losses("whole")
    assert cut["final"]["train_loss"] == alone["final"]["train_loss"] == whole["final"]["train_loss"]
    assert len(translation.dev_examples(dev_pairs, typed(dev_sentences=100)).lengths) == 30  # at most the split
    assert len(translation.dev_examples(dev_pairs, typed()).lengths) == 30


@pytest.mark.parametrize("task", ["translation", "captioning"])
def test_a_run_that_diverged_is_not_evaluated_and_its_evaluation_succeeds(tmp_path, task):
    """Its averaged weights hold NaN, which beam search cannot rank (the rehearsal's first run failed
    there); the report shows the run as diverged, from metrics.json."""
    import argparse
    import json

    from resrepro import jobs
    from test_evaluate import SPEC as EVAL_SPEC

    run_dir = tmp_path / "seed0"
    m = train(spec(lr_scale=1e12, variant="add", args={}), corpus(100, 0), corpus(10, 1), 26, run_dir, device="cpu", progress=False)
    assert m["diverged"]
    a = argparse.Namespace(task=task, threads=0, spec=json.dumps({**EVAL_SPEC, "average_last": 2, "beam": 2}), data=str(tmp_path / "no-data"), device="cpu",
                           java="bundled")
    assert jobs.evaluation(a)(0, run_dir) == {"diverged": True}
    assert not (run_dir / "averaged.pt").exists()


def test_only_the_step_checkpoints_that_averaging_reads_are_written(tmp_path, monkeypatch):
    """A paper run checkpoints hundreds of times and averages the last 5-20: the others were
    written (0.85 GB each for a big Transformer) only to be deleted."""
    assert translation.averaged_steps(24, 8, 2) == [16, 24]
    assert translation.averaged_steps(20, 1, 10) == list(range(11, 21))
    assert translation.averaged_steps(25, 8, 2) == [24, 25]  # the last update is checkpointed too
    assert translation.averaged_steps(10, 4, 5) == [4, 8, 10]  # fewer written than kept: all of them
    written, real = [], translation.save_step
    monkeypatch.setattr(translation, "save_step", lambda ckpt_dir, model, model_spec, step, *rest: (
        written.append(step), real(ckpt_dir, model, model_spec, step, *rest)))
    train(spec(), corpus(300, 0), corpus(30, 1), 26, tmp_path, device="cpu", progress=False)
    assert written == [16, 24]  # spec(): 24 updates, a checkpoint every 8, the last 2 averaged
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.pt")) == ["last.pt", "step16.pt", "step24.pt"]
