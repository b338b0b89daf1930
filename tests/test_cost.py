"""GPU-hours of a scale's tables (analysis/cost.py), against hand-computed values."""

import datetime
import json
import math

import pandas as pd
import pytest
import yaml
from fake_runs import tiny_config, tiny_config_file

from resrepro.analysis import cost
from resrepro.catalog import ConfigError
from resrepro.experiments import Plan, Run, make_plan

CIFAR = {"epochs": 10, "batch_size": 128}
MT = {"max_tokens": 4096, "max_updates": 1000, "update_freq": 2}


def run(task="classification", dataset="cifar10", arch="preact_resnet20", size=20, variant="add", args=None, seed=0, recipe=None):
    model = "preact_resnet" if task == "classification" else "transformer"
    return Run(task, dataset, arch, model, size, variant, json.dumps(args or {}, sort_keys=True), seed,
               recipe_json=json.dumps(recipe or (CIFAR if task == "classification" else MT), sort_keys=True))


def test_step_key_and_steps_follow_the_recipe():
    image = run(variant="xskip", args={"lam": 2})
    assert cost.step_key(image) == "classification/preact_resnet20/xskip-lam2/batch128"
    assert cost.steps_of(image) == 10 * 391  # ceil(50,000 / 128) = 391 steps an epoch
    text = run("translation", "wmt14_en_de", "transformer_big", "big", "sas")
    assert cost.step_key(text) == "translation/transformer_big/sas/tokens4096"
    assert cost.steps_of(text) == 2000  # 1,000 updates of 2 batches each
    with pytest.raises(ConfigError, match="training images of 'svhn'"):
        cost.steps_of(run(dataset="svhn"))


def test_hours_are_steps_times_step_time_times_gpus():
    text = run("translation", "wmt14_en_de", "transformer_big", "big", "sas")
    assert cost.run_gpu_hours(text, {cost.step_key(text): 90.0}, gpus=4) == pytest.approx(2000 * 0.090 * 4 / 3600)
    image = run()
    assert cost.run_gpu_hours(image, {cost.step_key(image): 36.0}, gpus=0) == pytest.approx(3910 * 0.036 / 3600)
    with pytest.raises(ConfigError, match="no step time for classification/preact_resnet20/add/batch128"):
        cost.run_gpu_hours(image, {}, gpus=1)


def test_a_table_counts_its_runs_and_the_total_counts_each_run_once():
    a0, a1, b0 = run(seed=0), run(seed=1), run(variant="sas", seed=0)
    only_a_figure = run(variant="xskip", seed=0)  # no step time: a figure's run is not costed
    plan = Plan("paper", {}, runs={"a0": a0, "a1": a1, "b0": b0, "f0": only_a_figure}, rows=[
        {"table": "t1", "label": "add", "runs": ["a0", "a1"]},
        {"table": "t1", "label": "sas", "runs": ["b0"]},
        {"table": "t2", "label": "add", "runs": ["a0", "a1"]},
        {"table": "t3", "label": "sas", "runs": ["b0"]},
    ])
    step_ms = {cost.step_key(a0): 36.0, cost.step_key(b0): 72.0}
    times = {"device": "GPU X", "basis": "estimate", "commit": "abc1234", "date": "2026-11-27", "source": "a test", "step_ms": step_ms}
    frame = cost.table_costs(plan, {"scale": "paper", "gpus_per_job": 1, "translation": {}}, times).set_index("table")
    add_h = 3910 * 0.036 / 3600  # 0.0391 h a run
    assert frame.loc["t1", "gpu_hours"] == pytest.approx(2 * add_h + 2 * add_h)  # sas steps take twice as long
    assert (frame.loc["t1", "runs"], frame.loc["t1", "seeds"]) == (3, 2)
    assert frame.loc["t1", "gpu_hours_per_seed"] == pytest.approx(4 * add_h / 2)
    assert frame.loc["t2", "gpu_hours"] == pytest.approx(2 * add_h)
    assert frame.loc["t3", "gpu_hours"] == frame.loc["t3", "gpu_hours_per_seed"] == pytest.approx(2 * add_h)  # one seed
    assert frame.loc["total", "gpu_hours"] == pytest.approx(4 * add_h) and frame.loc["total", "runs"] == 3
    assert frame.loc["total", "seeds"] == 2 and math.isnan(frame.loc["total", "gpu_hours_per_seed"])
    assert list(frame.reset_index().columns) == ["table", "scale", "runs", "seeds", "gpu_hours", "gpu_hours_per_seed", "counts",
                                                 "leaves_out", "sharing", "deterministic", "device", "basis", "commit", "date", "source"]
    assert set(frame["sharing"]) == {"each run alone on its GPUs"} and set(frame["commit"]) == {"abc1234"}
    assert set(frame["source"]) == {"a test"} and set(frame["deterministic"]) == {"off: torch's fastest kernels"}
    assert set(frame["scale"]) == {"paper"} and set(frame["device"]) == {"GPU X"} and set(frame["basis"]) == {"estimate"}


def test_the_deterministic_switch_is_priced_from_one_key_per_task_timed_with_it_off():
    """Per task, the key its deterministic runs take the most steps of is where the switch is timed
    (here add, 2 runs, over sas, 1). Off, add's step takes 24 of 36 ms: 2/3. The deterministic
    classification runs' steps (2 x 0.0391 h add, 0.0782 h sas) drop by a third, the run without
    deterministic kernels (xskip) and the translation run (not timed off) stay; the total's
    evaluation-free 0.2855 h become 0.2855 - 0.1564 / 3."""
    det = {**CIFAR, "deterministic": True}
    a0, a1, b0 = run(seed=0, recipe=det), run(seed=1, recipe=det), run(variant="sas", recipe=det)
    fast = run(variant="xskip", recipe=CIFAR)
    mt = run("translation", "wmt14_en_de", "transformer_big", "big", "sas", recipe={**MT, "deterministic": True})
    plan = Plan("paper", {}, runs={"a0": a0, "a1": a1, "b0": b0, "x0": fast, "mt": mt}, rows=[
        {"table": "t1", "label": "add", "runs": ["a0", "a1"]}, {"table": "t1", "label": "sas", "runs": ["b0"]},
        {"table": "t1", "label": "xskip", "runs": ["x0"]}, {"table": "t2", "label": "sas", "runs": ["mt"]}])
    add, sas, mt_key = cost.step_key(a0), cost.step_key(b0), cost.step_key(mt)
    assert cost.switch_keys(plan) == {"classification": add, "translation": mt_key}
    sas_first = Plan("paper", {}, runs=plan.runs, rows=[{"table": "t1", "label": "sas", "runs": ["b0"]},
                                                        {"table": "t1", "label": "add", "runs": ["a0", "a1"]}])
    assert cost.switch_keys(sas_first) == {"classification": add}  # add's 2 runs' steps, not its last run's
    step_ms = {add: 36.0, sas: 72.0, cost.step_key(fast): 40.0, mt_key: 90.0}
    times = {"device": "GPU X", "basis": "measured", "commit": "abc1234", "date": "2026-11-27", "source": "a test", "step_ms": step_ms}
    config = {"scale": "paper", "gpus_per_job": 1, "translation": {}}
    said = cost.table_costs(plan, config, times).set_index("table").loc["total", "deterministic"]
    assert said == ("on for classification and translation, so that a seed gives the same numbers on the same GPU and software, "
                    "and a resumed run those of an unbroken one; their cost is not in this step-times file "
                    "(benchmarks/gpu_budget.py times the keys ending /nondeterministic)")
    step_ms[add + cost.NONDETERMINISTIC] = 24.0
    assert cost.switch_ratios(plan, step_ms) == {"classification": (add, pytest.approx(2 / 3))}
    add_h, sas_h, fast_h, mt_h = 3910 * 0.036 / 3600, 3910 * 0.072 / 3600, 3910 * 0.040 / 3600, 2000 * 0.090 / 3600
    step_hours = {"a0": add_h, "a1": add_h, "b0": sas_h, "x0": fast_h, "mt": mt_h}
    total = 2 * add_h + sas_h + fast_h + mt_h
    assert cost.hours_without_deterministic(plan, step_ms, step_hours, total) == pytest.approx(total - (2 * add_h + sas_h) / 3)
    assert cost.hours_without_deterministic(plan, {**step_ms, mt_key + cost.NONDETERMINISTIC: 45.0}, step_hours, total) == \
        pytest.approx(total - (2 * add_h + sas_h) / 3 - mt_h / 2)
    said = cost.table_costs(plan, config, times).set_index("table").loc["total", "deterministic"]
    on = ("on for classification and translation, so that a seed gives the same numbers on the same GPU and software, and a resumed "
          "run those of an unbroken one")
    assert said == (f"{on}; off, a step takes 0.67x its time at classification/preact_resnet20/add/batch128, and the scale would "
                    f"take about {total - (2 * add_h + sas_h) / 3:,.1f} GPU-hours, not {total:,.1f} (each task's training steps "
                    "at its key's ratio); translation at their cost with them on (not timed off in this step-times file)")
    step_ms[mt_key + cost.NONDETERMINISTIC] = 45.0
    said = cost.table_costs(plan, config, times).set_index("table").loc["total", "deterministic"]
    assert said.startswith(f"{on}; off, a step takes 0.67x its time at classification/preact_resnet20/add/batch128, 0.50x its time at "
                           "translation/transformer_big/sas/tokens4096, and the scale would take about")
    assert cost._listed(["a", "b", "c"]) == "a, b and c" and cost._listed(["a"]) == "a"


