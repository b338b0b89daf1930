"""benchmarks/pipeline_time.py reads a run right: per-job rule, output and benchmark file from the
Snakemake log (Snakemake 9 prints a job's benchmark after its jobid), each job's seconds from its benchmark file, training-loop seconds from its runs."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from pipeline_time import by_table, jobs_of, memory, run_loop_seconds, table, with_benchmarks  # noqa: E402

LOG = """\
Building DAG of jobs...
[Mon Nov 23 05:38:35 2026]
localrule prepare_digits:
    output: results/data/digits.pt
    log: results/data/digits.log
    jobid: 12
    resources: tmpdir=/tmp
[Mon Nov 23 05:38:36 2026]
rule train_classifier:
    input: results/data/digits.pt
    output: results/mini/a/seeds0-1/trained.json
    log: results/mini/a/seeds0-1/train.log
    jobid: 3
    benchmark: results/mini/a/seeds0-1/train.benchmark.tsv
    reason: Missing output files: results/mini/a/seeds0-1/trained.json
    resources: tmpdir=/tmp, gpu=0, runtime=30, mem_mb=2000, mem=2 GB, mem_mib=1908
[Mon Nov 23 05:38:43 2026]
Finished jobid: 12 (Rule: prepare_digits)
1 of 3 steps (33%) done
[Mon Nov 23 05:39:06 2026]
Finished jobid: 3 (Rule: train_classifier)
[Mon Nov 23 05:39:07 2026]
localrule report:
    output: report/mini/index.html
    jobid: 0
"""
BENCHMARK = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n29.2500\t0:00:29\t512.1\t900.0\t500.0\t505.0\t0.1\t2.0\t95.0\t27.75\n"


def test_finished_jobs_with_their_rule_output_benchmark_and_seconds():
    jobs = sorted(jobs_of(LOG), key=lambda j: j["seconds"])
    assert [(j["rule"], j["output"], j["benchmark"], j["seconds"]) for j in jobs] == [
        ("prepare_digits", "results/data/digits.pt", None, 8.0),
        ("train_classifier", "results/mini/a/seeds0-1/trained.json", "results/mini/a/seeds0-1/train.benchmark.tsv", 30.0),
    ]  # the report never finished: not counted


def test_seconds_come_from_the_benchmark_file_and_the_loop_from_the_runs(tmp_path):
    job = tmp_path / "results/mini/a/seeds0-1"
    job.mkdir(parents=True)
    (job / "train.benchmark.tsv").write_text(BENCHMARK)
    (job / "trained.json").write_text(json.dumps({"seeds": [0, 1]}))
    for seed, loop in ((0, 10.5), (1, 12.0)):
        (tmp_path / f"results/mini/a/seed{seed}").mkdir()
        (tmp_path / f"results/mini/a/seed{seed}/metrics.json").write_text(json.dumps({"wall_time_s": loop}))
    jobs = with_benchmarks(jobs_of(LOG), tmp_path)
    rows = {r["rule"]: r for r in table(jobs, tmp_path)}
    assert (rows["train_classifier"]["sum"], rows["train_classifier"]["cpu"], rows["train_classifier"]["loop"]) == (29.25, 27.75, 22.5)
    assert rows["train_classifier"]["measured"] == 1
    assert (rows["prepare_digits"]["sum"], rows["prepare_digits"]["cpu"], rows["prepare_digits"]["measured"]) == (8.0, None, 0)
    assert [r["rule"] for r in table(jobs, tmp_path)] == ["train_classifier", "prepare_digits"]  # slowest first


def test_a_forked_jobs_cpu_adds_what_its_log_says_its_child_used(tmp_path):
    """A job forked from the preload server: Snakemake's benchmark sees only the waiting process."""
    from resrepro.preload import CHILD_USAGE

    job = tmp_path / "results/mini/a/seeds0-1"
    job.mkdir(parents=True)
    (job / "train.benchmark.tsv").write_text(BENCHMARK.replace("\t27.75\n", "\t0.05\n"))
    (job / "train.log").write_text(f"launch: the CPU only\npreload: running in pid 12\n{CHILD_USAGE} 31.20 s of CPU, 420 MB at most\n")
    jobs = with_benchmarks(jobs_of(LOG), tmp_path)
    trained = next(j for j in jobs if j["rule"] == "train_classifier")
    assert trained["forked"] and abs(trained["cpu"] - 31.25) < 1e-9
    assert not next(j for j in jobs if j["rule"] == "prepare_digits")["forked"]


