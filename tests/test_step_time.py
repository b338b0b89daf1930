"""benchmarks/step_time.py and transformer_step_time.py: the speed switches resolve as training
resolves them, --variants keeps the baseline, and a compiled run times every chosen row."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import step_time  # noqa: E402
import transformer_step_time  # noqa: E402

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture(autouse=True)
def global_seed():
    """A benchmark's main seeds torch's global generator; the tests after these keep their own
    stream (conftest.py restores the thread count and matmul precision it also sets)."""
    with torch.random.fork_rng():
        yield


def test_the_speed_switches_default_to_trainings_choice_for_the_device():
    opts = step_time.parse_args([])
    on_cpu, on_gpu = step_time.speed_from(opts, CPU, image_model=True), step_time.speed_from(opts, CUDA, image_model=True)
    assert (on_cpu.amp, on_cpu.channels_last, on_cpu.fused_optimizer, on_cpu.compile) == (False, False, False, None)
    assert (on_gpu.amp, on_gpu.channels_last, on_gpu.fused_optimizer, on_gpu.tf32, on_gpu.compile) == (True, True, True, True, None)


def test_each_switch_of_the_command_line_reaches_the_speed():
    opts = step_time.parse_args(["--amp", "bf16", "--channels-last", "--compile", "--fused-optimizer", "true"])
    speed = step_time.speed_from(opts, CPU, image_model=True)
    assert (speed.amp, speed.channels_last, speed.fused_optimizer, speed.compile) == (True, True, True, "inductor")
    assert step_time.speed_text(speed) == "bf16 autocast, channels-last, fused optimizer, torch.compile (inductor)"
    off = step_time.speed_from(step_time.parse_args(["--channels-last", "false", "--fused-optimizer", "false", "--amp", "fp32",
                                                     "--tf32", "false"]), CUDA, image_model=True)
    assert (off.amp, off.channels_last, off.fused_optimizer, off.tf32) == (False, False, False, False)
    assert step_time.speed_text(off) == "fp32, eager"
    # the Transformer's old --precision spelling still sets amp; channels-last is for image models only
    seq = transformer_step_time.parse_args(["--precision", "bf16", "--compile", "aot_eager"])
    speed = step_time.speed_from(seq, CPU)
    assert (speed.amp, speed.channels_last, speed.compile) == (True, False, "aot_eager")


def test_variants_keeps_the_baseline_and_the_rows_named_by_label_or_by_registry_name():
    rows = step_time.variants()
    assert step_time.chosen(rows, ["sas", "highway"], step_time.BASELINE) == [("add", {}), ("sas", {}), ("highway", {})]
    assert step_time.chosen(rows, ["sas-gatesingle"], step_time.BASELINE) == [("add", {}), ("sas", {"gate": "single"})]
    assert step_time.chosen(rows, None, step_time.BASELINE) == rows
    with pytest.raises(SystemExit, match="nope"):
        step_time.chosen(rows, ["nope"], step_time.BASELINE)
    # the Transformer's rows: no row is labelled `sas`, so the name takes every SAS row
    seq = transformer_step_time.variants()
    picked = step_time.chosen(seq, ["sas"], transformer_step_time.BASELINE)
    assert picked[0] == transformer_step_time.BASELINE and len(picked) == 1 + sum(n == "sas" for n, _ in seq) > 2


def test_a_compiled_transformer_run_times_the_baseline_and_the_chosen_rows(tmp_path, capsys):
    csv = tmp_path / "t.csv"
    argv = ["--preset", "mini_base", "--encoder-layers", "1", "--decoder-layers", "1", "--vocab", "40", "--batch", "2",
            "--src-len", "5", "--tgt-len", "5", "--rounds", "2", "--warmup", "1", "--threads", "1", "--device", "cpu",
            "--variants", "highway", "--compile", "aot_eager", "--csv", str(csv)]
    assert transformer_step_time.main(argv) == 0
    out = capsys.readouterr().out
    assert "speed    torch.compile (aot_eager)" in out
    lines = csv.read_text().splitlines()
    assert [line.split(",")[0] for line in lines[1:]] == ["xskip_ln", "highway"]
    header = lines[0].split(",")
    assert all(line.split(",")[header.index("steps")] == "2" for line in lines[1:])  # two rounds of one step each
    assert all(line.split(",")[header.index("ops")] == "" for line in lines[1:])  # compiled: not counted


def test_the_op_counter_counts_what_computes_forward_and_backward_not_views():
    x = torch.ones(2, 3, requires_grad=True)
    with step_time.OpCounter() as views:
        x.t().unsqueeze(0).expand(4, 3, 2).detach()
    assert views.count == 0
    with step_time.OpCounter() as counter:
        y = (x * 2).sum()  # mul, sum
    assert counter.count == 2
    with step_time.OpCounter() as backward:
        y.backward()  # ones_like (the seed), sum's expand (a view), mul's grad (mul), accumulate into x.grad
    assert backward.count >= 2 and torch.equal(x.grad, torch.full((2, 3), 2.0))


def test_a_resnet_run_counts_each_variants_ops_the_same_each_time_and_sas_dispatches_most(tmp_path, capsys):
    csv = tmp_path / "r.csv"
    argv = ["--depth", "8", "--size", "8", "--batch", "2", "--rounds", "1", "--steps", "1", "--warmup", "0", "--threads", "1",
            "--device", "cpu", "--variants", "sas", "rskip_ln", "--budget", "0", "--csv", str(csv)]

    def ops_per_variant():
        assert step_time.main(argv) == 0
        header, *rows = (line.split(",") for line in csv.read_text().splitlines())
        return {row[0]: int(row[header.index("ops")]) for row in rows}

    ops = ops_per_variant()
    assert ops["add"] > 0 and ops["sas"] > ops["rskip_ln-lam2"] > ops["add"]
    assert ops_per_variant() == ops  # a count, not a timing: the same on every run and machine
    assert "ops = operations one step dispatches" in capsys.readouterr().out


def _csv_column(path, column, cast=int) -> dict:
    header, *rows = (line.split(",") for line in path.read_text().splitlines())
    return {row[0]: cast(row[header.index(column)]) for row in rows}


def test_the_flop_column_counts_what_each_gate_adds_to_the_transformers_step(tmp_path):
    """SAS adds two Scaling Gates to each of the 2 + 3 residuals of a 1+1-layer Transformer; each
    gate's two linear layers (2h -> h, h -> 1) cost 2*M*K*N FLOPs forward and as much again for
    each of the two gradients, over the M tokens of its stack. Single-layer gates (2h -> 1) and
    Highway's transform gate (h -> h) likewise; everything else is the baseline's."""
    csv = tmp_path / "t.csv"
    batch, src_len, tgt_len, h = 2, 5, 4, 64
    argv = ["--preset", "mini_base", "--encoder-layers", "1", "--decoder-layers", "1", "--vocab", "40", "--batch", str(batch),
            "--src-len", str(src_len), "--tgt-len", str(tgt_len), "--rounds", "1", "--warmup", "0", "--threads", "1",
            "--device", "cpu", "--variants", "sas", "highway", "--budget", "0", "--csv", str(csv)]
    assert transformer_step_time.main(argv) == 0
    flops = _csv_column(csv, "flops")
    tokens_per_residual = [batch * src_len] * 2 + [batch * tgt_len] * 3  # encoder: 2 sublayers, decoder: 3

    def added(layers):  # (K, N) of each linear layer, once per residual, forward + two gradients
        return sum(3 * 2 * m * k * n for m in tokens_per_residual for k, n in layers)

    base = flops["xskip_ln"]
    assert flops["sas-bias_a0-bias_b0"] - base == 2 * added([(2 * h, h), (h, 1)])
    assert flops["sas-gatesingle"] - base == 2 * added([(2 * h, 1)])
    assert flops["highway"] - base == added([(h, h)])
    ratios = _csv_column(csv, "flop_ratio", float)
    assert ratios["xskip_ln"] == 1.0 and ratios["sas-bias_a0-bias_b0"] == pytest.approx(flops["sas-bias_a0-bias_b0"] / base, abs=1e-4)


def test_the_flop_column_counts_the_cpu_attention_and_a_compiled_run_too(tmp_path):
    """torch counts its CUDA attention kernels, not the CPU's flash attention: the benchmark adds
    the same formula (4 * batch * heads * Tq * Tk * head dim forward; the backward is 2.5 times it).
    A compiled run counts the same FLOPs as an eager one (the eager model's step)."""
    q = torch.randn(2, 4, 5, 16, requires_grad=True)
    with step_time.FlopCounterMode(display=False, custom_mapping=step_time.CPU_ATTENTION_FLOPS) as counter:
        torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()
    assert counter.get_total_flops() == 4 * 2 * 4 * 5 * 5 * 16 * 7 // 2
    argv = ["--depth", "8", "--size", "8", "--batch", "2", "--rounds", "1", "--steps", "1", "--warmup", "0", "--threads", "1",
            "--device", "cpu", "--variants", "highway", "--budget", "0"]
    eager, compiled = tmp_path / "e.csv", tmp_path / "c.csv"
    assert step_time.main(argv + ["--csv", str(eager)]) == 0
    assert step_time.main(argv + ["--compile", "aot_eager", "--csv", str(compiled)]) == 0
    assert _csv_column(eager, "flops") == _csv_column(compiled, "flops")
    assert _csv_column(eager, "flops")["highway"] > _csv_column(eager, "flops")["add"] > 0
