"""The DDP path of translation training: two CPU processes under torchrun (gloo) stay in lockstep.

tests/ddp_worker.py runs `translation.train` in each process on the tiny corpus and preset of
test_train_translation.py and saves its rank's final parameters; here we check that both exit 0,
rank 0 wrote the run's files, the configured number of updates was done, the parameters are
bit-identical on both ranks and the losses are finite.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from resrepro.launch import DDP_ENV

pytestmark = pytest.mark.integration

WORKER = Path(__file__).with_name("ddp_worker.py")
TORCHRUN = Path(sys.executable).parent / "torchrun"
TIMEOUT_S = 120


def spec(**over):  # as test_train_translation.spec: 8 token batches an epoch, so 4 per rank, 2 updates of 2
    base = dict(task="translation", dataset="synthetic", arch="transformer_base_2block", model="transformer", size="base_2block",
                variant="rskip_ln", args={"lam": 2}, seed=0, world_size=2, max_tokens=300,
                update_freq=2, warmup=50, lr_scale=1.0, label_smoothing=0.1, max_updates=24, checkpoint_every=8,
                keep_checkpoints=2, pad_id=0, bos_id=1, eos_id=2)
    return {**base, **over}


def torchrun(out_dir: Path, run_spec: dict, nproc: int = 2, timeout_s: float = TIMEOUT_S, gloo_timeout_s: float = 60,
             **worker_env: str) -> tuple[int, str]:
    """Run the worker under torchrun (`worker_env`: its DDP_TEST_* switches); -> (exit status,
    torchrun's output). Fails the test on a timeout, after ending torchrun and its workers (which
    torchrun starts in sessions of their own)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DDP_TEST_TIMEOUT_S": str(gloo_timeout_s), **worker_env}
    for name in DDP_ENV:
        env.pop(name, None)  # from an enclosing torchrun, if any
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node", str(nproc), str(WORKER), str(out_dir), json.dumps(run_spec)]
    log = out_dir.parent / f"{out_dir.name}.torchrun.log"
    with log.open("w") as sink:  # a file, not a pipe: an orphaned worker holding a pipe would block the read
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.terminate()  # torchrun ends its workers on SIGTERM
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            for pid_file in out_dir.glob("pid*"):
                try:
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            pytest.fail(f"torchrun did not finish within {timeout_s} s:\n{log.read_text()[-4000:]}")
    return proc.returncode, log.read_text()


def test_the_cases_split_as_their_names_say():
    from ddp_worker import corpus  # tests/ is on sys.path, as for any test module here
    from resrepro.train.translation import token_batches

    lengths = [(len(s) + 1, len(t) + 1) for s, t in corpus(300, 0)]
    count = lambda max_tokens: len(token_batches(lengths, max_tokens, torch.Generator().manual_seed(0)))  # the same every epoch
    assert count(spec()["max_tokens"]) == 8 and count(spec(**UNEVEN_SHARDS.values[0])["max_tokens"]) == 11


UNEVEN_SHARDS = pytest.param(
    dict(max_tokens=200), 20, id="uneven-shards",  # 11 batches an epoch: each rank gets 5, one is dropped this epoch
)


needs_gloo = pytest.mark.skipif(not TORCHRUN.exists() or not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="needs torchrun and torch.distributed with gloo")


