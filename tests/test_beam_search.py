"""Beam search: exact against exhaustive enumeration with a wide beam, batching and padding change
nothing, cache on/off agree, beam 1 without length penalty is greedy, and the outputs are clean.

The tiny random models have an untied, bias-carrying output layer: with the tied embedding alone
a random post-LN Transformer mostly repeats its last token, which makes every search agree."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from resrepro.evaluate.beam_search import beam_search, beam_search_nbest, best_reachable, greedy, length_penalty
from resrepro.models.transformer import Transformer, TransformerConfig

PAD, BOS, EOS = 0, 1, 2


class Untied(Transformer):
    """A Transformer with its own output layer (weights at `scale`, random bias) so that the
    next-token distribution depends on source and prefix in a less degenerate way."""

    def __init__(self, cfg: TransformerConfig, scale: float):
        super().__init__(cfg)
        self.out = nn.Linear(cfg.d_model, cfg.vocab_size)
        nn.init.normal_(self.out.weight, std=scale / cfg.d_model**0.5)
        nn.init.normal_(self.out.bias, std=0.5)

    def logits(self, h):
        return self.out(h)


def tiny(seed: int, vocab: int = 6, scale: float = 2.0) -> Untied:
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=vocab, d_model=16, heads=4, ffn=32, encoder_layers=2, decoder_layers=2, dropout=0.0)
    return Untied(cfg, scale).eval()


def random_src(seed: int, vocab: int, lengths: list[int]) -> torch.Tensor:
    """(N, max length) source of tokens in [3, vocab), right-padded with PAD."""
    g = torch.Generator().manual_seed(1000 + seed)
    src = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(3, vocab, (n,), generator=g)
    return src


def exhaustive_search(model, src_one: torch.Tensor, max_len: int, alpha: float):
    """Every hypothesis the search can produce for one (1, S) source: a sequence of
    non-special tokens ending in EOS with at most max_len tokens incl. EOS, or max_len
    non-special tokens cut off without EOS. Scored independently of the search code with the
    teacher-forcing forward: sum of log-softmax (PAD, BOS excluded, not renormalised) /
    ((5 + len) / 6) ** alpha, len including EOS. Returns [(score, tokens without EOS)], best first."""
    vocab = model.cfg.vocab_size
    words = [t for t in range(vocab) if t not in (PAD, BOS, EOS)]
    groups = [[list(p) + [EOS] for p in itertools.product(words, repeat=n)] for n in range(max_len)]
    groups.append([list(p) for p in itertools.product(words, repeat=max_len)])
    out = []
    with torch.no_grad():
        for group in groups:
            tgt = torch.tensor(group)
            tgt_in = torch.cat([torch.full((len(group), 1), BOS), tgt[:, :-1]], dim=1)
            logp = F.log_softmax(model(src_one.expand(len(group), -1), tgt_in).double(), dim=-1)
            total = logp.gather(2, tgt[:, :, None]).squeeze(2).sum(1)
            lp = ((5.0 + tgt.shape[1]) / 6.0) ** alpha
            out += [(s / lp, [t for t in seq if t != EOS]) for s, seq in zip(total.tolist(), group)]
    return sorted(out, key=lambda x: -x[0])


@pytest.mark.parametrize("vocab,max_len,alpha", [(6, 4, 0.6), (7, 3, 0.6), (6, 4, 0.0), (6, 3, 2.0)])
def test_wide_beam_is_exact(vocab, max_len, alpha):
    """With beam >= (words + 1) * words^(max_len - 2) every prefix stays alive and every EOS
    candidate ranks within the beam, so beam search must return the exhaustive optimum."""
    words = vocab - 3
    beam = (words + 1) * words ** (max_len - 2)
    greedy_wrong, beam4_wrong, lengths = 0, 0, set()
    for seed in range(8):
        model = tiny(seed, vocab)
        src = random_src(seed, vocab, [5])
        ranked = exhaustive_search(model, src, max_len, alpha)
        (best_score, best), (second_score, _) = ranked[0], ranked[1]
        kw = dict(alpha=alpha, max_len_a=0.0, max_len_b=max_len)
        nbest = beam_search_nbest(model, src, BOS, EOS, beam=beam, **kw)[0]
        assert nbest[0][0] == pytest.approx(best_score, abs=1e-5)
        if best_score - second_score > 1e-4:  # no near-tie: the sequence itself must match
            assert nbest[0][1] == best
        assert beam_search(model, src, BOS, EOS, beam=beam, **kw)[0] == nbest[0][1]
        # the n-best list: sorted, and every score is the exhaustive score of its hypothesis
        exact = {tuple(h): s for s, h in ranked}
        assert [s for s, _ in nbest] == sorted((s for s, _ in nbest), reverse=True)
        for s, h in nbest:
            assert s == pytest.approx(exact[tuple(h)], abs=1e-5)
        # running every sentence to max length (no early stop) finds the same best
        full = beam_search_nbest(model, src, BOS, EOS, beam=beam, early_stop=False, **kw)[0]
        assert full[0][1] == nbest[0][1]
        greedy_wrong += greedy(model, src, BOS, EOS, 0.0, max_len)[0] != best
        beam4_wrong += beam_search(model, src, BOS, EOS, beam=4, **kw)[0] != best
        lengths.add(len(best))  # == max_len: cut off without EOS
    # meaningful: the optimum is not always what greedy finds, and has several lengths
    assert greedy_wrong >= 1
    assert len(lengths) >= 2
    print(f"greedy missed the optimum {greedy_wrong}/8, beam 4 {beam4_wrong}/8; best lengths {sorted(lengths)}")


def test_batched_equals_one_at_a_time():
    """All sentences decode in one (N * beam) batch with padding and different maximum lengths;
    each result equals decoding the sentence alone without padding, in any batch order."""
    vocab = 8
    lengths = [5, 2, 7, 3, 6, 1]
    for seed in range(3):
        model = tiny(seed, vocab)
        src = random_src(seed, vocab, lengths)
        kw = dict(beam=4, alpha=0.6, max_len_a=1.0, max_len_b=3)
        stats = {}
        batched = beam_search_nbest(model, src, BOS, EOS, stats=stats, **kw)
        alone = [beam_search_nbest(model, src[i : i + 1, :n], BOS, EOS, **kw)[0] for i, n in enumerate(lengths)]
        for b, a in zip(batched, alone):
            assert [h for _, h in b] == [h for _, h in a]
            torch.testing.assert_close(torch.tensor([s for s, _ in b]), torch.tensor([s for s, _ in a]))
        perm = [3, 0, 5, 1, 4, 2]
        shuffled = beam_search(model, src[perm], BOS, EOS, **kw)
        assert shuffled == [batched[i][0][1] for i in perm]
        # sentences left the batch before the longest one finished
        assert stats["tokens"] < len(lengths) * 4 * stats["steps"]


def test_cache_and_full_recompute_agree():
    vocab = 8
    lengths = [4, 6, 2, 5]
    for seed in range(3):
        model = tiny(seed, vocab)
        src = random_src(seed, vocab, lengths)
        kw = dict(beam=3, alpha=0.6, max_len_a=1.0, max_len_b=2)
        cached = beam_search_nbest(model, src, BOS, EOS, use_cache=True, **kw)
        full = beam_search_nbest(model, src, BOS, EOS, use_cache=False, **kw)
        for c, f in zip(cached, full):
            assert [h for _, h in c] == [h for _, h in f]
            torch.testing.assert_close(torch.tensor([s for s, _ in c]), torch.tensor([s for s, _ in f]))
        assert beam_search(model, src, BOS, EOS, use_cache=False, **kw) == [c[0][1] for c in cached]


def test_beam_one_without_length_penalty_is_greedy():
    vocab = 8
    lengths = [3, 7, 5, 1, 6]
    for seed in range(5):
        model = tiny(seed, vocab, scale=1.0)
        src = random_src(seed, vocab, lengths)
        g = greedy(model, src, BOS, EOS, max_len_a=1.0, max_len_b=4)
        assert beam_search(model, src, BOS, EOS, beam=1, alpha=0.0, max_len_a=1.0, max_len_b=4) == g


def test_outputs_are_clean_and_respect_max_length():
    """No PAD, BOS or EOS in any result even when the model prefers them; at most
    int(a * src_len + b) tokens; exactly that many when the model never says EOS."""
    vocab = 8
    lengths = [4, 1, 6]
    src = random_src(0, vocab, lengths)
    model = tiny(0, vocab)
    with torch.no_grad():
        model.out.bias[PAD] += 8.0
        model.out.bias[BOS] += 8.0
    for a, b in [(1.0, 2), (0.5, 1), (0.0, 3), (0.0, 0)]:
        limits = [max(int(a * n + b), 1) for n in lengths]
        for out in (beam_search(model, src, BOS, EOS, beam=4, max_len_a=a, max_len_b=b),
                    greedy(model, src, BOS, EOS, max_len_a=a, max_len_b=b)):
            for hyp, limit in zip(out, limits):
                assert not {PAD, BOS, EOS} & set(hyp)
                assert len(hyp) <= limit
    with torch.no_grad():
        model.out.bias[EOS] -= 1e4  # EOS (almost) impossible: every hypothesis is cut off
    out = beam_search(model, src, BOS, EOS, beam=4, max_len_a=1.0, max_len_b=2)
    assert [len(h) for h in out] == [n + 2 for n in lengths]
    assert all(not {PAD, BOS, EOS} & set(h) for h in out)


def test_a_source_longer_than_the_position_table_is_decoded():
    """A 1,100-token source (the table holds 1,024 positions) gets a hypothesis, under the papers'
    limit of source length + 50 tokens, which lies past the table too."""
    model = tiny(1)
    src = random_src(1, 6, [1100, 12])
    nbest = beam_search_nbest(model, src, BOS, EOS, beam=4, alpha=0.6, max_len_a=1.0, max_len_b=50)
    assert [len(n) for n in nbest] == [4, 4] and all(len(n[0][1]) > 0 for n in nbest)
    assert len(greedy(model, src[:1], BOS, EOS, max_len_a=1.0, max_len_b=50)[0]) <= 1150


def test_decoding_past_the_position_table_is_as_a_longer_table_decodes_and_is_not_cut_at_it():
    """A model whose table stops at 8 positions decodes a 12-token source to its full limit of 16
    tokens, as the same model with 1,024 positions does, to the score."""
    model = tiny(2)
    short_table = Untied(TransformerConfig(**{**vars(model.cfg), "max_positions": 8}), 2.0).eval()
    short_table.load_state_dict(model.state_dict())
    with torch.no_grad():
        for m in (model, short_table):
            m.out.bias[EOS] -= 1e4  # every hypothesis runs to its length limit
    src = random_src(2, 6, [12, 5])
    kw = dict(beam=3, alpha=0.6, max_len_a=1.0, max_len_b=4)
    nbest = beam_search_nbest(short_table, src, BOS, EOS, **kw)
    assert nbest == beam_search_nbest(model, src, BOS, EOS, **kw)
    assert [len(n[0][1]) for n in nbest] == [16, 9]
    assert greedy(short_table, src, BOS, EOS, 1.0, 4) == greedy(model, src, BOS, EOS, 1.0, 4)


def test_mode_restored_and_arguments_checked():
    model = tiny(0).train()
    src = random_src(0, 6, [3])
    beam_search(model, src, BOS, EOS, beam=2, max_len_b=2)
    greedy(model, src, BOS, EOS, max_len_b=2)
    assert model.training
    with pytest.raises(ValueError):
        beam_search(model, src, BOS, BOS)
    with pytest.raises(ValueError, match="^beam must be >= 1$"):
        beam_search(model, src, BOS, EOS, beam=0)
    assert length_penalty(1, 0.6) == 1.0 and length_penalty(7, 0.6) == pytest.approx(2.0**0.6)


@pytest.mark.parametrize("scale,alpha", [(2.0, 0.6), (4.0, 2.0), (4.0, -1.0)])
def test_early_stop_changes_nothing(scale, alpha):
    """Stopping a sentence once its best alive hypothesis cannot beat its best finished one
    (bound: raw log-prob / largest reachable lp) gives the same best hypotheses as running
    every sentence to its maximum length, with less work. (Peaky models with a strong length
    reward catch an unsafe bound such as dividing by the next step's lp only; a negative alpha,
    which rewards short hypotheses, one that divides by the longest length's lp only.)"""
    vocab = 8
    lengths = [3, 6, 2, 5, 4]
    saved = 0
    for seed in range(6):
        model = tiny(seed, vocab, scale)
        src = random_src(seed, vocab, lengths)
        kw = dict(beam=4, alpha=alpha, max_len_a=1.0, max_len_b=4)
        fast, slow = {}, {}
        early = beam_search_nbest(model, src, BOS, EOS, stats=fast, **kw)
        late = beam_search_nbest(model, src, BOS, EOS, early_stop=False, stats=slow, **kw)
        assert [e[0] for e in early] == [x[0] for x in late]
        saved += slow["tokens"] - fast["tokens"]
    assert saved > 0


def test_the_early_stop_bound_divides_by_the_largest_length_penalty_still_ahead():
    """After step 1 of sentences that may run to 4 or 1 tokens: lengths 2..4 are ahead of the
    first, whose largest lp is lp(4) = 1.5^alpha for alpha > 0 and lp(2) = (7/6)^alpha for alpha < 0.
    The second stops at this step anyway (its end, lp(1) = 1, is behind the next step's)."""
    alive, max_len = torch.tensor([-6.0, -6.0]), torch.tensor([4, 1])
    assert best_reachable(alive, 1, max_len, 0.6).tolist() == pytest.approx([-6 / 1.5**0.6, -6 / (7 / 6) ** 0.6])
    assert best_reachable(alive, 1, max_len, -1.0).tolist() == pytest.approx([-7.0, -6.0])
    assert best_reachable(alive, 1, max_len, 0.0).tolist() == [-6.0, -6.0]


def test_stats_count_each_decoder_step_and_each_rows_token():
    """Without EOS, every sentence decodes to its maximum length int(a * len + b): the search runs
    max(limits) steps and generates beam x limit tokens per sentence (benchmarks/decode_speed.py
    reports both)."""
    model = tiny(3)
    with torch.no_grad():
        model.out.bias[EOS] = -1e4  # finite, never among the best K: no hypothesis ends early
    src = random_src(3, 6, [3, 1, 2])  # limits 4, 2, 3 at a=1, b=1
    stats = {}
    nbest = beam_search_nbest(model, src, BOS, EOS, beam=2, alpha=0.6, max_len_a=1.0, max_len_b=1, early_stop=False, stats=stats)
    assert stats == {"steps": 4, "tokens": 2 * (4 + 2 + 3)}
    assert [len(hyps[0][1]) for hyps in nbest] == [4, 2, 3]


def test_finished_hypotheses_stay_sorted_best_first_stable_and_at_most_k():
    from resrepro.evaluate.beam_search import _add_finished

    kept = []
    for score, hyp in [(0.5, [1]), (0.9, [2]), (0.1, [3]), (0.3, [4])]:
        _add_finished(kept, score, hyp, k=4)
    assert kept == [(0.9, [2]), (0.5, [1]), (0.3, [4]), (0.1, [3])]  # 0.3 went between 0.5 and 0.1
    _add_finished(kept, 0.5, [5], k=4)  # a tie keeps the earlier one first; the worst drops out
    assert kept == [(0.9, [2]), (0.5, [1]), (0.5, [5]), (0.3, [4])]
    _add_finished(kept, 0.2, [6], k=4)  # worse than all k: not kept
    assert kept == [(0.9, [2]), (0.5, [1]), (0.5, [5]), (0.3, [4])]
    _add_finished(kept, 1.0, [7], k=4)
    assert [h for _, h in kept] == [[7], [2], [1], [5]]