ANCHORS = {
    "classification": {"batch_size": 128, "baseline_ms": {20: 10.0, 110: 46.0}, "ratio": {"add": 1.0, "sas": 4.0, "other": 1.5}},
    "translation": {"tokens": 4096, "baseline_ms": {"base": 50.0, "big": 60.0}, "ratio": {"xskip_ln": 1.0, "sas": 2.0, "other": 1.2}},
}


def test_the_estimate_is_linear_in_depth_and_batch_and_scaled_by_the_variant():
    assert cost.estimate_step_ms(run(size=20), ANCHORS) == pytest.approx(10.0)
    assert cost.estimate_step_ms(run(size=56), ANCHORS) == pytest.approx(10.0 + 36 * 0.4)  # 0.4 ms a layer of depth
    assert cost.estimate_step_ms(run(size=110, variant="sas"), ANCHORS) == pytest.approx(46.0 * 4.0)
    assert cost.estimate_step_ms(run(size=20, variant="xskip_ln"), ANCHORS) == pytest.approx(15.0)  # other: 1.5
    assert cost.estimate_step_ms(run(size=20, recipe={**CIFAR, "batch_size": 64}), ANCHORS) == pytest.approx(5.0)
    three = {**ANCHORS, "classification": {**ANCHORS["classification"], "baseline_ms": {20: 10.0, 56: 30.0, 110: 46.0}}}
    assert cost.estimate_step_ms(run(size=74), three) == pytest.approx(10.0 + 54 * 0.4)  # the outer two anchors
    one = {**ANCHORS, "classification": {**ANCHORS["classification"], "baseline_ms": {56: 30.0}}}
    assert cost.estimate_step_ms(run(size=110), one) == pytest.approx(30.0)  # one anchor: no slope


def test_a_float64_step_has_its_own_key_and_the_anchors_ratio():
    """Paper 002's equivalent training runs in double precision: its own step time, the float64
    ratio times the float32 estimate (1 where the anchors give none)."""
    double = run(size=20, recipe={**CIFAR, "dtype": "float64"})
    assert cost.step_key(double) == "classification/preact_resnet20/add/batch128/float64"
    assert cost.step_key(run(size=20, recipe={**CIFAR, "dtype": "float32"})) == "classification/preact_resnet20/add/batch128"
    assert cost.estimate_step_ms(double, {**ANCHORS, "float64_ratio": 8}) == pytest.approx(80.0)
    assert cost.estimate_step_ms(double, ANCHORS) == pytest.approx(10.0)


def test_the_translation_estimate_grows_with_tokens_only_above_the_anchor_batch():
    base = run("translation", "iwslt15_en_vi", "transformer_base", "base", "xskip_ln", {"lam": 1})
    assert cost.estimate_step_ms(base, ANCHORS) == pytest.approx(50.0)
    small = run("translation", "iwslt15_en_vi", "transformer_base", "base", "xskip_ln", recipe={**MT, "max_tokens": 2048})
    assert cost.estimate_step_ms(small, ANCHORS) == pytest.approx(50.0)
    big = run("translation", "wmt14_en_de", "transformer_big", "big", "sas", recipe={**MT, "max_tokens": 6144})
    assert cost.estimate_step_ms(big, ANCHORS) == pytest.approx(60.0 * 1.5 * 2.0)


def test_a_step_times_file_names_its_device_basis_and_one_session(tmp_path):
    path = tmp_path / "times.yaml"
    session = "device: GPU X\ncommit: abc1234\ndate: 2026-11-27\nsource: s\nstep_ms: {a: 1.5}\n"
    path.write_text("basis: guessed\n" + session)
    with pytest.raises(ConfigError, match="basis must be one of measured, estimate"):
        cost.load_step_times(path)
    path.write_text("device: GPU X\nbasis: measured\ncommit: abc1234\ndate: 2026-11-27\nstep_ms: {}\n")
    with pytest.raises(ConfigError, match="missing key 'source'"):
        cost.load_step_times(path)
    path.write_text("basis: measured\n" + session.replace("commit: abc1234\n", ""))
    with pytest.raises(ConfigError, match="missing key 'commit'"):
        cost.load_step_times(path)
    path.write_text("basis: measured\n" + session)
    assert cost.load_step_times(path)["date"] == "2026-11-27"  # YAML's date, as text
    for mixed in ("commit: [abc1234, fed4321]", "date: [2026-11-24, 2026-11-26]", "device: {a: GPU X, b: GPU Y}"):
        key = mixed.split(":")[0]
        path.write_text("basis: measured\n" + "\n".join(mixed if line.startswith(key + ":") else line for line in session.splitlines()))
        with pytest.raises(ConfigError, match="several sessions"):
            cost.load_step_times(path)


def test_runs_that_share_a_gpu_cost_their_part_of_it_at_the_step_time_measured_so():
    """A job of 3 seeds: alone (one after another) each run costs its steps at the alone step time;
    stacked, at the stacked key's time per run; as 2 processes side by side, at that key's. Without
    a key measured so, at the time alone (an upper bound), and the words say so."""
    runs = {f"s{seed}": run(seed=seed) for seed in range(3)}
    plan = Plan("paper", {}, runs=runs, rows=[{"table": "t1", "label": "add", "runs": list(runs)}], jobs={"job": list(runs)})
    key = cost.step_key(runs["s0"])
    times = {"device": "GPU X", "basis": "measured", "commit": "abc1234", "date": "2026-11-27", "source": "a test",
             "step_ms": {key: 36.0, key + "/stacked3": 9.0, key + "/processes2": 20.0}}
    steps = 10 * 391  # 10 epochs of ceil(50,000 / 128) steps

    def costed(**config):
        frame = cost.table_costs(plan, {"scale": "paper", "gpus_per_job": 1, "translation": {}, **config}, times).set_index("table")
        return frame.loc["total", "gpu_hours"], frame.loc["total", "sharing"]

    assert costed() == (pytest.approx(3 * steps * 0.036 / 3600), "each run alone on its GPUs")
    assert costed(seeds_stacked=True) == (pytest.approx(3 * steps * 0.009 / 3600), "3 runs a GPU stacked as one program")
    hours, how = costed(seeds_in_parallel=2)  # each run counts as one of 2 side by side (the job's pool keeps 2 busy)
    assert hours == pytest.approx(3 * steps * 0.020 / 3600) and how == "2 runs a GPU as processes"
    assert costed(seeds_in_parallel={"classification": 2}) == (hours, how)  # the run's own task's setting counts
    assert costed(seeds_in_parallel={"translation": 2})[1] == "each run alone on its GPUs"
    assert costed(seeds_in_parallel=3) == (pytest.approx(3 * steps * 0.036 / 3600),
                                           "3 runs a GPU as processes (costed alone: no step times measured so, an upper bound)")
    with pytest.raises(ConfigError, match=r"no step time for .*/processes3;.* its job shares a GPU \(processes3\)"):
        cost.run_gpu_hours(runs["s0"], times["step_ms"], 1, "/processes3")
    assert cost.sharing({"seeds_stacked": True}, Plan("paper", {}, runs={"s0": runs["s0"]}, jobs={"j": ["s0"]})) == {"s0": ""}


@pytest.mark.config
def test_the_committed_estimate_covers_every_run_of_the_costed_scales():
    """config/costs/h100-estimate.yaml is what benchmarks/gpu_budget.py --estimate writes from the
    anchors: every run of paper.yaml's and gpu-day.yaml's tables has its step time, equal to the estimate."""


    times = cost.load_step_times("config/costs/h100-estimate.yaml")
    anchors = yaml.safe_load(open("config/costs/h100-anchors.yaml"))
    for scale in ("config/paper.yaml", "config/gpu-day.yaml"):
        config = yaml.safe_load(open(scale))
        plan = make_plan(config)
        for r in cost.tabled_runs(plan).values():
            for key, _ in cost.stages_of(r):
                assert times["step_ms"][key] == pytest.approx(cost.estimate_step_ms(r, anchors, key), abs=0.01)
        assert isinstance(cost.table_costs(plan, config, times), pd.DataFrame)


@pytest.mark.config
def test_the_measured_step_times_cover_every_run_of_the_costed_scales_and_are_what_the_configs_read():
    """config/costs/h100.yaml (benchmarks/gpu_budget.py --device cuda on an H100): a step time for
    every run of paper.yaml's and gpu-day.yaml's tables; a new step needs a new measurement."""


    times = cost.load_step_times("config/costs/h100.yaml")
    assert times["basis"] == "measured" and times["device"] == "NVIDIA H100 80GB HBM3"
    for scale in ("config/paper.yaml", "config/gpu-day.yaml", "config/mini.yaml"):
        config = yaml.safe_load(open(scale))
        assert config["gpu_costs"]["step_times"] == "config/costs/h100.yaml"
        if scale.endswith("mini.yaml"):
            continue
        keys = [k for r in cost.tabled_runs(make_plan(config)).values() for k, _ in cost.stages_of(r)]
        assert any("/scst50" in k for k in keys)  # the captioning runs' self-critical stage is costed too
        missing = [k for k in keys if k not in times["step_ms"]]
        assert missing == []


def test_a_captioning_step_is_a_batch_of_captions():
    """Its key names the captions per batch; the estimate scales the anchor above its batch only."""
    recipe = {"batch_size": 50, "max_updates": 3000, "update_freq": 1}
    caption = Run("captioning", "mscoco", "captioner_paper", "transformer_captioner", "paper", "sas", "{}", 0,
                  recipe_json=json.dumps(recipe, sort_keys=True))
    assert cost.step_key(caption) == "captioning/captioner_paper/sas/captions50" and cost.steps_of(caption) == 3000
    anchors = {"captioning": {"captions": 50, "baseline_ms": {"paper": 30.0}, "ratio": {"xskip_ln": 1.0, "sas": 2.0, "other": 1.2}}}
    assert cost.estimate_step_ms(caption, anchors) == pytest.approx(60.0)
    larger = Run(**{**caption.__dict__, "recipe_json": json.dumps({**recipe, "batch_size": 100})})
    assert cost.estimate_step_ms(larger, anchors) == pytest.approx(120.0)
    smaller = Run(**{**caption.__dict__, "variant": "rskip_ln", "recipe_json": json.dumps({**recipe, "batch_size": 10})})
    assert cost.estimate_step_ms(smaller, anchors) == pytest.approx(36.0)  # launch-bound below the anchor: its time, x other


