"""Train one captioning run: cross-entropy on every reference caption, in the translation track's
loop, then, when the recipe has `scst`, self-critical sequence training on CIDEr-D.

Cross-entropy: each caption of each training image is one example (the usual recipe: Cornia et
al. 2020, batch 50 captions); an epoch is every caption once, in batches of `batch_size` captions
drawn in a shuffled order. Adam with the inverse square-root schedule and warm-up, checkpoints,
resume, divergence, averaging and DDP are the translation loop's (train/translation.train_sequences).

Self-critical (Rennie et al. 2017): from the cross-entropy model, for each batch of images, one
caption sampled from the model and one decoded greedily (both in one batch:
beam_search.greedy_and_sample); the sample's reward is its CIDEr-D against the image's references
minus the greedy caption's (the baseline), with document frequencies from all training references
(evaluate/cider.py); the loss is minus that advantage times the sample's log-probability, averaged
over its tokens. Adam at a fixed learning rate.
Dropout is off throughout, so the log-probabilities are those of the policy that sampled. The
stage has its own resume state (checkpoints/scst.pt) and continues the step<N>.pt numbering, so
evaluation averages its checkpoints as it would the cross-entropy ones. Changing only `scst`
keeps the cross-entropy stage (its checkpoint's spec has no `scst`). One process: under DDP the
stage refuses to start.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from .. import files, models
from ..models import load_checkpoint
from ..data import captions
from ..devices import pick_device
from ..evaluate.beam_search import banned_tokens, greedy, greedy_and_sample
from ..evaluate.cider import CiderD
from ..specs import MISSING, CaptioningTrainSpec, ModelSpec
from ..speed import speed_of
from .checkpoint import LoopState, random_state, resume, save
from .time_limit import TimeLimitReached, must_stop
from .classification import log_csv
from .translation import max_train_len, save_step, shifted_targets, step_checkpoints, train_sequences

SCST_LOG_FIELDS = ("step", "epoch", "reward", "baseline", "dev_cider", "seconds")


class CaptionedImages:
    """A captioning split as the training loop reads it (see translation.TokenPairs): examples are
    (image, caption) pairs; `collate` gives the images' features (N, regions, dim) as the source.
    With `max_len`, a caption longer than that (with its EOS) is no example (`dropped` counts them):
    only the caption is a sequence, the regions have no positions."""

    def __init__(self, split: captions.CaptionSplit, vocabulary: list[str], spec: CaptioningTrainSpec, max_len: int | None = None):
        self.features, self.spec = split.features, spec
        pairs = captions.training_pairs(split, vocabulary)
        self.pairs = [(image, c) for image, c in pairs if max_len is None or len(c) + 1 <= max_len]
        self.dropped = len(pairs) - len(self.pairs)
        regions = split.features.shape[1]
        self.lengths = np.array([(regions, len(c) + 1) for _, c in self.pairs], dtype=np.int32).reshape(-1, 2)

    def batches(self, generator: torch.Generator) -> list[list[int]]:
        order = torch.randperm(len(self.pairs), generator=generator).tolist()
        size = self.spec.batch_size
        return [order[i : i + size] for i in range(0, len(order), size)]

    def collate(self, idx: list[int]):
        images = np.asarray([self.pairs[i][0] for i in idx])
        features = torch.from_numpy(np.asarray(self.features[images], dtype=np.float32))
        return (features, *shifted_targets([self.pairs[i][1] for i in idx], self.spec.pad_id, self.spec.bos_id, self.spec.eos_id))


def train(spec: CaptioningTrainSpec | Mapping, data_dir: str | Path, out_dir: str | Path, device: str = "auto", progress: bool = True,
          stop_by: float | None = None) -> dict:
    """Run (or resume) one captioning run on a prepared dataset (data/captions.py); writes
    out_dir/{train_log.csv, metrics.json, checkpoints/} as a translation run does; both stages stop
    at a checkpoint before `stop_by` as the translation loop does."""
    spec = CaptioningTrainSpec.of(spec)
    meta, vocabulary = captions.load_meta(data_dir), captions.load_vocabulary(data_dir)
    train_data = CaptionedImages(captions.load_split(data_dir, "train"), vocabulary, spec, max_train_len(spec))
    dev_data = CaptionedImages(captions.load_split(data_dir, "val"), vocabulary, spec)
    inputs = {"vocab_size": len(vocabulary), "feature_dim": meta["features"]["dim"]}
    cross_entropy = spec.replace(scst=MISSING)
    metrics = train_sequences(cross_entropy, train_data, dev_data, inputs, out_dir, device, progress, stop_by)
    if spec.get("scst") and not metrics["diverged"]:
        splits = {name: captions.load_split(data_dir, name) for name in ("train", "val")}
        metrics = {**metrics, "spec": spec.to_dict(), "scst": self_critical(spec, metrics["updates"], splits, vocabulary, out_dir, device, progress,
                                                                        stop_by)}
        metrics["diverged"] = metrics["scst"]["diverged"]
        files.write_json(Path(out_dir) / "metrics.json", metrics)
    return metrics


def references(split: captions.CaptionSplit, vocabulary: list[str]) -> list[list[list[int]]]:
    """Each image's reference captions as token ids (UNK for rare words), as the reward reads them."""
    index = {w: i for i, w in enumerate(vocabulary)}
    return [[captions.encode(c, index) for c in image] for image in split.captions]


