"""Measurements and figures as data: the registry, paper 000 Figure 3's gates on a model whose
answer is known by hand, the figures' tidy data, and their plan."""

import json
import math

import pandas as pd
import pytest
import torch
import yaml

from resrepro import experiments, files, measure, models
from resrepro.analysis.aggregate import aggregate, aggregate_figures
from resrepro.measure.gates import measure_gates, sas_blocks, summarize_gates
from resrepro.measure.run import run_measurement
from resrepro.residual import ConfigError

from fake_runs import TABLES, plan_for, tiny_config, write_metrics

SETTINGS = {"examples": 10000, "split": "test", "batch_size": 7, "blocks": "all"}


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


def constant_gates_net() -> torch.nn.Module:
    """A depth-8 SAS net (3 blocks) whose gates ignore their input: block i predicts
    alpha = sigmoid(i) and beta = sigmoid(-i) for every example (last layer's weights zeroed)."""
    torch.manual_seed(0)
    net = models.build({"arch": "preact_resnet", "depth": 8, "variant": "sas", "args": {}, "classes": 3, "in_channels": 1})
    with torch.no_grad():
        for i, block in enumerate(sas_blocks(net), start=1):
            for gate, bias in ((block.gate_a, i), (block.gate_b, -i)):
                gate.net[-1].weight.zero_()
                gate.net[-1].bias.fill_(bias)
    return net


def tiny_data(n: int = 20) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"test_x": torch.randint(0, 255, (n, 1, 8, 8), generator=g, dtype=torch.uint8), "mean": [0.5], "std": [0.25]}


def test_gates_of_a_net_with_known_gates():
    frame = measure_gates(constant_gates_net(), tiny_data(), SETTINGS, torch.device("cpu"))
    assert list(frame.columns) == ["block", "quantity", "value", "examples"]
    assert frame["examples"].eq(20).all()  # 20 test examples < the 10,000 asked: all of them
    by = frame.set_index(["block", "quantity"])["value"]
    for i in (1, 2, 3):
        a, b = sigmoid(i), sigmoid(-i)
        assert by[i, "alpha"] == pytest.approx(a) and by[i, "beta"] == pytest.approx(b)
        assert by[i, "gamma"] == pytest.approx((1 - a) * (1 - b))  # tied: the mean of the product


def test_gates_average_over_exactly_the_examples_asked():
    """One block's alpha follows the input: its mean must be over the first `examples` only."""
    net = constant_gates_net()
    block = sas_blocks(net)[0]
    data = tiny_data(10)
    data["test_x"][:4] = 0  # the first 4 examples differ from the rest
    with torch.no_grad():
        block.gate_a.net[-1].weight[0, 0] = 1.0  # alpha now reads the pooled first channel of x
    seen = []
    block.register_forward_hook(lambda m, args, out: seen.append(m.last_gates["a"].flatten()))
    frame = measure_gates(net, data, {**SETTINGS, "examples": 4, "batch_size": 3}, torch.device("cpu"))
    alphas = torch.cat(seen)
    assert len(alphas) == 4 and frame.loc[(frame.block == 1) & (frame.quantity == "alpha"), "value"].item() == pytest.approx(alphas.mean().item())


def test_gates_of_the_middle_stage_only_keep_their_numbers_in_the_whole_net():
    """"We only show the representative blocks at the middle of the model": a depth-8 net has a
    block a stage (16, 32, 64 channels), so the middle stage is block 2 alone."""
    frame = measure_gates(constant_gates_net(), tiny_data(), {**SETTINGS, "blocks": "middle"}, torch.device("cpu"))
    assert sorted(set(frame["block"])) == [2] and len(frame) == 3
    assert frame.set_index("quantity").loc["alpha", "value"] == pytest.approx(sigmoid(2))
    with pytest.raises(ValueError, match="blocks='top' is invalid"):
        measure_gates(constant_gates_net(), tiny_data(), {**SETTINGS, "blocks": "top"}, torch.device("cpu"))


def test_gates_refuse_a_model_without_sas():
    net = models.build({"arch": "preact_resnet", "depth": 8, "variant": "add", "args": {}, "classes": 3, "in_channels": 1})
    with pytest.raises(ValueError, match="no SAS residual"):
        measure_gates(net, tiny_data(), SETTINGS, torch.device("cpu"))


def test_summary_reads_the_papers_three_claims():
    frame = pd.DataFrame([(b, q, v) for b, vals in ((1, (0.95, 0.1, 0.3)), (2, (0.97, 0.2, 0.2)), (3, (0.9, 0.3, 0.1)))
                          for q, v in zip(("alpha", "beta", "gamma"), vals)], columns=["block", "quantity", "value"])
    assert summarize_gates(frame) == ("alpha > 0.9 in 2 of 3 blocks; with depth, beta has Spearman rho = +1.00 and "
                                      "(1-alpha)(1-beta) rho = -1.00")