def test_a_self_critical_stage_adds_its_updates_at_its_own_step_time():
    recipe = {"batch_size": 50, "max_updates": 3000, "update_freq": 1, "scst": {"updates": 200, "batch_images": 40, "lr": 5e-5,
                                                                                "checkpoint_every": 100, "max_len": 20}}
    caption = Run("captioning", "mscoco", "captioner_paper", "transformer_captioner", "paper", "sas", "{}", 0,
                  recipe_json=json.dumps(recipe, sort_keys=True))
    assert cost.scst_key(caption) == "captioning/captioner_paper/sas/scst40"
    assert cost.stages_of(caption) == [("captioning/captioner_paper/sas/captions50", 3000), ("captioning/captioner_paper/sas/scst40", 200)]
    step_ms = {"captioning/captioner_paper/sas/captions50": 60.0, "captioning/captioner_paper/sas/scst40": 900.0}
    assert cost.run_gpu_hours(caption, step_ms, gpus=1) == pytest.approx((3000 * 0.060 + 200 * 0.900) / 3600)
    with pytest.raises(ConfigError, match="scst40"):
        cost.run_gpu_hours(caption, {"captioning/captioner_paper/sas/captions50": 60.0}, gpus=1)
    anchors = {"captioning": {"captions": 50, "baseline_ms": {"paper": 30.0}, "ratio": {"sas": 2.0, "other": 1.2},
                              "scst": {"images": 20, "baseline_ms": {"paper": 500.0}, "ratio": {"sas": 1.5, "other": 1.1}}}}
    assert cost.estimate_step_ms(caption, anchors, "captioning/captioner_paper/sas/scst40") == pytest.approx(500.0 * 2 * 1.5)
    assert cost.estimate_step_ms(caption, anchors) == pytest.approx(60.0)  # the cross-entropy step
    plain = Run(**{**caption.__dict__, "recipe_json": json.dumps({k: v for k, v in recipe.items() if k != "scst"})})
    assert cost.scst_key(plain) is None and len(cost.stages_of(plain)) == 1


def test_the_budget_times_a_self_critical_stage_with_the_training_loops_update(monkeypatch):
    """benchmarks/gpu_budget.py measures a run's scst key with scst_step_time's update (the real
    scst_update), its other key with the training step."""
    import sys
    from pathlib import Path


    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gpu_budget
    import scst_step_time

    config = tiny_config()
    run = next(r for r in cost.tabled_runs(make_plan(config)).values() if r.task == "captioning")
    made = []
    real = scst_step_time.self_critical_step
    monkeypatch.setattr(scst_step_time, "self_critical_step", lambda *a: made.append(a[2:]) or real(*a))
    assert gpu_budget.measure_step_ms(config, run, "cpu", warmup=0, steps=1, key=cost.scst_key(run)) > 0
    assert made == [(20, 12, 9_571, 49, 2_050)]  # the recipe's batch_images and max_len; MSCOCO's words and features
    assert gpu_budget.measure_step_ms(config, run, "cpu", warmup=0, steps=1, key=cost.step_key(run)) > 0 and len(made) == 1
    assert {k for k in gpu_budget.distinct_steps([(config, make_plan(config))]) if k.startswith("captioning/")} == {
        k for r in cost.tabled_runs(make_plan(config)).values() if r.task == "captioning" for k, _ in cost.stages_of(r)}


def test_the_budget_times_a_stacked_job_as_one_program_and_gives_a_runs_part(monkeypatch):
    """A config whose jobs stack their seeds adds the stacked keys to what is measured; such a key's
    step is the K runs' step as one StackedRuns, and its time the step's over K."""
    import itertools

    from resrepro.models import stacked

    gpu_budget = _gpu_budget()
    tiny = tiny_config()
    config = {**tiny, "seeds": 3, "seeds_stacked": True}
    steps = gpu_budget.distinct_steps([(config, make_plan(config))])
    stacked_keys = [k for k in steps if k.endswith("/stacked3")]
    assert stacked_keys and all(k.startswith("classification/") and k.removesuffix("/stacked3") in steps for k in stacked_keys)
    assert not any("/stacked" in k for k in gpu_budget.distinct_steps([(tiny, make_plan(tiny))]))
    asked = gpu_budget.distinct_steps([(tiny, make_plan(tiny))], stacked=(4, 5))  # what stacking would cost, beside alone
    alone = [k for k in asked if "/stacked" not in k]
    assert sorted(k for k in asked if "/stacked" in k) == sorted(f"{k}/stacked{n}" for k in alone if k.startswith("classification/")
                                                                 for n in (4, 5))
    config_of, run = steps[stacked_keys[0]]
    built = []
    monkeypatch.setattr(gpu_budget, "training_step", lambda spec, device, data, stacked: built.append(stacked) or (lambda: None))
    clock = itertools.count(0.0, 0.3)  # each step 0.3 s
    monkeypatch.setattr(gpu_budget.time, "perf_counter", lambda: next(clock))
    assert gpu_budget.measure_step_ms(config_of, run, "cpu", warmup=0, steps=3, key=stacked_keys[0]) == pytest.approx(100.0)
    assert gpu_budget.measure_step_ms(config_of, run, "cpu", warmup=0, steps=3, key=stacked_keys[0].removesuffix("/stacked3")) == \
        pytest.approx(300.0)
    assert built == [3, 1]
    resets = []
    monkeypatch.setattr("torch._dynamo.reset", lambda: resets.append(1))
    gpu_budget.measure_step_ms(config_of, run, "cpu", warmup=0, steps=1, key=stacked_keys[0])
    assert resets == [1]  # each key compiles as its own run's process: no recompile limit across keys
    monkeypatch.undo()
    stacks = []
    monkeypatch.setattr(stacked.StackedRuns, "__init__", lambda self, nets, _init=stacked.StackedRuns.__init__: stacks.append(len(nets))
                        or _init(self, nets))
    assert gpu_budget.measure_step_ms(config_of, run, "cpu", warmup=0, steps=1, key=stacked_keys[0]) > 0 and stacks == [3]


def test_the_budget_times_runs_side_by_side_as_processes_and_gives_a_runs_part():
    """A config whose jobs train their seeds side by side adds the /processes{P} keys; such a key is
    timed by P processes stepping the run's step together, and one run's part of the GPU is the
    median of their median steps over P."""

    gpu_budget = _gpu_budget()
    assert gpu_budget.shared_step_ms([[0.010, 0.012, 0.011], [0.020, 0.020, 0.021], [0.016, 0.015, 0.014]]) == pytest.approx(5.0)
    assert gpu_budget.runs_sharing("classification/cifar10/preact_resnet20/add/b128/processes4", "processes") == 4
    assert gpu_budget.runs_sharing("classification/cifar10/preact_resnet20/add/b128/stacked4", "processes") == 1
    config = {**tiny_config(), "seeds": 2, "seeds_per_job": {"classification": 2}, "seeds_in_parallel": {"classification": 2}}
    steps = gpu_budget.distinct_steps([(config, make_plan(config))], evaluation=True)
    shared = [k for k in steps if k.endswith("/processes2")]
    assert shared and sorted(shared) == sorted(f"{k}/processes2" for k in steps if k.startswith("classification/") and "/processes" not in k)


def test_the_budget_times_the_runs_alone_first_and_skips_what_it_is_told(tmp_path, monkeypatch, capsys):
    """gpu_budget.py's main: the keys alone, then each count of processes side by side as one
    group (a file stopped at a time limit holds the keys every cost needs); --skip leaves keys out."""

    gpu_budget = _gpu_budget()
    config = {**tiny_config(), "seeds": 2, "seeds_per_job": {"classification": 2}, "seeds_in_parallel": {"classification": 2}}
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(config))
    groups = []

    def side_by_side(paths, keys, device, warmup, steps, measured, data_dir):
        groups.append(keys)
        for key in keys:
            measured(key, 2.0)

    monkeypatch.setattr(gpu_budget, "measure_step", lambda *a, data_dir: (8.0, 0.5))
    monkeypatch.setattr(gpu_budget, "measure_side_by_side", side_by_side)
    monkeypatch.setattr(gpu_budget, "measure_write_gb_s", lambda *a: 1.0)
    monkeypatch.setattr(gpu_budget, "largest_checkpoint_mb", lambda configs_and_plans: 8)
    monkeypatch.setattr(gpu_budget, "measure_job_start_s", lambda device, gpus: dict.fromkeys(gpus, 2.5))
    out = tmp_path / "times.yaml"
    gpu_budget.main(["--config", str(path), "--device", "cpu", "--out", str(out)])
    keys = list(yaml.safe_load(out.read_text())["step_ms"])
    shared = [key for key in keys if key.endswith("/processes2")]
    assert shared and keys == [key for key in keys if key not in shared] + shared and groups == [shared]
    gpu_budget.main(["--config", str(path), "--device", "cpu", "--out", str(out), "--skip", "*/processes*"])
    assert list(yaml.safe_load(out.read_text())["step_ms"]) == [key for key in keys if key not in shared] and len(groups) == 1
    capsys.readouterr()


