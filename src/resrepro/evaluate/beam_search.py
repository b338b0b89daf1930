"""Batched beam search for the encoder-decoder Transformer, as in the papers' translation runs.

Vaswani et al. 2017 (and the papers following them) decode with beam 4 and length penalty
alpha 0.6 in the GNMT / tensor2tensor form

    lp(len) = ((5 + len) / 6) ** alpha,    score = (sum of token log-probabilities) / lp(len)

where `len` counts the generated tokens *including* the EOS that ends the hypothesis, as
tensor2tensor does (`lp` uses step i + 1 when EOS is produced at step i); a hypothesis cut off
at the maximum length has len = max_len and no EOS. BOS is not counted.

All N sentences x `beam` hypotheses decode together as one (N * beam) batch: the source is
encoded once, memory and mask are repeated per beam (`repeat_interleave`), and the decoder's
key/value cache is reordered with `reorder_cache` whenever beams are re-selected. Each step
takes the 2 * beam best extensions of a sentence (fairseq / tensor2tensor); an extension ending
in EOS is finished (kept in the sentence's finished list, `beam` best) when it ranks within the
best `beam` (fairseq's rule: so beam 1 is exactly greedy search), and the `beam` best
extensions not ending in EOS stay alive. At the sentence's maximum length every one of the
best `beam` extensions is finished (truncated if it is not EOS).

Early stop (per sentence, exact): log-probabilities are <= 0, so an alive hypothesis with raw
score s can at best finish with s / max(lp over the lengths still reachable); when this bound
for the best alive hypothesis is below the best finished score, nothing better can come and
the sentence stops (with `early_stop=False` it runs to its maximum length; the best hypothesis
is the same either way). Stopped sentences leave the batch, so no work is spent on them.

Maximum length (generated tokens incl. EOS) per sentence: int(max_len_a * src_len + max_len_b),
src_len the model's `source_lengths` (a sentence's non-pad tokens; an image's regions), at least 1.
Neither the source nor this limit is bounded by the model's `max_positions`: positions past its
sinusoid table are computed as needed (Transformer.position_rows), so every test sentence is
decoded whole, as tensor2tensor decodes it. The source is whatever the model's `encode` takes:
token ids (N, S) for the translation Transformer, features (N, regions, dim) for the captioner.

PAD and BOS are never generated (their log-probabilities are set to -inf after the softmax,
without renormalising, as fairseq does for PAD), so returned hypotheses contain neither; EOS is
stripped from them.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..models.transformer import reorder_cache

NEG_INF = float("-inf")


def length_penalty(length, alpha: float):
    """GNMT / tensor2tensor: ((5 + length) / 6) ** alpha; `length` (an int, or a float tensor of
    them) includes the EOS token."""
    return ((5.0 + length) / 6.0) ** alpha


def best_reachable(alive_best: torch.Tensor, t: int, max_len: torch.Tensor, alpha: float) -> torch.Tensor:
    """Per sentence, the best score its alive hypotheses can still reach after step t: their best
    log-prob (it only falls as tokens are added) over the largest length penalty of the lengths
    still ahead, t + 1 .. max_len. lp is monotone in the length, so the largest is at an end: the
    far one for alpha > 0, the next step's for alpha < 0 (which rewards short hypotheses)."""
    return alive_best / length_penalty(max_len.float(), alpha).clamp(min=length_penalty(t + 1, alpha))


def max_lengths(src_len: list[int], max_len_a: float, max_len_b: int) -> list[int]:
    """Per source: int(max_len_a * its length + max_len_b), at least 1."""
    return [max(int(max_len_a * n + max_len_b), 1) for n in src_len]


def banned_tokens(model, bos: int, eos: int) -> list[int]:
    """The tokens no decoder may emit (PAD, BOS), after checking the special ids against the model."""
    if bos == eos:
        raise ValueError("bos and eos must differ")
    vocab, pad = model.cfg.vocab_size, model.cfg.pad_id
    for name, tok in (("bos", bos), ("eos", eos)):
        if not 0 <= tok < vocab:
            raise ValueError(f"{name} {tok} outside the vocabulary (size {vocab})")
    if eos == pad:
        raise ValueError("eos must differ from the pad id")
    return sorted({pad, bos})


def _log_probs(logits: torch.Tensor, banned: list[int]) -> torch.Tensor:
    logp = F.log_softmax(logits.float(), dim=-1)
    logp[:, banned] = NEG_INF
    return logp


def _device(model) -> torch.device:
    return next(model.parameters()).device


