"""Checkpoint averaging (fairseq semantics) on small hand-computed state dicts and real files."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from resrepro.train.average import (
    average_checkpoints,
    average_state_dicts,
    checkpoints_to_average,
)


def test_float32_exact_mean_of_two_and_three():
    a = {"w": torch.tensor([1.0, 2.0, -4.0]), "b": torch.tensor(0.5)}
    b = {"w": torch.tensor([3.0, 6.0, 4.0]), "b": torch.tensor(1.5)}
    c = {"w": torch.tensor([5.0, 1.0, 3.0]), "b": torch.tensor(-0.5)}
    two = average_state_dicts([a, b])
    assert two["w"].tolist() == [2.0, 4.0, 0.0]
    assert two["b"].item() == 1.0
    three = average_state_dicts([a, b, c])
    assert three["w"].tolist() == [3.0, 3.0, 1.0]
    assert three["b"].item() == 0.5
    assert three["w"].dtype == torch.float32
    assert list(three) == ["w", "b"]  # key order of the first state


def test_float64_stays_float64():
    out = average_state_dicts([{"x": torch.tensor([1.0], dtype=torch.float64)},
                               {"x": torch.tensor([2.0], dtype=torch.float64)}])
    assert out["x"].dtype == torch.float64 and out["x"].item() == 1.5
    fine = average_state_dicts([{"x": torch.tensor([1 + 2e-12], dtype=torch.float64)},
                                {"x": torch.tensor([1 + 4e-12], dtype=torch.float64)}])
    assert fine["x"].item() == pytest.approx(1 + 3e-12, abs=1e-15)  # not summed in float32 (which gives 1.0)


def test_bool_tensors_are_copied_when_equal_and_refused_when_not():
    mask = torch.tensor([True, False])
    out = average_state_dicts([{"m": mask, "w": torch.tensor(1.0)}, {"m": mask.clone(), "w": torch.tensor(3.0)},
                               {"m": mask.clone(), "w": torch.tensor(5.0)}])
    assert out["m"].tolist() == [True, False] and out["m"].dtype == torch.bool and out["m"] is not mask
    with pytest.raises(ValueError, match=r"^bool tensor 'm' differs between checkpoint 0 and 2$"):
        average_state_dicts([{"m": mask}, {"m": mask.clone()}, {"m": ~mask}])
    with pytest.raises(ValueError, match=r"^bool tensor 'm' differs between checkpoint 0 and 1$"):  # the first that differs
        average_state_dicts([{"m": mask}, {"m": ~mask}, {"m": mask.clone()}])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_summed_in_float32_and_returned_in_own_dtype(dtype):
    big = torch.tensor([60000.0, 2.0], dtype=dtype)
    if dtype == torch.float16:
        assert math.isinf((big + big)[0].item())  # the overflow the upcast avoids
    out = average_state_dicts([{"p": big}, {"p": big.clone()}])
    assert out["p"].dtype == dtype
    assert out["p"][0].item() == big[0].item()  # 60000 (bf16 rounds it to 59904), not inf
    assert out["p"][1].item() == 2.0
    # mean computed in float32 then rounded once: (1 + 2) / 2 = 1.5 is exact in both
    out = average_state_dicts([{"p": torch.tensor([1.0], dtype=dtype)},
                               {"p": torch.tensor([2.0], dtype=dtype)}])
    assert out["p"].item() == 1.5 and out["p"].dtype == dtype


def test_integer_tensors_floor_divided():
    out = average_state_dicts([
        {"n": torch.tensor(3), "k": torch.tensor([7, -3], dtype=torch.int32)},
        {"n": torch.tensor(4), "k": torch.tensor([8, -4], dtype=torch.int32)},
    ])
    assert out["n"].item() == 3 and out["n"].dtype == torch.int64
    assert out["k"].tolist() == [7, -4] and out["k"].dtype == torch.int32  # floor, like //


def test_small_integer_types_do_not_overflow():
    out = average_state_dicts([{"q": torch.tensor([100], dtype=torch.int8)}] * 2)
    assert out["q"].item() == 100 and out["q"].dtype == torch.int8


def test_missing_and_extra_keys_raise_naming_key_and_checkpoint():
    a = {"w": torch.zeros(2), "b": torch.zeros(1)}
    with pytest.raises(ValueError, match=r"^checkpoint 1 is missing key 'b' \(present in checkpoint 0\)$"):
        average_state_dicts([a, {"w": torch.zeros(2)}])
    with pytest.raises(ValueError, match=r"^checkpoint 1 is missing key 'w' \(present in checkpoint 0\) and 1 more$"):
        average_state_dicts([a, {}])
    with pytest.raises(ValueError, match=r"^checkpoint 2 has extra key 'extra' \(absent from checkpoint 0\)$"):
        average_state_dicts([a, dict(a), {**a, "extra": torch.zeros(1)}])
    with pytest.raises(ValueError, match=r"^checkpoint 1 has extra key 'x' \(absent from checkpoint 0\) and 1 more$"):
        average_state_dicts([a, {**a, "x": torch.zeros(1), "y": torch.zeros(1)}])
    with pytest.raises(ValueError, match=r"^'w' in checkpoint 1 is a float, not a tensor$"):
        average_state_dicts([a, {**a, "w": 1.0}])


def test_shape_and_dtype_mismatch_raise_naming_key():
    with pytest.raises(ValueError, match=r"shape mismatch for 'w'"):
        average_state_dicts([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])
    with pytest.raises(ValueError, match=r"dtype mismatch for 'w'"):
        average_state_dicts([{"w": torch.zeros(2)}, {"w": torch.zeros(2, dtype=torch.float16)}])


def test_empty_list_raises():
    with pytest.raises(ValueError, match="^no state dicts to average$"):
        average_state_dicts([])


def test_inputs_unchanged_and_not_aliased():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(5), "h": torch.tensor([1.0], dtype=torch.float16)}
    b = {"w": torch.tensor([3.0, 4.0]), "n": torch.tensor(7), "h": torch.tensor([3.0], dtype=torch.float16)}
    before = {k: (a[k].clone(), b[k].clone()) for k in a}
    out = average_state_dicts([a, b])
    for k in a:
        assert torch.equal(a[k], before[k][0]) and torch.equal(b[k], before[k][1])
        assert out[k].data_ptr() not in (a[k].data_ptr(), b[k].data_ptr())
    # a single state: a copy, not the same tensors
    single = average_state_dicts([a])
    assert torch.equal(single["w"], a["w"]) and single["w"].data_ptr() != a["w"].data_ptr()
    single["w"] += 1
    assert a["w"].tolist() == [1.0, 2.0]


def _touch(folder, *names):
    for name in names:
        (folder / name).write_bytes(b"")


def test_checkpoints_to_average_numeric_not_lexical(tmp_path):
    _touch(tmp_path, "step800.pt", "step9000.pt", "step10000.pt", "notes.txt", "step_avg.pt")
    assert [p.name for p in checkpoints_to_average(tmp_path, 2)] == ["step9000.pt", "step10000.pt"]
    assert [p.name for p in checkpoints_to_average(tmp_path, 1)] == ["step10000.pt"]


def test_checkpoints_to_average_fewer_than_n(tmp_path, capsys):
    _touch(tmp_path, "step800.pt", "step9000.pt", "step10000.pt")
    got = checkpoints_to_average(tmp_path, 10)
    assert [p.name for p in got] == ["step800.pt", "step9000.pt", "step10000.pt"]
    assert "only 3" in capsys.readouterr().err
    assert len(checkpoints_to_average(tmp_path, 3)) == 3 and capsys.readouterr().err == ""  # exactly n: nothing to report


def test_checkpoints_to_average_none_raises(tmp_path):
    _touch(tmp_path, "model.pt")
    with pytest.raises(ValueError, match="no checkpoints"):
        checkpoints_to_average(tmp_path, 10)
    with pytest.raises(ValueError, match="^n must be at least 1, got 0$"):
        checkpoints_to_average(tmp_path, 0)


def _write_ckpt(path, w, step, num_batches):
    torch.save(
        {
            "model": {"w": torch.tensor(w), "bn.num_batches_tracked": torch.tensor(num_batches)},
            "optimizer": {"state": {}, "param_groups": [{"lr": 0.1}]},
            "step": step,
            "epoch": step // 1000,
            "log": [{"step": step}],
            "model_spec": {"arch": "transformer", "size": "base"},
        },
        path,
    )


def test_average_checkpoints_round_trip(tmp_path):
    _write_ckpt(tmp_path / "step1000.pt", [1.0, 1.0], 1000, 3)
    _write_ckpt(tmp_path / "step2000.pt", [3.0, 5.0], 2000, 4)
    paths = [tmp_path / "step1000.pt", tmp_path / "step2000.pt"]  # oldest first
    out = tmp_path / "avg" / "averaged.pt"
    summary = average_checkpoints(paths, out)
    assert summary == {"files": ["step1000.pt", "step2000.pt"], "n": 2, "step": 2000, "out": str(out)}

    saved = torch.load(out, map_location="cpu", weights_only=True)
    assert saved["model"]["w"].tolist() == [2.0, 3.0]
    assert saved["model"]["bn.num_batches_tracked"].item() == 3
    assert saved["averaged_from"] == ["step1000.pt", "step2000.pt"]
    assert saved["step"] == 2000 and saved["epoch"] == 2 and saved["log"] == [{"step": 2000}]  # from the newest
    assert saved["model_spec"] == {"arch": "transformer", "size": "base"}  # evaluation rebuilds its model from it
    assert "optimizer" not in saved
    assert not list(out.parent.glob(".*.tmp"))  # atomic write left no temp file


def test_average_checkpoints_errors_name_the_files(tmp_path):
    _write_ckpt(tmp_path / "step1000.pt", [1.0, 1.0], 1000, 3)
    _write_ckpt(tmp_path / "step2000.pt", [1.0], 2000, 3)
    with pytest.raises(ValueError, match=r"^shape mismatch for 'w': checkpoint 0 has \(2,\), checkpoint 1 has \(1,\) "
                                         r"\(checkpoints: 0=step1000.pt, 1=step2000.pt\)$"):
        average_checkpoints([tmp_path / "step1000.pt", tmp_path / "step2000.pt"], tmp_path / "avg.pt")
    with pytest.raises(ValueError, match="^no checkpoints to average$"):
        average_checkpoints([], tmp_path / "avg.pt")


def test_average_checkpoints_with_selection(tmp_path):
    for i, step in enumerate([800, 9000, 10000]):
        _write_ckpt(tmp_path / f"step{step}.pt", [float(i), 0.0], step, i)
    out = tmp_path / "avg.pt"
    average_checkpoints(checkpoints_to_average(tmp_path, 2), out)
    saved = torch.load(out, weights_only=True)
    assert saved["model"]["w"].tolist() == [1.5, 0.0]
    assert saved["averaged_from"] == ["step9000.pt", "step10000.pt"]
    assert saved["step"] == 10000


def test_corrupt_file_raises_runtime_error_naming_it(tmp_path):
    _write_ckpt(tmp_path / "step1000.pt", [1.0], 1000, 1)
    bad = tmp_path / "step2000.pt"
    bad.write_bytes(b"this is not a torch file")
    with pytest.raises(RuntimeError, match="step2000.pt") as info:
        average_checkpoints([tmp_path / "step1000.pt", bad], tmp_path / "avg.pt")
    try:  # the message names torch's error and the first line of what it said
        torch.load(bad, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001
        said = f"{type(err).__name__}: {str(err).strip().splitlines()[0]}"
    assert str(info.value) == f"cannot load checkpoint {bad}: {said}"
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert not (tmp_path / "avg.pt").exists()


class _NotATensor:  # a pickled object: loading it would run code, so weights_only refuses it
    pass


def test_a_checkpoint_holding_arbitrary_objects_is_refused(tmp_path):
    torch.save({"model": {"w": torch.tensor(1.0)}, "extra": _NotATensor()}, tmp_path / "step1000.pt")
    with pytest.raises(RuntimeError, match="cannot load checkpoint .*step1000.pt: UnpicklingError"):
        average_checkpoints([tmp_path / "step1000.pt"], tmp_path / "avg.pt")


def test_file_without_model_entry_raises(tmp_path):
    torch.save({"weights": {}}, tmp_path / "step1000.pt")
    with pytest.raises(RuntimeError, match="step1000.pt"):
        average_checkpoints([tmp_path / "step1000.pt"], tmp_path / "avg.pt")


def test_module_state_dict_loads_strict():
    torch.manual_seed(0)
    states = []
    for _ in range(3):
        m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
        m.train()
        m(torch.randn(4, 3))  # moves running stats, bumps num_batches_tracked
        states.append({k: v.clone() for k, v in m.state_dict().items()})
    avg = average_state_dicts(states)
    assert avg["1.num_batches_tracked"].item() == 1
    expected = (states[0]["0.weight"] + states[1]["0.weight"] + states[2]["0.weight"]) / 3
    torch.testing.assert_close(avg["0.weight"], expected)
    fresh = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    fresh.load_state_dict(avg, strict=True)
    fresh.eval()
    assert fresh(torch.randn(5, 3)).shape == (5, 2)


@pytest.mark.parametrize("last", [1, 3, 5])
def test_average_command_averages_exactly_the_n_newest(tmp_path, last):
    """Averaging the last N (what `resrepro evaluate` does per seed): the N newest by step, read back from
    `averaged_from`, and their mean; older and unnumbered files are left out."""
    from resrepro import jobs

    steps = [50, 100, 150, 200, 250, 1000]
    for step in steps:
        _write_ckpt(tmp_path / f"step{step}.pt", [float(step), 1.0], step, step)
    _write_ckpt(tmp_path / "last.pt", [-1.0, -1.0], 999999, 0)  # the resume point, not a step checkpoint
    out = tmp_path / "averaged.pt"
    jobs.average_newest(tmp_path, last, out)
    saved = torch.load(out, weights_only=True)
    newest = steps[-last:]
    assert saved["averaged_from"] == [f"step{s}.pt" for s in newest]
    assert saved["model"]["w"].tolist() == pytest.approx([sum(newest) / last, 1.0])
    assert saved["step"] == 1000


def test_a_step_written_by_another_run_is_refused_naming_it(tmp_path):
    for step, run in [(100, "a"), (200, "a"), (300, "b")]:
        _write_ckpt(tmp_path / f"step{step}.pt", [1.0], step, 0)
        torch.save({**torch.load(tmp_path / f"step{step}.pt", weights_only=True), "run_id": run}, tmp_path / f"step{step}.pt")
    paths = [tmp_path / f"step{s}.pt" for s in (100, 200, 300)]
    with pytest.raises(ValueError, match=r"step300.pt was written by another training run \(run id b, not a\)"):
        average_checkpoints(paths, tmp_path / "avg.pt", run_id="a")
    assert not (tmp_path / "avg.pt").exists()
    assert average_checkpoints(paths[:2], tmp_path / "avg.pt", run_id="a")["step"] == 200
    assert average_checkpoints(paths, tmp_path / "any.pt")["step"] == 300  # no run named: no check (a standalone average)


def test_evaluation_averages_only_the_steps_of_the_run_that_wrote_last_pt(tmp_path):
    from resrepro import jobs

    for step, run in [(100, "old"), (200, "new"), (300, "new")]:
        torch.save({"model": {"w": torch.tensor([float(step)])}, "step": step, "run_id": run}, tmp_path / f"step{step}.pt")
    torch.save({"model": {"w": torch.tensor([0.0])}, "step": 300, "run_id": "new"}, tmp_path / "last.pt")
    jobs.average_newest(tmp_path, 2, tmp_path / "averaged.pt")
    assert torch.load(tmp_path / "averaged.pt", weights_only=True)["model"]["w"].tolist() == [250.0]
    with pytest.raises(ValueError, match="step100.pt was written by another training run"):
        jobs.average_newest(tmp_path, 3, tmp_path / "averaged.pt")


def test_averaging_holds_one_checkpoint_in_memory_at_a_time(tmp_path, monkeypatch):
    """The last 20 checkpoints of a big Transformer are 17 GB: loaded together they outgrew the
    rehearsal's memory (a job killed by Slurm); loaded one at a time beside the sums, two files' worth."""
    import weakref

    from resrepro.train import average

    paths = [tmp_path / f"step{1000 * k}.pt" for k in range(1, 6)]
    for k, path in enumerate(paths, start=1):
        _write_ckpt(path, [float(k), 0.0], 1000 * k, k)
    alive, most = set(), [0]
    real = average._load

    def tracked(path, mmap=False):
        ckpt = real(path, mmap)
        weights = ckpt["model"]["w"]
        alive.add(id(weights))
        weakref.finalize(weights, alive.discard, id(weights))
        most[0] = max(most[0], len(alive))
        return ckpt

    monkeypatch.setattr(average, "_load", tracked)
    summary = average_checkpoints(paths, tmp_path / "avg.pt")
    assert summary["n"] == 5 and most[0] == 1
