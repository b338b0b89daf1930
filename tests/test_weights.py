"""Paper 002's weight statistics (SM Tables 3-4, measure/weights.py) and the tables they fill:
masses, decay terms and risks on nets whose answer is known by hand, and the measured rows of a
table from a run's measurement CSV to its verdict."""

import json
import math

import pandas as pd
import pytest
import torch
from fake_runs import TABLES

from resrepro import files, models
from resrepro.analysis.aggregate import aggregate, measured_values, round_for
from resrepro.analysis import stats
from resrepro.catalog import ConfigError
from resrepro.experiments import load_tables, make_plan, measure_settings, measured
from resrepro.measure import weights
from resrepro.measure.run import run_measurement
from resrepro.models.simple_net import equivalent

SETTINGS = {"examples": 50000, "batch_size": 7, "large": 0.25, "weight_decay": 0.01}
DEPTH5_ID_ENTRIES = 16 + 32 + 64  # one block a group: an ID entry per output channel


def zero_net(variant: str) -> torch.nn.Module:
    """A depth-5 simplified net (one block a group) with every parameter 0, on 3-channel 8x8 input."""
    net = models.build({"arch": "simple_net", "depth": 5, "variant": variant, "classes": 10, "in_channels": 3})
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    return net


def data(n: int = 10) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"train_x": torch.randint(0, 255, (n, 3, 8, 8), generator=g, dtype=torch.uint8), "train_y": torch.arange(n) % 10,
            "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}


def test_a_zero_residual_nets_transferred_vector_is_its_id_entries_and_the_masses_say_so():
    """All parameters 0 but two: the transferred vector is 1 at the 112 ID entries, plus 0.5 in the
    stem and -0.3 in the classifier. By hand: mass 112.8 (all, and above 0.25), ID mass 112."""
    net = zero_net("add")
    with torch.no_grad():
        net.stem.weight[0, 0, 0, 0] = 0.5
        net.fc.weight[0, 0] = -0.3
    n = sum(p.numel() for p in net.parameters())
    got = weights.plain_form_stats(net, large=0.25)
    assert got[weights.MASS_ID] == pytest.approx(DEPTH5_ID_ENTRIES)
    assert got[weights.MASS_ALL] == pytest.approx(DEPTH5_ID_ENTRIES + 0.8)
    assert got[weights.MASS_LARGE] == pytest.approx(DEPTH5_ID_ENTRIES + 0.8)
    assert got[weights.ID_SHARE] == pytest.approx(100 * DEPTH5_ID_ENTRIES / (DEPTH5_ID_ENTRIES + 0.8))
    assert got[weights.MEAN] == pytest.approx((DEPTH5_ID_ENTRIES + 0.2) / n)
    values = torch.zeros(n, dtype=torch.float64)
    values[:DEPTH5_ID_ENTRIES], values[-2:] = 1.0, torch.tensor([0.5, -0.3], dtype=torch.float64)
    assert got[weights.STD] == pytest.approx(values.std().item())
    # the threshold is strict and on the magnitude: -0.3 and 0.5 drop out at 0.5
    assert weights.plain_form_stats(net, large=0.5)[weights.MASS_LARGE] == pytest.approx(DEPTH5_ID_ENTRIES)


def test_a_plain_nets_masses_are_its_own_weights_and_its_id_entries_the_kernel_centres():
    net = zero_net("plain")
    with torch.no_grad():
        net.blocks[1].conv.weight[5, 5 % 16, 1, 1] = -2.0  # an ID entry of the 16 -> 32 block
        net.blocks[1].conv.weight[5, 4, 1, 1] = 0.2  # off the diagonal: not an ID entry, below 0.25
        net.blocks[0].conv.weight[3, 3, 0, 1] = 0.25  # on the diagonal kernel, not its centre; not above 0.25
    got = weights.plain_form_stats(net, large=0.25)
    assert (got[weights.MASS_ID], got[weights.MASS_LARGE], got[weights.MASS_ALL]) == pytest.approx((2.0, 2.0, 2.45))
    assert got[weights.ID_SHARE] == pytest.approx(100.0)
    assert math.isnan(weights.plain_form_stats(zero_net("plain"), 0.25)[weights.ID_SHARE])  # nothing above the threshold


