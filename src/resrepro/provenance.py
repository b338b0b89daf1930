"""Provenance recorded in every metrics file: what ran, where, with which code."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

PACKAGES = ("resrepro", "torch", "torchvision", "numpy", "snakemake", "pandas", "scikit-learn")


def git_commit(cwd: str | Path | None = None) -> str:
    """HEAD of the repository the code runs from, with "-dirty" when it has uncommitted changes."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def collect(device) -> dict:
    return {
        "versions": versions(),
        "device": device_name(device),
        "git_commit": git_commit(),
        "host": socket.gethostname(),
        "command": " ".join(sys.argv),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