def sampled_targets(samples: list[list[int]], limit: int, spec: CaptioningTrainSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forcing input and target of sampled captions: EOS ends a sample that drew it (one
    shorter than `limit`), not one the length limit cut; PAD after."""
    tin, tout = shifted_targets([np.asarray(s, dtype=np.int64) for s in samples], spec.pad_id, spec.bos_id, spec.eos_id)
    for i, s in enumerate(samples):
        if len(s) >= limit:
            tout[i, len(s)] = spec.pad_id
    return tin, tout


def policy_loss(logits: torch.Tensor, target: torch.Tensor, advantage: torch.Tensor, pad_id: int, banned: list[int]) -> torch.Tensor:
    """Minus advantage x log-probability of each sampled token, averaged over the tokens; the
    log-probabilities over the tokens sampling could draw (banned ones excluded)."""
    logits = logits.float().index_fill(-1, torch.tensor(banned, dtype=torch.long, device=logits.device), float("-inf"))
    logp = F.log_softmax(logits, dim=-1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    mask = target != pad_id  # where, not a product: a padded position's banned PAD is -inf
    return -torch.where(mask, advantage[:, None] * logp, 0.0).sum() / mask.sum()


def scst_update(model, opt, feats: torch.Tensor, images, reward: CiderD, spec: CaptioningTrainSpec, limit: int, generator: torch.Generator,
                speed, device: torch.device, banned: list[int]) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """One self-critical update on a batch of images (their features and corpus indices): greedy
    baseline and sampled captions, their rewards, the policy loss and, where it is finite, the
    optimizer's step. Returns the samples' and the baselines' rewards and the (detached) loss."""
    baseline_caps, samples = greedy_and_sample(model, feats, spec.bos_id, spec.eos_id, 0.0, limit, generator)
    rewards, baselines = np.array(reward.scores(samples, images)), np.array(reward.scores(baseline_caps, images))
    tin, tout = (t.to(device) for t in sampled_targets(samples, limit, spec))
    advantage = torch.tensor(rewards - baselines, dtype=torch.float32, device=device)
    with speed.autocast(device):
        logits = model(feats, tin)
    loss = policy_loss(logits, tout, advantage, spec.pad_id, banned)
    if torch.isfinite(loss.detach()):
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return rewards, baselines, loss.detach()


def self_critical(spec: CaptioningTrainSpec, first_step: int, splits: dict, vocabulary: list[str], out_dir: str | Path, device: str = "auto",
                  progress: bool = True, stop_by: float | None = None) -> dict:
    """The self-critical stage (module docstring) after `first_step` cross-entropy updates; writes
    scst_log.csv and step<N>.pt checkpoints; returns its summary for metrics.json."""
    cfg = spec.scst
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        raise RuntimeError("self-critical training runs in one process: set captioning.gpus to 1")
    out_dir, device = Path(out_dir), pick_device(device)
    ckpt_dir, speed = out_dir / "checkpoints", speed_of(spec, device)
    xe = load_checkpoint(ckpt_dir / "last.pt")
    model_spec = ModelSpec.from_dict(xe["model_spec"])
    model = models.build(model_spec).to(device)
    model.load_state_dict(xe["model"])
    model.eval()  # dropout off: the log-probabilities are the sampling policy's
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-9, **speed.optimizer_options())
    gen = torch.Generator().manual_seed(spec.seed)
    state = resume(ckpt_dir / "scst.pt", spec.to_dict(), model, opt, device)
    if state is None:  # a fresh stage: the checkpoints of an earlier one (another scst recipe) go
        for stale in step_checkpoints(ckpt_dir):
            if int(stale.stem.removeprefix("step")) > first_step:
                stale.unlink()
        state = LoopState(generator=gen.get_state())
    gen.set_state(state.generator)

    train, dev = splits["train"], splits["val"]
    reward, dev_reward = CiderD(references(train, vocabulary)), CiderD(references(dev, vocabulary))
    banned, limit, images = banned_tokens(model, spec.bos_id, spec.eos_id), cfg.max_len, cfg.batch_images
    per_epoch = max(1, len(train.captions) // images)

    def features_of(split, idx) -> torch.Tensor:
        return torch.from_numpy(np.asarray(split.features[idx], dtype=np.float32)).to(device)

    def dev_cider() -> float:
        caps = []
        for start in range(0, len(dev.captions), 100):
            caps += greedy(model, features_of(dev, np.arange(start, min(start + 100, len(dev.captions)))), spec.bos_id, spec.eos_id, 0.0, limit)
        return float(np.mean(dev_reward.scores(caps, range(len(caps)))))

    bar = tqdm(total=cfg.updates, initial=state.step, desc=f"{out_dir} (self-critical)", disable=not progress, mininterval=2, file=sys.stderr)
    started, sums = time.perf_counter(), np.zeros(2)
    while state.step < cfg.updates and state.diverged is None:
        epoch, position = divmod(state.step, per_epoch)
        # the image order of an epoch comes from (seed, epoch) alone: a resume finds it again
        order = torch.randperm(len(train.captions), generator=torch.Generator().manual_seed(spec.seed * 100_003 + epoch))
        idx = np.sort(order[position * images : (position + 1) * images].numpy())
        rewards, baselines, loss = scst_update(model, opt, features_of(train, idx), idx, reward, spec, limit, gen, speed, device, banned)
        if not torch.isfinite(loss):
            state.diverged = {"step": first_step + state.step + 1, "loss": str(loss.item())}
            break
        state.step, sums = state.step + 1, sums + [rewards.mean(), baselines.mean()]
        bar.update(1)
        if state.step % cfg.checkpoint_every == 0 or state.step == cfg.updates:
            done = state.step % cfg.checkpoint_every or cfg.checkpoint_every
            row = {"step": first_step + state.step, "epoch": state.step // per_epoch, "reward": float(sums[0] / done),
                   "baseline": float(sums[1] / done), "dev_cider": dev_cider(), "seconds": time.perf_counter() - started}
            state.log.append(row)
            bar.set_postfix(reward=f"{row['reward']:.3f}", dev_cider=f"{row['dev_cider']:.3f}")
            started, sums = time.perf_counter(), np.zeros(2)
            state.generator = gen.get_state()
            files.write_text(out_dir / "scst_log.csv", log_csv(state.log, SCST_LOG_FIELDS))
            save_step(ckpt_dir, model, model_spec, first_step + state.step, spec.keep_checkpoints, xe.get("run_id"))
            save(ckpt_dir / "scst.pt", model, opt, spec.to_dict(), state, model_spec, [random_state(device)])
            if state.step < cfg.updates and must_stop(stop_by, row["seconds"]):
                raise TimeLimitReached(f"{out_dir}: stopped after self-critical update {state.step} of {cfg.updates}, "
                                       "checkpointed, before the job's time limit; the next attempt continues from it")
    bar.close()
    if state.diverged is not None:
        state.generator = gen.get_state()
        save(ckpt_dir / "scst.pt", model, opt, spec.to_dict(), state, model_spec, [random_state(device)])
    return {"updates": state.step, "lr": cfg.lr, "diverged": state.diverged is not None, "diverged_at": state.diverged,
            "final": state.log[-1] if state.log and state.diverged is None else None,
            "wall_time_s": sum(r["seconds"] for r in state.log)}