def test_the_decay_term_is_half_lambda_times_the_squared_distance_to_the_decay_centre():
    net = zero_net("add")
    with torch.no_grad():
        net.fc.bias[2] = 3.0
    assert weights.decay_term(net, 0.01) == pytest.approx(0.01 / 2 * 9.0)
    plain = equivalent(net, "plain")  # 1 at the ID entries, decayed towards them: the same term
    assert plain.decays_to_identity and weights.decay_term(plain, 0.01) == pytest.approx(0.045)
    plain.decays_to_identity = False  # decayed towards 0 instead, the 112 ones count
    assert weights.decay_term(plain, 0.01) == pytest.approx(0.005 * (9.0 + DEPTH5_ID_ENTRIES))


def test_the_risk_of_a_net_with_zero_logits_is_log_of_the_classes_over_exactly_the_examples_asked():
    net = zero_net("plain")
    with torch.no_grad():
        net.fc.bias.copy_(torch.tensor([math.log(3.0)] + [0.0] * 9))  # class 0: probability 3/12, the others 1/12
    d = data(10)  # labels 0..9, one each
    expected = (-math.log(3 / 12) - 9 * math.log(1 / 12)) / 10
    assert weights.risk(net, d, SETTINGS, torch.device("cpu")) == pytest.approx(expected)
    assert weights.risk(net, d, {**SETTINGS, "examples": 1}, torch.device("cpu")) == pytest.approx(-math.log(3 / 12))


def test_weight_stats_writes_every_quantity_and_refuses_another_architecture():
    frame = weights.measure_weight_stats(zero_net("add"), data(), SETTINGS, torch.device("cpu"))
    assert list(frame["quantity"]) == list(weights.QUANTITIES)
    assert frame.set_index("quantity").loc[weights.RISK, "value"] == pytest.approx(math.log(10))
    other = models.build({"arch": "preact_resnet", "depth": 8, "variant": "add", "args": {}, "classes": 10, "in_channels": 3})
    with pytest.raises(ValueError, match="simplified nets"):
        weights.measure_weight_stats(other, data(), SETTINGS, torch.device("cpu"))


def test_the_measure_job_reads_each_snapshot_with_the_runs_weight_decay(tmp_path):
    """Snapshots at epochs 0 and 3; the run's recipe (metrics.json) gives lambda = 0.2."""
    run = tmp_path / "run"
    spec = {"arch": "simple_net", "depth": 5, "variant": "add", "classes": 10, "in_channels": 3}
    for epoch, bias in ((0, 0.0), (3, 1.0)):
        net = zero_net("add")
        with torch.no_grad():
            net.fc.bias[0] = bias
        files.save_torch(models.snapshot_path(run, epoch), {"model": net.state_dict(), "model_spec": spec, "epoch": epoch})
    files.write_json(run / "metrics.json", {"spec": {"weight_decay": 0.2}})
    torch.save({**data(), "test_x": torch.zeros(1, 3, 8, 8, dtype=torch.uint8), "test_y": torch.zeros(1, dtype=torch.long),
                "classes": [str(c) for c in range(10)], "name": "tiny", "source": "test"}, tmp_path / "d.pt")
    settings = {k: v for k, v in SETTINGS.items() if k != "weight_decay"}
    run_measurement("weight_stats", run, tmp_path / "d.pt", settings, tmp_path / "out.csv", device="cpu")
    frame = pd.read_csv(tmp_path / "out.csv")
    decay = frame[frame["quantity"] == weights.DECAY].set_index("epoch")["value"]
    assert decay.to_dict() == pytest.approx({0: 0.0, 3: 0.1})
    assert "epoch 0 -> 0.1 at epoch 3" in weights.summarize_weight_stats(frame)


# --- measured table rows: config, plan, aggregate ----------------------------------------------


def _table(tmp_path, **changes):
    row = {"label": "r", "dataset": "cifar10", "depth": 20, "variant": "add", "quantity": "risk", "at": "init", "paper": 2.3}
    table = {"paper": "noise", "caption": "c", "source": "s", "task": "classification", "measurement": "weight_stats",
             "rows": [{**row, **changes}]}
    path = tmp_path / "t.yaml"
    path.write_text(json.dumps({"noise-tx": table}))
    return path


