"""benchmarks/gpu_share.py's table: throughput of K runs side by side, against hand-computed values."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from gpu_share import throughput_table  # noqa: E402


def test_throughput_adds_each_runs_images_per_second_and_compares_with_one_run():
    results = {1: [[0.010, 0.020, 0.010]], 2: [[0.010, 0.016, 0.016], [0.020, 0.020, 0.030]]}
    one, two = throughput_table(results, batch=100)
    assert one == {"runs": 1, "step_ms": pytest.approx(10.0), "images_per_s": pytest.approx(10_000), "vs_one": pytest.approx(1.0)}
    # run medians 16 ms and 20 ms: 6,250 + 5,000 images/s; the median of the two medians is 18 ms
    assert two == {"runs": 2, "step_ms": pytest.approx(18.0), "images_per_s": pytest.approx(11_250), "vs_one": pytest.approx(1.125)}
