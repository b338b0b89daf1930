"""Time of one self-critical update (train/captioning.py: a greedy and a sampled caption per
image, their CIDEr-D rewards, then a forward and backward over the samples) at a captioner size.

Random grid features of MSCOCO's shape (49 regions of 2,050 values), vocabulary 9,571, random
references (5 of 10 words per image), an untrained model: its captions run to `--max-len` words,
so the figure is an upper bound for a trained model's shorter ones. The recipe's speed switches
are resolved on the device as training resolves them; medians after warm-up, variants interleaved.

    .venv/bin/python benchmarks/scst_step_time.py --device cuda --size paper
"""

from __future__ import annotations

import argparse
import statistics
import time

from resrepro.specs import CaptioningTrainSpec


VOCAB, REGIONS, DIM = 9_571, 49, 2_050  # MSCOCO's vocabulary at min count 5, a 7 x 7 grid of 2,048 + centre


def self_critical_step(spec: CaptioningTrainSpec, device, images: int, max_len: int, vocab: int = VOCAB, regions: int = REGIONS,
                       dim: int = DIM):
    """One self-critical update of the captioner `spec` names (a run's training spec), on random
    features (`regions` vectors of `dim` an image) and references (words of `vocab`), as a
    callable that ends with a host sync."""
    import torch

    from resrepro import models
    from resrepro.evaluate.beam_search import banned_tokens
    from resrepro.evaluate.cider import CiderD
    from resrepro.speed import speed_of
    from resrepro.train.captioning import scst_update

    gen = torch.Generator().manual_seed(0)
    reward = CiderD([[torch.randint(4, vocab, (10,), generator=gen).tolist() for _ in range(5)] for _ in range(images)])
    feats = torch.rand(images, regions, dim, generator=gen).to(device)
    torch.manual_seed(0)
    model = models.build(models.model_spec(spec, vocab_size=vocab, feature_dim=dim)).to(device).eval()
    speed = speed_of(spec, device)
    lr = spec.scst.lr if spec.get("scst") else 5e-5
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9, **speed.optimizer_options())
    banned = banned_tokens(model, spec.bos_id, spec.eos_id)

    def step():
        _, _, loss = scst_update(model, opt, feats, list(range(images)), reward, spec, max_len, gen, speed, device, banned)
        loss.item()  # a host sync, as the loop's finiteness check is

    return step


def captioner_spec(size: str, variant: str, args: dict, deterministic: bool) -> CaptioningTrainSpec:
    """A captioner's training spec: its model and switches; the keys of the cross-entropy stage do
    not enter a self-critical update."""
    return CaptioningTrainSpec.from_dict({
        "task": "captioning", "dataset": "mscoco", "arch": f"captioner_{size}", "model": "transformer_captioner", "size": size,
        "variant": variant, "args": args, "pad_id": 0, "bos_id": 1, "eos_id": 2, "deterministic": deterministic, "world_size": 1,
        "batch_size": 50, "update_freq": 1, "max_updates": 1, "warmup": 1, "lr_scale": 1.0, "label_smoothing": 0.1,
        "checkpoint_every": 1, "keep_checkpoints": 1})


def main(argv=None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--size", default="paper", choices=["paper", "mini"])
    p.add_argument("--variants", nargs="+", default=["xskip_ln", "sas"])
    p.add_argument("--batch-images", type=int, default=50)
    p.add_argument("--max-len", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--deterministic", action="store_true", help="deterministic kernels, as the paper recipe trains")
    opts = p.parse_args(argv)

    import torch

    from resrepro.devices import pick_device, use_deterministic_algorithms

    if opts.deterministic:
        use_deterministic_algorithms()
    device = pick_device(opts.device)
    args = {"xskip_ln": {"lam": 1.0}, "sas": {"bias_a": 0.0, "bias_b": 0.0}}
    steps = {v: self_critical_step(captioner_spec(opts.size, v, args.get(v, {}), opts.deterministic), device, opts.batch_images, opts.max_len)
             for v in opts.variants}
    for step in steps.values():
        for _ in range(opts.warmup):
            step()
    times = {v: [] for v in steps}
    for _ in range(opts.steps):
        for variant, step in steps.items():
            started = time.perf_counter()
            step()
            times[variant].append(time.perf_counter() - started)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"self-critical update, captioner {opts.size}, {opts.batch_images} images, at most {opts.max_len} words, on {name}"
          f"{' (deterministic)' if opts.deterministic else ''}: median of {opts.steps} after {opts.warmup} warm-up")
    medians = {v: 1000 * statistics.median(t) for v, t in times.items()}
    for variant, ms in medians.items():
        print(f"  {variant:10s} {ms:8.1f} ms")
    return medians


if __name__ == "__main__":
    main()
