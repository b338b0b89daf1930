"""The unit tests' config (tests/fixtures/config) and the guard that keeps them off the project's
own config/: editing a paper's table or a scale breaks only the tests marked `config`."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager

import pytest

import conftest
from fake_runs import TABLES
from resrepro import experiments


@contextmanager
def refused(match: str = ""):
    """The read must be stopped; made on purpose, it is then not held against the test."""
    with pytest.raises(conftest.LiveConfigRead, match=match):
        yield
    assert len(conftest._refusing) == 2  # the test's marker and the one read, for the call's check to fail on
    conftest._refusing[:] = [None]


def test_the_guard_is_the_conftest_the_run_loaded():
    assert sys.modules["conftest"] is conftest and conftest._refusing == [None]


def test_a_unit_test_that_opens_the_live_config_is_stopped_naming_the_file():
    with refused(r"config/mini.yaml.*tests/fixtures/config"):
        open("config/mini.yaml")
        assert False, "not reached"


def test_a_glob_of_the_live_tables_is_stopped_not_read_as_no_tables():
    """pathlib's glob swallows an OSError and would answer 'no *.yaml tables'."""
    with refused("config/tables"):
        experiments.load_tables("config/tables")


def test_a_unit_test_that_starts_snakemake_is_stopped():
    with refused("Snakemake"):
        subprocess.run(["snakemake", "--version"])


def test_a_read_the_code_caught_still_fails_the_test():
    """Code that swallows the guard's error (an `except Exception`) does not hide the read: the
    call's hook fails the test on the read it recorded."""
    conftest._refusing.append("config/mini.yaml")  # as the audit hook records a read before raising
    try:
        call = conftest.pytest_runtest_call(None)
        next(call)  # the test body would run here
        with pytest.raises(AssertionError, match=r"read the live config: \['config/mini.yaml'\]"):
            call.send(None)
    finally:
        conftest._refusing[:] = [None]


def test_the_fixtures_are_read_and_other_files_too():
    assert "sas-t7" in experiments.load_tables(TABLES)
    assert open("tests/configs/tiny.yaml").read()


@pytest.mark.config
def test_a_config_test_reads_the_live_config():
    assert conftest._refusing == [] and "sas-t7" in experiments.load_tables("config/tables")
