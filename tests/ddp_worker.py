"""One torchrun process of a tiny translation run on CPU (gloo), for test_ddp.py.

Usage: torchrun --standalone --nproc_per_node 2 tests/ddp_worker.py OUT_DIR SPEC_JSON

Trains into OUT_DIR/run with `translation.train` (which initialises torch.distributed itself and
wraps the model in DDP), then saves this rank's final parameters and what `train` returned as
OUT_DIR/rank{RANK}.pt, for the test to compare across ranks. OUT_DIR/pid{RANK} holds the process
id (torchrun puts its workers in sessions of their own), so that the test can end a stuck rank.
The process group gets a timeout of DDP_TEST_TIMEOUT_S seconds (default 60) instead of gloo's
30 minutes, so ranks that wait in mismatched collectives fail instead of hanging.

Switches, for the tests: DDP_TEST_FAKE_CUDA=1 makes torch report two GPUs (a GPU machine, where
`--device cpu` must still give CPU ranks); DDP_TEST_KILL_AT_CHECKPOINT=N makes every checkpoint a
resume point and ends every rank when the N-th is due, after the (N-1)-th was written, as a kill
between checkpoints would;
DDP_TEST_DEVICE and DDP_TEST_BACKEND choose the device and backend (the GPU tests: two ranks on
one GPU need gloo, NCCL refuses to share a GPU between ranks).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch

from resrepro import recipes
from resrepro.models import transformer
from resrepro.train import translation


def corpus(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """As in test_train_translation.py: a reversing "language" over ids 4..24 (vocabulary 26)."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        length = int(torch.randint(3, 10, (1,), generator=g))
        src = torch.randint(4, 24, (length,), generator=g).tolist()
        pairs.append((src, [x + 1 for x in reversed(src)]))
    return pairs


def fake_two_gpus_for_resrepro() -> None:
    """torch tells resrepro's own code that there are two GPUs (torch itself, e.g. the optimizer's
    CUDA-graph check, still sees none: it would try to start CUDA)."""
    real_available, real_count = torch.cuda.is_available, torch.cuda.device_count

    def asked_by_resrepro() -> bool:
        return sys._getframe(2).f_globals.get("__name__", "").startswith("resrepro")

    torch.cuda.is_available = lambda: asked_by_resrepro() or real_available()
    torch.cuda.device_count = lambda: 2 if asked_by_resrepro() else real_count()


def main() -> None:
    out_dir, spec = Path(sys.argv[1]), json.loads(sys.argv[2])
    rank = int(os.environ["RANK"])
    (out_dir / f"pid{rank}").write_text(str(os.getpid()))
    init_process_group = torch.distributed.init_process_group

    def init_with_timeout(backend=None, **kwargs):
        kwargs.setdefault("timeout", timedelta(seconds=float(os.environ.get("DDP_TEST_TIMEOUT_S", 60))))
        return init_process_group(os.environ.get("DDP_TEST_BACKEND") or backend, **kwargs)

    torch.distributed.init_process_group = init_with_timeout  # train() still makes the call and picks the backend
    if os.environ.get("DDP_TEST_FAKE_CUDA") == "1":
        fake_two_gpus_for_resrepro()
    if (kill_at := int(os.environ.get("DDP_TEST_KILL_AT_CHECKPOINT", 0))):
        recipes.RESUME_EVERY_S = 0.0  # a resume point at every checkpoint, each gathering the ranks' random states
        gather, calls = translation.random_states_of_all_ranks, []

        def killed_when_due(*args):
            calls.append(1)
            if len(calls) == kill_at:
                raise SystemExit(f"killed at checkpoint {kill_at}")
            return gather(*args)

        translation.random_states_of_all_ranks = killed_when_due
    transformer.PRESETS["base_2block"] = dict(d_model=32, heads=4, ffn=64, encoder_layers=2, decoder_layers=2, dropout=0.1)
    built = []
    build = translation.models.build

    def recording_build(*args, **kwargs):
        built.append(build(*args, **kwargs))
        return built[-1]

    translation.models.build = recording_build  # train() does not return the model: keep a handle on it
    device = os.environ.get("DDP_TEST_DEVICE", "cpu")
    metrics = translation.train(spec, corpus(300, 0), corpus(30, 1), 26, out_dir / "run", device=device, progress=False)
    assert torch.distributed.is_initialized() and torch.distributed.get_world_size() == int(os.environ["WORLD_SIZE"])
    (model,) = built
    torch.save({"rank": rank, "backend": str(torch.distributed.get_backend()), "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "updates": metrics["updates"], "diverged": metrics["diverged"], "final": metrics["final"],
                "device": str(next(model.parameters()).device)},
               out_dir / f"rank{rank}.pt")
    torch.distributed.barrier()  # rank 0 has written metrics.json once every rank is here
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