def test_run_measurement_rebuilds_the_model_from_the_checkpoint(tmp_path):
    net = constant_gates_net()
    spec = {"arch": "preact_resnet", "depth": 8, "variant": "sas", "args": {}, "classes": 3, "in_channels": 1}
    files.save_torch(tmp_path / "run" / "checkpoints" / "last.pt", {"model": net.state_dict(), "model_spec": spec})
    torch.save({**tiny_data(), "train_x": torch.zeros(1, 1, 8, 8, dtype=torch.uint8), "train_y": torch.zeros(1, dtype=torch.long),
                "test_y": torch.zeros(20, dtype=torch.long), "classes": ["a", "b", "c"], "name": "tiny", "source": "test"}, tmp_path / "data.pt")
    threads = torch.get_num_threads()
    try:  # the job's one thread (the rule's `threads`), not torch's every core
        run_measurement("sas_gates", tmp_path / "run", tmp_path / "data.pt", SETTINGS, tmp_path / "out.csv", device="cpu", threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    frame = pd.read_csv(tmp_path / "out.csv")
    assert frame.loc[(frame.block == 2) & (frame.quantity == "beta"), "value"].item() == pytest.approx(sigmoid(-2))


def test_registry_names_the_measurements_and_their_settings():
    assert measure.get("sas_gates").task == "classification" and measure.get("sas_gates").kind == "per_block"
    with pytest.raises(ConfigError, match="measurement 'cushion' unknown; allowed: sas_gates"):
        measure.get("cushion")
    assert measure.settings_for("sas_gates", {"examples": 5}, "f")["examples"] == 5
    with pytest.raises(ConfigError, match="f: sas_gates has no setting 'exmaples'"):
        measure.settings_for("sas_gates", {"exmaples": 5}, "f")


FIGURE = {"paper": "sas", "caption": "c", "source": "s", "measurement": "sas_gates", "claim": "alpha > 0.9",
          "cells": [{"label": "SAS", "dataset": "cifar10", "depth": 110, "variant": "sas"}]}


@pytest.mark.parametrize("change, message", [
    ({"measurement": "cushion"}, "bad-f1.measurement: measurement 'cushion' unknown"),
    ({"settings": {"exmaples": 1}}, "bad-f1.settings: sas_gates has no setting 'exmaples'"),
    ({"claim": None}, "bad-f1: missing key 'claim'"),
    ({"colour": "red"}, "bad-f1: unknown key 'colour'"),
    ({"cells": [{"label": "x", "dataset": "cifar10", "variant": "sas"}]}, "bad-f1.cells[0]: missing key 'depth'"),
    ({"cells": [{"label": "x", "dataset": "cifar10", "depth": 8, "variant": "sas", "args": {"norm": "gn"}}]}, "norm"),
    ({"cells": [{"label": "x", "dataset": "cifar10", "size": "base", "variant": "sas", "arch": "transformer"}]},
     "bad-f1.cells[0].arch: architecture 'transformer' unknown for classification"),
])
def test_a_bad_figure_entry_is_refused_naming_the_key(tmp_path, change, message):
    figure = {k: v for k, v in {**FIGURE, **change}.items() if v is not None}
    (tmp_path / "f.yaml").write_text(yaml.safe_dump({"bad-f1": figure}))
    with pytest.raises(ConfigError) as err:
        experiments.load_figures(tmp_path)
    assert message in str(err.value)


def test_a_figure_cell_reuses_the_tables_run_and_has_its_settings():
    config = tiny_config() | {"tables": ["sas-t7"], "figures": ["sas-f3"]}
    plan = experiments.make_plan(config)
    (m,) = plan.measures
    sas_row = next(r for r in plan.rows if r["label"] == "SAS with LN")
    assert m["runs"] == sas_row["runs"] and len(plan.runs) == 3  # three cells of sas-t7, nothing more
    assert m["settings"] == {"examples": 10000, "split": "test", "batch_size": 500, "blocks": "middle"}
    assert experiments.measure_settings(plan, m["runs"][0], "sas_gates") == m["settings"]
    assert not experiments.make_plan(config | {"figures": []}).measures
    every = experiments.make_plan(config | {"figures": "all"}).measures  # sas-t7 is paper 000's: its figures
    assert {m["figure"] for m in every} == {"sas-f3", "sas-f4"} and every[0] == m
    rskip_only = experiments.make_plan(config | {"tables": ["rskip-t1"], "figures": "all"}).measures
    assert {m["figure"] for m in rskip_only} == {"rskip-f3", "rskip-f3-scale", "rskip-f4", "rskip-lam-w"}  # paper 001's figures; no SAS net
    with pytest.raises(ConfigError, match="figures: unknown figure 'sas-f9'"):
        experiments.make_plan(config | {"figures": ["sas-f9"]})


def test_two_figures_measuring_one_run_differently_are_refused(tmp_path):
    (tmp_path / "f.yaml").write_text(yaml.safe_dump({"f1": FIGURE, "f2": {**FIGURE, "settings": {"examples": 5}}}))
    config = tiny_config() | {"tables": ["sas-t7"], "figures_dir": str(tmp_path)}
    with pytest.raises(ConfigError, match="f2: sas_gates of classification/digits/preact_resnet8/default/sas/seed0 with settings"):
        experiments.make_plan(config)


def test_figure_data_tags_each_run_and_sums_up_the_mean_over_finished_seeds(tmp_path):
    plan = plan_for(["sas-t7"])
    config = tiny_config() | {"tables": ["sas-t7"], "figures": ["sas-f3"], "seeds": 3}
    measures = experiments.make_plan(config).measures
    runs = measures[0]["runs"]
    for path in plan.runs:
        write_metrics(tmp_path, path, None if path == runs[2] else 5.0)  # the third SAS seed diverged
    alphas = {runs[0]: (0.95, 0.97, 0.5), runs[1]: (0.93, 0.99, 0.7), runs[2]: (0.0, 0.0, 0.0)}
    for run, alpha in alphas.items():
        rows = [(b, q, v) for b in (1, 2, 3) for q, v in (("alpha", alpha[b - 1]), ("beta", 0.1 * b), ("gamma", 0.4 - 0.1 * b))]
        files.write_text(tmp_path / run / "measure" / "sas_gates.csv", pd.DataFrame(rows, columns=["block", "quantity", "value"]).to_csv(index=False))
    table_runs = aggregate(plan.rows, tmp_path, TABLES, "final")["runs"]
    out = aggregate_figures(measures, tmp_path, table_runs)
    data, (cell,) = out["figures"], out["figure_cells"].to_dict("records")
    assert set(data["run"]) == {runs[0], runs[1]} and set(data["seed"]) == {0, 1}  # the diverged seed is not drawn
    assert (cell["n"], cell["n_runs"], cell["kind"], cell["label"]) == (2, 3, "per_block", "SAS (LN)")
    # mean alpha per block over the two finished seeds: 0.94, 0.98, 0.6
    assert cell["summary"].startswith("alpha > 0.9 in 2 of 3 blocks; with depth, beta has Spearman rho = +1.00")
    assert json.loads(json.dumps(list(data.columns))) == ["figure", "cell", "label", "run", "seed", "block", "quantity", "value"]


def test_a_run_that_only_a_figure_names_is_measured_and_listed_with_the_runs(tmp_path):
    """Paper 003's nets are trained for its figures alone: no table row names their runs, yet the
    figure reads them, and runs.csv lists them beside the tables' runs."""
    plan = plan_for(["sas-t7"])
    for path in plan.runs:
        write_metrics(tmp_path, path, 5.0)
    only_figure = "classification/digits/wide_resnet_mini/default/add/seed0"
    write_metrics(tmp_path, only_figure, 4.0)
    rows = [("test", b, "cos(F(h), dL/dh)", v) for b, v in ((1, -0.1), (2, -0.2), (3, -0.3))]
    files.write_text(tmp_path / only_figure / "measure" / "grad_cosine.csv",
                     pd.DataFrame(rows, columns=["split", "block", "quantity", "value"]).to_csv(index=False))
    measures = [{"figure": "iter-f4", "cell": 3, "label": "wide ResNet", "measurement": "grad_cosine", "runs": [only_figure]}]
    table_runs = aggregate(plan.rows, tmp_path, TABLES, "final")["runs"]
    out = aggregate_figures(measures, tmp_path, table_runs)
    (cell,) = out["figure_cells"].to_dict("records")
    assert (cell["n"], cell["n_runs"]) == (1, 1)
    assert cell["summary"] == "test: negative in 3 of 3 blocks; mean -0.100 in the lowest third, -0.300 in the highest"
    assert list(out["runs"]["run"]) == [*table_runs["run"], only_figure]
    assert out["runs"].set_index("run").loc[only_figure, "status"] == "ok"


def test_the_block_drawing_gives_each_split_its_line():
    from resrepro.report.figures import per_block

    frame = pd.DataFrame([{"label": "net", "run": "r0", "split": split, "block": b, "quantity": "q", "value": b * k}
                          for split, k in (("train", 1.0), ("test", 2.0)) for b in (1, 2, 3)])
    png = per_block(frame, "iter-f2")
    assert png.startswith(b"\x89PNG")
    assert per_block(frame.drop(columns="split"), "sas-f3").startswith(b"\x89PNG")  # sas_gates has no split
    assert per_block(frame.iloc[:0], "empty") is None


def test_summary_of_one_block_says_it_has_no_rank_correlation():
    frame = pd.DataFrame([(3, q, v) for q, v in (("alpha", 0.95), ("beta", 0.1), ("gamma", 0.3))], columns=["block", "quantity", "value"])
    assert summarize_gates(frame) == ("alpha > 0.9 in 1 of 1 blocks; with depth, beta has Spearman rho = none (one block) and "
                                      "(1-alpha)(1-beta) rho = none (one block)")
