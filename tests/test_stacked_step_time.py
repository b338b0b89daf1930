"""benchmarks/stacked_step_time.py's table, against hand-computed values, and a CPU run of it."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import stacked_step_time  # noqa: E402


def test_a_row_divides_the_step_among_its_runs_and_prices_a_paper_run():
    r = stacked_step_time.row("add", 16, "eager", step_ms=124.8, alone_ms=31.2, peak_mb=21056.0)
    assert r["run_ms"] == pytest.approx(7.8) and r["vs_alone"] == pytest.approx(0.25)
    # 164 epochs x 391 steps = 64,124 steps at 7.8 ms: 500.2 s, 8.34 minutes
    assert r["paper_run_min"] == pytest.approx(64124 * 7.8 / 60000)
    assert stacked_step_time.row("sas", 1, "graphs", 31.5, None, 0.0)["vs_alone"] == 1.0


def test_it_times_runs_alone_and_stacked_on_the_cpu(capsys):
    rows = stacked_step_time.main(["--device", "cpu", "--depth", "8", "--batch", "8", "--runs", "1", "2", "--variants", "sas",
                                   "--warmup", "1", "--steps", "1", "--rounds", "1"])
    assert [(r["variant"], r["runs"], r["mode"]) for r in rows] == [("sas", 1, "eager"), ("sas", 2, "eager")]
    assert rows[1]["vs_alone"] == pytest.approx(rows[1]["run_ms"] / rows[0]["step_ms"])
    assert "sas         2 eager" in capsys.readouterr().out