def beam_search_nbest(
    model,
    src: torch.Tensor,
    bos: int,
    eos: int,
    beam: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
    early_stop: bool = True,
    stats: dict | None = None,
) -> list[list[tuple[float, list[int]]]]:
    """Per sentence, its finished hypotheses as (score, tokens), best first (at most `beam`;
    ties keep the one found first). Tokens exclude BOS and EOS; see the module docstring.

    `stats`, when given, receives "steps" (decoder steps run) and "tokens" (hypothesis tokens
    generated = sum over steps of the rows still decoding, N * beam * steps when no sentence
    stops early)."""
    if beam < 1:
        raise ValueError("beam must be >= 1")
    banned = banned_tokens(model, bos, eos)
    device = _device(model)
    src = src.to(device)
    n, k = src.shape[0], beam
    limits = max_lengths(model.source_lengths(src), max_len_a, max_len_b)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(n)]
    steps_run, tokens_generated = 0, 0
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            active = list(range(n))  # original sentence id of each sentence still decoding
            max_len = torch.tensor(limits, device=device)
            src_rows = src.repeat_interleave(k, dim=0)  # (B*K, S), rows b*K .. b*K+K-1 = sentence b
            if use_cache:
                memory, src_mask = model.encode(src)
                memory, src_mask = memory.repeat_interleave(k, dim=0), src_mask.repeat_interleave(k, dim=0)
                cache = model.new_cache()
            tokens = torch.full((n * k, 1), bos, dtype=torch.long, device=device)  # prefixes incl. BOS
            scores = torch.full((n, k), NEG_INF, device=device)
            scores[:, 0] = 0.0  # one real hypothesis per sentence at the start
            t = 0
            while active:
                t += 1  # generating token t (1-based); its position is t - 1
                b_now = len(active)
                if use_cache:
                    logits = model.decode_step(tokens[:, -1:], memory, src_mask, cache, t - 1)
                else:
                    logits = model(src_rows, tokens)[:, -1]
                steps_run += 1
                tokens_generated += b_now * k
                vocab = logits.shape[-1]
                cand = (scores.view(-1, 1) + _log_probs(logits, banned)).view(b_now, k * vocab)
                top_val, top_idx = cand.topk(min(2 * k, k * vocab), dim=1)
                top_beam, top_tok = top_idx // vocab, top_idx % vocab
                is_eos = top_tok == eos
                last = max_len <= t  # (B,): this step is the sentence's last

                # finish: EOS within the best K candidates, or any of the best K at the last step
                fin = (is_eos | last[:, None]) & torch.isfinite(top_val)
                fin[:, k:] = False
                if bool(fin.any()):
                    lp = length_penalty(t, alpha)
                    rows = (torch.arange(b_now, device=device)[:, None] * k + top_beam)[fin]
                    prefixes = tokens[rows, 1:].tolist()
                    for (b, j), prefix, val, tok in zip(fin.nonzero().tolist(), prefixes,
                                                        top_val[fin].tolist(), top_tok[fin].tolist()):
                        hyp = prefix if tok == eos else prefix + [tok]
                        _add_finished(finished[active[b]], val / lp, hyp, k)

                # alive: the K best candidates that are not EOS (at most K of the 2K are EOS)
                alive_val, pos = top_val.masked_fill(is_eos, NEG_INF).topk(k, dim=1)
                alive_beam, alive_tok = top_beam.gather(1, pos), top_tok.gather(1, pos)

                # which sentences stop now
                done = last.clone()
                if early_stop:
                    best_fin = torch.tensor([finished[s][0][0] if finished[s] else NEG_INF for s in active],
                                            device=device)
                    done |= torch.isfinite(best_fin) & (best_reachable(alive_val[:, 0], t, max_len, alpha) < best_fin)
                keep = (~done).nonzero().squeeze(1)
                if keep.numel() == 0:
                    break
                index = (keep[:, None] * k + alive_beam[keep]).reshape(-1)  # surviving rows
                tokens = torch.cat([tokens.index_select(0, index), alive_tok[keep].reshape(-1, 1)], dim=1)
                scores = alive_val[keep]
                if keep.numel() < b_now:
                    active = [active[b] for b in keep.tolist()]
                    max_len = max_len[keep]
                    rows_kept = (keep[:, None] * k + torch.arange(k, device=device)).reshape(-1)
                    src_rows = src_rows.index_select(0, rows_kept)
                    if use_cache:
                        memory, src_mask = memory.index_select(0, rows_kept), src_mask.index_select(0, rows_kept)
                if use_cache:
                    cache = reorder_cache(cache, index)
    finally:
        model.train(was_training)
    if stats is not None:
        stats.update(steps=steps_run, tokens=tokens_generated)
    return finished


def _add_finished(lst: list[tuple[float, list[int]]], score: float, hyp: list[int], k: int) -> None:
    """Insert keeping `lst` sorted best first (stable: equal scores keep the earlier one) and at most k long."""
    i = len(lst)
    while i > 0 and lst[i - 1][0] < score:
        i -= 1
    if i < k:
        lst.insert(i, (score, hyp))
        del lst[k:]


