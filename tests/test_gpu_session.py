"""benchmarks/gpu_session.py, the checks a lent GPU runs: every check's command line is one its
benchmark accepts (a typo would waste the loan), and the runner keeps to its time limits."""

import argparse
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_session  # noqa: E402


class Parsed(Exception):
    pass


@pytest.mark.parametrize("check", [c for c in gpu_session.CHECKS if c.argv[0].endswith(".py")], ids=lambda c: c.name)
def test_each_benchmark_check_parses_with_its_own_command_line(check, monkeypatch):
    import importlib

    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise Parsed(real(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    module = importlib.import_module(Path(check.argv[0]).stem)
    with pytest.raises(Parsed) as parsed:
        (getattr(module, "parse_args", None) or module.main)(list(check.argv[1:]))
    opts = parsed.value.args[0]
    if check.group == "rehearsal":  # the rehearsal runs its jobs on the GPU through gpus_per_job=1
        assert opts.cover == (check.name == "rehearsal-cover")
        return
    assert opts.device == "cuda"
    if check.group == "steps":
        assert opts.variants == ["sas", "highway"]


def test_the_test_checks_run_the_registered_gpu_marker():
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("gpu:") for m in markers)
    for tests in (c for c in gpu_session.CHECKS if c.group == "tests" and c.argv[:2] == ("-m", "pytest")):
        assert tests.argv[:4] == ("-m", "pytest", "-m", "gpu") and (ROOT / tests.argv[5]).exists()
    graphs = next(c for c in gpu_session.CHECKS if c.name == "graphs-auto")
    assert graphs.argv[-2:] == ("-k", "compile_auto")  # selects the test of compile: auto by its name
    assert "def test_compile_auto_" in (ROOT / "tests" / "test_gpu.py").read_text()


def test_the_steps_check_ieee_against_tf32_then_compiled_and_resnet_eager_then_compiled():
    argv = {c.name: c.argv for c in gpu_session.CHECKS}
    assert argv["transformer-ieee"][-2:] == ("--tf32", "false") and argv["transformer-tf32"][-2:] == ("--tf32", "true")
    assert "--compile" in argv["transformer-compiled"] and "--compile" in argv["resnet-compiled"]
    assert "--compile" not in argv["resnet"] and "--compile" not in argv["transformer-tf32"]
    assert argv["resnet-cudagraphs"][-2:] == ("--compile", "cudagraphs")
    assert [c.group for c in gpu_session.CHECKS] == ["steps"] * 8 + ["paper-steps"] * 3 + ["stacked"] * 4 + ["share"] + ["costs"] * 4 + ["tests"] * 4 + ["rehearsal"] * 3
    assert [c.name for c in gpu_session.CHECKS][:3] == ["transformer-ieee", "transformer-tf32", "resnet-compiled"]


def test_the_costs_check_leaves_the_runs_side_by_side_to_the_shared_checks_of_the_same_file():
    argv = {c.name: c.argv for c in gpu_session.CHECKS}
    assert argv["costs"][argv["costs"].index("--skip") + 1] == "*/processes*"
    for name, keys in (("costs-shared", "*/processes4"), ("costs-shared-day", "*/processes2")):
        assert argv[name][argv[name].index("--keys") + 1] == keys and argv[name][-2:] == ("--out", gpu_session.STEP_TIMES)


def test_the_share_check_times_the_paper_runs_side_by_side_beyond_the_scales_four():
    (check,) = [c for c in gpu_session.CHECKS if c.group == "share"]
    assert check.argv[0] == "benchmarks/gpu_share.py" and ("--depth", "110") == check.argv[3:5]
    runs = check.argv[check.argv.index("--runs") + 1 : check.argv.index("--seconds")]
    assert runs == ("1", "4", "5", "8")


def test_the_stacked_checks_time_resnet110_runs_stacked_within_their_limits():
    checks = {c.name: c for c in gpu_session.CHECKS if c.group == "stacked"}
    assert set(checks) == {"stacked", "stacked-compiled", "stacked-deterministic", "stacked-one-batch"}
    assert "--deterministic" in checks["stacked-deterministic"].argv and "--deterministic" not in checks["stacked"].argv
    for check in checks.values():
        assert check.argv[0] == "benchmarks/stacked_step_time.py" and ("--depth", "110") == check.argv[3:5]
        budget = float(check.argv[check.argv.index("--budget") + 1])
        assert budget < check.limit_s  # the rows measured before the budget ran out still print
    assert checks["stacked-compiled"].argv[-5:-2] == ("--modes", "compiled", "compiled-graphs")


def test_the_paper_steps_time_resnet110_deterministic_eager_then_as_cuda_graphs():
    argv = {c.name: c.argv for c in gpu_session.CHECKS}
    eager, graphs = argv["resnet110"], argv["resnet110-cudagraphs"]
    assert {"--deterministic", "110"} <= set(eager) and graphs[-2:] == ("--compile", "cudagraphs")
    assert "--compile" not in eager and eager[:-2] == graphs[:-4] and eager[-2] == graphs[-4] == "--budget"
    assert argv["resnet110-reduce-overhead"][:-4] == eager[:-2] and argv["resnet110-reduce-overhead"][-1] == "reduce-overhead"


def check(name, code, limit=30, group="steps"):
    return gpu_session.Check(name, group, limit, ("-c", code))


def test_the_session_logs_each_check_and_says_how_it_ended(tmp_path, capsys):
    checks = [check("fine", "print('figure 1.0')"), check("broken", "import sys; print('bad'); sys.exit(3)"),
              check("slow", "import subprocess, time; subprocess.Popen(['sleep', '60']); print('started', flush=True); time.sleep(60)", limit=2)]
    started = time.monotonic()
    results = gpu_session.run_session(checks, tmp_path, limit_s=100, min_left_s=1, env=gpu_session.environment(), header="device X")
    assert time.monotonic() - started < 30  # the slow check's child was stopped with it, so its output pipe closed
    assert [(name, how) for name, how, _ in results] == [("fine", "ok"), ("broken", "failed (exit 3)"), ("slow", "stopped at 2 s")]
    log = (tmp_path / "session.log").read_text()
    assert log.startswith("device X\n") and "figure 1.0" in log and "bad" in log and "started" in log
    assert log.rstrip().endswith("slow: stopped at 2 s, 2 s") and "figure 1.0" in capsys.readouterr().out


def test_no_check_starts_with_too_little_time_left_and_each_stops_at_the_session_limit(tmp_path):
    checks = [check("first", "import time; time.sleep(60)", limit=100), check("second", "print(1)")]
    results = gpu_session.run_session(checks, tmp_path, limit_s=2, min_left_s=1, env=gpu_session.environment())
    assert results[0][:2] == ("first", "stopped at 2 s") and results[1][1].startswith("not started")


def test_a_measured_step_times_file_comes_back_when_its_check_passed_or_was_stopped_at_its_limit(tmp_path, monkeypatch):
    """A failed check's file may be anything and stays; one stopped at its limit holds the keys
    measured until then (gpu_budget.py writes after each, its source saying partial)."""
    monkeypatch.setattr(gpu_session, "ROOT", tmp_path / "checkout")  # the checks run there
    (tmp_path / "checkout" / "config" / "costs").mkdir(parents=True)
    writes = f"from pathlib import Path; Path({gpu_session.STEP_TIMES!r}).write_text('step_ms: {{}}')"
    gpu_session.run_session([check("costs", writes + "; import sys; sys.exit(1)", group="costs")], tmp_path / "a", 60, 1,
                            gpu_session.environment())
    assert not (tmp_path / "a" / "gpu-session.yaml").exists()
    gpu_session.run_session([check("costs", writes, group="costs")], tmp_path / "b", 60, 1, gpu_session.environment())
    assert (tmp_path / "b" / "gpu-session.yaml").read_text() == "step_ms: {}"
    stopped = check("costs", writes + "; import time; time.sleep(60)", limit=3, group="costs")
    assert gpu_session.run_session([stopped], tmp_path / "c", 60, 1, gpu_session.environment())[0][1] == "stopped at 3 s"
    assert (tmp_path / "c" / "gpu-session.yaml").read_text() == "step_ms: {}"


def test_the_preflight_names_a_missing_module(monkeypatch):
    env = gpu_session.environment()
    assert gpu_session.preflight(env) is None  # this venv has every package the checks import
    monkeypatch.setattr(gpu_session, "NEEDS", ("yaml", "no_such_package_here"))
    assert "No module named 'no_such_package_here'" in gpu_session.preflight(env)


def test_without_a_gpu_the_session_refuses_before_running_anything(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_session, "device_header", lambda: "torch 2 python 3\nno CUDA device")
    assert gpu_session.main(["--out", str(tmp_path)]) == 2
    assert "need one" in capsys.readouterr().err and not (tmp_path / "session.log").exists()


def test_the_wheels_are_resolved_here_at_this_venvs_versions_then_compiled_ones_fetched_for_the_gpu_python(tmp_path):
    from importlib.metadata import version

    cmd = gpu_session.wheel_command(tmp_path / "whl", python="py")
    assert cmd[:4] == ["py", "-m", "pip", "wheel"] and cmd[cmd.index("-w") + 1] == str(tmp_path / "whl")
    assert f"snakemake=={version('snakemake')}" in cmd and f"sacremoses=={version('sacremoses')}" in cmd
    (tmp_path / "whl").mkdir()
    for name in ("snakemake-9.27.1-py3-none-any.whl", "jinja2-3.1.6-py3-none-any.whl",
                 "rpds_py-2026.9.1-cp311-cp311-manylinux_2_17_x86_64.whl", "pyyaml-6.0.3-cp311-cp311-manylinux_2_17_x86_64.whl"):
        (tmp_path / "whl" / name).write_text("")
    # the image has jinja2 and pyyaml: dropped; rpds_py was built for this Python: fetched again for the GPU's
    assert gpu_session.for_gpu_python(tmp_path / "whl") == ["rpds-py==2026.9.1"]
    assert [w.name for w in (tmp_path / "whl").iterdir()] == ["snakemake-9.27.1-py3-none-any.whl"]
    cmd = gpu_session.download_command(tmp_path / "whl", ["rpds-py==2026.9.1"], python="py")
    assert cmd[:4] == ["py", "-m", "pip", "download"] and cmd[-1] == "rpds-py==2026.9.1"
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and cmd[cmd.index("-d") + 1] == str(tmp_path / "whl")
    assert {"--no-deps", "--only-binary=:all:"} <= set(cmd) and "manylinux2014_x86_64" in cmd


def _wheel(folder: Path, module: str, value: int) -> Path:
    """A minimal pure-Python wheel, made by hand: pip installs it offline like any other."""
    import zipfile

    info = f"{module}-1.0.dist-info"
    files = {f"{module}/__init__.py": f"VALUE = {value}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{module}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_wheels_install_offline_into_their_own_folder_which_the_checks_then_import(tmp_path, monkeypatch):
    import subprocess

    _wheel(tmp_path / "whl", "gpu_probe_pkg", 7)
    site = gpu_session.install_wheels(tmp_path / "whl", tmp_path / "site")
    assert site == tmp_path / "site"
    env = gpu_session.environment(site)
    assert env["PYTHONPATH"].split(":")[:3] == [str(ROOT / "src"), str(ROOT / "benchmarks"), str(site)]
    monkeypatch.setattr(gpu_session, "NEEDS", ("yaml", "gpu_probe_pkg"))
    assert gpu_session.preflight(env) is None and "No module named" in gpu_session.preflight(gpu_session.environment())
    out = subprocess.run([sys.executable, "-c", "import gpu_probe_pkg; print(gpu_probe_pkg.VALUE)"], env=env,
                         capture_output=True, text=True).stdout
    assert out.strip() == "7"


def test_a_wheels_folder_without_wheels_or_with_a_broken_one_stops_the_session(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no .whl files"):
        gpu_session.main(["--wheels", str(tmp_path / "empty"), "--out", str(tmp_path / "out")])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "broken-1.0-py3-none-any.whl").write_text("not a zip")
    with pytest.raises(SystemExit, match="broken-1.0-py3-none-any.whl failed"):
        gpu_session.install_wheels(tmp_path / "bad", tmp_path / "site")
    assert not (tmp_path / "out").exists()


def test_checks_named_run_in_the_order_given_instead_of_the_groups():
    assert [c.name for c in gpu_session.chosen_checks(["steps"], ["resnet-compiled", "transformer-ieee"])] == [
        "resnet-compiled", "transformer-ieee"]
    assert [c.name for c in gpu_session.chosen_checks(["costs", "tests"])] == ["costs", "costs-shared", "costs-shared-day", "costs-stacked", "graphs-auto", "stacked-modes", "stacked-tests", "tests"]  # groups: their checks in order
    with pytest.raises(SystemExit):
        gpu_session.main(["--checks", "no-such-check"])
