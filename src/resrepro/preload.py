"""A warm process for many short CPU jobs: torch imported once, every job forked from it.

A CPU job of the mini scale spends 2-5 s before its first step: importing torch, and for training
torch._dynamo, which the first optimizer imports. Over the ~200 jobs of a mini run that is a fifth
of its job-seconds (docs/performance.md). `serve` pays it once, then forks one child per job;
`launch --gpus 0` hands its command to the server named by RESREPRO_PRELOAD and runs it in its own
process when no server answers. The child gets the job's stdin, stdout and stderr (passed over the
Unix socket), its working directory and its environment, so its log, its files and its exit status
are the job's own; the job waits for it, and a job stopped by a signal stops its child.

Only CPU jobs outside Slurm are sent here: CUDA cannot be initialised before a fork (GPU jobs start
their own process), and a Slurm job must run inside its own allocation, not in a process of the
machine that submitted it. The server never runs a torch operation, so no thread pool exists when
it forks, and each child sets its own thread count.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import selectors
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

SOCKET_ENV = "RESREPRO_PRELOAD"  # the server's socket path, for the jobs of a local run
PRELOADED_PACKAGES = ("data", "models", "train", "evaluate", "measure")  # what CPU jobs import
MAX_REQUEST_BYTES = 1 << 22
CHILD_USAGE = "preload: the job's process used"  # then "<s> s of CPU, <MB> MB at most" (benchmarks/pipeline_time.py)


def usable(environ=os.environ) -> str | None:
    """The server's socket for this process to send its command to, or None: none named, or a Slurm
    job (it must compute inside its allocation)."""
    path = environ.get(SOCKET_ENV)
    if not path or environ.get("SLURM_JOB_ID"):
        return None
    return path


def warm() -> None:
    """Import what the jobs import, and build an optimizer once (it imports torch._dynamo), without
    running any torch operation: a thread pool made now would be broken in every forked child."""
    import torch

    weight = torch.nn.Parameter(torch.zeros(1))
    torch.optim.SGD([weight], lr=0.1)
    torch.optim.Adam([weight], lr=0.1)
    importlib.import_module("resrepro.jobs")
    for name in PRELOADED_PACKAGES:
        package = importlib.import_module(f"resrepro.{name}")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"resrepro.{name}.{module.name}")


# --- the job's side -----------------------------------------------------------------------------


def run_remote(path: str, argv: list[str], env: dict[str, str]) -> int | None:
    """Run `resrepro <argv>` in a child of the server at `path`, with this process's stdio, working
    directory and `env`; its exit status (128 + N for a signal N), or None when no server answers.
    SIGTERM and SIGHUP sent to this process are passed to the child."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    forwarded = {signal.SIGTERM, signal.SIGHUP}
    # held until the child's pid is known, then passed to it
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    try:
        with sock:
            return _ask(sock, argv, env, forwarded)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)


def _ask(sock: socket.socket, argv: list[str], env: dict[str, str], forwarded: set) -> int:
    """run_remote's conversation with the server, the forwarded signals blocked until the child's pid is known."""
    request = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd()}).encode() + b"\n"
    sent = socket.send_fds(sock, [request], [0, 1, 2])
    sock.sendall(request[sent:])
    replies = sock.makefile("rb")
    first = replies.readline().split()
    if first[:1] != [b"pid"]:
        print(f"preload: the server refused the job: {b' '.join(first).decode() or 'no answer'}", file=sys.stderr)
        return 1
    child = int(first[1])
    print(f"preload: running in pid {child}, forked from the server", file=sys.stderr, flush=True)

    def forward(signum, frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in forwarded:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
    last = replies.readline().split()
    if last[:1] != [b"exit"]:
        print("preload: the server ended before the job did", file=sys.stderr)
        return 1
    code, cpu_s, max_rss_kb = int(last[1]), float(last[2]), int(last[3])
    # Snakemake's benchmark sees only this process: the child's figures go to the job's log
    print(f"{CHILD_USAGE} {cpu_s:.2f} s of CPU, {max_rss_kb / 1024:.0f} MB at most", file=sys.stderr)
    return 128 - code if code < 0 else code


# --- the server's side --------------------------------------------------------------------------


def read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """The job's request and its three stdio descriptors."""
    conn.settimeout(30)
    data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST_BYTES, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(MAX_REQUEST_BYTES)
        if not more:
            raise ConnectionError("the job closed its connection before its request ended")
        data += more
    conn.settimeout(None)
    if len(fds) != 3:
        raise ConnectionError(f"the job sent {len(fds)} descriptors, not its stdin, stdout and stderr")
    return json.loads(data), fds


def run_child(request: dict, fds: list[int], command) -> int:
    """In the forked child: become the job (stdio, directory, environment, default signals) and run
    its command line with `command` (cli.main); its exit status."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["resrepro", *request["argv"]]
    try:
        command(request["argv"])
        return 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - the job's traceback goes to its log, as a fresh process's would
        traceback.print_exc()
        return 1


def fork_job(conn: socket.socket, servers: list, command) -> int | None:
    """Fork a child running the job that `conn` sends; its pid (told to the job), or None. The child
    closes the server's own sockets (`servers`): a job waits for its connection's end, which must
    not wait for other jobs' children."""
    try:
        request, fds = read_request(conn)
    except (OSError, ValueError) as error:
        print(f"preload: a bad request: {error}", file=sys.stderr)
        conn.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)  # the server's: its socket closes next, and the number could be reused by a file
        for inherited in (*servers, conn):
            inherited.close()
        code = 1
        try:
            code = run_child(request, fds, command)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"pid {pid}\n".encode())
    return pid


