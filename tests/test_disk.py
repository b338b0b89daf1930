"""analysis/disk.py: the disk a scale's runs keep, and benchmarks/disk_use.py, which measures it."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from fake_runs import CONFIG

from resrepro.analysis import disk
from resrepro.analysis.cost import load_scale
from resrepro.catalog import ConfigError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import disk_use  # noqa: E402

COPIES = {"classification/last": 2.0, "classification/snapshot": 1.0, "translation/step": 1.0, "translation/last": 3.0,
          "translation/averaged": 1.0, "captioning/step": 1.0, "captioning/last": 3.0, "captioning/averaged": 1.0, "captioning/scst": 3.0}


@pytest.fixture(scope="module")
def paper():
    return load_scale(f"{CONFIG}/paper.yaml")


def a_run(plan, **match):
    return next(run for run in plan.runs.values() if all(getattr(run, k) == v for k, v in match.items()))


def test_what_each_task_keeps(paper):
    _, plan = paper
    classifier = next(r for r in plan.runs.values() if r.task == "classification" and json.loads(r.recipe_json).get("snapshots") == 4)
    assert json.loads(classifier.recipe_json)["epochs"] == 200  # paper 002's: snapshots at epochs 0, 50, 100, 150, 200
    assert disk.kept_files(classifier) == {"last": 1, "snapshot": 6}  # and the weights after the first step
    big = a_run(plan, task="translation", size="big", dataset="wmt14_en_de")  # rskip-t7: the last 20 averaged
    assert disk.kept_files(big) == {"step": 20, "last": 1, "averaged": 1}
    captioner = a_run(plan, task="captioning")
    assert disk.kept_files(captioner) == {"step": 1, "last": 1, "averaged": 1, "scst": 1}
    unrefined = replace(captioner, recipe_json=json.dumps({**json.loads(captioner.recipe_json), "scst": None}))
    assert "scst" not in disk.kept_files(unrefined)


def test_what_each_task_writes_while_it_trains(paper):
    """Not what it keeps: every last.pt it overwrites, each checkpoint's step file averaging reads,
    and the self-critical stage's checkpoints."""
    _, plan = paper
    classifier = next(r for r in plan.runs.values() if r.task == "classification" and json.loads(r.recipe_json).get("snapshots") == 4)
    assert disk.written_files(classifier) == {"last": 200, "snapshot": 6}
    big = a_run(plan, task="translation", size="big", dataset="wmt14_en_de")  # 550,000 updates, a checkpoint every 1,000
    assert disk.written_files(big) == {"step": 20, "last": 550}
    # checkpoints 250 s apart: a resume point (last.pt) at every 3rd of the 550 (10 minutes), and the last
    assert disk.written_files(big, checkpoint_s=250.0) == {"step": 20, "last": 184}
    captioner = a_run(plan, task="captioning")  # 226,000 updates, one checkpoint every 11,300; self-critical 67,950 every 2,265
    assert disk.written_files(captioner) == {"step": 1 + 30, "last": 20, "scst": 30}
    uneven = replace(big, recipe_json=json.dumps({**json.loads(big.recipe_json), "max_updates": 2500, "keep_checkpoints": 5}))
    assert disk.written_files(uneven) == {"step": 3, "last": 3}  # at 1,000, 2,000 and the last, 2,500


def test_a_runs_bytes_are_its_files_copies_of_its_weights(paper):
    from resrepro import models

    config, plan = paper
    resnet = a_run(plan, task="classification", arch_dir="preact_resnet110", variant="add", dataset="cifar10", recipe="default")
    parameters = models.parameters_of({"arch": "preact_resnet", "depth": 110, "variant": "add", "args": {}, "classes": 10, "in_channels": 3})
    assert 1_700_000 < parameters < 1_750_000  # He et al. (2016) Table 6: 1.7M
    assert disk.weight_bytes(resnet, config) == 4 * parameters
    snapshots = disk.kept_files(resnet)["snapshot"]
    assert disk.run_bytes(resnet, config, COPIES) == pytest.approx((2.0 + snapshots) * 4 * parameters)


def test_a_float64_run_counts_8_bytes_a_parameter(paper):
    config, plan = paper
    run = next(r for r in plan.runs.values() if r.task == "classification" and json.loads(r.recipe_json).get("dtype") == "float64")
    as_float32 = replace(run, recipe_json=json.dumps({**json.loads(run.recipe_json), "dtype": "float32"}))
    assert disk.weight_bytes(run, config) == 2 * disk.weight_bytes(as_float32, config)


def test_the_big_transformers_weights_and_files(paper):
    config, plan = paper
    big = a_run(plan, task="translation", size="big", dataset="wmt14_en_de")
    weights = disk.weight_bytes(big, config)
    assert 200e6 * 4 < weights < 230e6 * 4  # Vaswani et al. (2017): 213M parameters
    assert disk.run_bytes(big, config, COPIES) == pytest.approx((20 + 3 + 1) * weights)


def test_an_unmeasured_kind_is_refused(paper):
    config, plan = paper
    with pytest.raises(ConfigError, match="no measured size for 'translation/averaged'"):
        disk.run_bytes(a_run(plan, task="translation"), config, {k: v for k, v in COPIES.items() if k != "translation/averaged"})


def test_the_coco_grid_features_and_their_peak(paper):
    config, _ = paper
    features, peak = disk.coco_feature_bytes(config)
    per_image = 7 * 7 * 2050 * 2  # 224 / 32 = 7; ResNet-101's 2,048 channels and the centre's 2; float16
    assert features == 123_287 * per_image == 24_768_358_300
    assert peak == (123_287 + 113_287) * per_image  # the training split written a second time
    bottom_up = {**config, "captioning": {**config["captioning"], "features": {"kind": "bottom_up"}}}
    with pytest.raises(ConfigError, match="only grid features"):
        disk.coco_feature_bytes(bottom_up)