def test_the_budget_times_each_tasks_switch_key_with_deterministic_kernels_off_and_last(tmp_path, monkeypatch, capsys):
    """With deterministic recipes, gpu_budget.py adds each task's switch key ending /nondeterministic;
    its step is the run's training step with torch's defaults restored, timed after the other keys
    alone (cuBLAS starts with the deterministic keys' workspace)."""
    import torch

    from resrepro import devices

    gpu_budget = _gpu_budget()
    tiny = tiny_config()
    config = {**tiny, "classification": {**tiny["classification"], "deterministic": True}}
    plan = make_plan(config)
    switched = [k for k in gpu_budget.distinct_steps([(config, plan)], switched=True) if k.endswith(cost.NONDETERMINISTIC)]
    assert switched == [cost.switch_keys(plan)["classification"] + cost.NONDETERMINISTIC]
    assert not any(k.endswith(cost.NONDETERMINISTIC) for k in gpu_budget.distinct_steps([(config, plan)]))

    modes = []
    monkeypatch.setattr(gpu_budget, "training_step", lambda spec, device, data, stacked: modes.append(
        torch.are_deterministic_algorithms_enabled()) or (lambda: None))
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # use_deterministic_algorithms sets it: undone with the test
    config_of, run = gpu_budget.distinct_steps([(config, plan)], switched=True)[switched[0]]
    try:
        gpu_budget.measure_step_ms(config_of, run, "cpu", warmup=0, steps=1, key=switched[0].removesuffix(cost.NONDETERMINISTIC))
        gpu_budget.measure_step_ms(config_of, run, "cpu", warmup=0, steps=1, key=switched[0])
        assert modes == [True, False]
        devices.use_deterministic_algorithms()
        gpu_budget.use_fastest_algorithms()
        assert not torch.backends.cudnn.deterministic and torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        gpu_budget.use_fastest_algorithms()

    monkeypatch.setattr(gpu_budget, "measure_step", lambda config, run, device, warmup, steps, key, data_dir: (8.0, 0.5))
    monkeypatch.setattr(gpu_budget, "measure_write_gb_s", lambda *a: 1.0)
    monkeypatch.setattr(gpu_budget, "largest_checkpoint_mb", lambda configs_and_plans: 8)
    monkeypatch.setattr(gpu_budget, "measure_job_start_s", lambda device, gpus: dict.fromkeys(gpus, 2.5))
    path, out = tmp_path / "deterministic.yaml", tmp_path / "times.yaml"
    path.write_text(yaml.safe_dump(config))
    gpu_budget.main(["--config", str(path), "--device", "cpu", "--out", str(out)])
    written = yaml.safe_load(out.read_text())
    keys = list(written["step_ms"])
    assert keys[-1] == switched[0] and len(keys) == len(gpu_budget.distinct_steps([(config, plan)], evaluation=True)) + 1
    # the warm-ups the cost reads: each training stage's (the switched key's compiling is its key's; evaluation is not compiled)
    assert list(written["warmup_s"]) == [key for key in keys[:-1] if not cost.is_eval_key(key)] and written["job_start_s"] == {0: 2.5}  # tiny runs on the CPU
    capsys.readouterr()


@pytest.mark.integration
def test_the_budget_starts_the_processes_of_side_by_side_keys_once_and_fails_with_them(tmp_path):
    """Two real worker processes on the CPU step two keys, one after the other, and give a time
    for each as it is in; workers that fail (an unknown key) fail the measurement."""


    gpu_budget = _gpu_budget()
    config = {**tiny_config(), "seeds": 2, "seeds_per_job": {"classification": 2}, "seeds_in_parallel": {"classification": 2}}
    shared = [k for k in gpu_budget.distinct_steps([(config, make_plan(config))], evaluation=True) if k.endswith("/processes2")]
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(config))
    keys = [next(k for k in shared if not cost.is_eval_key(k)), next(k for k in shared if cost.is_eval_key(k))]
    seen = []
    times = gpu_budget.measure_side_by_side([str(path)], keys, "cpu", warmup=0, steps=2, measured=lambda key, ms: seen.append(key))
    assert sorted(times) == sorted(keys) == sorted(seen) and all(ms > 0 for ms in times.values())
    with pytest.raises(SystemExit, match=r"0 of 1 keys side by side measured: a worker failed"):
        gpu_budget.measure_side_by_side([str(path)], ["classification/no/such/key/processes2"], "cpu", warmup=0, steps=1)
    with pytest.raises(ValueError, match="one count of processes"):
        gpu_budget.measure_side_by_side([str(path)], [keys[0], keys[0].replace("processes2", "processes3")], "cpu", warmup=0, steps=1)


def test_side_by_side_workers_start_in_the_callers_folder_where_the_configs_paths_are(tmp_path, monkeypatch):
    """A config's paths are relative to the folder gpu_budget.py runs in (the rehearsal's mirror):
    its workers start there, whatever folder holds the script."""
    import subprocess
    from pathlib import Path

    gpu_budget = _gpu_budget()
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **kw: started.append((argv, kw)))
    monkeypatch.setattr(gpu_budget, "collect_side_by_side", lambda workers, work, keys, measured: {})
    monkeypatch.chdir(tmp_path)
    gpu_budget.measure_side_by_side(["config.yaml"], ["a/b/c/d/processes2"], "cpu", warmup=0, steps=1)
    assert len(started) == 2 and all(kw.get("cwd") in (None, str(tmp_path)) for _, kw in started)
    assert started[0][0][1] == str(Path(gpu_budget.__file__).resolve())
    assert started[0][0][started[0][0].index("--config") + 1] == str(tmp_path / "config.yaml")


def test_a_failed_side_by_side_worker_kills_the_ones_waiting_for_it(tmp_path):
    """One worker fails while the other waits (as at the next key's barrier): the waiting one is
    killed at once, and the measurement fails naming the exit code; times already in are given."""
    import json
    import subprocess
    import sys
    import time

    gpu_budget = _gpu_budget()
    (tmp_path / "0-0.json").write_text(json.dumps([0.010, 0.012]))
    (tmp_path / "0-1.json").write_text(json.dumps([0.014, 0.014]))
    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    failing = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    seen, started = {}, time.monotonic()
    with pytest.raises(SystemExit, match=r"1 of 2 keys side by side measured: a worker failed \(exit codes \[3\]\)"):
        gpu_budget.collect_side_by_side([waiting, failing], tmp_path, ["a/processes2", "b/processes2"], measured=seen.__setitem__)
    assert waiting.returncode == -9 and time.monotonic() - started < 60
    assert seen == {"a/processes2": pytest.approx(1000 * 0.0125 / 2)}  # the median of 11 and 14 ms, over 2


def test_checkpoint_writes_and_the_all_reduce_count_where_the_file_has_their_bandwidths(monkeypatch):
    """A translation run on 4 GPUs, 2,500 updates, a checkpoint every 1,000 (3 last.pt of 3 weight
    copies, 3 step files of 1), 100 MB of weights: 12 copies = 1.2 GB written at 2 GB/s = 0.6 s,
    times 4 GPUs waiting; each update all-reduces 2 x 3/4 x 100 MB at 150 GB/s = 1 ms, 2.5 s in all,
    times 4 GPUs. Without the figures, neither counts, and the words say what is left out."""
    from resrepro.analysis import disk

    mt = run("translation", "wmt14_en_de", "transformer_big", "big", "xskip_ln",
             recipe={**MT, "max_updates": 2500, "checkpoint_every": 1000, "keep_checkpoints": 5})
    monkeypatch.setattr(cost, "weight_bytes", lambda r, config: 100e6)
    copies = {"translation/last": 3.0, "translation/step": 1.0}
    figures = {"checkpoint_write_gb_s": 2.0, "allreduce_bus_gb_s": 150.0, "allreduce_source": "assumed", "step_ms": {}}
    assert disk.written_files(mt) == {"step": 3, "last": 3}
    hours = cost.overhead_hours(mt, {}, figures, copies, gpus=4)
    assert hours == {"checkpoints": pytest.approx(0.6 * 4 / 3600), "allreduce": pytest.approx(2500 * 0.001 * 4 / 3600)}
    assert cost.overhead_hours(mt, {}, figures, copies, gpus=1) == {"checkpoints": pytest.approx(0.6 / 3600)}  # no all-reduce alone
    assert cost.overhead_hours(mt, {}, figures, copies, gpus=2)["allreduce"] == pytest.approx(2500 * (100e6 / 150e9) * 2 / 3600)
    assert cost.overhead_hours(mt, {}, {}, copies, gpus=4) == {} and cost.overhead_hours(mt, {}, figures, None, gpus=4).keys() == {"allreduce"}
    # timed steps: checkpoints 1,000 x 2 x 300 ms = 600 s apart, a resume point at each; at 299 ms,
    # at every second one (and the last): 2 of 3, so 3 + 2 x 3 copies = 0.9 GB
    timed = {**figures, "step_ms": {cost.step_key(mt): 300.0}}
    assert cost.overhead_hours(mt, {}, timed, copies, gpus=1)["checkpoints"] == pytest.approx(0.6 / 3600)
    timed["step_ms"][cost.step_key(mt)] = 299.0
    assert cost.overhead_hours(mt, {}, timed, copies, gpus=1)["checkpoints"] == pytest.approx(0.45 / 3600)
    counts, left = cost.counted_text(figures, copies, multi_gpu=True)
    assert counts == ("training steps; checkpoint writes at 2 GB/s (a translation or captioning run's resume point at most every 10 "
                      "minutes of training); the gradients' all-reduce at 150 GB/s bus bandwidth (assumed; an upper bound: DDP "
                      "overlaps it with backward)")
    assert left == ("classification's evaluation (the step-times file has no evaluation times), translation's dev loss (the "
                    "step-times file has no dev-loss times), beam search and captioning's evaluation, data preparation, each job's start "
                    "(the step-times file has no start time), each run's model build and first steps beyond their step time (the step-times file has no "
                    "warm-up times)")
    counts, left = cost.counted_text({"step_ms": {}}, copies, multi_gpu=True)
    assert counts == "training steps"
    assert left == ("classification's evaluation (the step-times file has no evaluation times), translation's dev loss (the "
                    "step-times file has no dev-loss times), beam search and captioning's evaluation, data preparation, each job's start "
                    "(the step-times file has no start time), each run's model build and first steps beyond their step time (the step-times file has no "
                    "warm-up times), checkpoint writes (the step-times file has no write bandwidth), the all-reduce of multi-GPU runs (the step-times file has no bus bandwidth)")
    plan = Plan("paper", {}, runs={"mt": mt}, rows=[{"table": "t", "label": "x", "runs": ["mt"]}])
    times = {"device": "GPU X", "basis": "measured", "commit": "abc1234", "date": "2026-11-27", "source": "a test",
             **figures, "step_ms": {cost.step_key(mt): 36.0}}
    frame = cost.table_costs(plan, {"scale": "paper", "gpus_per_job": 1, "translation": {"gpus": {"wmt14_en_de": 4}}}, times, copies)
    steps_h = 2500 * 2 * 0.036 * 4 / 3600
    # checkpoints 72 s apart: one resume point, the last (3 step files and 1 last.pt, 0.6 GB: 0.3 s)
    assert frame.set_index("table").loc["total", "gpu_hours"] == pytest.approx(steps_h + hours["allreduce"] + 0.3 * 4 / 3600)


