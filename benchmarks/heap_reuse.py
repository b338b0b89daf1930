"""A mini Transformer run with glibc's heap kept (resrepro.heap, what every resrepro command sets)
against glibc's defaults: its training loop's seconds and the process's page faults.

Each round trains the same mini translation cell (one seed, `--updates` updates of the mini recipe
on the synthetic corpus in results/data/synthetic, which `make report` builds) in a fresh process,
once each way, the order alternating; the training is the same, so the losses must agree to the last
digit, which the script checks. The page faults are the process's minor faults (getrusage), start-up
included (about 100,000 for importing torch).

    .venv/bin/python benchmarks/heap_reuse.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SPEC = {"arch": "transformer_mini_base", "args": {}, "bos_id": 1, "checkpoint_every": 50, "dataset": "synthetic", "eos_id": 2,
        "fused_optimizer": True, "keep_checkpoints": 10, "label_smoothing": 0.1, "lr_scale": 0.5, "max_tokens": 384,
        "model": "transformer", "pad_id": 0, "size": "mini_base", "task": "translation", "update_freq": 1, "variant": "add",
        "warmup": 200, "world_size": 1}

RUN = """
import json, resource, sys
from resrepro import cli
if sys.argv[1] == "default":
    cli.keep_freed_memory = lambda: False
cli.main(sys.argv[2:])
print(json.dumps({"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt}))
"""


def one_run(mode: str, updates: int, data: str, folder: Path) -> dict:
    cell = folder / mode
    argv = ["train", "translation", "--spec", json.dumps({**SPEC, "max_updates": updates}), "--seeds", "0", "--data", data,
            "--cell-dir", str(cell), "--done", str(cell / "trained.json"), "--threads", "1", "--parallel", "1", "--minutes", "60"]
    proc = subprocess.run([sys.executable, "-c", RUN, mode, *argv], capture_output=True, text=True, check=True)
    metrics = json.loads((cell / "seed0" / "metrics.json").read_text())
    return {"loop_s": metrics["wall_time_s"], "faults": json.loads(proc.stdout.splitlines()[-1])["faults"],
            "final": (metrics["final"]["train_loss"], metrics["final"]["dev_loss"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--data", default="results/data/synthetic")
    a = p.parse_args()
    runs = {"default": [], "kept": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for mode in (("default", "kept") if r % 2 == 0 else ("kept", "default")):
                runs[mode].append(one_run(mode, a.updates, a.data, Path(tmp) / f"round{r}"))
                print(f"round {r}, {mode}: loop {runs[mode][-1]['loop_s']:.2f} s, {runs[mode][-1]['faults']:,} page faults", flush=True)
    finals = {run["final"] for mode in runs for run in runs[mode]}
    assert len(finals) == 1, f"the two heaps trained differently: {finals}"
    default, kept = (statistics.median(run["loop_s"] for run in runs[m]) for m in ("default", "kept"))
    faults = {m: statistics.median(run["faults"] for run in runs[m]) for m in runs}
    print(f"median loop: default {default:.2f} s, kept {kept:.2f} s ({kept / default:.2f}x); "
          f"page faults {faults['default']:,.0f} -> {faults['kept']:,.0f}; the same losses in every run")


if __name__ == "__main__":
    main()
