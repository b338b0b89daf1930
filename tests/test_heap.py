"""resrepro.heap: freed memory stays in the process's heap, so a step's activations, allocated and freed
every step, do not page-fault again (each fault costs microseconds on the project's virtual machines)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from resrepro import cli


def test_glibc_takes_both_thresholds():
    """mallopt refuses (returns 0) a value out of its range, e.g. an mmap threshold over 32 MiB."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's mallopt")
    code = "from resrepro import heap; print(heap.keep_freed_memory())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "True"


def test_every_command_keeps_freed_memory(monkeypatch):
    kept = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: kept.append(True))
    monkeypatch.setitem(cli.COMMANDS, "prepare", cli.COMMANDS["prepare"]._replace(run=lambda a: None))
    cli.main(["prepare", "digits", "--out", "unused.pt"])
    assert kept == [True]

