"""The warm server (preload.py): a job sent to it runs as a forked child with the job's own stdio,
directory, environment and exit status; a stopped job stops its child; the server ends with the
process that started it; torch in a child uses its threads without hanging; `launch --gpus 0`
uses it when named and runs the command itself when no server answers or under Slurm."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from resrepro import launch, preload

# A server whose command line is a few test commands (in place of cli.main), run by every child.
SERVER = textwrap.dedent("""
    import os, sys, time
    from resrepro.preload import serve

    def main(argv):
        what = argv[0]
        if what == "echo":
            print(" ".join(argv[1:]))
            print("to stderr", file=sys.stderr)
        elif what == "where":
            print(os.getcwd(), os.environ.get("PROBE"), sys.argv[1:])
        elif what == "exit":
            sys.exit(int(argv[1]))
        elif what == "raise":
            raise ValueError("a job's own error")
        elif what == "sleep":
            print(os.getpid(), flush=True)
            time.sleep(60)
        elif what == "torch":
            import torch
            torch.set_num_threads(2)
            conv = torch.nn.Conv2d(3, 16, 3)
            loss = conv(torch.randn(64, 3, 32, 32)).square().mean()
            loss.backward()
            print(torch.get_num_threads(), bool(torch.isfinite(conv.weight.grad).all()))

    parent = int(sys.argv[2]) if len(sys.argv) > 2 else None
    # Polls rarely unless watching a parent: a job's end must wake the loop itself (SIGCHLD), or
    # every job here would wait minutes for its exit status.
    serve(sys.argv[1], main, parent_pid=parent, poll_s=0.05 if parent else 300)
""")


def start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, str]:
    path = str(tmp_path / "s")
    server = subprocess.Popen([sys.executable, "-c", SERVER, path, *args], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    return server, path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process, path = start(tmp_path_factory.mktemp("server"))
    yield path
    process.terminate()
    process.wait(timeout=20)


def job(path: str, *argv: str, cwd: Path, env: dict | None = None, **kwargs) -> subprocess.Popen:
    """`launch`'s client side in a process of its own, as a Snakemake job runs it."""
    client = f"import sys; from resrepro.preload import run_remote; sys.exit(run_remote({path!r}, sys.argv[1:], {env or {}!r}))"
    return subprocess.Popen([sys.executable, "-c", client, *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def finished(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


def test_a_job_runs_with_its_own_stdio_directory_environment_and_exit_status(server, tmp_path):
    code, out, err = finished(job(server, "echo", "hello", "there", cwd=tmp_path))
    assert (code, out) == (0, "hello there\n")
    assert "to stderr" in err and "preload: running in pid" in err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out, _ = finished(job(server, "where", "x", cwd=elsewhere, env={"PROBE": "42"}))
    assert out.split(maxsplit=2) == [str(elsewhere), "42", "['where', 'x']\n"]
    assert finished(job(server, "exit", "3", cwd=tmp_path))[0] == 3
    code, _, err = finished(job(server, "raise", cwd=tmp_path))
    assert code == 1 and "ValueError: a job's own error" in err


def test_torch_in_a_forked_child_uses_its_threads(server, tmp_path):
    """The server imported torch and built optimizers: a child's first parallel kernels run
    (an OpenMP pool made before the fork would hang here)."""
    code, out, err = finished(job(server, "torch", cwd=tmp_path))
    assert (code, out) == (0, "2 True\n"), err
    cpu_s = float(re.search(re.escape(preload.CHILD_USAGE) + r" ([\d.]+) s of CPU", err).group(1))
    assert cpu_s > 0.01  # the child's own, which Snakemake's benchmark of the job cannot see


def test_a_stopped_job_stops_its_child(server, tmp_path):
    for stop in (signal.SIGTERM, signal.SIGKILL):  # passed on; or the job is gone and the server notices
        client = job(server, "sleep", cwd=tmp_path)
        child = int(client.stdout.readline())
        client.send_signal(stop)
        client.wait(timeout=30)
        if stop == signal.SIGTERM:
            assert client.returncode == 128 + signal.SIGTERM
        deadline = time.monotonic() + 30
        while alive(child):
            assert time.monotonic() < deadline, f"the child of a job stopped by {stop!r} still runs"
            time.sleep(0.05)


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for the server to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_the_server_ends_with_the_process_that_started_it(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        server, path = start(tmp_path, str(parent.pid))
        # the server's parent is this test, not `parent`: it sees a parent other than the one named and ends, once
        # its imports are done (their seconds grow many times on 2 loaded cores)
        assert server.wait(timeout=180) == 0
        assert not os.path.exists(path)
    finally:
        parent.kill()


def test_launch_uses_a_named_server_and_runs_itself_when_none_answers(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(preload, "run_remote", lambda path, argv, env: calls.append(("remote", path, env)) or 7)
    monkeypatch.setattr(launch, "run_here", lambda env, argv, run_command: calls.append(("here", env)) or 0)
    monkeypatch.setenv(preload.SOCKET_ENV, str(tmp_path / "s"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert launch.launch(0, ["train"], None) == 7
    assert calls[-1][:2] == ("remote", str(tmp_path / "s")) and calls[-1][2]["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.setenv("SLURM_JOB_ID", "12")  # a Slurm job computes in its own allocation
    assert launch.launch(0, ["train"], None) == 0 and calls[-1][0] == "here"
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.setattr(preload, "run_remote", lambda path, argv, env: None)  # no server answers
    assert launch.launch(0, ["train"], None) == 0 and calls[-1][0] == "here"
    monkeypatch.delenv(preload.SOCKET_ENV)
    assert launch.launch(0, ["train"], None) == 0 and calls[-1][0] == "here"


def test_no_server_at_the_path_means_none(tmp_path):
    assert preload.run_remote(str(tmp_path / "none"), ["echo"], {}) is None


def test_start_and_stop_name_the_server_in_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(preload.SOCKET_ENV, raising=False)
    log = tmp_path / "preload.log"
    path = preload.start_server(log)
    try:
        assert os.environ[preload.SOCKET_ENV] == path and os.path.exists(path)
        process = preload._server["process"]
        environ = dict(item.split("=", 1) for item in Path(f"/proc/{process.pid}/environ").read_text().split("\0") if "=" in item)
        assert environ["CUDA_VISIBLE_DEVICES"] == ""  # no GPU for the server: CUDA before a fork breaks the forks
        deadline = time.monotonic() + 60
        while "serving on" not in log.read_text():  # after its imports
            assert time.monotonic() < deadline
            time.sleep(0.05)
        code, _, err = finished(job(path, "prepare", "digits", "--out", "digits.pt", cwd=tmp_path))  # the real command line
        assert code == 0 and (tmp_path / "digits.pt").exists(), err
    finally:
        preload.stop_server()
    assert process.returncode == 0 and preload.SOCKET_ENV not in os.environ and not os.path.exists(path)