def serve(path: str | Path, command, parent_pid: int | None = None, poll_s: float = 1.0) -> None:
    """Serve jobs on the Unix socket `path` until SIGTERM, or until the process `parent_pid` (the
    Snakemake that started this server) is gone; running children are then sent SIGTERM. Each job
    is a forked child that runs its command line with `command` (cli.main, passed in: this module
    imports nothing of the command line's)."""
    path = Path(path)
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(128)  # jobs that connect while the imports run wait here, in the backlog
    warm()
    stopping = []
    # Ctrl-C reaches every process of the terminal's group: the jobs stop themselves, and the
    # server lives until Snakemake, which started it, has seen them stop and stops it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    # A child's end wakes the loop at once (its job waits for the news), not at the next poll.
    wake_read, wake_write = socket.socketpair()
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    jobs: dict[int, socket.socket] = {}  # child pid -> its job's connection
    print(f"preload: serving on {path} (pid {os.getpid()})", file=sys.stderr)
    try:
        while not stopping and (parent_pid is None or os.getppid() == parent_pid):
            for key, _ in selector.select(timeout=poll_s):
                if key.fileobj is wake_read:
                    wake_read.recv(4096)
                elif key.fileobj is listener:
                    conn, _ = listener.accept()
                    pid = fork_job(conn, [listener, selector, wake_read, wake_write, *jobs.values()], command)
                    if pid is not None:
                        jobs[pid] = conn
                        selector.register(conn, selectors.EVENT_READ, pid)
                elif not key.fileobj.recv(1):  # the job's process ended before its child: stop the child
                    selector.unregister(key.fileobj)
                    stop_child(key.data)
            reap(jobs, selector)
    finally:
        for pid in list(jobs):
            stop_child(pid)
        deadline = time.monotonic() + 10
        while jobs and time.monotonic() < deadline:
            reap(jobs, selector)
            time.sleep(0.05)
        signal.set_wakeup_fd(-1)
        for server_socket in (listener, wake_read, wake_write):
            server_socket.close()
        path.unlink(missing_ok=True)


def stop_child(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def reap(jobs: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    """Tell each finished child's job its exit status, CPU seconds and largest resident memory (kB)."""
    while jobs:
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = jobs.pop(pid, None)
        if conn is None:
            continue
        cpu_s = usage.ru_utime + usage.ru_stime
        try:
            conn.sendall(f"exit {os.waitstatus_to_exitcode(status)} {cpu_s:.3f} {usage.ru_maxrss}\n".encode())
        except OSError:
            pass  # the job is gone already
        try:
            selector.unregister(conn)
        except KeyError:
            pass  # unregistered when its job ended first
        conn.close()


# --- the run's side: Snakemake's onstart and onsuccess/onerror hooks ----------------------------

_server: dict = {}  # the server this process started: its process and folder


def start_server(log_path: str | Path = ".snakemake/resrepro-preload.log", wait_s: float = 30) -> str | None:
    """Start a server for the jobs this process (Snakemake) runs locally, and name it in this
    process's environment, which local jobs inherit; its socket path, or None if it did not start
    (the jobs then start their own processes). It stops itself when this process ends."""
    import shutil
    import subprocess
    import tempfile

    folder = tempfile.mkdtemp(prefix="resrepro-preload-")  # short: a socket path has at most ~100 bytes
    path = os.path.join(folder, "socket")
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        # No GPU visible to the server: its forks serve CPU jobs, and CUDA initialised before a fork
        # (by any import that asks for a device) would fail in every fork that touched it.
        process = subprocess.Popen(
            [sys.executable, "-m", "resrepro.cli", "preload", "--socket", path, "--parent-pid", str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    deadline = time.monotonic() + wait_s
    while not os.path.exists(path):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            shutil.rmtree(folder, ignore_errors=True)
            print(f"resrepro: the preload server did not start (see {log_path}); jobs start their own processes",
                  file=sys.stderr)
            return None
        time.sleep(0.02)
    _server.update(process=process, folder=folder)
    os.environ[SOCKET_ENV] = path
    print(f"resrepro: CPU jobs run as forks of one process with torch imported (pid {process.pid}, log {log_path})",
          file=sys.stderr)
    return path


def stop_server() -> None:
    """Stop the server that start_server started, if any (its running children get SIGTERM)."""
    import shutil
    import subprocess

    os.environ.pop(SOCKET_ENV, None)
    if not _server:
        return
    process = _server.pop("process")
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()  # reaped: no zombie, and its return code is known
    shutil.rmtree(_server.pop("folder"), ignore_errors=True)
