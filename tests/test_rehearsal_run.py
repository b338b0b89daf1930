"""`resrepro rehearse` end to end (make test-rehearsal; CI): the paper scale's whole DAG on fake data in
the real formats, with every compute job refused the network, to a report of every table and figure.

The workflow is copied into a temporary folder, as the integration tests do."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_workflow import COPIED, REPO, planned_jobs

from resrepro import experiments

pytestmark = pytest.mark.rehearsal
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory):
    root = tmp_path_factory.mktemp("rehearsal")
    for item in COPIED:
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, root / item)
    refused = root / "refused.log"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "RESREPRO_REFUSED_LOG": str(refused),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "offline"), os.environ.get("PYTHONPATH", "")])}
    started = time.time()
    proc = subprocess.run([str(BIN / "resrepro"), "rehearse", "--cores", "2"], cwd=root, env=env, capture_output=True, text=True)
    minutes = (time.time() - started) / 60
    print(f"rehearsal: {minutes:.1f} minutes")
    (root / "rehearse.log").write_text(proc.stdout + proc.stderr)
    try:
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
        yield root, proc.stdout + proc.stderr
    finally:  # about 30 GB, mostly the big Transformer's checkpoints: not left in pytest's kept folders (logs and report stay)
        for folder in ("results", "resources"):
            shutil.rmtree(root / folder, ignore_errors=True)


def test_every_rule_of_the_paper_scale_ran(rehearsed):
    root, log = rehearsed
    ran = set(re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", log, re.M))
    assert ran == set(planned_jobs(root, "--configfile", "config/paper.yaml"))


def test_the_report_holds_every_table_and_figure(rehearsed):
    root, _ = rehearsed
    html = (root / "report" / "rehearsal" / "index.html").read_text()
    config = yaml.safe_load((root / "config" / "rehearsal.yaml").read_text())
    plan = experiments.make_plan({**config, "download_urls": {}})
    for section in [*plan.tables, *plan.figures]:
        assert f'<section id="{section}">' in html, section
    assert "Ran at rehearsal scale" in html


def test_no_compute_job_used_the_network(rehearsed):
    root, _ = rehearsed
    refused = root / "refused.log"
    assert not refused.exists(), refused.read_text()


def test_the_hard_cases_of_the_real_data_were_met(rehearsed):
    root, _ = rehearsed
    downloads = root / "resources" / "rehearsal" / "downloads"
    fetch_log = (root / "logs" / "data" / "fetch_iwslt15_en_vi.log").read_text()
    assert re.search(r"train\.en: expected [\d,]+ bytes, received [\d,]+ \(attempt 1 of 3\)", fetch_log)  # cut short, fetched again
    lock = json.loads((downloads / "checksums.lock.json").read_text())
    assert lock["iwslt15_en_vi/train.en"]["bytes"] == (root / "resources/rehearsal/mirror/iwslt15_en_vi/train.en").stat().st_size
    assert "wmt14_en_de/test-full.tgz" not in lock and "wmt14_en_de/training-parallel-europarl-v7.tgz" in lock  # pinned; first use
    dropped = [json.loads(p.read_text()).get("dropped_long_pairs", 0)
               for p in (root / "results" / "rehearsal" / "translation").glob("*/*/*/*/seed0/metrics.json")]
    assert dropped and min(dropped) >= 1  # the pairs over 256 subwords (one over 1,024) of every dataset
    coco = json.loads((root / "results" / "rehearsal" / "data" / "mscoco" / "prepared.json").read_text())
    assert len(coco["left_out"]) == 1  # the corrupt JPEG