def test_translation_counts_its_dev_loss_at_each_checkpoint_where_the_file_times_it(monkeypatch):
    """The dev loss reads the recipe's dev_sentences, at most the split's, else the whole split:
    IWSLT15's tst2012 (1,553), WMT14 EN-FR's newstest2012 + 2013 (3,003 + 3,000). 2,500 updates
    with a checkpoint every 1,000 compute it 3 times (1,000, 2,000 and the last): at 500 ms on 4
    GPUs, 3 x 0.5 x 4 s; without its time in the file, none, and the words say so."""
    iwslt = run("translation", "iwslt15_en_vi", "transformer_base", "base", "add", recipe={**MT, "checkpoint_every": 1000})
    assert cost.dev_pairs(iwslt) == 1_553 and cost.dev_key(iwslt) == "translation/transformer_base/add/dev1553"
    assert cost.dev_pairs(run("translation", "wmt14_en_fr", "transformer_big", "big", "add")) == 6_003
    assert cost.dev_pairs(run("translation", "iwslt15_en_vi", "transformer_base", "base", "add", recipe={**MT, "dev_sentences": 16})) == 16
    assert cost.dev_pairs(run("translation", "iwslt15_en_vi", "transformer_base", "base", "add", recipe={**MT, "dev_sentences": 9000})) == 1_553
    assert cost.dev_key(run("translation", "synthetic", "transformer_mini", "mini", "add")) is None  # a split of unknown size
    assert cost.dev_key(run()) is None
    mt = run("translation", "wmt14_en_de", "transformer_big", "big", "add",
             recipe={**MT, "max_updates": 2500, "checkpoint_every": 1000, "keep_checkpoints": 5})
    key = cost.dev_key(mt)
    assert key == "translation/transformer_big/add/dev3000"
    assert cost.dev_hours(mt, {key: 500.0}, gpus=4) == pytest.approx(3 * 0.5 * 4 / 3600) and cost.dev_hours(mt, {}, gpus=4) == 0.0
    assert cost.dev_hours(mt, {key: 500.0}, gpus=1) == pytest.approx(3 * 0.5 / 3600)
    assert cost.times_dev_loss({key: 500.0}) and not cost.times_dev_loss({cost.step_key(mt): 90.0, "a/b/dev": 1.0})
    plan = Plan("paper", {}, runs={"mt": mt}, rows=[{"table": "t", "label": "x", "runs": ["mt"]}], jobs={"j": ["mt"]})
    times = {"device": "GPU X", "basis": "measured", "commit": "abc1234", "date": "2026-11-27", "source": "a test",
             "step_ms": {cost.step_key(mt): 36.0, key: 500.0}}
    config = {"scale": "paper", "gpus_per_job": 1, "translation": {"gpus": {"wmt14_en_de": 4}}}
    assert cost.run_hours(plan, config, times)["mt"]["dev loss"] == pytest.approx(3 * 0.5 * 4 / 3600)
    steps_s = 2500 * 2 * 0.036  # on each of its 4 GPUs: the job's wall time is its GPU-hours over 4
    assert cost.job_seconds(plan, config, times) == {"j": pytest.approx(steps_s + 3 * 0.5)}
    # 3 step files of 1 copy; the checkpoints 72.5 s apart (1,000 updates of 2 batches at 36 ms, and
    # the dev loss), so one resume point in 600 s: the last, a last.pt of 3 copies. 0.6 GB at 2 GB/s.
    assert cost.checkpoint_seconds(mt, times["step_ms"]) == pytest.approx(1000 * 2 * 0.036 + 0.5)
    shared = {cost.step_key(mt) + "/processes2": 18.0, key: 500.0}  # one run's part of a GPU two runs share: 36 ms of wall time
    assert cost.checkpoint_seconds(mt, shared, "/processes2") == pytest.approx(1000 * 2 * 0.036 + 0.5)
    assert cost.checkpoint_seconds(mt, {}) is None and cost.checkpoint_seconds(run(), {cost.step_key(run()): 1.0}) is None
    monkeypatch.setattr(cost, "weight_bytes", lambda r, config: 100e6)
    written = {**times, "checkpoint_write_gb_s": 2.0, "job_start_s": {1: 3.0, 4: 5.0}}  # the job holds 4 GPUs
    assert cost.job_seconds(plan, config, written, {"translation/last": 3.0, "translation/step": 1.0}) == \
        {"j": pytest.approx(steps_s + 1.5 + 0.3 + 5.0)}
    assert cost.counted_text(times, None, multi_gpu=False)[0] == "training steps; translation's dev loss at each checkpoint"


def test_a_jobs_start_and_its_runs_first_steps_count_where_the_file_times_them():
    """A job of 2 CIFAR runs side by side (processes2) and a job of 1: each job starts once in
    6 s, so a run's part is 3 s in the first and 6 s in the second; each run's first steps take
    4 s beyond its steps, 2 s each where 2 start side by side. The job of 2 takes its runs' parts
    of the GPU: 2 x (3910 x 10 ms + 3 + 2) s; the job of 1, 3910 x 36 ms + 6 + 4 s. The fake
    copy's 150 training images at batch 128 are 2 steps an epoch: 20 steps."""
    a0, a1, b0 = run(seed=0), run(seed=1), run(variant="sas", seed=0)
    plan = Plan("paper", {}, runs={"a0": a0, "a1": a1, "b0": b0}, rows=[{"table": "t", "label": "add", "runs": ["a0", "a1"]},
                {"table": "t", "label": "sas", "runs": ["b0"]}], jobs={"ja": ["a0", "a1"], "jb": ["b0"]})
    key, sas = cost.step_key(a0), cost.step_key(b0)
    times = {"device": "GPU X", "basis": "measured", "commit": "abc1234", "date": "2026-11-27", "source": "a test", "job_start_s": {1: 6.0},
             "warmup_s": {key: 4.0, sas: 4.0}, "step_ms": {key: 36.0, key + "/processes2": 10.0, sas: 36.0}}
    config = {"scale": "paper", "gpus_per_job": 1, "translation": {}, "seeds_per_job": 2, "seeds_in_parallel": {"classification": 2}}
    hours = cost.run_hours(plan, config, times)
    assert hours["a0"] == {"steps": pytest.approx(3910 * 0.010 / 3600), "warmup": pytest.approx(2 / 3600), "start": pytest.approx(3 / 3600)}
    assert hours["b0"] == {"steps": pytest.approx(3910 * 0.036 / 3600), "warmup": pytest.approx(4 / 3600), "start": pytest.approx(6 / 3600)}
    assert cost.job_seconds(plan, config, times) == {"ja": pytest.approx(2 * (39.1 + 3 + 2)), "jb": pytest.approx(140.76 + 6 + 4)}
    assert cost.job_seconds(plan, config, times, examples={"cifar10": (150, 10)})["jb"] == pytest.approx(20 * 0.036 + 6 + 4)
    assert cost.eval_batches_of(b0, {"cifar10": (150, 1_000)}) == 10 * 2  # 1,000 test images at 512 a batch, each epoch
    evaluated = {**times, "step_ms": {**times["step_ms"], cost.eval_key(a0): 20.0, cost.eval_key(b0): 20.0}}
    assert cost.job_seconds(plan, config, evaluated, examples={"cifar10": (150, 1_000)})["jb"] == pytest.approx(20 * 0.036 + 20 * 0.020 + 6 + 4)
    assert cost.run_hours(plan, config, evaluated)["b0"]["evaluation"] == pytest.approx(10 * 20 * 0.020 / 3600)  # 10,000 images: 20 a epoch
    assert cost.overhead_hours(b0, {}, {"warmup_s": {sas: 4.0}}, None, gpus=2) == {"warmup": pytest.approx(8 / 3600)}  # alone, on 2 GPUs
    with_a_figures_run = Plan("paper", {}, runs={**plan.runs, "f0": run(variant="xskip")}, rows=plan.rows, jobs={"jf": ["b0", "f0"]})
    assert cost.job_seconds(with_a_figures_run, config, times) == {}  # a run no table names has no step times: not held against
    stopped_part_way = {**times, "step_ms": {key: 36.0, key + "/processes2": 10.0}}  # sas not yet timed
    assert cost.job_seconds(plan, config, stopped_part_way) == {"ja": pytest.approx(2 * (39.1 + 3 + 2))}
    with pytest.raises(ConfigError, match="no step time for classification/preact_resnet20/sas/batch128"):
        cost.table_costs(plan, config, stopped_part_way)
    untimed_first = Plan("paper", {}, runs=plan.runs, rows=[{"table": "t", "label": "sas", "runs": ["b0"]},
                                                            {"table": "t", "label": "add", "runs": ["a0", "a1"]}], jobs=plan.jobs)
    assert cost.job_seconds(untimed_first, config, stopped_part_way) == {"ja": pytest.approx(2 * (39.1 + 3 + 2))}
    no_jobs = Plan("paper", {}, runs=plan.runs, rows=plan.rows)
    assert cost.run_hours(no_jobs, config, times)["b0"]["start"] == pytest.approx(6 / 3600)  # a run of no job: a start of its own
    counts, _ = cost.counted_text(times, None, multi_gpu=False)
    assert counts == ("training steps; each job's start (its launcher and ranks importing torch and starting their devices: 1 GPU 6 s); "
                      "each run's model build and first steps beyond their step time (compiling)")
    assert cost.runs_at_once("/processes4") == 4 and cost.runs_at_once("/stacked5") == 5 and cost.runs_at_once("") == 1


