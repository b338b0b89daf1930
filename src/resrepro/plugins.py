"""Residual variants from files outside the package: a researcher's idea against every paper's setup
without editing src/ (issue 16; README, "Bring your own residual").

A variant module is a Python file that registers its class with `residual.register_external(name,
params)` (examples/residuals/gated_add.py). The config names the files (`variant_modules: [path,
...]`); the Snakefile loads them while it parses the workflow, so the plan can check a row's variant
and args, and names them in RESREPRO_VARIANT_MODULES, which every job inherits: a job's process (or
its fork of the preload server) loads them before it runs its command. Loading a module imports
torch, which a parse otherwise avoids: the cost of the option, paid only when it is used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

ENV = "RESREPRO_VARIANT_MODULES"  # absolute paths, separated by os.pathsep


def use(paths: list[str]) -> None:
    """Load the files and name them in this process's environment, for the jobs it starts."""
    resolved = [str(Path(p).resolve()) for p in paths]
    for path in resolved:
        if not Path(path).is_file():
            raise FileNotFoundError(f"variant_modules: {path} is not a file")
    os.environ[ENV] = os.pathsep.join(resolved)
    load()


def load(environ=os.environ) -> list[str]:
    """Import every file the environment names (each once per process); their paths."""
    paths = [p for p in environ.get(ENV, "").split(os.pathsep) if p]
    for path in paths:
        name = "resrepro_variant_module_" + hashlib.sha256(path.encode()).hexdigest()[:12]
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{ENV}: cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return paths
