"""Train one Transformer translation run: the papers' tensor2tensor recipe, resumable.

The loop (`train_sequences`) also trains the captioner (train/captioning.py): it reads its data
through an object with `lengths`, `batches` and `collate` (TokenPairs here), so the schedule,
checkpoints, resume, divergence and DDP are one code path for both tracks.

Token-based batches (sentences of similar length grouped until `max_tokens` source-or-target
tokens, the papers' "batch size 4096" for IWSLT), gradient accumulation over `update_freq`
batches to emulate the 8-GPU WMT batch on fewer GPUs, Adam (0.9, 0.98, 1e-9) with the inverse
square-root schedule and warm-up of Vaswani et al. (2017), label smoothing 0.1. With
`length_bucket: N`, every batch is padded to one of a few shapes (`pad_to_bucket`): on a GPU an
eager step is its kernel launches, and CUDA graphs (`compile: cudagraphs`) replay a step only for a
shape they have recorded. A training pair with a side longer than `max_train_len` tokens (with EOS
or BOS; default the model's MAX_POSITIONS) is dropped, as tensor2tensor drops it (`max_length`);
how many is printed and kept in metrics.json. The dev split keeps every pair, or its first
`dev_sentences` (`dev_examples`).

Contracts (docs/design.md), as for classification: a checkpoint every `checkpoint_every` updates
(a log row, the dev loss, and checkpoints/step<N>.pt for the last `keep_checkpoints` of them, those
averaging reads); at the first checkpoint RESUME_EVERY_S after the last one (recipes.py),
at a time-limit stop and at the end, last.pt with everything needed to continue bit-identically on
CPU (optimizer, random states, position in the epoch); a NaN/inf loss stops the run and is
recorded; metrics.json carries spec and provenance.
With torchrun (WORLD_SIZE > 1) each process takes every WORLD_SIZE-th batch and DDP averages the
gradients; only rank 0 writes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from .. import files, models, provenance, recipes, residual
from ..catalog import MAX_POSITIONS
from ..devices import join_process_group, pick_device, use_deterministic_algorithms
from ..models.transformer import label_smoothed_loss
from ..specs import ModelSpec, SequenceTrainSpec, TranslationTrainSpec
from ..speed import Speed, own_gradients, speed_of
from .checkpoint import LoopState, new_run_id, random_state, resume, resume_due, save
from .time_limit import TimeLimitReached, must_stop
from .classification import log_csv

LOG_FIELDS = ("step", "epoch", "lr", "train_loss", "dev_loss", "tokens_per_s", "seconds")


def inverse_sqrt_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Vaswani et al. (2017) Eq. (3): d^-0.5 * min(step^-0.5, step * warmup^-1.5), step from 1."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def bucketed(length: int, bucket: int) -> int:
    """`length` rounded up to a multiple of `bucket`; unchanged for bucket 0."""
    return -(-length // bucket) * bucket if bucket else length


def token_batches(lengths, max_tokens: int, generator: torch.Generator, bucket: int = 0) -> list[np.ndarray]:
    """Group sentence indices into batches of at most `max_tokens` (padded source or target tokens,
    whichever is larger), similar lengths together, in a shuffled order. A sentence longer than
    max_tokens gets a batch of its own. With `bucket`, a sentence counts as its lengths rounded up
    to a multiple of it: the length a batch is padded to (`pad_to_bucket`). `lengths`: (source,
    target) of each sentence, an (N, 2) array or its rows.

    Sentences are taken in order of (longest side, source, target, index) and a batch is closed
    before the sentence that would take it over the budget, so a batch from position p runs to the
    first j with longest[j] * (j - p + 1) > max_tokens, i.e. j + 1 - max_tokens // longest[j] > p:
    that left side rises with j, so one binary search finds each batch's end. Done in numpy, since
    every rank makes an epoch's batches while the GPUs wait (benchmarks/epoch_batches.py)."""
    lengths = np.asarray(lengths).reshape(-1, 2)
    if bucket:
        lengths = -(-lengths // bucket) * bucket
    longest = lengths.max(axis=1)
    order = np.lexsort((lengths[:, 1], lengths[:, 0], longest))  # stable: ties in index order
    longest = longest[order]
    closes_before = np.arange(1, len(order) + 1) - max_tokens // longest
    bounds, start = [0], 0
    while start < len(order):
        start = max(start + 1, int(np.searchsorted(closes_before, start, side="right")))
        bounds.append(start)
    perm = torch.randperm(len(bounds) - 1, generator=generator).tolist()
    return [order[bounds[p] : bounds[p + 1]] for p in perm]


def collate(pairs, idx, pad: int, bos: int, eos: int):
    """-> src (N, S) with EOS, tgt_in (N, T) = BOS + target, tgt_out (N, T) = target + EOS, for the
    pairs `idx`. `pairs` is a prepared split (data/translation.EncodedPairs), each side gathered from
    its memory-mapped ids by the offsets at once: a batch is made on the host after an update's sync
    and before the next step's kernels, so the GPU waits for it (benchmarks/epoch_batches.py). Else
    `pairs[i]` is (source ids, target ids), packed the same way first."""
    if is_prepared(pairs):
        sources, targets, rows = (pairs.src_ids, pairs.src_offsets), (pairs.tgt_ids, pairs.tgt_offsets), np.asarray(idx)
    else:
        sources, targets = packed([pairs[i][0] for i in idx]), packed([pairs[i][1] for i in idx])
        rows = np.arange(len(idx))
    return padded_rows(*sources, rows, pad, last=eos), *shifted_rows(*targets, rows, pad, bos, eos)


def packed(sentences) -> tuple[np.ndarray, np.ndarray]:
    """Sentences of ids as a prepared split holds a side: all ids in one array, and offsets such that
    sentence k is ids[offsets[k]:offsets[k + 1]]."""
    arrays = [np.asarray(s, dtype=np.int64) for s in sentences]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    return np.concatenate([np.zeros(0, dtype=np.int64), *arrays]), offsets


def padded_rows(ids: np.ndarray, offsets: np.ndarray, rows: np.ndarray, pad: int, first: int | None = None,
                last: int | None = None) -> torch.Tensor:
    """(len(rows), longest + 1): each row's sentence (ids[offsets[r]:offsets[r + 1]]) after `first`
    or followed by `last` (one of them), then `pad`."""
    starts = offsets[rows].astype(np.int64)
    lengths = offsets[rows + 1].astype(np.int64) - starts
    shift = int(first is not None)
    place = np.arange(int(lengths.max(initial=0)) + 1)[None, :] - shift  # a column's place in its sentence
    inside = (place >= 0) & (place < lengths[:, None])
    out = np.full(inside.shape, pad, dtype=np.int64)
    out[inside] = ids[(starts[:, None] + place)[inside]]
    if first is not None:
        out[:, 0] = first
    if last is not None:
        out[np.arange(len(rows)), lengths] = last
    return torch.from_numpy(out)


def shifted_rows(ids: np.ndarray, offsets: np.ndarray, rows: np.ndarray, pad: int, bos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher forcing's pair of the target sentences `rows`, padded: tgt_in (N, T) = BOS + target,
    tgt_out (N, T) = target + EOS."""
    return padded_rows(ids, offsets, rows, pad, first=bos), padded_rows(ids, offsets, rows, pad, last=eos)


def shifted_targets(targets, pad: int, bos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`shifted_rows` of target sentences given as sequences of ids."""
    ids, offsets = packed(targets)
    return shifted_rows(ids, offsets, np.arange(len(offsets) - 1), pad, bos, eos)


def pad_to_bucket(batch: tuple[torch.Tensor, ...], bucket: int, max_tokens: int, pad: int, bos: int, eos: int):
    """(src, tgt_in, tgt_out) padded to one of few shapes, so that a compiled step replays one CUDA
    graph per shape instead of recording one per batch: source and target to the same length L, a
    multiple of `bucket`, and the rows to max_tokens // L (at least the batch's own). A row added
    is the empty sentence (source EOS, target BOS, no target token), which the loss ignores; pads
    added to a row are masked in the source and come after the causal target's last token, so the
    real tokens' outputs are unchanged."""
    src, tin, tout = batch
    length = bucketed(max(src.shape[1], tin.shape[1]), bucket)
    rows = max(src.shape[0], max_tokens // length)

    def grown(t: torch.Tensor, first: int | None) -> torch.Tensor:
        out = torch.full((rows, length), pad, dtype=t.dtype)
        out[: t.shape[0], : t.shape[1]] = t
        if first is not None:
            out[t.shape[0] :, 0] = first
        return out

    return grown(src, eos), grown(tin, bos), grown(tout, None)


def max_train_len(spec: SequenceTrainSpec) -> int:
    """The most tokens (with EOS or BOS) a side of a training example may have: the recipe's
    `max_train_len`, else every position the model holds a sinusoid for."""
    return spec.get("max_train_len", MAX_POSITIONS)


def length_buckets(spec: TranslationTrainSpec) -> int:
    """How many batch shapes the loop can feed its model: one per length bucket up to the longest
    side (`pad_to_bucket` sets the rows from the length); 1 without buckets (no graph mode then:
    the plan refuses one)."""
    bucket = spec.get("length_bucket", 0)
    return bucketed(max_train_len(spec), bucket) // bucket if bucket else 1


class TokenPairs:
    """A split of sentence pairs as the training loop reads it: `lengths`, an (examples, 2) array of
    each example's source and target tokens with EOS; `batches(generator)`, an epoch's batches of
    example indices (arrays); and `collate(idx)` -> (src, tgt_in, tgt_out). With `max_len`, a pair
    with a side longer than that is no example (`dropped` counts them; `kept` maps an example to its
    pair). The captioning track gives the loop its own
    (train/captioning.CaptionedImages): the loop is the same for both."""

    def __init__(self, pairs, spec: TranslationTrainSpec, max_len: int | None = None):
        self.pairs, self.spec = pairs, spec
        lengths = (np.stack(sides_of(pairs), axis=1) + 1).astype(np.int32)
        self.kept = np.flatnonzero(lengths.max(axis=1, initial=0) <= max_len) if max_len is not None else np.arange(len(lengths))
        self.lengths = lengths[self.kept]
        self.dropped = len(lengths) - len(self.kept)

    def batches(self, generator: torch.Generator) -> list[np.ndarray]:
        return token_batches(self.lengths, self.spec.max_tokens, generator, self.spec.get("length_bucket", 0))

    def collate(self, idx: list[int]):
        ids = self.spec.pad_id, self.spec.bos_id, self.spec.eos_id
        pairs = self.kept[np.asarray(idx, dtype=np.int64)]
        batch = collate(self.pairs, pairs, *ids)
        if bucket := self.spec.get("length_bucket", 0):
            batch = pad_to_bucket(batch, bucket, self.spec.max_tokens, *ids)
        return batch


def is_prepared(pairs) -> bool:
    """Whether `pairs` is a prepared split (data/translation.EncodedPairs: ids and their offsets,
    memory-mapped), read by its offsets, or pairs of id lists, read one by one."""
    return hasattr(pairs, "src_offsets")


def sides_of(pairs) -> tuple[np.ndarray, np.ndarray]:
    """The source and target lengths of each pair (no EOS): from a prepared split's offsets
    without reading its ids, else pair by pair."""
    if is_prepared(pairs):
        return pairs.src_lengths(), pairs.tgt_lengths()
    sides = np.array([(len(s), len(t)) for s, t in pairs], dtype=np.int64).reshape(-1, 2)
    return sides[:, 0], sides[:, 1]


def dev_examples(dev_pairs, spec: TranslationTrainSpec) -> TokenPairs:
    """The dev pairs the dev loss reads: the first `dev_sentences` of the split (the recipe's; every
    pair when absent). A paper-size model on a few CPU cores cannot afford the loss over a 3,000
    sentence dev set at every checkpoint; the first N keep it one fixed set across checkpoints."""
    n = spec.get("dev_sentences")
    first = dev_pairs if n is None else [dev_pairs[i] for i in range(min(n, len(dev_pairs)))]
    return TokenPairs(first, spec)


@torch.no_grad()
def dev_loss(model, data, spec, device, speed: Speed) -> float:
    """Mean label-smoothed loss per target token over the dev examples (its batches from seed 0):
    for translation those `dev_examples` keeps."""
    model.eval()
    total, tokens = torch.zeros((), dtype=torch.float64, device=device), 0
    for idx in data.batches(torch.Generator().manual_seed(0)):
        src, tin, tout = (t.to(device) for t in data.collate(idx))
        n = target_tokens(data, idx)
        with speed.autocast(device):
            logits = model(src, tin)
        total += label_smoothed_loss(logits, tout, spec.pad_id, spec.label_smoothing).double() * n
        tokens += n
    model.train()
    return total.item() / max(tokens, 1)


def target_tokens(data, idx: list[int]) -> int:
    """The target tokens (with EOS) of these examples: the loss's non-pad positions, counted on the
    host from the lengths, so that no step waits for the device to count them."""
    return int(data.lengths[np.asarray(idx, dtype=np.int64), 1].sum())


def update_target_tokens(data, batches: list[list[int]]) -> int:
    """The target tokens of one update on every rank together: its batches are the same slice of
    the epoch's batch list on every rank (the loop deals them out), so no collective is needed."""
    return sum(target_tokens(data, idx) for idx in batches)


def train(spec: TranslationTrainSpec | Mapping, train_pairs, dev_pairs, vocab_size: int, out_dir: str | Path, device: str = "auto", progress: bool = True,
          stop_by: float | None = None) -> dict:
    """Run (or resume) one translation run; writes out_dir/{train_log.csv, metrics.json, checkpoints/}."""
    spec = TranslationTrainSpec.of(spec)
    train_data = TokenPairs(train_pairs, spec, max_train_len(spec))
    return train_sequences(spec, train_data, dev_examples(dev_pairs, spec), {"vocab_size": vocab_size}, out_dir, device, progress, stop_by)


def train_sequences(spec: SequenceTrainSpec, train_data, dev_data, model_inputs: dict, out_dir: str | Path, device: str = "auto", progress: bool = True,
                    stop_by: float | None = None) -> dict:
    """The loop of a translation or captioning run (module docstring): `train_data` and `dev_data`
    as TokenPairs (`train_data` without the examples over max_train_len), `model_inputs` what the
    model spec takes from the data (vocab_size, ...). With `stop_by` (time.time()), it stops after a
    checkpoint when the next stretch might not end before then (time_limit.TimeLimitReached)."""
    out_dir = Path(out_dir)
    ckpt_dir = out_dir / "checkpoints"
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    if spec.world_size != world:  # the batch would not be the recipe's
        raise RuntimeError(f"the spec asks for {spec.world_size} ranks (translation.gpus), this job has {world}; "
                           "run it through `resrepro launch --gpus N`")
    if spec.get("deterministic"):
        use_deterministic_algorithms()
    device = pick_device(device)  # under torchrun, auto means cuda:LOCAL_RANK; --device cpu gives CPU ranks
    speed = speed_of(spec, device)
    if world > 1:
        join_process_group(device)

    torch.manual_seed(spec.seed)
    gen = torch.Generator().manual_seed(spec.seed)
    model_spec = models.model_spec(spec, **model_inputs)
    model = models.build(model_spec).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, **speed.optimizer_options())
    state = resume(ckpt_dir / "last.pt", spec.to_dict(), model, opt, device, rank)
    if state is None:
        if rank == 0:  # an earlier run's steps (another spec, same folder) must never be averaged with this one's
            remove_checkpoints(ckpt_dir)
        state = LoopState(generator=gen.get_state(), run_id=new_run_id())
        # Admin's profile (a no-op for other variants): one batch through the fresh model, before DDP,
        # whose construction gives every rank rank 0's result
        def first_batch():
            src, tin, _ = (t.to(device) for t in train_data.collate(train_data.batches(torch.Generator().manual_seed(spec.seed))[0]))
            return model(src, tin)

        with speed.autocast(device):
            residual.initialize(model, first_batch)
    # positions is a constant buffer: nothing to broadcast before each forward
    ddp_model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False) if world > 1 else model
    forward = speed.compiled(ddp_model, shapes=length_buckets(spec))

    if rank == 0:
        print(f"{out_dir}: dropped {train_data.dropped} training examples with a side over {max_train_len(spec)} tokens "
              "(max_train_len)", file=sys.stderr)
    bar = tqdm(total=spec.max_updates, initial=state.step, desc=str(out_dir), disable=not progress or rank > 0, mininterval=2, file=sys.stderr)
    # The epoch's loss sum stays on the device: a step reads one tensor, its divergence check.
    started, loss_sum, loss_tokens, seen_tokens = time.perf_counter(), torch.zeros((), dtype=torch.float64, device=device), 0, 0
    last_resume = started
    per_update = spec.update_freq * world  # batches of one update, all ranks together
    while state.step < spec.max_updates and state.diverged is None:
        gen.set_state(state.generator)
        batches = train_data.batches(gen)
        batches = batches[: len(batches) - len(batches) % world]  # as many on every rank: DDP's collectives pair up
        updates = [batches[i : i + per_update] for i in range(0, len(batches), per_update)]
        while state.position < len(updates) and state.step < spec.max_updates:
            lr = inverse_sqrt_lr(state.step + 1, model.cfg.d_model, spec.warmup, spec.lr_scale)
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad(set_to_none=True)
            # The loss is the mean over every target token of this update, on all ranks together, as
            # on one GPU: DDP averages the ranks' gradients, so each rank's sum is scaled by world/tokens.
            update_tokens = update_target_tokens(train_data, updates[state.position])
            update = updates[state.position][rank::world]  # this rank's batches
            losses = []
            for k, idx in enumerate(update):
                batch = train_data.collate(idx)
                if device.type == "cuda":  # pinned host memory: the copy overlaps with compute
                    batch = tuple(t.pin_memory() for t in batch)
                src, tin, tout = (t.to(device, non_blocking=True) for t in batch)
                n = target_tokens(train_data, idx)
                # gradients are all-reduced once per update, after its last batch, not after each
                syncing = world == 1 or k == len(update) - 1
                with contextlib.nullcontext() if syncing else ddp_model.no_sync():
                    with speed.autocast(device):
                        logits = forward(src, tin)
                    loss = label_smoothed_loss(logits, tout, spec.pad_id, spec.label_smoothing)
                    (loss * n * world / update_tokens).backward()
                    if speed.replays_graphs and k < len(update) - 1:
                        own_gradients(model)
                losses.append(loss.detach())
                loss_sum, loss_tokens = loss_sum + losses[-1].double() * n, loss_tokens + n
                seen_tokens += int(train_data.lengths[np.asarray(idx, dtype=np.int64), 0].sum()) + n
            # Checked once an update, before the optimizer moves the weights: a non-finite loss stops
            # the run with the weights it had before this update, on every rank together.
            finite = torch.isfinite(torch.stack(losses)).all().float()
            if world > 1:
                torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
            if not finite:
                first_bad = next((x for x in losses if not torch.isfinite(x)), losses[-1])
                state.diverged = {"step": state.step + 1, "loss": str(first_bad.item())}
                break
            opt.step()
            state.step, state.position = state.step + 1, state.position + 1
            bar.update(1)
            if state.step % spec.checkpoint_every == 0 or state.step == spec.max_updates:
                elapsed = time.perf_counter() - started
                loss_sum, loss_tokens, seen_tokens = sum_over_ranks([loss_sum.item(), loss_tokens, seen_tokens], device, world)
                row = {"step": state.step, "epoch": state.epoch, "lr": lr, "train_loss": loss_sum / max(loss_tokens, 1),
                       "dev_loss": dev_loss(model, dev_data, spec, device, speed), "tokens_per_s": seen_tokens / elapsed, "seconds": elapsed}
                state.log.append(row)
                bar.set_postfix(train_loss=f"{row['train_loss']:.3f}", dev_loss=f"{row['dev_loss']:.3f}")
                started, loss_sum, loss_tokens, seen_tokens = time.perf_counter(), torch.zeros((), dtype=torch.float64, device=device), 0, 0
                stop = state.step < spec.max_updates and must_stop(stop_by, elapsed, device, world)
                resumable = stop or state.step == spec.max_updates or resume_due(time.perf_counter() - last_resume, device, world)
                random_states = random_states_of_all_ranks(device, world) if resumable else None
                if rank == 0:
                    files.write_text(out_dir / "train_log.csv", log_csv(state.log, LOG_FIELDS))
                    _save(ckpt_dir, model, opt, spec, state, model_spec, random_states)
                if resumable:
                    last_resume = time.perf_counter()
                if stop:
                    raise TimeLimitReached(f"{out_dir}: stopped after update {state.step} of {spec.max_updates}, checkpointed, "
                                           "before the job's time limit; the next attempt continues from it")
        if state.diverged is None and state.position >= len(updates):
            state.epoch, state.position, state.generator = state.epoch + 1, 0, gen.get_state()
    bar.close()
    if state.diverged is not None:
        random_states = random_states_of_all_ranks(device, world)
        if rank == 0:
            _save(ckpt_dir, model, opt, spec, state, model_spec, random_states)

    rows = state.log
    metrics = {"spec": spec.to_dict(), "seed": spec.seed, "diverged": state.diverged is not None, "diverged_at": state.diverged,
               "dropped_long_pairs": train_data.dropped, "max_train_len": max_train_len(spec),
               "updates": state.step, "epochs": state.epoch, "parameters": models.count_parameters(model), "speed": asdict(speed),
               "wall_time_s": sum(r["seconds"] for r in rows), "final": rows[-1] if rows and state.diverged is None else None,
               "provenance": provenance.collect(device)}
    if rank == 0:
        files.write_text(out_dir / "train_log.csv", log_csv(rows, LOG_FIELDS))
        files.write_json(out_dir / "metrics.json", metrics)
    return metrics


def sum_over_ranks(values: list[float], device, world: int) -> list[float]:
    """Each value summed over the ranks (float64: token counts stay exact); as given on one process."""
    if world == 1:
        return values
    summed = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(summed)
    return summed.tolist()


def random_states_of_all_ranks(device, world: int) -> list[dict]:
    """Every rank's random_state(), in rank order (a collective: every rank calls it)."""
    if world == 1:
        return [random_state(device)]
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, random_state(device))
    return gathered