def test_classification_evaluates_its_test_set_after_every_epoch_where_the_file_times_evaluation():
    """10 epochs of CIFAR-10 at batch 128 evaluate 10,000 test images after each epoch in batches of
    4 x 128 = 512: 10 x ceil(10,000 / 512) = 10 x 20 = 200 batches. At 20 ms a batch that is 4 s
    beside the steps' 3,910 x 36 ms; stacked, at the stacked evaluation's time per run where the
    file has it, else alone. A file without evaluation times leaves it out and says so; a file with
    some but not this run's refuses."""
    a0, a1 = run(seed=0), run(seed=1)
    assert cost.eval_key(a0) == "classification/preact_resnet20/add/eval512" and cost.eval_batches_of(a0) == 200
    assert cost.eval_key(run(recipe={**CIFAR, "dtype": "float64"})) == "classification/preact_resnet20/add/eval512/float64"
    assert cost.eval_key(run("translation", "wmt14_en_de", "transformer_big", "big", "sas")) is None
    assert cost.eval_batches_of(run(dataset="digits", recipe={"epochs": 4, "batch_size": 64})) == 4 * 2  # 500 test images, 256 a batch
    with pytest.raises(ConfigError, match="test images of 'svhn'"):
        cost.eval_batches_of(run(dataset="svhn"))
    assert cost.is_eval_key("classification/x/add/eval512/stacked2") and not cost.is_eval_key("classification/x/eval/batch128")
    key, evaluation = cost.step_key(a0), cost.eval_key(a0)
    plan = Plan("paper", {}, runs={"a0": a0, "a1": a1}, rows=[{"table": "t", "label": "add", "runs": ["a0", "a1"]}], jobs={"j": ["a0", "a1"]})
    steps_h, eval_h = 3910 * 0.036 / 3600, 200 * 0.020 / 3600

    def costed(step_ms, **config):
        times = {"device": "GPU X", "basis": "measured", "commit": "abc1234", "date": "2026-11-27", "source": "a test", "step_ms": step_ms}
        frame = cost.table_costs(plan, {"scale": "paper", "gpus_per_job": 1, "translation": {}, **config}, times).set_index("table")
        return frame.loc["total", "gpu_hours"], frame.loc["total", "counts"], frame.loc["total", "leaves_out"]

    hours, counts, left = costed({key: 36.0, evaluation: 20.0})
    assert hours == pytest.approx(2 * (steps_h + eval_h))
    assert counts == "training steps; classification's test evaluation after every epoch"
    assert left == ("translation's dev loss (the step-times file has no dev-loss times), beam search and captioning's evaluation, "
                    "data preparation, each job's start (the step-times file has no start time), each run's model build and first steps beyond their step time (the step-times file has no "
                    "warm-up times), checkpoint writes (the step-times file has no write bandwidth)")
    assert costed({key: 36.0, evaluation: 20.0, key + "/stacked2": 10.0, evaluation + "/stacked2": 6.0}, seeds_stacked=True)[0] == \
        pytest.approx(2 * (3910 * 0.010 + 200 * 0.006) / 3600)
    assert costed({key: 36.0, evaluation: 20.0, key + "/stacked2": 10.0}, seeds_stacked=True)[0] == \
        pytest.approx(2 * (3910 * 0.010 + 200 * 0.020) / 3600)  # stacked evaluation not measured: as alone
    assert costed({key: 36.0})[0] == pytest.approx(2 * steps_h)
    assert costed({key: 36.0})[2].startswith("classification's evaluation (the step-times file has no evaluation times), translation's dev")
    with pytest.raises(ConfigError, match="no evaluation time for classification/preact_resnet20/add/eval512"):
        costed({key: 36.0, "classification/other/add/eval512": 20.0})


def test_the_budget_times_a_classification_runs_evaluation_batch_with_the_loops_evaluate(monkeypatch):
    """With evaluation, each classification run's eval key follows its steps (stacked too); its
    time is one call of evaluate/classification.evaluate on eval_batch_size images (evaluate_stacked
    over K runs, over K); no other task gets one."""
    from resrepro.evaluate import classification

    gpu_budget = _gpu_budget()
    tiny = tiny_config()
    plan = make_plan(tiny)
    steps = gpu_budget.distinct_steps([(tiny, plan)], stacked=(2,), evaluation=True)
    assert not any(map(cost.is_eval_key, gpu_budget.distinct_steps([(tiny, plan)])))
    expected = {cost.eval_key(r) + s for r in cost.tabled_runs(plan).values() if r.task == "classification" for s in ("", "/stacked2")}
    assert {k for k in steps if cost.is_eval_key(k)} == expected
    key = next(k for k in steps if cost.is_eval_key(k) and "/stacked" not in k)
    config_of, measured_run = steps[key]
    calls = []
    for name in ("evaluate", "evaluate_stacked"):
        real = getattr(classification, name)
        monkeypatch.setattr(classification, name, lambda model, x, y, *a, _real=real, _name=name: calls.append((_name, len(y), a[2]))
                            or _real(model, x, y, *a))
    assert gpu_budget.measure_step_ms(config_of, measured_run, "cpu", warmup=0, steps=1, key=key) > 0
    assert gpu_budget.measure_step_ms(config_of, measured_run, "cpu", warmup=0, steps=1, key=key + "/stacked2") > 0
    size = classification.eval_batch_size(json.loads(measured_run.recipe_json)["batch_size"])
    assert calls == [("evaluate", size, size), ("evaluate_stacked", size, size)]


def test_the_write_bandwidth_is_the_bytes_over_the_median_write_and_an_assumed_all_reduce_names_its_source(tmp_path, monkeypatch,
                                                                                                           capsys):
    import itertools

    gpu_budget = _gpu_budget()
    clock = itertools.chain([0.0, 0.5, 1.0, 1.25, 2.0, 3.0])  # writes of 0.5, 0.25 and 1.0 s: the median 0.5
    monkeypatch.setattr(gpu_budget.time, "perf_counter", lambda: next(clock))
    assert gpu_budget.measure_write_gb_s(tmp_path, megabytes=8) == pytest.approx(8 * 2**20 / 1e9 / 0.5)
    monkeypatch.undo()
    with pytest.raises(SystemExit):  # argparse's error, before anything is measured: a bandwidth without its source
        gpu_budget.main(["--config", tiny_config_file(tmp_path), "--device", "cpu", "--allreduce-gb-s", "100"])
    assert "--allreduce-gb-s needs --allreduce-source" in capsys.readouterr().err


def test_a_runs_warm_up_is_its_first_steps_beyond_its_step_time_and_a_jobs_start_its_launcher_and_ranks(monkeypatch):
    """Warm-up steps of 1.0 and 0.3 s against timed steps of median 0.1 s: 1.1 s beyond them (none
    below 0). A job's start, per number of GPUs it holds: the median of 3 `resrepro launch --gpus G
    -- devices` (the launcher, its ranks, their devices), started afresh (never a preload server's
    fork); on the CPU with no GPU visible, on a GPU machine only up to the GPUs it has."""
    import itertools
    import subprocess

    import torch

    from resrepro import devices
    from resrepro.preload import SOCKET_ENV

    gpu_budget = _gpu_budget()
    assert gpu_budget.warmup_excess_s([1.0, 0.3], [0.1, 0.2, 0.1]) == pytest.approx(1.1)
    assert gpu_budget.warmup_excess_s([0.05], [0.1, 0.1]) == 0.0 and gpu_budget.warmup_excess_s([], [0.1]) == 0.0
    started = []
    monkeypatch.setattr(subprocess, "run", lambda argv, env, **kw: started.append((argv[1:], env)))
    monkeypatch.setenv(SOCKET_ENV, "/tmp/a-preload-server")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    clock = itertools.chain([0.0, 3.0, 10.0, 14.0, 20.0, 25.0], [0.0, 8.0, 10.0, 19.0, 20.0, 30.0])  # 3, 4, 5 s; 8, 9, 10 s
    monkeypatch.setattr(gpu_budget.time, "perf_counter", lambda: next(clock))
    assert gpu_budget.measure_job_start_s("cpu", [0, 2]) == {0: pytest.approx(4.0), 2: pytest.approx(9.0)}
    assert [argv for argv, _ in started] == [["-m", "resrepro.cli", "launch", "--gpus", "0", "--", "devices"]] * 3 + \
        [["-m", "resrepro.cli", "launch", "--gpus", "2", "--", "devices"]] * 3
    assert all(env["CUDA_VISIBLE_DEVICES"] == "" and SOCKET_ENV not in env for _, env in started)
    started.clear()
    clock = itertools.chain([0.0, 5.0] * 3)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert gpu_budget.measure_job_start_s("cuda", [1, 4]) == {1: pytest.approx(5.0)}  # 4 GPUs: not on this machine
    assert all(argv[4] == "1" and "CUDA_VISIBLE_DEVICES" not in env for argv, env in started) and len(started) == 3
    monkeypatch.setattr(devices, "_INDEX", 0)  # this process took cuda:0 from the pool: a launch would wait for it forever
    with pytest.raises(RuntimeError, match="measured before this process takes a GPU"):
        gpu_budget.measure_job_start_s("cuda", [1])