@pytest.mark.parametrize("change, message", [
    ({"quantity": "volume"}, "quantity='volume' is not one of weight_stats's"),
    ({"at": "middle"}, "at='middle' unknown; allowed: init, final"),
    ({"paper": None}, "paper is null: say in its note why"),
    ({"paper": "67"}, "paper: expected a number"),
    ({"metric": "train_loss"}, "a measured row's metric is its quantity"),
])
def test_a_bad_measured_row_is_refused_naming_the_key(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_tables([_table(tmp_path, **change)])
    assert load_tables([_table(tmp_path, paper=None, note="lost")])["noise-tx"]["rows"][0]["paper"] is None


def test_a_quantity_without_the_tables_measurement_is_refused(tmp_path):
    path = _table(tmp_path)
    table = json.loads(path.read_text())
    del table["noise-tx"]["measurement"]
    table["noise-tx"]["metric"] = "test_error"
    path.write_text(json.dumps(table))
    with pytest.raises(ConfigError, match="the table names none"):
        load_tables([path])


def test_measured_rows_plan_measure_jobs_on_the_tables_runs_with_the_tables_settings():
    """noise-t4 reads noise-t1's runs (same cells, same recipe): no training of its own; both
    tables' measured rows ask the same measurement with the same settings, one job a run."""
    from fake_runs import config_for

    plan = make_plan(config_for(["noise-t1", "noise-t4"], seeds=2))
    t1_runs = {r for row in plan.rows if row["table"] == "noise-t1" for r in row["runs"]}
    asked = {(run, name, who) for run, name, _, who in measured(plan)}
    assert {run for run, _, _ in asked} == t1_runs and {(n, w) for _, n, w in asked} == {("weight_stats", "noise-t1"), ("weight_stats", "noise-t4")}
    assert measure_settings(plan, sorted(t1_runs)[0], "weight_stats") == {"examples": 50000, "batch_size": 500, "large": 0.25}


def _write_measured(results, run, values_by_epoch):
    from fake_runs import write_metrics

    write_metrics(results, run, 10.0)
    rows = [{"quantity": q, "value": v, "epoch": e} for e, by_q in values_by_epoch.items() for q, v in by_q.items()]
    files.write_text(results / run / "measure" / "weight_stats.csv", pd.DataFrame(rows).to_csv(index=False))


def test_measured_values_take_the_first_or_the_last_snapshot_and_none_without_a_measurement(tmp_path):
    runs = pd.DataFrame({"run": ["a/seed0", "a/seed1", "a/seed2"], "status": ["ok", "ok", "diverged"]}).set_index("run", drop=False)
    _write_measured(tmp_path, "a/seed0", {4: {"risk": 0.1}, 0: {"risk": 2.3}, 2: {"risk": 0.5}})
    assert measured_values(tmp_path, runs, ["a/seed0"], "weight_stats", "risk", "init") == [2.3]
    assert measured_values(tmp_path, runs, ["a/seed0", "a/seed1", "a/seed2"], "weight_stats", "risk", "final") == [0.1, None, None]


def test_noise_t4_plain_against_residual_decay_terms_with_ratios_and_lost_values(tmp_path):
    """Plain decay terms 250x the residual ones before training: supported, ratio 250 beside the
    paper's 268; depth 32's residual value is lost in our copy: no claim, its ratio blank."""
    from fake_runs import plan_for

    plan = plan_for(["noise-t4"], seeds=2)
    for path, run in plan.runs.items():
        plain = run.variant == "plain"
        jitter = 1 + run.seed / 100
        _write_measured(tmp_path, path, {0: {"risk": 2.3, "decay term": (0.5 if plain else 0.002) * jitter},
                                         6: {"risk": 0.2 if plain else 0.1, "decay term": (0.6 if plain else 0.4) * jitter}})
    rows = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"].set_index("label")
    before = rows.loc["PlnNet-20 before: decay term"]
    assert (before["verdict"], before["metric"], before["at"]) == ("supported", "decay term", "init")
    assert before["ratio"] == pytest.approx(250.0) and before["paper_ratio"] == pytest.approx(0.0005393 / 2.0123e-6)
    assert "the paper reports larger" in before["reason"]
    lost = rows.loc["PlnNet-32 before: decay term"]
    assert lost["verdict"] == "no claim" and math.isnan(lost["paper_ratio"]) and lost["ratio"] == pytest.approx(250.0)
    assert math.isnan(rows.loc["ResNet-32 before: decay term", "delta"])
    after = rows.loc["PlnNet-44 after: risk"]
    assert (after["mean"], after["verdict"], after["ratio"]) == (pytest.approx(0.2), "supported", pytest.approx(2.0))
    assert json.loads(rows.loc["ResNet-20 after: decay term", "values"]) == [0.4, 0.404]


def test_noise_t1b_gives_each_kinds_degradation_from_depth_20_to_44_as_a_ratio_on_table_1s_jobs(tmp_path):
    """SM A's 6.85 (plain) and 1.73 (residual): each depth-44 net's risk over the depth-20 net's of
    its kind, from Table 1's runs and weight_stats jobs. Plain risks 0.1 -> 0.6, residual 0.05 -> 0.08."""
    from fake_runs import config_for

    plan = make_plan(config_for(["noise-t1", "noise-t1b"], seeds=2))
    asked = {(run, name) for run, name, _, _ in measured(plan)}
    t1_runs = {r for row in plan.rows if row["table"] == "noise-t1" for r in row["runs"]}
    assert {run for run, _ in asked} == t1_runs and {name for _, name in asked} == {"weight_stats"}
    plan = make_plan(config_for(["noise-t1b"], seeds=2, scale="mini"))  # the tiny config's depths 20 and 44 are one net
    risk = {"PlnNet-20, risk": 0.1, "PlnNet-44, risk": 0.6, "ResNet-20, risk": 0.05, "ResNet-44, risk": 0.08}
    for row in plan.rows:
        for seed, path in enumerate(row["runs"]):
            _write_measured(tmp_path, path, {0: {"risk": 2.3}, 6: {"risk": risk[row["label"]] * (1 + seed / 100)}})
    rows = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"].set_index("label")
    plain, residual = rows.loc["PlnNet-44, risk"], rows.loc["ResNet-44, risk"]
    assert (plain["ratio"], plain["paper_ratio"], plain["baseline"]) == (pytest.approx(6.0), pytest.approx(0.4950 / 0.07227), "PlnNet-20, risk")
    assert (residual["ratio"], residual["paper_ratio"]) == (pytest.approx(1.6), pytest.approx(0.07397 / 0.04287))
    assert plain["verdict"] == residual["verdict"] == "supported"


def test_a_measured_quantity_is_larger_or_smaller_not_better_or_worse_and_shown_to_four_digits():
    v = stats.compare([5.0, 5.1], [1.0, 1.1], 700.0, 67.0, higher_is_better=None)
    assert v.verdict == "supported" and "the paper reports larger" in v.reason
    assert "smaller" in stats.compare([1.0, 1.1], [5.0, 5.1], 67.0, 700.0, None).reason
    assert (round_for(2.0123456e-6, "decay term"), round_for(0.123456, "train_loss"), round_for(12.3456, "test_error")) == (2.012e-6, 0.1235, 12.35)


@pytest.mark.config
def test_the_noise_tables_3_and_4_read_table_1s_runs_at_every_scale():
    """Same cells, same recipe: t3 and t4 measure t1's runs; the paper scale keeps the snapshots."""
    from fake_runs import config_for

    for scale in ("mini", "paper", "gpu-day"):
        plan = make_plan(config_for(["noise-t1", "noise-t3", "noise-t4"], seeds=1, scale=scale, config_dir="config"))
        runs_of = {row["table"]: set(row["runs"]) for row in plan.rows}
        assert set().union(*(set(r["runs"]) for r in plan.rows if r["table"] != "noise-t1")) <= {
            r for row in plan.rows if row["table"] == "noise-t1" for r in row["runs"]}, scale
        assert runs_of and all(json.loads(plan.runs[r].recipe_json).get("snapshots", 0) >= 1 for r in plan.runs), scale


# --- Figure 7's histograms and Figure 8 (b)'s error at a training loss --------------------------

HIST = {"bins": 6, "low": -1.5, "high": 1.5}  # bins of width 0.5: [-1.5, -1), ..., [1, 1.5]


def test_the_histogram_of_a_zero_residual_net_holds_its_id_entries_at_one_and_the_rest_at_zero():
    net = zero_net("add")
    with torch.no_grad():
        net.fc.bias[0] = 7.0  # beyond the range: counted in the last bin, not dropped
        net.stem.weight[0, 0, 0, 0] = -0.75
    frame = weights.measure_weight_histogram(net, {}, HIST, torch.device("cpu"))
    n = sum(p.numel() for p in net.parameters())
    counts = {(r.part, round(r.bin, 2)): r.value for r in frame.itertuples()}
    assert sorted({b for _, b in counts}) == [-1.25, -0.75, -0.25, 0.25, 0.75, 1.25]
    assert counts[(weights.ALL, 1.25)] == DEPTH5_ID_ENTRIES + 1  # the ones, and the clamped 7
    assert counts[(weights.ALL, -0.75)] == 1 and counts[(weights.ALL, 0.25)] == n - DEPTH5_ID_ENTRIES - 2  # 0 in [0, 0.5)
    assert counts[(weights.IDS, 1.25)] == DEPTH5_ID_ENTRIES and sum(v for (p, _), v in counts.items() if p == weights.IDS) == DEPTH5_ID_ENTRIES
    text = weights.summarize_weight_histogram(frame.assign(epoch=0))
    assert text == f"epoch 0: ID entries' mode 1.25, {DEPTH5_ID_ENTRIES + 2} weights beyond 0.7 in magnitude"


def test_the_error_at_a_training_loss_is_read_at_the_first_epoch_that_reaches_it(tmp_path):
    from resrepro.measure.curves import measure_error_at_loss, summarize_error_at_loss

    files.write_text(tmp_path / "train_log.csv", "epoch,train_loss,test_error\n1,2.0,80\n2,0.9,30\n3,0.5,20\n4,0.45,25\n")
    frame = measure_error_at_loss(tmp_path, {"levels": [1.0, 0.5, 0.1]})
    assert frame[["level", "epoch", "value"]].values.tolist() == [[1.0, 2, 30.0], [0.5, 3, 20.0]]  # 0.1 never reached: no row
    assert summarize_error_at_loss(frame) == "30% at training loss 1; 20% at training loss 0.5"
    assert summarize_error_at_loss(frame.iloc[:0]) == "no run reached any of the training-loss levels"


def test_the_histogram_and_level_drawings_give_images():
    from resrepro.report.figures import DRAWINGS

    hist = weights.measure_weight_histogram(zero_net("add"), {}, HIST, torch.device("cpu"))
    frame = pd.concat([hist.assign(epoch=e, label=lbl, run=f"{lbl}/seed0") for e in (0, 6) for lbl in ("plain", "residual")])
    assert DRAWINGS["histogram"](frame, "noise-f7")[:4] == b"\x89PNG"
    levels = pd.DataFrame({"level": [1.0, 0.5, 1.0], "quantity": "q", "value": [30.0, 20.0, 25.0], "label": ["a", "a", "b"], "run": ["a/s0", "a/s0", "b/s0"]})
    assert DRAWINGS["per_level"](levels, "noise-f8b")[:4] == b"\x89PNG"


def test_the_level_drawing_has_one_line_per_net_whatever_epoch_each_seed_reached_a_level_at(monkeypatch):
    """noise-f8b: the epoch a level was reached differs between seeds and levels; it is not a
    snapshot, so each net keeps one line (not one per epoch, which made the legend unreadable)."""
    from resrepro.report import figures

    drawn = []
    monkeypatch.setattr(figures, "to_png", lambda fig: drawn.append(fig) or b"png")
    levels = pd.DataFrame({"level": [1.0, 0.5, 1.0, 0.5, 1.0], "epoch": [2, 5, 3, 6, 4], "quantity": "test error",
                           "value": [30.0, 20.0, 32.0, 22.0, 25.0], "label": ["plain"] * 4 + ["residual"],
                           "run": ["plain/s0", "plain/s0", "plain/s1", "plain/s1", "residual/s0"]})
    figures.per_level(levels, "noise-f8b")
    lines = drawn[0].axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["plain (2 runs)", "residual (1 run)"]
    assert dict(zip(lines[0].get_xdata(), lines[0].get_ydata())) == {1.0: 31.0, 0.5: 21.0}  # the mean over seeds per level