def beam_search(
    model,
    src: torch.Tensor,
    bos: int,
    eos: int,
    beam: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
) -> list[list[int]]:
    """Best hypothesis per sentence of the (N, S) padded source, tokens without BOS and EOS.

    Score = sum of log-probs / ((5 + len) / 6) ** alpha with len = generated tokens including
    EOS (tensor2tensor); maximum length int(max_len_a * src_len + max_len_b) generated tokens
    (incl. EOS), src_len without padding. `use_cache=False` recomputes every step with the full
    teacher-forcing forward `model(src, prefix)` (encoder included) instead of `decode_step`
    with the key/value cache: same hypotheses, much slower (reference and speed benchmark).
    Runs in eval mode under inference_mode and restores the model's train/eval mode."""
    nbest = beam_search_nbest(model, src, bos, eos, beam, alpha, max_len_a, max_len_b, use_cache)
    return [hyps[0][1] for hyps in nbest]


def greedy(model, src: torch.Tensor, bos: int, eos: int, max_len_a: float = 1.0, max_len_b: int = 50) -> list[list[int]]:
    """Greedy decoding (argmax each step, no length penalty) with the key/value cache; same
    maximum length and banned tokens (PAD, BOS) as `beam_search`, tokens without BOS and EOS."""
    return _one_path(model, src, bos, eos, max_len_a, max_len_b, lambda logp, alive: logp.argmax(-1))


def sample(model, src: torch.Tensor, bos: int, eos: int, max_len_a: float, max_len_b: int,
           generator: torch.Generator) -> list[list[int]]:
    """One sequence per source drawn from the model's distribution (its softmax, PAD and BOS
    banned), as `greedy` decodes but drawing instead of taking the argmax: self-critical training's
    samples. `generator` is a CPU generator, so the draws are the same on any device."""
    return _one_path(model, src, bos, eos, max_len_a, max_len_b, lambda logp, alive: draw(logp, generator))


def greedy_and_sample(model, src: torch.Tensor, bos: int, eos: int, max_len_a: float, max_len_b: int,
                      generator: torch.Generator) -> tuple[list[list[int]], list[list[int]]]:
    """`greedy` and `sample` of the same sources decoded as one batch of 2N sequences (self-critical
    training's baseline and samples): one decoder step serves both. The samples draw only while
    one of them runs, as `sample` does, so `generator` ends where it would after `sample`."""
    n = src.shape[0]

    def choose(logp: torch.Tensor, alive: list[bool]) -> torch.Tensor:
        drawn = draw(logp[n:], generator) if alive[1] else logp[n:].argmax(-1)  # no sample runs: any token
        return torch.cat([logp[:n].argmax(-1), drawn])

    both = _one_path(model, torch.cat([src, src]), bos, eos, max_len_a, max_len_b, choose, groups=2)
    return both[:n], both[n:]


def draw(logp: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row from softmax(logp) (renormalised over the allowed tokens, also when PAD or
    BOS held the mass), as torch.multinomial(probs, 1, generator) draws it on the CPU: the argmax of
    probs / E with E ~ Exp(1) from `generator`. E is drawn on the host and copied, so the draw needs
    no read of the device's probabilities and is the same on any device."""
    probs = logp.softmax(-1)
    noise = torch.empty(probs.shape, dtype=probs.dtype).exponential_(1, generator=generator)
    if probs.device.type == "cuda":
        noise = noise.pin_memory()
    return (probs / noise.to(probs.device, non_blocking=True)).argmax(-1)


def _one_path(model, src: torch.Tensor, bos: int, eos: int, max_len_a: float, max_len_b: int, choose, groups: int = 1) -> list[list[int]]:
    """Decode one token per source per step, `choose(logp, alive)` picking it from the
    log-probabilities (N, V), in eval mode; a sequence ends at EOS (not kept) or at its maximum
    length. The rows are `groups` equal groups, and `alive` says which of them still has a running
    sequence. The tokens stay on the device until the end: a step reads those flags once."""
    banned = banned_tokens(model, bos, eos)
    device = _device(model)
    src = src.to(device)
    limits = max_lengths(model.source_lengths(src), max_len_a, max_len_b)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            memory, src_mask = model.encode(src)
            cache = model.new_cache()
            token = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=device)
            limit = torch.tensor(limits, device=device)
            kept = torch.zeros(src.shape[0], dtype=torch.long, device=device)  # tokens each sequence holds
            running = torch.ones(src.shape[0], dtype=torch.bool, device=device)
            alive = [True] * groups
            steps = []  # per step, the token a sequence keeps, or -1
            for t in range(max(limits)):
                nxt = choose(_log_probs(model.decode_step(token, memory, src_mask, cache, t), banned), alive)
                keeps = running & (nxt != eos)
                steps.append(torch.where(keeps, nxt, -1))
                kept += keeps
                running = keeps & (kept < limit)
                alive = running.view(groups, -1).any(1).tolist()
                if not any(alive):
                    break
                token = nxt[:, None]
            rows = torch.stack(steps, dim=1).tolist() if steps else [[] for _ in limits]
    finally:
        model.train(was_training)
    return [[tok for tok in row if tok >= 0] for row in rows]