def test_a_scales_tables_total_and_peak(paper):
    config, plan = paper
    sizes = disk.scale_disk(plan, config, COPIES)
    runs = {path: disk.run_bytes(run, config, COPIES) for path, run in plan.runs.items()}
    t7 = {r for row in plan.rows if row["table"] == "rskip-t7" for r in row["runs"]}
    assert sizes["rskip-t7"] == pytest.approx(sum(runs[r] for r in t7))
    assert sizes["total"] == pytest.approx(sum(runs.values()) + sizes["features"])
    assert sizes["peak"] - sizes["total"] == pytest.approx(113_287 * 7 * 7 * 2050 * 2)
    assert 1.0e12 < sizes["total"] < 1.6e12  # the "about 1.25 TB" of translation checkpoints, and the rest


def test_a_scale_without_mscoco_has_no_features():
    config, plan = load_scale(f"{CONFIG}/mini.yaml")
    sizes = disk.scale_disk(plan, config, COPIES)
    assert sizes["features"] == 0 and sizes["peak"] == sizes["total"]


@pytest.mark.config
def test_the_copies_file_in_the_repository_is_measured_and_complete():
    copies = disk.load_copies(ROOT / "config" / "costs" / "disk.yaml")
    assert "measured on results/rehearsal" in copies["source"]
    assert set(copies["copies"]) == {f"{task}/{kind}" for task, kinds in disk.KINDS.items() for kind in kinds}
    # the weights once (step, averaged, snapshot), with Adam's moments, with SGD's momentum; a classifier's
    # files hold its batch norms' running statistics too, which are not parameters (a few percent more)
    for key, expected in {"translation/step": 1, "translation/averaged": 1, "translation/last": 3, "captioning/scst": 3}.items():
        assert copies["copies"][key] == pytest.approx(expected, abs=0.005), key
    assert 2 <= copies["copies"]["classification/last"] < 2.1 and 1 <= copies["copies"]["classification/snapshot"] < 1.1


def test_disk_use_measures_copies_of_the_weights_per_kind(tmp_path):
    run = tmp_path / "translation" / "d" / "a" / "r" / "v" / "seed0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"parameters": 2_000_000, "spec": {}}))
    for name, size in {"checkpoints/step10.pt": 8_000_000, "checkpoints/step20.pt": 8_100_000, "checkpoints/last.pt": 24_000_000,
                       "averaged.pt": 8_000_000, "train.log": 5}.items():
        (run / name).write_bytes(b"\0" * size)
    small = tmp_path / "classification" / "d" / "a" / "r" / "v" / "seed0"
    (small / "checkpoints").mkdir(parents=True)
    (small / "metrics.json").write_text(json.dumps({"parameters": 10, "spec": {"dtype": "float64"}}))
    (small / "checkpoints" / "last.pt").write_bytes(b"\0" * 4000)
    copies = disk_use.measure(tmp_path, min_parameters=1_000_000)
    assert {k: sorted(v) for k, v in copies.items()} == {"translation/step": [1.0, 1.0125], "translation/last": [3.0], "translation/averaged": [1.0]}
    assert disk_use.measure(tmp_path, min_parameters=1)["classification/last"] == [4000 / 80]  # float64: 8 bytes a parameter


@pytest.mark.config
def test_gpu_hours_csv_holds_each_tables_disk_then_the_features_and_the_peak(tmp_path):
    import pandas as pd

    from resrepro import cli

    out = tmp_path / "gpu_hours.csv"
    cli.main(["gpu-hours", "--scales", "config/gpu-day.yaml", "--step-times", "config/costs/h100.yaml",
              "--disk", "config/costs/disk.yaml", "--out", str(out)])
    frame = pd.read_csv(out)
    assert list(frame["table"])[-3:] == ["total", "features", "peak"] and frame["disk_gb"].notna().all()
    config, plan = load_scale("config/gpu-day.yaml")
    expected = disk.scale_disk(plan, config, disk.load_copies("config/costs/disk.yaml")["copies"])
    assert frame.set_index("table")["disk_gb"].to_dict() == pytest.approx({k: v / 1e9 for k, v in expected.items()})


@pytest.mark.config
def test_gpu_hours_csv_is_the_same_to_the_last_digit_whatever_the_hash_seed(tmp_path):
    """A table's GPU-hours and disk sum its runs, a set of them: summed in the set's order, which
    Python's string hashing changes from process to process, the last digits moved between two
    runs of the same commit. The sums are exact now (math.fsum), so the file is the same."""
    import os
    import subprocess
    import sys

    outs = []
    for seed in ("1", "2", "3"):
        out = tmp_path / f"gpu_hours{seed}.csv"
        code = ("from resrepro import cli; cli.main(['gpu-hours', '--scales', 'config/gpu-day.yaml', '--step-times', "
                f"'config/costs/h100.yaml', '--disk', 'config/costs/disk.yaml', '--out', {str(out)!r}])")
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, check=True, capture_output=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_a_scales_copies_come_from_its_own_disk_file(tmp_path):
    """`gpu_costs.disk` names the scale's file of copies; the benchmarks read it through copies_of."""
    import yaml

    (tmp_path / "disk.yaml").write_text(yaml.safe_dump({"source": "a test", "copies": {"translation/last": 3.0}}))
    assert disk.copies_of({"gpu_costs": {"disk": str(tmp_path / "disk.yaml")}}) == {"translation/last": 3.0}