@needs_gloo
@pytest.mark.parametrize("over, gloo_timeout_s", [pytest.param({}, 60, id="even-shards"), UNEVEN_SHARDS])
def test_two_process_ddp_training_keeps_the_ranks_identical(tmp_path, over, gloo_timeout_s):
    """On a machine with GPUs (patched in), `--device cpu` still gives CPU ranks on gloo."""
    run_spec, out = spec(**over), tmp_path / "out"
    returncode, output = torchrun(out, run_spec, gloo_timeout_s=gloo_timeout_s, DDP_TEST_FAKE_CUDA="1")
    assert returncode == 0, output[-4000:]

    run = out / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["spec"] == run_spec and metrics["diverged"] is False
    assert metrics["updates"] == run_spec["max_updates"] == 24
    rows = list(csv.DictReader((run / "train_log.csv").open()))
    assert [int(r["step"]) for r in rows] == [8, 16, 24]  # a row every checkpoint_every updates
    for r in rows:
        assert math.isfinite(float(r["train_loss"])) and math.isfinite(float(r["dev_loss"]))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.pt", "step16.pt", "step24.pt"]
    last = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert last["step"] == 24

    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert sorted(p.name for p in out.iterdir()) == ["pid0", "pid1", "rank0.pt", "rank1.pt", "run"]  # train() wrote only under run/
    for r in ranks:
        assert r["backend"] == "gloo" and r["device"] == "cpu" and r["updates"] == 24 and r["diverged"] is False
        assert math.isfinite(r["final"]["train_loss"]) and math.isfinite(r["final"]["dev_loss"])
    a, b = ranks[0]["model"], ranks[1]["model"]
    assert a.keys() == b.keys() and a.keys() == last["model"].keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert all(torch.equal(a[k], last["model"][k]) for k in a)  # rank 0's checkpoint is the final model
    # the logged training loss is over every rank's tokens, so both ranks report the same one
    assert ranks[0]["final"]["train_loss"] == ranks[1]["final"]["train_loss"]
    assert ranks[0]["final"]["dev_loss"] == ranks[1]["final"]["dev_loss"]


def final_model(out: Path) -> dict:
    return torch.load(out / "run" / "checkpoints" / "last.pt", weights_only=True)["model"]


def logged(out: Path, *fields: str) -> list[tuple[float, ...]]:
    return [tuple(float(r[f]) for f in fields) for r in csv.DictReader((out / "run" / "train_log.csv").open())]


@needs_gloo
def test_a_killed_ddp_run_resumes_bit_identically(tmp_path):
    """Each rank draws its own dropout masks, so a checkpoint keeps every rank's random state: a run
    killed between checkpoints and started again ends exactly as one that was never stopped."""
    run_spec = spec()
    assert torchrun(tmp_path / "whole", run_spec)[0] == 0
    returncode, output = torchrun(tmp_path / "killed", run_spec, DDP_TEST_KILL_AT_CHECKPOINT="3")  # steps 8 and 16 saved
    assert returncode != 0 and "killed at checkpoint 3" in output
    assert torch.load(tmp_path / "killed" / "run" / "checkpoints" / "last.pt", weights_only=True)["step"] == 16
    returncode, output = torchrun(tmp_path / "killed", run_spec)
    assert returncode == 0 and "resuming from" in output, output[-4000:]
    whole, resumed = final_model(tmp_path / "whole"), final_model(tmp_path / "killed")
    assert [k for k in whole if not torch.equal(whole[k], resumed[k])] == []
    fields = ("step", "train_loss", "dev_loss")
    assert logged(tmp_path / "whole", *fields) == logged(tmp_path / "killed", *fields)


@needs_gloo
def test_ddp_loss_is_the_token_mean_over_all_ranks_as_on_one_process(tmp_path, monkeypatch):
    """Two ranks with one batch each per update see the same tokens as one process accumulating two
    batches: the logged loss and the trained parameters agree (gloo; dropout off, so the only
    difference is the order of float sums)."""
    from ddp_worker import corpus
    from resrepro.models import transformer
    from resrepro.train import translation

    over = dict(dropout=0.0, max_updates=6, checkpoint_every=1, keep_checkpoints=1)
    assert torchrun(tmp_path / "ranks", spec(**over, update_freq=1))[0] == 0
    monkeypatch.setitem(transformer.PRESETS, "base_2block", dict(d_model=32, heads=4, ffn=64, encoder_layers=2, decoder_layers=2, dropout=0.1))
    translation.train(spec(**over, update_freq=2, world_size=1), corpus(300, 0), corpus(30, 1), 26, tmp_path / "one" / "run", device="cpu", progress=False)
    ranks, one = logged(tmp_path / "ranks", "step", "train_loss"), logged(tmp_path / "one", "step", "train_loss")
    assert [r[0] for r in ranks] == [r[0] for r in one] == [1, 2, 3, 4, 5, 6]
    assert all(abs(a[1] - b[1]) < 1e-6 for a, b in zip(ranks, one)), (ranks, one)
    a, b = final_model(tmp_path / "ranks"), final_model(tmp_path / "one")
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-5) for k in a), max((a[k] - b[k]).abs().max().item() for k in a)
