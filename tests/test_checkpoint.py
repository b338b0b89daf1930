"""Checkpoints keep every rank's random state, the GPU's included: checked with CUDA's generator patched."""

import torch
from torch import nn

from resrepro.specs import ModelSpec
from resrepro import recipes
from resrepro.train import checkpoint
from resrepro.train.checkpoint import LoopState, random_state, resume, save

SPEC = {"seed": 0, "lr": 0.1}
LINEAR = ModelSpec(arch="linear", variant="add")  # stored, never built here


def model_and_optimizer():
    model = nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_each_rank_gets_back_its_own_cpu_and_gpu_random_state(tmp_path, monkeypatch):
    gpu_states = {0: torch.tensor([1, 2, 3], dtype=torch.uint8), 1: torch.tensor([7, 8, 9], dtype=torch.uint8)}
    restored = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: gpu_states[device.index].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.append((state.tolist(), str(device))))
    torch.manual_seed(1)
    rank0 = random_state(torch.device("cuda", 0))
    torch.manual_seed(2)
    rank1 = random_state(torch.device("cuda", 1))
    assert rank0["cuda"].tolist() == [1, 2, 3] and not torch.equal(rank0["cpu"], rank1["cpu"])

    model, opt = model_and_optimizer()
    save(tmp_path / "last.pt", model, opt, SPEC, LoopState(step=5), LINEAR, [rank0, rank1])
    torch.manual_seed(3)
    state = resume(tmp_path / "last.pt", SPEC, *model_and_optimizer(), torch.device("cuda", 1), rank=1)
    assert state.step == 5
    assert restored == [([7, 8, 9], "cuda:1")]  # rank 1's GPU state, on rank 1's GPU
    assert torch.equal(torch.get_rng_state(), rank1["cpu"])

    restored.clear()
    resume(tmp_path / "last.pt", SPEC, *model_and_optimizer(), torch.device("cuda", 0), rank=0)
    assert restored == [([1, 2, 3], "cuda:0")] and torch.equal(torch.get_rng_state(), rank0["cpu"])


def test_on_the_cpu_no_gpu_state_is_taken_or_set(tmp_path, monkeypatch):
    def no_gpu(*args, **kwargs):
        raise AssertionError("CUDA's generator touched on a CPU run")

    monkeypatch.setattr(torch.cuda, "get_rng_state", no_gpu)
    monkeypatch.setattr(torch.cuda, "set_rng_state", no_gpu)
    assert random_state(torch.device("cpu"))["cuda"] is None
    model, opt = model_and_optimizer()
    save(tmp_path / "last.pt", model, opt, SPEC, LoopState(step=1), LINEAR, [random_state(torch.device("cpu"))])
    expected = torch.rand(4)  # what the run draws next
    assert resume(tmp_path / "last.pt", SPEC, model, opt) is not None
    assert torch.equal(torch.rand(4), expected)


def test_a_checkpoint_from_before_per_rank_states_still_resumes(tmp_path):
    """Older checkpoints kept one CPU state as torch_rng: a run interrupted then resumes as before."""
    model, opt = model_and_optimizer()
    torch.manual_seed(4)
    old = {"model": model.state_dict(), "optimizer": opt.state_dict(), "torch_rng": torch.get_rng_state(), "spec": SPEC, "step": 2}
    torch.save(old, tmp_path / "last.pt")
    expected = torch.rand(3)
    assert resume(tmp_path / "last.pt", SPEC, model, opt).step == 2
    assert torch.equal(torch.rand(3), expected)


def test_a_checkpoint_of_the_same_spec_whose_weights_do_not_fit_is_not_resumed(tmp_path, capsys):
    """A size preset changed in the code (the spec names the preset, not its widths): the run starts
    afresh and says why, instead of failing to load the old weights."""
    model, opt = model_and_optimizer()
    save(tmp_path / "last.pt", model, opt, SPEC, LoopState(step=3), LINEAR, [random_state(torch.device("cpu"))])
    wider = nn.Linear(3, 4)
    assert resume(tmp_path / "last.pt", SPEC, wider, torch.optim.SGD(wider.parameters(), lr=0.1)) is None
    assert "do not fit this model" in capsys.readouterr().err
    assert resume(tmp_path / "last.pt", SPEC, *model_and_optimizer()).step == 3
    renamed = nn.Sequential(nn.Linear(3, 2))  # the same shapes under other names
    assert resume(tmp_path / "last.pt", SPEC, renamed, torch.optim.SGD(renamed.parameters(), lr=0.1)) is None


def test_a_resume_point_is_due_once_resume_every_s_has_passed(monkeypatch):
    monkeypatch.setattr(recipes, "RESUME_EVERY_S", 600.0)
    assert [checkpoint.resume_due(s) for s in (0.0, 599.9, 600.0, 4000.0)] == [False, False, True, True]


def test_resume_points_count_every_ceil_of_the_interval_over_the_stretch_and_the_last():
    # 50 checkpoints 20 s apart, one resume point 600 s after the last: every 30th checkpoint
    # (30, then the 50th, the run's end)
    assert recipes.resume_points(50, 20.0, 600.0) == 2
    assert recipes.resume_points(60, 20.0, 600.0) == 2  # 30 and 60
    assert recipes.resume_points(61, 20.0, 600.0) == 3
    assert recipes.resume_points(50, 250.0, 600.0) == 17  # every 3rd (ceil(2.4)): 16 and the 50th
    assert recipes.resume_points(50, 7.0, 600.0) == 1  # ceil(600 / 7) = 86 apart: the end alone
    assert recipes.resume_points(50, 700.0, 600.0) == 50  # stretches longer than the interval: every one
    assert recipes.resume_points(50, None) == 50  # no time given: every checkpoint, an upper bound
