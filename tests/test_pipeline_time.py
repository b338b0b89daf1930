"""benchmarks/pipeline_time.py reads a Snakemake log right: per-job rule, output and wall time."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from pipeline_time import jobs_of  # noqa: E402

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
    output: results/mini/a/seed0/metrics.json, results/mini/a/seed0/train_log.csv
    jobid: 3
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


def test_finished_jobs_with_their_rule_output_and_seconds():
    jobs = sorted(jobs_of(LOG), key=lambda j: j["seconds"])
    assert [(j["rule"], j["output"], j["seconds"]) for j in jobs] == [
        ("prepare_digits", "results/data/digits.pt", 8.0),
        ("train_classifier", "results/mini/a/seed0/metrics.json", 30.0),
    ]  # the report never finished: not counted