def test_a_runs_setup_is_its_models_build_and_its_warm_up_beyond_its_steps(monkeypatch):
    """A training key: its model takes 2 s to build, its 2 warm-up steps 0.5 s each and its 3
    timed steps 0.1 s: a setup of 2 + 2 x (0.5 - 0.1) = 2.8 s. A dev loss uses the model its run
    built: only its warm-up beyond its passes counts (0.8 s)."""
    gpu_budget = _gpu_budget()
    config = tiny_config()
    plan = make_plan(config)
    run = next(r for r in cost.tabled_runs(plan).values() if r.task == "classification")
    now = [0.0]
    durations = iter([0.5, 0.5, 0.1, 0.1, 0.1] * 2)

    def step():
        now[0] += next(durations)

    def built(*args, **kwargs):
        now[0] += 2.0
        return step

    monkeypatch.setattr(gpu_budget.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(gpu_budget, "training_step", built)
    monkeypatch.setattr(gpu_budget, "evaluation_batch", built)
    assert gpu_budget.measure_step(config, run, "cpu", warmup=2, steps=3, key=cost.step_key(run)) == \
        (pytest.approx(100.0), pytest.approx(2.8))
    assert gpu_budget.measure_step(config, run, "cpu", warmup=2, steps=3, key=cost.eval_key(run))[1] == pytest.approx(0.8)


def test_the_write_timed_is_the_scales_largest_checkpoint_file(tmp_path, monkeypatch):
    """A run's last.pt is its weights times disk.yaml's copies for its task: with a translation
    model of 10 MiB in 2 copies, a captioner of 4 MiB in 3 and a classifier of 1 MiB in 3, the
    largest file is 20 MiB."""
    from resrepro.analysis import disk

    gpu_budget = _gpu_budget()
    (tmp_path / "disk.yaml").write_text(yaml.safe_dump({"source": "a test", "copies": {
        "classification/last": 3.0, "translation/last": 2.0, "captioning/last": 3.0}}))
    config = {**tiny_config(), "gpu_costs": {"disk": str(tmp_path / "disk.yaml")}}
    mib = {"classification": 1, "translation": 10, "captioning": 4}
    monkeypatch.setattr(disk, "weight_bytes", lambda run, config: mib[run.task] * 2**20)
    assert gpu_budget.largest_checkpoint_mb([(config, make_plan(config))]) == 20
    mib["captioning"] = 7  # 21 MiB
    assert gpu_budget.largest_checkpoint_mb([(config, make_plan(config))]) == 21


def test_a_jobs_start_is_read_by_the_gpus_it_holds():
    """Measured on the CPU and on 1 and 2 GPUs: a job takes its own; on 4 GPUs, the most measured
    below (2); a file without starts, none. The report names each start, and a scale's jobs on
    more GPUs than measured."""
    times = {"job_start_s": {0: 2.0, 1: 5.0, 2: 8.0}}
    assert [cost.job_start_s(times, gpus) for gpus in (0, 1, 2, 4)] == [2.0, 5.0, 8.0, 8.0]
    assert cost.job_start_s({"job_start_s": {1: 5.0}}, 0) == 5.0 and cost.job_start_s({}, 1) is None
    assert cost.job_start_s({"job_start_s": {1: 5.0, 4: 9.0}}, 2) == 5.0
    counts, _ = cost.counted_text({**times, "step_ms": {}}, None, multi_gpu=True, job_gpus=frozenset({1, 4, 8}))
    assert counts == ("training steps; each job's start (its launcher and ranks importing torch and starting their devices: "
                      "the CPU 2 s, 1 GPU 5 s, 2 GPUs 8 s; a job on 4 GPUs as on 2 GPUs, a job on 8 GPUs as on 2 GPUs: not measured)")
    counts, _ = cost.counted_text({"job_start_s": {1: 5.0, 4: 9.0}, "step_ms": {}}, None, multi_gpu=True, job_gpus=frozenset({0, 2, 4}))
    assert counts.endswith("1 GPU 5 s, 4 GPUs 9 s; a job on the CPU as on 1 GPU, a job on 2 GPUs as on 1 GPU: not measured)")


def test_a_step_times_file_gives_a_jobs_start_by_its_gpus(tmp_path):
    """job_start_s maps the GPUs a job holds to seconds; one number (which GPUs?) is refused."""
    times = {"device": "GPU X", "basis": "measured", "commit": "abc1234", "date": "2026-11-29", "source": "a test", "step_ms": {}}
    path = tmp_path / "times.yaml"
    path.write_text(yaml.safe_dump({**times, "job_start_s": {0: 2.5, 4: 9.0}}))
    assert cost.load_step_times(path)["job_start_s"] == {0: 2.5, 4: 9.0}
    for wrong in (2.5, {"one": 2.5}, {-1: 2.5}):
        path.write_text(yaml.safe_dump({**times, "job_start_s": wrong}))
        with pytest.raises(ConfigError, match="job_start_s must give a job's start in seconds by the GPUs it holds"):
            cost.load_step_times(path)


def test_the_budget_times_steps_on_data_shaped_as_the_prepared_data_the_runs_train_on(tmp_path):
    """Without a data folder, the real datasets' shapes; with one, each task's from its prepared
    files: digits' 1 x 8 x 8 images and 10 classes; a corpus's 6 pieces and sentences of (3 + 5 +
    4 + 4) / 4 = 4 tokens; a caption set's 7 words, 16 regions of 50 values and captions of
    (2 + 4) / 2 = 3 words. A step on digits-shaped data trains a one-channel net."""
    import json

    import numpy as np
    import torch

    from resrepro.data.images import save_prepared

    gpu_budget = _gpu_budget()
    assert gpu_budget.real_data(run(dataset="cifar100")) == gpu_budget.StepData(classes=100)
    assert gpu_budget.real_data(run("captioning", "mscoco", "captioner_paper", "paper", "sas")) == gpu_budget.StepData(vocab=9_571, length=12)
    save_prepared(tmp_path / "digits.pt", train_x=torch.zeros(6, 1, 8, 8, dtype=torch.uint8), train_y=torch.arange(6) % 3,
                  test_x=torch.zeros(2, 1, 8, 8, dtype=torch.uint8), test_y=torch.arange(2), classes=list("abc"), name="digits", source="a test")
    assert gpu_budget.prepared_data(run(dataset="digits"), tmp_path) == gpu_budget.StepData(image=(1, 8, 8), classes=3)
    corpus = tmp_path / "synthetic"
    corpus.mkdir()
    (corpus / "subword.vocab").write_text("".join(f"piece{i}\t0\n" for i in range(6)))
    np.save(corpus / "train.src.offsets.npy", np.array([0, 3, 8]))
    np.save(corpus / "train.tgt.offsets.npy", np.array([10, 14, 18]))
    text = run("translation", "synthetic", "transformer_mini", "mini", "add")
    assert gpu_budget.prepared_data(text, tmp_path) == gpu_budget.StepData(vocab=6, length=4)
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    (scenes / "prepared.json").write_text(json.dumps({"vocab_size": 7}))
    np.save(scenes / "train.features.npy", np.zeros((2, 16, 50), dtype=np.float32))
    (scenes / "train.captions.json").write_text(json.dumps([{"id": "a", "captions": ["a ball"]}, {"id": "b", "captions": ["a red ball here"]}]))
    caption = run("captioning", "scenes", "captioner_mini", "mini", "add")
    assert gpu_budget.prepared_data(caption, tmp_path) == gpu_budget.StepData(vocab=7, length=3, regions=16, feature_dim=50)

    config = tiny_config()
    digits = next(r for r in cost.tabled_runs(make_plan(config)).values() if r.task == "classification" and r.dataset == "digits")
    built = []
    real = gpu_budget.classifier
    gpu_budget.classifier = lambda spec, device, speed, data: built.append(data.image) or real(spec, device, speed, data)
    try:
        assert gpu_budget.measure_step_ms(config, digits, "cpu", warmup=0, steps=1, key=cost.step_key(digits), data_dir=tmp_path) > 0
    finally:
        gpu_budget.classifier = real
    assert built == [(1, 8, 8)]


def test_the_budget_times_a_translation_runs_dev_loss_with_the_loops_dev_loss(monkeypatch):
    """A translation run's dev-loss key is measured (with evaluation) by the loop's own dev_loss
    over that many random pairs."""
    from resrepro.train import translation

    gpu_budget = _gpu_budget()
    config = {**tiny_config(), "translation": {**tiny_config()["translation"], "dev_sentences": 8}}
    runs = [r for r in cost.tabled_runs(make_plan(config)).values() if r.task == "translation"]
    keys = gpu_budget.distinct_steps([(config, make_plan(config))], evaluation=True)
    assert {cost.dev_key(r) for r in runs} <= set(keys) and not any("/dev" in k for k in gpu_budget.distinct_steps([(config, make_plan(config))]))
    passes = []
    real = translation.dev_loss
    monkeypatch.setattr(translation, "dev_loss", lambda model, data, *a: passes.append(len(data.lengths)) or real(model, data, *a))
    assert gpu_budget.measure_step_ms(config, runs[0], "cpu", warmup=3, steps=10, key=cost.dev_key(runs[0])) > 0
    assert passes == [8] * 3  # a pass is many batches: one untimed, two timed


def test_the_session_commit_comes_from_resrepro_commit_where_the_code_has_no_git(monkeypatch):
    gpu_budget = _gpu_budget()
    monkeypatch.setenv("RESREPRO_COMMIT", "abc1234")
    assert gpu_budget.git_commit() == "abc1234"
    monkeypatch.delenv("RESREPRO_COMMIT")
    assert gpu_budget.git_commit() not in ("", "abc1234")


def _gpu_budget():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gpu_budget

    return gpu_budget


def test_the_budget_remeasures_only_the_chosen_keys_and_keeps_the_rest(tmp_path, monkeypatch):
    """`--keys`: after a change to one variant, its steps are measured again on the same device and
    every other step time of the file stays; the source says what was re-measured."""


    gpu_budget = _gpu_budget()
    config = tiny_config()
    keys = list(gpu_budget.distinct_steps([(config, make_plan(config))], evaluation=True))
    out = tmp_path / "times.yaml"
    session = {"commit": gpu_budget.git_commit(), "date": datetime.date.today().isoformat()}
    out.write_text(yaml.safe_dump({"device": gpu_budget.device_label("cpu"), "basis": "measured", **session, "source": "measured before",
                                   "warmup_s": {keys[0]: 9.0}, "step_ms": {k: 1e6 for k in keys}}, sort_keys=False))
    monkeypatch.setattr(gpu_budget, "measure_job_start_s", lambda device, gpus: dict.fromkeys(gpus, 2.5))
    gpu_budget.main(["--config", tiny_config_file(tmp_path), "--device", "cpu", "--warmup", "0", "--steps", "1",
                     "--keys", "*/sas-gatesingle/*", "--out", str(out), "--write-dir", str(tmp_path / "disk"), "--write-mb", "8"])
    times = cost.load_step_times(out)
    assert times["checkpoint_write_gb_s"] > 0 and not list((tmp_path / "disk").iterdir())  # timed, and its files gone
    changed = [k for k in keys if times["step_ms"][k] != 1e6]
    assert changed == ["classification/preact_resnet8/sas-gatesingle/batch256", "classification/preact_resnet8/sas-gatesingle/eval1024"]
    assert all(0 < times["step_ms"][k] < 1e6 for k in changed)
    assert list(times["warmup_s"]) == [keys[0], changed[0]] and times["warmup_s"][keys[0]] == 9.0  # the others' kept; no evaluation's
    assert list(times["step_ms"]) == keys  # the file's order kept
    assert times["source"].startswith("measured before; steps matching */sas-gatesingle/* re-measured ")
    assert (times["commit"], times["date"]) == (session["commit"], session["date"])
    out.write_text(yaml.safe_dump({**times, "checkpoint_write_gb_s": 0.5, "job_start_s": {0: 3.0}}))

    def measured_again(*args):
        raise AssertionError("the session's file has this machine figure")

    monkeypatch.setattr(gpu_budget, "measure_write_gb_s", measured_again)
    monkeypatch.setattr(gpu_budget, "measure_job_start_s", lambda device, gpus: measured_again() if gpus else {})
    gpu_budget.main(["--config", tiny_config_file(tmp_path), "--device", "cpu", "--warmup", "0", "--steps", "1",
                     "--keys", "*/sas-gatesingle/*", "--out", str(out)])
    again = cost.load_step_times(out)
    assert (again["checkpoint_write_gb_s"], again["job_start_s"]) == (0.5, {0: 3.0})


def test_a_budget_stopped_midway_leaves_the_keys_it_measured_said_partial(tmp_path, monkeypatch):
    """A GPU session stops a check at its time limit: the file written after each key holds those
    measured until then, and its source says how many of how many."""

    gpu_budget = _gpu_budget()
    measured = []

    def measure(config, run, device, warmup, steps, key, data_dir):
        if len(measured) == 2:
            raise KeyboardInterrupt  # stands for the session's kill
        measured.append(key)
        return 5.0, 0.0

    monkeypatch.setattr(gpu_budget, "measure_step", measure)
    monkeypatch.setattr(gpu_budget, "measure_write_gb_s", lambda directory, megabytes: 1.5)
    monkeypatch.setattr(gpu_budget, "largest_checkpoint_mb", lambda configs_and_plans: 8)
    monkeypatch.setattr(gpu_budget, "measure_job_start_s", lambda device, gpus: dict.fromkeys(gpus, 2.5))
    out = tmp_path / "times.yaml"
    with pytest.raises(KeyboardInterrupt):
        gpu_budget.main(["--config", tiny_config_file(tmp_path), "--device", "cpu", "--out", str(out)])
    times = yaml.safe_load(out.read_text())
    total = len(gpu_budget.distinct_steps([cost.load_scale(tiny_config_file(tmp_path))], evaluation=True))
    assert times["step_ms"] == {measured[0]: 5.0, measured[1]: 5.0} and times["checkpoint_write_gb_s"] == 1.5
    assert times["source"].endswith(f"(partial: 2 of {total} keys measured)") and not list(tmp_path.glob("*.tmp"))


def test_the_budget_refuses_to_mix_devices_or_to_match_nothing(tmp_path):

    gpu_budget = _gpu_budget()
    out = tmp_path / "times.yaml"
    out.write_text(yaml.safe_dump({"device": "NVIDIA H100 80GB HBM3", "basis": "measured", "source": "s", "step_ms": {"a/b/c/d": 1.0}}))
    with pytest.raises(SystemExit, match="file measured on this device"):
        gpu_budget.main(["--config", tiny_config_file(tmp_path), "--device", "cpu", "--warmup", "0", "--steps", "1",
                         "--keys", "*/sas-gatesingle/*", "--out", str(out)])
    with pytest.raises(SystemExit, match="matches none"):
        gpu_budget.chosen_steps({"classification/x/add/batch1": None}, ["*/sas*"])
    assert list(gpu_budget.chosen_steps({"a/sas": 1, "a/add": 2, "a/hw": 3}, ["*/sas*", "*/hw"])) == ["a/sas", "a/hw"]
    here = {"device": "CPU", "basis": "measured", "commit": "abc1234", "date": "2026-11-27", "source": "measured now", "step_ms": {"a": 2.0}}
    with pytest.raises(SystemExit, match="estimate times"):
        gpu_budget.merge_measured({**here, "basis": "estimate", "step_ms": {"a": 1.0}}, here, ["a"])
    for other_session in ({"commit": "fed4321"}, {"date": "2026-11-26"}):  # the same machine, another commit or day
        with pytest.raises(SystemExit, match="measure every step again"):
            gpu_budget.merge_measured({**here, **other_session, "step_ms": {"a": 1.0}}, here, ["a"])
    assert gpu_budget.merge_measured({**here, "step_ms": {"a": 1.0, "b": 3.0}}, here, ["a"])["step_ms"] == {"a": 2.0, "b": 3.0}
    assert list(gpu_budget.chosen_steps({"a/sas": 1, "a/add": 2}, None)) == ["a/sas", "a/add"]
    with pytest.raises(SystemExit):  # --keys without a file to update
        gpu_budget.main(["--config", tiny_config_file(tmp_path), "--device", "cpu", "--keys", "*"])


def test_the_gpu_day_fit_finds_the_most_cifar_epochs_whose_hours_fit_the_day():
    """benchmarks/gpu_day_fit.py: CIFAR at E epochs keeps the papers' milestones at their fractions
    (81 and 122 of 164: 6 and 9 of 12); the scale's hours grow by each CIFAR run's steps per epoch
    (ceil(50,000 / 128) = 391 at 1 ms each here); the bisection returns the most epochs within the
    budget, or one fewer than it started from when none fits."""
    import sys
    from pathlib import Path


    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gpu_budget
    import gpu_day_fit


    with open("tests/fixtures/config/gpu-day.yaml") as f:
        config = yaml.safe_load(f)
    assert gpu_day_fit.at_epochs(config, 12)["classification"]["lr_milestones"] == [6, 9] == config["classification"]["lr_milestones"]
    assert gpu_day_fit.at_epochs(config, 164)["classification"]["lr_milestones"] == [81, 122]
    assert config["classification"]["epochs"] == 12  # a copy: the config itself is untouched
    steps = gpu_budget.distinct_steps([(config, make_plan(config))])
    times = {"device": "GPU X", "basis": "measured", "commit": "abc1234", "date": "2026-11-29", "source": "a test",
             "step_ms": {key: 1.0 for key in steps}}
    cifar_runs = sum(run.task == "classification" for run in cost.tabled_runs(make_plan(config)).values())
    at12, at20 = (gpu_day_fit.total_hours(gpu_day_fit.at_epochs(config, e), times) for e in (12, 20))
    assert at20 - at12 == pytest.approx(8 * cifar_runs * 391 * 1.0 / 3.6e6)
    best, totals = gpu_day_fit.most_epochs(config, times, at20, 12, 24)
    assert best == 20 and totals[20] == pytest.approx(at20) and all(totals[e] > at20 for e in totals if e > 20)
    assert gpu_day_fit.most_epochs(config, times, at12 * 0.99, 12, 24)[0] == 11