def averaged_steps(max_updates: int, every: int, keep: int) -> list[int]:
    """The updates whose step<N>.pt averaging will read: the last `keep` of those checkpointed (every
    `every` updates, and the last one)."""
    return recipes.checkpointed_updates(max_updates, every)[-keep:]


def _save(ckpt_dir: Path, model, opt, spec: SequenceTrainSpec, state: LoopState, model_spec: ModelSpec, random_states: list[dict] | None) -> None:
    """A checkpoint's files: step<N>.pt (model and its spec) for averaging, written only for the
    updates averaging reads (a big Transformer's file is 0.85 GB; a paper run checkpoints 550 times);
    last.pt for resuming where this is a resume point (every rank's `random_states` given)."""
    if state.diverged is None and state.step in averaged_steps(spec.max_updates, spec.checkpoint_every, spec.keep_checkpoints):
        save_step(ckpt_dir, model, model_spec, state.step, spec.keep_checkpoints, state.run_id)
    if random_states is not None:
        save(ckpt_dir / "last.pt", model, opt, spec.to_dict(), state, model_spec, random_states)


def step_checkpoints(ckpt_dir: Path) -> list[Path]:
    """The step<N>.pt files, oldest first."""
    return sorted(ckpt_dir.glob("step*.pt"), key=lambda p: int(p.stem.removeprefix("step")))


def remove_checkpoints(ckpt_dir: Path) -> None:
    """Every checkpoint of an earlier run in this folder: its steps, its resume points."""
    for old in ckpt_dir.glob("*.pt"):
        old.unlink()


def save_step(ckpt_dir: Path, model, model_spec: ModelSpec, step: int, keep: int, run_id: str | None) -> None:
    """step<N>.pt (the model and its spec, what averaging reads, stamped with the run that wrote it),
    the newest `keep` kept."""
    files.save_torch(ckpt_dir / f"step{step}.pt", {"model": model.state_dict(), "model_spec": model_spec.to_dict(), "step": step, "run_id": run_id})
    for old in step_checkpoints(ckpt_dir)[:-keep]:
        old.unlink()
