"""The preflight (preflight.py) against the project's local mirror server: a file that is
there, a 404, a wrong size, an HTML page, a slow server, a server that ignores ranges, too little
disk, and the scorers' Java."""

import http.client
import json
import shutil
import urllib.request
from collections import namedtuple
from pathlib import Path

import pytest

from resrepro import preflight
from resrepro.data.mirror_server import serving
from resrepro.data.translation import IWSLT15_LINES

ARCHIVE = bytes(range(256)) * 40  # 10,240 bytes, not text
PAGE = b"<!DOCTYPE html>\n<html><body>This site has moved</body></html>\n"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "train.tgz").write_bytes(ARCHIVE)
    (tmp_path / "site" / "page.tgz").write_bytes(PAGE)
    return tmp_path / "site"


@pytest.mark.parametrize("ranges", [True, False])
def test_a_file_that_is_there_passes_with_the_size_it_declares(site, ranges):
    with serving(site, ranges=ranges) as server:
        assert preflight.probe(server.url + "train.tgz", None) == (10_240, "ok (size not known before its first download)")
        assert preflight.probe(server.url + "train.tgz", 10_240) == (10_240, "ok")
    assert all(r.sent <= preflight.SNIFF for r in server.requests) == ranges  # a range: the body is not fetched


def test_a_404_a_wrong_size_and_an_html_page_fail_naming_what(site):
    with serving(site) as server:
        assert preflight.probe(server.url + "gone.tgz", None)[1] == "FAIL: HTTP 404 no file 'gone.tgz' in this mirror"
        assert preflight.probe(server.url + "train.tgz", 10_241) == (10_240, "FAIL: 10,240 bytes, the file recorded is 10,241")
        assert preflight.probe(server.url + "page.tgz", None)[1] == "FAIL: an HTML page, not the file"
    assert preflight.probe(str(site / "page.tgz"), None)[1] == "FAIL: an HTML page, not the file"  # a local mirror too
    assert preflight.probe(str(site / "train.tgz"), 10_240) == (10_240, "ok")
    assert preflight.probe(str(site / "gone.tgz"), None)[1] == f"FAIL: no file {site / 'gone.tgz'}"


def test_a_server_slower_than_the_timeout_fails():
    with serving(Path(__file__).parent, delay_s=1.5) as server:
        assert preflight.probe(server.url + "test_preflight.py", None, timeout=0.3) == (None, "FAIL: no answer within 0.3 s")


Plan = namedtuple("Plan", "runs rows names")
Plan.datasets = lambda self: self.names


def iwslt_site(tmp_path: Path, broken: str) -> tuple[Path, dict]:
    """IWSLT15's six files by name, one of them an HTML page; the lock recording their sizes."""
    folder, lock = tmp_path / "iwslt", {}
    folder.mkdir()
    for stem in IWSLT15_LINES:
        for lang in ("en", "vi"):
            name = f"{stem}.{lang}"
            (folder / name).write_bytes(PAGE if name == broken else b"a line\n" * 3)
            lock[f"iwslt15_en_vi/{name}"] = {"md5": "0" * 32, "bytes": 21}
    return folder, lock


def test_preflight_tries_each_files_sources_in_order_and_checks_disk_and_java(tmp_path, monkeypatch):
    folder, lock = iwslt_site(tmp_path, broken="tst2013.vi")
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "tst2013.vi").write_bytes(b"a line\n" * 3)
    downloads = tmp_path / "resources"
    downloads.mkdir()
    disk_yaml = tmp_path / "disk.yaml"  # no runs here: the peak is the downloads alone
    disk_yaml.write_text("source: a test\ncopies: {}\n")
    (downloads / "checksums.lock.json").write_text(json.dumps(lock))
    with serving(folder) as server:
        config = {"downloads_dir": str(downloads), "download_urls": {"iwslt15_en_vi": server.url}, "gpu_costs": {"disk": str(disk_yaml)},
                  "download_mirrors": {"iwslt15_en_vi/tst2013.vi": [str(copy)]}}
        checks = preflight.preflight(config, Plan({}, [], ["iwslt15_en_vi"]))
    by_file = {c.file: c for c in checks}
    assert [c.file for c in checks] == [f"iwslt15_en_vi/{s}.{lang}" for s in IWSLT15_LINES for lang in ("en", "vi")] + ["disk"]
    assert by_file["iwslt15_en_vi/tst2013.vi"].source == str(copy / "tst2013.vi")  # its own source failed: the copy
    assert not any(c.failed for c in checks)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100, 100, 99))  # 99 bytes free
    with serving(folder) as server:
        config["download_urls"] = {"iwslt15_en_vi": server.url}
        config["download_mirrors"] = {}
        checks = preflight.preflight(config, Plan({}, [], ["iwslt15_en_vi"]))
    failed = {c.file: c.status for c in checks if c.failed}
    assert failed == {"iwslt15_en_vi/tst2013.vi": "FAIL: an HTML page, not the file",
                      "disk": "FAIL: 0.0 GB free, the downloads and the runs' peak need 0.0 GB"}
    text = preflight.table(checks)
    assert text.splitlines()[0].split() == ["file", "source", "size", "status"] and "FAIL: an HTML page" in text


def test_the_scorers_check_names_the_java_and_its_problem(monkeypatch, tmp_path):
    assert preflight.scorer_check({}).status.startswith('ok: openjdk version "25')
    monkeypatch.setenv("PATH", str(tmp_path))
    check = preflight.scorer_check({"java": "system"})
    assert check.failed and check.status == "FAIL: java: system, but no java on PATH (install one, `module load java`, or set java: bundled)"


@pytest.mark.config
def test_the_command_exits_non_zero_on_a_failure(tmp_path, capsys):
    """The real paper config on a machine that reaches no dataset host: a table, then exit 1."""
    from resrepro import cli

    with pytest.raises(SystemExit, match=r"preflight: \d+ of \d+ checks failed"):
        cli.main(["preflight", "--configfile", "config/paper.yaml", "--timeout", "0.5"])
    printed = capsys.readouterr().out
    assert "wmt14_en_de/training-parallel-commoncrawl.tgz" in printed and "mscoco/caption_datasets.zip" in printed
    assert printed.splitlines()[-2].startswith("disk ") and printed.splitlines()[-1].startswith("captioning scorers ")


def test_a_probe_of_a_file_the_mirror_cuts_short_neither_overruns_its_range_nor_spends_the_cut(site):
    """The rehearsal's server cuts IWSLT's train.en once: the preflight's first-bytes probe before
    the download must get exactly its range, and the download after it must still be the one cut."""
    with serving(site, cut_short=["train.tgz"]) as server:
        assert preflight.probe(server.url + "train.tgz", 10_240) == (10_240, "ok")
        with urllib.request.urlopen(server.url + "train.tgz") as response, pytest.raises(http.client.IncompleteRead):
            response.read()
    assert [(r.start, r.sent) for r in server.requests] == [(0, preflight.SNIFF), (0, 5_120)]