def test_each_rules_peak_memory_beside_what_it_asked_for(tmp_path):
    """A forked job's peak is its command's (its log), another's the benchmark's max_rss: the
    figures a scale's mem_mb are set from."""
    from resrepro.preload import CHILD_USAGE

    job = tmp_path / "results/mini/a/seeds0-1"
    job.mkdir(parents=True)
    (job / "train.benchmark.tsv").write_text(BENCHMARK)
    assert memory(with_benchmarks(jobs_of(LOG), tmp_path)) == [
        {"rule": "train_classifier", "peak_mb": 512.1, "asked_mb": 2000, "job": "results/mini/a/seeds0-1/trained.json"}]
    (job / "train.log").write_text(f"{CHILD_USAGE} 31.20 s of CPU, 2420 MB at most\n")
    assert memory(with_benchmarks(jobs_of(LOG), tmp_path))[0]["peak_mb"] == 2420.0


def test_a_runs_loop_seconds_split_evenly_among_the_tables_that_name_it(tmp_path):
    plan_rows = [{"table": "t1", "runs": ["a/seed0", "shared/seed0"]}, {"table": "t1", "runs": ["a/seed0"]},
                 {"table": "t2", "runs": ["shared/seed0"]}]
    loops = {"a/seed0": 10.0, "shared/seed0": 6.0, "figure/seed0": 4.0}
    assert by_table(plan_rows, loops) == {"t1": 13.0, "t2": 3.0, "(figures only)": 4.0}
    run = tmp_path / "classification" / "digits" / "net" / "default" / "add" / "seed1"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"wall_time_s": 2.5}))
    assert run_loop_seconds(tmp_path) == {"classification/digits/net/default/add/seed1": 2.5}


def test_training_jobs_are_held_against_the_cost_models_seconds_for_them(tmp_path, capsys):
    """--predict: each finished training job beside cost.job_seconds for it (the job's output names
    it); a job forked from the preload server without the model's start; the ratio per rule."""
    import yaml
    from fake_runs import tiny_config_file

    from pipeline_time import predicted, print_predicted
    from resrepro import layout
    from resrepro.analysis import cost

    config = yaml.safe_load(Path(tiny_config_file(tmp_path)).read_text())
    copies = {f"{task}/{kind}": 1.0 for task in ("classification", "translation", "captioning")
              for kind in ("last", "snapshot", "step", "averaged", "scst")}
    (tmp_path / "disk.yaml").write_text(yaml.safe_dump({"source": "a test", "copies": copies}))
    config_path = tmp_path / "costed.yaml"
    config_path.write_text(yaml.safe_dump({**config, "gpu_costs": {**config["gpu_costs"], "disk": str(tmp_path / "disk.yaml")}}))
    config, plan = cost.load_scale(config_path)
    keys = {key for run in cost.tabled_runs(plan).values() for key, _ in cost.stages_of(run)}
    times = tmp_path / "times.yaml"
    times.write_text(yaml.safe_dump({"device": "CPU", "basis": "measured", "commit": "abc1234", "date": "2026-11-29", "source": "a test",
                                     "job_start_s": {0: 2.0, 1: 7.0}, "checkpoint_write_gb_s": 0.5, "step_ms": {key: 10.0 for key in keys}}))
    model = cost.job_seconds(plan, config, cost.load_step_times(times), copies)
    job = next(iter(model))
    output = layout.job_file("trained.json", scale=config["scale"], job=job)
    jobs = [{"rule": "train_classifier", "output": output, "seconds": 2 * model[job], "forked": False},
            {"rule": "train_classifier", "output": output, "seconds": model[job], "forked": True},
            {"rule": "report", "output": "report/tiny/index.html", "seconds": 5.0, "forked": False}]
    rows = predicted(jobs, config_path, times)
    assert [(r["measured"], r["model"]) for r in rows] == [(2 * model[job], model[job]), (model[job], model[job] - 2.0)]
    print_predicted(rows)
    said = capsys.readouterr().out
    total = f"{3 * model[job]:11.0f} {2 * model[job] - 2.0:9.0f} {3 * model[job] / (2 * model[job] - 2.0):15.2f}"
    assert f"train_classifier             2 {total}" in said and f"all                          2 {total}" in said


def test_the_model_takes_the_sizes_of_the_prepared_data_trained_on(tmp_path):
    """--data-dir: each prepared classification file's training and test images, by dataset name."""
    import torch

    from resrepro.data.images import prepared_sizes, save_prepared

    for name, (train, test) in {"cifar10": (15, 16), "cifar100": (100, 20)}.items():
        save_prepared(tmp_path / f"{name}.pt", train_x=torch.zeros(train, 3, 4, 4, dtype=torch.uint8), train_y=torch.zeros(train, dtype=torch.int64),
                      test_x=torch.zeros(test, 3, 4, 4, dtype=torch.uint8), test_y=torch.zeros(test, dtype=torch.int64),
                      classes=["a", "b"], name=name, source="a test")
    assert prepared_sizes(tmp_path) == {"cifar10": (15, 16), "cifar100": (100, 20)}
