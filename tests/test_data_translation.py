"""Translation data layer: readers, verified downloads, preparation, synthetic corpus, subwords.

Fixtures are written at test time in the real formats: IWSLT15-style Moses-tokenized text
with HTML entities (&apos; &quot; &amp;), WMT .sgm test sets (<srcset>/<doc>/<seg id>) and
statmt-style .tgz/.tar archives. Downloads use file:// URLs. Nothing touches the network.
"""

from __future__ import annotations

import hashlib
import json
import random
import tarfile
import gzip
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from resrepro.data import synthetic_translation as synth
from resrepro.data.download import ATTEMPTS, ChecksumError, IncompleteDownload
from resrepro.data.fake_sources import add_member as _add
from resrepro.data.fake_sources import sgm_text as _sgm
from resrepro.data.fake_sources import text_bytes as _text
from resrepro.data.mirror_server import serving
from resrepro.data.subword import (BOS_ID, EOS_ID, PAD_ID, UNK_ID, VOCAB_SIZES, SubwordVocab, count_lines,
                                   train_subword)
from resrepro.data.translation import (IWSLT15_LINES, SOURCES, RemoteFile, check_lines, extract_members,
                                       fetch_file, fetch_source, load_encoded, load_prepared_meta,
                                       prepare_synthetic, prepare_translation, read_lock, read_parallel,
                                       read_sgm, source_url, unescape_xml)

# ------------------------------------------------------------------------ fixtures

EN_WORDS = ["I", "you", "we", "they", "think", "know", "love", "see", "music", "science", "water", "the",
            "world", "people", "story", "time", "child", "school", "really", "very", "good", "today"]
VI_WORDS = ["tôi", "bạn", "chúng", "họ", "nghĩ", "biết", "yêu", "thấy", "âm", "nhạc", "khoa", "học", "nước",
            "thế", "giới", "người", "câu", "chuyện", "thời", "gian", "trẻ", "em", "trường", "rất", "tốt", "hôm", "nay"]


def _iwslt_line(rng: random.Random, words: list[str]) -> str:
    """A Moses-tokenized line with the entities the Stanford files carry."""
    body = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
    extra = rng.choice(["", " , isn &apos;t it", " &quot; yes &quot;", " &amp; more", " it &apos;s"])
    return body + (extra if words is EN_WORDS else "") + rng.choice([" .", " ?", " !"])


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(s + "\n" for s in lines), encoding="utf-8", newline="\n")
    return path


@pytest.fixture
def iwslt_raw(tmp_path: Path) -> Path:
    """Luong & Manning's file names and format, 80/12/10 lines."""
    rng = random.Random(0)
    raw = tmp_path / "raw_iwslt"
    for stem, n in (("train", 80), ("tst2012", 12), ("tst2013", 10)):
        _write(raw / f"{stem}.en", [_iwslt_line(rng, EN_WORDS) for _ in range(n)])
        _write(raw / f"{stem}.vi", [_iwslt_line(rng, VI_WORDS) for _ in range(n)])
    # The real train files contain a few empty pairs; dev/test keep theirs.
    lines_en = (raw / "train.en").read_text(encoding="utf-8").split("\n")
    lines_vi = (raw / "train.vi").read_text(encoding="utf-8").split("\n")
    lines_en[5] = lines_vi[5] = ""
    (raw / "train.en").write_text("\n".join(lines_en), encoding="utf-8")
    (raw / "train.vi").write_text("\n".join(lines_vi), encoding="utf-8")
    return raw


TEST_EN = ["Gutach: Increased safety for pedestrians", "They are not even 100 metres apart &amp; close.",
           "The &quot;Mayor&quot; said: &lt;no&gt; &#39;comment&#39;", "AT&T and R&D&not   spaced"]
TEST_DE = ["Gutach: Noch mehr Sicherheit für Fußgänger", "Sie liegen keine 100 Meter &amp; nah.",
           "Der &quot;Bürgermeister&quot; sagte: &lt;nein&gt; &#39;Kommentar&#39;", "AT&T und F&E&not   gesperrt"]


@pytest.fixture
def wmt_raw(tmp_path: Path) -> Path:
    """The statmt archives of wmt14_en_de with their real member paths, tiny contents."""
    rng = random.Random(1)
    raw = tmp_path / "raw_wmt"
    raw.mkdir()

    def corpus(n: int, tag: str) -> tuple[list[str], list[str]]:
        en = [f"{tag} " + " ".join(rng.choice(EN_WORDS) for _ in range(rng.randint(2, 9))) + " ." for _ in range(n)]
        de = [f"{tag} " + " ".join(rng.choice(["Welt", "Zeit", "Schule", "gut", "heute", "Wasser", "Größe"])
                                    for _ in range(rng.randint(2, 9))) + " ." for _ in range(n)]
        return en, de

    members = {
        "training-parallel-europarl-v7.tgz": ("training/europarl-v7.de-en", corpus(30, "ep")),
        "training-parallel-commoncrawl.tgz": ("commoncrawl.de-en", corpus(20, "cc")),
        "training-parallel-nc-v9.tgz": ("training/news-commentary-v9.de-en", corpus(10, "nc")),
    }
    members["training-parallel-commoncrawl.tgz"][1][0][3] = ""  # an empty source line: dropped
    for archive, (stem, (en, de)) in members.items():
        with tarfile.open(raw / archive, "w:gz") as tar:
            _add(tar, f"{stem}.fr", _text(["ignored"] * len(en)))  # other language pairs share archives
            _add(tar, f"{stem}.en", _text(en))
            _add(tar, f"{stem}.de", _text(de))
    with tarfile.open(raw / "wmt13-test.tgz", "w:gz") as tar:
        for lang, segs in (("en", ["Dev one .", "Dev two &amp; three ."]), ("de", ["Dev eins .", "Dev zwei ."])):
            _add(tar, f"test/newstest2013-src.{lang}.sgm",
                 _sgm("src", lang, [("d1", segs)], setid="newstest2013").encode())
    with tarfile.open(raw / "test-full.tgz", "w:gz") as tar:
        _add(tar, "test-full/newstest2014-deen-src.en.sgm", _sgm("src", "en", [("a", TEST_EN[:2]), ("b", TEST_EN[2:])]).encode())
        _add(tar, "test-full/newstest2014-deen-ref.de.sgm", _sgm("ref", "de", [("a", TEST_DE[:2]), ("b", TEST_DE[2:])]).encode())
    return raw


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------ readers


def test_read_parallel_pairs_lines_and_keeps_text_as_distributed(iwslt_raw: Path):
    pairs = read_parallel(iwslt_raw / "tst2012.en", iwslt_raw / "tst2012.vi")
    assert len(pairs) == 12
    en = (iwslt_raw / "tst2012.en").read_text(encoding="utf-8").split("\n")[:12]
    assert [p[0] for p in pairs] == en  # entities untouched: tokenized BLEU uses them as they are


def test_read_parallel_mismatch_names_both_files(tmp_path: Path):
    longer = _write(tmp_path / "a.en", ["one", "two", "three"])
    shorter = _write(tmp_path / "a.vi", ["một", "hai"])
    for src, tgt, n_src, n_tgt in ((longer, shorter, 3, 2), (shorter, longer, 2, 3)):
        with pytest.raises(ValueError) as err:
            read_parallel(src, tgt)
        assert f"{src} has {n_src} lines" in str(err.value) and f"{tgt} has {n_tgt}" in str(err.value)


def test_lines_end_only_at_newline(tmp_path: Path):
    # U+2028 and a lone \r occur inside lines of the web corpora; they must not split a line.
    path = tmp_path / "odd.txt"
    path.write_bytes("a\u2028b\nc\rd\ne".encode("utf-8"))
    other = _write(tmp_path / "other.txt", ["1", "2", "3"])
    assert count_lines(path) == 3
    pairs = read_parallel(path, other)
    assert [p[0] for p in pairs] == ["a b", "c d", "e"]  # written back without line-break characters


def test_read_sgm_extracts_segments_in_order_and_unescapes(tmp_path: Path):
    path = tmp_path / "newstest2014-deen-src.en.sgm"
    path.write_text(_sgm("src", "en", [("doc-b", TEST_EN[:2]), ("doc-a", TEST_EN[2:])]), encoding="utf-8")
    assert read_sgm(path) == [
        "Gutach: Increased safety for pedestrians",
        "They are not even 100 metres apart & close.",
        "The \"Mayor\" said: <no> 'comment'",
        "AT&T and R&D&not spaced",  # raw "&" kept (html.unescape would turn "&not" into "¬")
    ]
    assert unescape_xml("&amp;lt;") == "&lt;"  # decoded once
    bad = tmp_path / "plain.txt"
    bad.write_text("no markup\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no <seg>"):
        read_sgm(bad)


def test_check_lines_catches_a_truncated_iwslt_file(tmp_path: Path):
    full = _write(tmp_path / "tst2013.en", ["x"] * 1268)
    check_lines(full, IWSLT15_LINES["tst2013"])
    truncated = tmp_path / "train.en"
    truncated.write_text("a\n" * 1000 + "half a li", encoding="utf-8")  # cut mid-line
    with pytest.raises(ValueError) as err:
        check_lines(truncated, IWSLT15_LINES["train"])
    assert str(truncated) in str(err.value) and "1,001 lines, expected 133,317 (truncated" in str(err.value)


def test_iwslt_source_records_the_papers_splits():
    spec = SOURCES["iwslt15_en_vi"]
    assert IWSLT15_LINES == {"train": 133_317, "tst2012": 1_553, "tst2013": 1_268}
    assert (spec.dev[0].src, spec.test.src) == ("tst2012.en", "tst2013.en")
    assert all(f.md5 is None and f.url.startswith("https://nlp.stanford.edu/") for f in spec.files)
    de = SOURCES["wmt14_en_de"]
    assert de.test.lines == 3003 and de.test.src == "test-full/newstest2014-deen-src.en.sgm"
    fr = SOURCES["wmt14_en_fr"]
    assert [c.src.split("/")[-1] for c in fr.dev] == ["newstest2012-src.en.sgm", "newstest2013-src.en.sgm"]
    assert len(fr.train) == 5
    for spec in SOURCES.values():  # public md5s only where cited; well-formed where present
        assert all(f.md5 is None or len(f.md5) == 32 for f in spec.files)
        assert spec.vocab_size == VOCAB_SIZES[spec.name]


# ------------------------------------------------------------------ verified downloads


def test_trust_on_first_use_writes_the_lock_then_verifies(tmp_path: Path):
    remote = _write(tmp_path / "remote" / "train.en", ["hello world", "second line"])
    lock = tmp_path / "resources" / "checksums.lock.json"
    file = RemoteFile("train.en", remote.as_uri())
    dest_dir = tmp_path / "raw"

    got = fetch_file(file, dest_dir, key="toy/train.en", lock_path=lock)
    assert got.read_bytes() == remote.read_bytes()
    entry = read_lock(lock)["toy/train.en"]
    assert entry["md5"] == _md5(remote) and entry["url"] == remote.as_uri()

    assert fetch_file(file, dest_dir, key="toy/train.en", lock_path=lock) == got  # verified, kept

    got.write_text("corrupted locally\n")  # a bad local copy is replaced by a good download
    fetch_file(file, dest_dir, key="toy/train.en", lock_path=lock)
    assert _md5(got) == entry["md5"]

    _write(remote, ["hello world", "the host changed the file"])  # now the source itself changed
    got.unlink()
    with pytest.raises(ChecksumError) as err:
        fetch_file(file, dest_dir, key="toy/train.en", lock_path=lock)
    assert str(got) in str(err.value) and entry["md5"] in str(err.value)
    assert not got.exists() and not list(dest_dir.glob(".*part"))  # removed, nothing half-written
    assert read_lock(lock)["toy/train.en"]["md5"] == entry["md5"]  # the lock is not rewritten


def test_pinned_md5_wins_and_a_mismatch_names_the_file(tmp_path: Path):
    remote = _write(tmp_path / "remote" / "tst2012.vi", ["xin chào"])
    lock = tmp_path / "lock.json"
    file = RemoteFile("tst2012.vi", remote.as_uri())
    with pytest.raises(ChecksumError, match="tst2012.vi"):
        fetch_file(file, tmp_path / "raw", key="k", lock_path=lock, md5="0" * 32)
    assert not (tmp_path / "raw" / "tst2012.vi").exists() and not lock.exists()
    fetch_file(file, tmp_path / "raw", key="k", lock_path=lock, md5=_md5(remote))
    assert not lock.exists()  # a pinned or public md5 needs no lock entry


def test_first_download_with_wrong_line_count_is_not_trusted(tmp_path: Path):
    mirror = tmp_path / "mirror"
    for name in ("train.en", "train.vi", "tst2012.en", "tst2012.vi", "tst2013.en", "tst2013.vi"):
        _write(mirror / name, ["a truncated copy", "of two lines"])
    lock = tmp_path / "lock.json"
    with pytest.raises(ValueError) as err:
        fetch_source("iwslt15_en_vi", tmp_path / "raw", lock_path=lock, mirror=mirror.as_uri())
    msg = str(err.value)
    assert "train.en" in msg and "2 lines, expected 133,317" in msg and mirror.as_uri() in msg
    assert not (tmp_path / "raw" / "train.en").exists() and read_lock(lock) == {}


def _statmt_tgz(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            _add(tar, name, data)
    return path


EUROPARL_MEMBERS = ("training/europarl-v7.de-en.en", "training/europarl-v7.de-en.de")


@pytest.mark.parametrize("served, why", [
    (b"<!DOCTYPE html><html><body>503 Service Unavailable</body></html>\n", "not a readable tar or zip archive"),
    ("cut", "not a readable tar or zip archive"),  # a gzip body cut short, with no Content-Length to tell
    ("other", "no member training/europarl-v7.de-en.de, training/europarl-v7.de-en.en inside"),
])
def test_an_archive_is_looked_inside_before_its_first_md5_is_recorded(tmp_path: Path, served, why):
    """WMT's training archives have no public md5: the first download's is recorded. An HTML error
    page, a body cut short or another archive must not become the trusted file."""
    whole = _statmt_tgz(tmp_path / "whole.tgz", {m: b"Resumption of the session\n" * 2000 for m in EUROPARL_MEMBERS})
    remote = tmp_path / "remote" / "training-parallel-europarl-v7.tgz"
    remote.parent.mkdir()
    if served == "cut":
        remote.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    elif served == "other":
        _statmt_tgz(remote, {"training/europarl-v7.fr-en.en": b"x\n"})
    else:
        remote.write_bytes(served)
    lock, file = tmp_path / "lock.json", RemoteFile(remote.name, remote.as_uri())
    with pytest.raises(ValueError, match=f"{remote.name} \\(downloaded from .*; removed, nothing recorded\\): {why}"):
        fetch_file(file, tmp_path / "raw", key=f"wmt14_en_de/{remote.name}", lock_path=lock, members=EUROPARL_MEMBERS)
    assert read_lock(lock) == {} and not (tmp_path / "raw" / remote.name).exists()
    placed = tmp_path / "raw" / remote.name  # the same file placed by hand: refused, left, not recorded
    placed.write_bytes(remote.read_bytes())
    with pytest.raises(ValueError, match=f"a file already there; nothing recorded\\): {why}"):
        fetch_file(file, tmp_path / "raw", key=f"wmt14_en_de/{remote.name}", lock_path=lock, members=EUROPARL_MEMBERS)
    assert placed.exists() and read_lock(lock) == {}
    placed.unlink()
    remote.write_bytes(whole.read_bytes())  # the source serves the real archive again
    fetch_file(file, tmp_path / "raw", key=f"wmt14_en_de/{remote.name}", lock_path=lock, members=EUROPARL_MEMBERS)
    assert read_lock(lock)[f"wmt14_en_de/{remote.name}"]["md5"] == _md5(whole)


def test_fetch_source_looks_for_the_members_each_dataset_reads():
    from resrepro.data.translation import archive_members

    de, fr = SOURCES["wmt14_en_de"], SOURCES["wmt14_en_fr"]
    assert archive_members(de, "training-parallel-europarl-v7.tgz") == EUROPARL_MEMBERS
    assert archive_members(fr, "training-parallel-europarl-v7.tgz") == ("training/europarl-v7.fr-en.en", "training/europarl-v7.fr-en.fr")
    assert archive_members(fr, "training-giga-fren.tar") == ("giga-fren.release2.fixed.en.gz", "giga-fren.release2.fixed.fr.gz")
    assert archive_members(de, "test-full.tgz") == ("test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm")
    assert archive_members(SOURCES["iwslt15_en_vi"], "train.en") == ()  # a plain file


def test_a_recorded_md5_that_no_longer_matches_says_how_to_clear_it(tmp_path: Path):
    remote = _write(tmp_path / "remote" / "train.en", ["hello world"])
    lock, file = tmp_path / "lock.json", RemoteFile("train.en", remote.as_uri())
    fetch_file(file, tmp_path / "raw", key="toy/train.en", lock_path=lock)
    _write(remote, ["the genuine file"])
    (tmp_path / "raw" / "train.en").unlink()
    with pytest.raises(ChecksumError) as err:
        fetch_file(file, tmp_path / "raw", key="toy/train.en", lock_path=lock)
    message = str(err.value)
    assert f"(downloaded from {remote.as_uri()}; removed); the expected md5 is the one recorded on first use" in message
    assert f"delete the entry 'toy/train.en' from {lock} and run again" in message


def test_a_byte_that_is_not_utf8_in_a_strict_file_names_the_file_and_line(tmp_path: Path):
    """IWSLT's files are valid UTF-8: a byte that is not is a damaged or wrong download, said where."""
    from resrepro.data.translation import iter_lines

    path = tmp_path / "train.vi"
    path.write_bytes("tôi yêu &#91; âm nhạc &#93;\n".encode() + b"hai d\xf2ng\n" + "ba\n".encode())
    with pytest.raises(ValueError, match=rf"{path}, line 2: byte 0xf2 at byte 6 of the line is not UTF-8 \(invalid continuation byte\)"):
        list(iter_lines(path))
    assert list(iter_lines(path, errors="replace")) == ["tôi yêu &#91; âm nhạc &#93;", "hai d\ufffdng", "ba"]  # the web corpora's policy


def test_sources_are_tried_in_order_until_one_gives_the_file(tmp_path: Path):
    """caption_datasets.zip's own URL answers 404: a copy the user lists in download_mirrors is
    tried next, and the first source that gives the right file is the one recorded."""
    good = _write(tmp_path / "copy" / "train.en", ["hello world"])
    page = tmp_path / "page" / "train.en"  # a source answering an HTML page for a text file of 1 line
    page.parent.mkdir()
    page.write_text("<html>\n<body>moved</body>\n</html>\n")
    lock = tmp_path / "lock.json"
    file = RemoteFile("train.en", (tmp_path / "gone" / "train.en").as_uri(), lines=1)
    got = fetch_file(file, tmp_path / "raw", key="toy/train.en", lock_path=lock,
                     mirrors=[page.as_uri(), str(good.parent), (tmp_path / "never-tried").as_uri()])
    assert got.read_bytes() == good.read_bytes()
    assert read_lock(lock)["toy/train.en"]["url"] == str(good)  # the folder, joined with the file's name


def test_when_no_source_gives_the_file_the_error_lists_each_and_says_where_to_place_it(tmp_path: Path):
    lock, raw = tmp_path / "lock.json", tmp_path / "raw"
    file = RemoteFile("caption_datasets.zip", (tmp_path / "gone.zip").as_uri())
    html = tmp_path / "copy" / "caption_datasets.zip"
    html.parent.mkdir()
    html.write_bytes(b"<html>404</html>")
    with pytest.raises(RuntimeError) as err:
        fetch_file(file, raw, key="mscoco/caption_datasets.zip", lock_path=lock, members=["*dataset_coco.json"], mirrors=[html.as_uri()])
    message = str(err.value)
    assert message.startswith("caption_datasets.zip: none of its 2 sources gave the file:\n")
    assert f"  {(tmp_path / 'gone.zip').as_uri()}: could not download" in message
    assert f"  {html.as_uri()}: {raw / 'caption_datasets.zip'} (downloaded from {html.as_uri()}; removed, nothing recorded): not a readable" in message
    assert message.endswith(f"Place the file by hand at {raw / 'caption_datasets.zip'} (it is then checked, and its md5 recorded where none "
                            "is published), or add another source for it under download_mirrors['mscoco/caption_datasets.zip'] in the config.")
    with pytest.raises(RuntimeError, match="could not download") as one:  # one source: its own error, the hint as a note
        fetch_file(file, raw, key="mscoco/caption_datasets.zip", lock_path=lock)
    assert one.value.__notes__ == [message.splitlines()[-1]]
    assert read_lock(lock) == {}


def test_a_file_placed_by_hand_is_checked_recorded_and_tried_before_any_source(tmp_path: Path):
    lock, raw = tmp_path / "lock.json", tmp_path / "raw"
    file = RemoteFile("train.en", (tmp_path / "gone" / "train.en").as_uri(), lines=2)
    placed = _write(raw / "train.en", ["placed", "by hand"])
    assert fetch_file(file, raw, key="toy/train.en", lock_path=lock) == placed  # no source reached
    assert read_lock(lock)["toy/train.en"]["md5"] == _md5(placed)
    wrong = RemoteFile("train.vi", (tmp_path / "gone" / "train.vi").as_uri(), lines=3)
    _write(raw / "train.vi", ["one line"])
    good = _write(tmp_path / "copy" / "train.vi", ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"train.vi \(a file already there; nothing recorded\): 1 lines, expected 3. Delete it"):
        fetch_file(wrong, raw, key="toy/train.vi", lock_path=lock, mirrors=[good.as_uri()])  # never replaced silently
    assert (raw / "train.vi").read_text() == "one line\n" and "toy/train.vi" not in read_lock(lock)


MILLION_BYTES = bytes(range(250)) * 4000  # 1,000,000 bytes, not text: no line count to catch a short file


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A served folder holding train.tgz (MILLION_BYTES)."""
    (tmp_path / "remote").mkdir()
    (tmp_path / "remote" / "train.tgz").write_bytes(MILLION_BYTES)
    return tmp_path / "remote"


def test_a_download_cut_short_once_is_downloaded_again_and_the_whole_file_recorded(remote: Path, tmp_path: Path):
    lock = tmp_path / "lock.json"
    with serving(remote, cut_short=["train.tgz"]) as server:
        got = fetch_file(RemoteFile("train.tgz", server.url + "train.tgz"), tmp_path / "raw", key="toy/train.tgz", lock_path=lock)
    assert len(server.requests) == 2
    assert got.read_bytes() == MILLION_BYTES
    assert read_lock(lock)["toy/train.tgz"]["md5"] == hashlib.md5(MILLION_BYTES).hexdigest()


def test_a_download_always_cut_short_fails_naming_both_sizes_and_records_nothing(remote: Path, tmp_path: Path):
    lock = tmp_path / "lock.json"
    with serving(remote, cut_short={"train.tgz": None}) as server, pytest.raises(IncompleteDownload) as err:
        fetch_file(RemoteFile("train.tgz", server.url + "train.tgz"), tmp_path / "raw", key="toy/train.tgz", lock_path=lock)
    # the first try brings half; each resumed try from there is cut at the same byte: no new byte
    assert [(r.start, r.sent) for r in server.requests] == [(0, 500_000)] + [(500_000, 0)] * ATTEMPTS
    assert f"{server.url}train.tgz: expected 1,000,000 bytes, received 500,000 (no new byte in the last {ATTEMPTS} tries; removed)" in str(err.value)
    assert read_lock(lock) == {} and list((tmp_path / "raw").iterdir()) == []


@pytest.mark.parametrize("ranges", [True, False])
def test_a_download_cut_at_a_random_byte_is_resumed_where_the_server_accepts_ranges(remote: Path, tmp_path: Path, ranges):
    """train2014.zip is 13.5 GB: a connection cut near its end must not cost the whole file again.
    A server that ignores ranges answers 200 with the whole file, which is then written from the start."""
    cut = random.Random(7).random()
    lock = tmp_path / "lock.json"
    with serving(remote, cut_short=["train.tgz"], ranges=ranges, cut_at=cut) as server:
        got = fetch_file(RemoteFile("train.tgz", server.url + "train.tgz"), tmp_path / "raw", key="toy/train.tgz", lock_path=lock)
    at = int(len(MILLION_BYTES) * cut)
    if ranges:
        assert [(r.start, r.sent, r.status) for r in server.requests] == [(0, at, 200), (at, len(MILLION_BYTES) - at, 206)]
    else:
        assert [(r.start, r.sent, r.status) for r in server.requests] == [(0, at, 200), (0, len(MILLION_BYTES), 200)]
    assert _md5(got) == hashlib.md5(MILLION_BYTES).hexdigest() == read_lock(lock)["toy/train.tgz"]["md5"]


def test_mirror_replaces_the_host_but_not_the_file_name():
    f = SOURCES["iwslt15_en_vi"].files[0]
    assert source_url(f) == "https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi/train.en"
    assert source_url(f, "https://mirror.example/iwslt/") == "https://mirror.example/iwslt/train.en"


# ------------------------------------------------------------------------ preparation


def test_prepare_iwslt(iwslt_raw: Path, tmp_path: Path):
    out = tmp_path / "prepared" / "iwslt15_en_vi"
    meta = prepare_translation("iwslt15_en_vi", iwslt_raw, out, vocab_size=400, check_counts=False,
                               detokenize=lambda line, lang: f"{lang}|{line}")
    assert meta["pairs"] == {"train": 79, "dev": 12, "test": 10} and meta["dropped_empty_train_pairs"] == 1
    assert meta["tokenized"] is True and meta["references"]["tokenized"] == "test.tgt"
    assert (out / "test.tgt").read_bytes() == (iwslt_raw / "tst2013.vi").read_bytes()  # as distributed
    detok = (out / "test.ref.detok").read_text(encoding="utf-8").split("\n")[:-1]
    assert detok == [f"vi|{line}" for line in (iwslt_raw / "tst2013.vi").read_text(encoding="utf-8").split("\n")[:-1]]
    assert load_prepared_meta(out) == meta

    vocab = SubwordVocab.load(out / "subword.model")
    assert vocab.size == 400 == meta["subword"]["vocab_size"]
    for split in ("train", "dev", "test"):
        enc = load_encoded(out, split)
        src = (out / f"{split}.src").read_text(encoding="utf-8").split("\n")[:-1]
        tgt = (out / f"{split}.tgt").read_text(encoding="utf-8").split("\n")[:-1]
        assert len(enc) == len(src) == len(tgt) == meta["pairs"][split]
        for i in range(len(enc)):  # exact round trip, entities and Vietnamese diacritics included
            assert vocab.decode(enc[i][0]) == src[i] and vocab.decode(enc[i][1]) == tgt[i]
        assert enc[0][0].dtype == np.int32 and EOS_ID not in enc.src_ids


def test_prepare_iwslt_default_counts_catch_a_short_file(iwslt_raw: Path, tmp_path: Path):
    with pytest.raises(ValueError, match=r"train.en has 80 lines, expected 133,317 \(truncated"):
        prepare_translation("iwslt15_en_vi", iwslt_raw, tmp_path / "out", vocab_size=400)
    assert not (tmp_path / "out" / "prepared.json").exists()


def test_prepare_iwslt_default_detokenizer_is_moses(iwslt_raw: Path, tmp_path: Path):
    bleu = pytest.importorskip("resrepro.evaluate.bleu")
    pytest.importorskip("sacremoses")
    out = tmp_path / "out"
    meta = prepare_translation("iwslt15_en_vi", iwslt_raw, out, vocab_size=400, check_counts=False)
    assert "detokenize_moses" in meta["references"]["detokenizer"]
    tgt = (out / "test.tgt").read_text(encoding="utf-8").split("\n")[:-1]
    assert (out / "test.ref.detok").read_text(encoding="utf-8").split("\n")[:-1] == [
        bleu.detokenize_moses(t, "vi") for t in tgt]


def test_prepare_wmt_from_statmt_archives(wmt_raw: Path, tmp_path: Path):
    out = tmp_path / "prepared" / "wmt14_en_de"
    meta = prepare_translation("wmt14_en_de", wmt_raw, out, vocab_size=330, check_counts=False)
    assert meta["pairs"] == {"train": 59, "dev": 2, "test": 4} and meta["dropped_empty_train_pairs"] == 1
    train = (out / "train.src").read_text(encoding="utf-8").split("\n")[:-1]
    assert [t[:2] for t in train] == ["ep"] * 30 + ["cc"] * 19 + ["nc"] * 10  # corpora in order
    test_src = (out / "test.src").read_text(encoding="utf-8").split("\n")[:-1]
    assert test_src[1] == "They are not even 100 metres apart & close."
    assert (out / "test.ref.detok").read_bytes() == (out / "test.tgt").read_bytes()  # raw text already
    assert meta["tokenized"] is False and meta["references"]["tokenized"] is None
    assert (out / "dev.src").read_text(encoding="utf-8") == "Dev one .\nDev two & three .\n"
    verified = {s["name"]: s["verified_by"] for s in meta["sources"]}
    assert verified["test-full.tgz"] == "public md5"
    assert verified["training-parallel-europarl-v7.tgz"].startswith("trust on first use")
    assert not list((tmp_path / "prepared").glob(".wmt14_en_de-extract-*"))  # temp files cleaned


def test_prepare_wmt_checks_test_set_sizes(wmt_raw: Path, tmp_path: Path):
    with pytest.raises(ValueError, match=r"newstest2013-src.en.sgm in .*wmt13-test.tgz has 2 lines, expected 3,000"):
        prepare_translation("wmt14_en_de", wmt_raw, tmp_path / "out", vocab_size=330)


def test_extract_members_gunzips_and_names_missing_members(tmp_path: Path):
    archive = tmp_path / "training-giga-fren.tar"
    with tarfile.open(archive, "w") as tar:
        _add(tar, "giga-fren.release2.fixed.en.gz", gzip.compress(b"hello\n"))
        _add(tar, "./giga-fren.release2.fixed.fr.gz", gzip.compress("bonjour é\n".encode()))
    en, fr = extract_members(archive, ["giga-fren.release2.fixed.en.gz", "giga-fren.release2.fixed.fr.gz"],
                             tmp_path / "x")
    assert en.name == "giga-fren.release2.fixed.en" and en.read_text() == "hello\n"
    assert fr.read_text(encoding="utf-8") == "bonjour é\n"
    with pytest.raises(ValueError, match="no file un/undoc.2000.fr-en.en"):
        extract_members(archive, ["un/undoc.2000.fr-en.en"], tmp_path / "x")


def test_unknown_dataset_lists_the_allowed(tmp_path: Path):
    with pytest.raises(ValueError, match="allowed: iwslt15_en_vi, wmt14_en_de"):
        prepare_translation("wmt15_en_xx", tmp_path, tmp_path / "out")


# -------------------------------------------------------------------- synthetic corpus


def test_synthetic_is_deterministic_per_seed_and_differs_across_seeds():
    a = synth.generate_corpus(300, 30, 30, seed=3)
    assert a == synth.generate_corpus(300, 30, 30, seed=3)
    assert a["train"] != synth.generate_corpus(300, 30, 30, seed=4)["train"]
    assert [len(a[s]) for s in ("train", "dev", "test")] == [300, 30, 30]
    sources = [s for split in a.values() for s, _ in split]
    assert len(set(sources)) == len(sources)  # no test sentence is in train


def test_synthetic_default_sizes_and_lengths():
    corpus = synth.generate_corpus(seed=0)
    assert [len(corpus[s]) for s in ("train", "dev", "test")] == [4000, 300, 300]
    lengths = [len(s.split()) for s, _ in corpus["train"]]
    assert min(lengths) == synth.MIN_TOKENS == 4 and max(lengths) == synth.MAX_TOKENS == 14
    assert sum(n >= 12 for n in lengths) > 500  # long sentences exist ...
    assert sum(" , " in t for _, t in corpus["train"]) > 500  # ... with a subordinate clause moved first
    assert sum(" that " in s for s, _ in corpus["train"]) > 300  # and with a complement clause


def test_synthetic_grammar_on_one_sentence():
    # "the big dog saw the small red cats because three women will sing ."
    s = synth.Sentence(
        main=synth.Clause(synth.NounPhrase("dog", adjectives=("big",)), "see", "past",
                          obj=synth.NounPhrase("cat", plural=True, adjectives=("small", "red"))),
        conj="because",
        sub=synth.Clause(synth.NounPhrase("woman", plural=True, det="num", count=3), "sing", "fut"))
    assert synth.source_sentence(s) == "the big dog saw the small red cats because three women will sing ."
    # subordinate clause first, SOV, adjectives after the noun (mirrored), gender/number agreement,
    # object marker, irregular past (vid -> vist), plural verb agreement (-eron)
    assert synth.target_sentence(s) == "tri donas kanteron porke , lo hund grando le gatas rube pike ko vist ."
    fronted = synth.Sentence(s.main, "because", s.sub, fronted=True)
    assert synth.source_sentence(fronted).startswith("because three women will sing , the big dog")
    assert synth.target_sentence(fronted) == synth.target_sentence(s)

    kids = synth.Clause(synth.NounPhrase("child", plural=True, det="dem"), "say", "past",
                        complement=synth.Clause(synth.NounPhrase("apple", det="indef", adjectives=("old",)), "fall"))
    assert synth.source_sentence(synth.Sentence(kids)) == "these children said that an old apple falls ."
    assert synth.target_sentence(synth.Sentence(kids)) == "kesti kindar un pom vetulo kada ke diten ."


def _forms() -> tuple[dict, dict, dict]:
    """target noun form -> (stem, gender, plural); adjective form -> (stem, gender, plural); verb form -> stem."""
    nouns = {synth.target_noun(n[0], pl): (n[2], n[3], pl) for n in synth.NOUNS for pl in (False, True)}
    adjs = {synth.target_adjective(a, g, pl): (stem, g, pl) for a, stem in synth.ADJECTIVES
            for g in "mf" for pl in (False, True)}
    verbs = {synth.target_verb(v[0], t, pl): v[3] for v in synth.VERBS for t in synth.TENSES for pl in (False, True)}
    return nouns, adjs, verbs


def test_synthetic_target_forms_are_unambiguous():
    nouns, adjs, verbs = _forms()
    function = {w for table in synth.DETERMINERS.values() for w in table.values()}
    function |= {t for _, t in synth.NUMERALS.values()} | set(synth.CONJUNCTIONS.values()) | {"ko", "ke", ",", "."}
    sizes = [len(nouns), len(adjs), len(verbs), len(function)]
    assert len(set(nouns) | set(adjs) | set(verbs) | function) == sum(sizes)
    assert len(nouns) == 2 * len(synth.NOUNS) and len(verbs) == 6 * len(synth.VERBS)


def test_synthetic_reorders_relative_to_a_word_by_word_gloss():
    nouns, adjs, verbs = _forms()
    gloss = {}  # source content word -> target stem
    for sg, pl, stem, *_ in synth.NOUNS:
        gloss[sg] = gloss[pl] = stem
    gloss.update({a: stem for a, stem in synth.ADJECTIVES})
    for base, third, past, stem, *_ in synth.VERBS:
        gloss[base] = gloss[third] = gloss[past] = stem
    target_stem = {**{f: v[0] for f, v in nouns.items()}, **{f: v[0] for f, v in adjs.items()}, **verbs}

    pairs = synth.generate_corpus(500, 0, 0, seed=7)["train"]
    reordered = 0
    for src, tgt in pairs:
        word_by_word = [gloss[w] for w in src.split() if w in gloss]
        actual = [target_stem[w] for w in tgt.split() if w in target_stem]
        assert sorted(word_by_word) == sorted(actual), (src, tgt)  # same content words ...
        reordered += word_by_word != actual  # ... in another order
    assert reordered / len(pairs) > 0.8  # only short intransitive sentences keep the order


def test_synthetic_agreement_and_morphology_hold_across_the_corpus():
    nouns, adjs, verbs = _forms()
    det_agreement = {w: key for table in synth.DETERMINERS.values() for key, w in table.items()}
    seen_keys, checked = set(), 0
    corpus = synth.generate_corpus(1000, 0, 0, seed=11)["train"]
    for _, tgt in corpus:
        words = tgt.split()
        for i, w in enumerate(words):
            if w in det_agreement:  # det noun adj*: all agree in gender and number
                _, g, pl = nouns[words[i + 1]]
                assert det_agreement[w] == (g, pl), tgt
                j = i + 2
                while j < len(words) and words[j] in adjs:
                    assert adjs[words[j]][1:] == (g, pl), tgt
                    j += 1
                seen_keys.add((g, pl))
                checked += 1
    assert checked > 1000 and seen_keys == {("m", False), ("f", False), ("m", True), ("f", True)}

    words = {w for _, t in corpus for w in t.split()}
    assert {"omin", "kindar", "mis", "regen"} & words  # irregular plurals
    assert {"vist", "visten", "edit", "kors", "dit"} & words  # irregular pasts
    for suffix in ("a", "an", "is", "isen", "ero", "eron"):  # every tense x number
        assert any(w in verbs and w == verbs[w] + suffix for w in words), suffix
    # the verb agrees with its subject's number: a plural subject is never followed by a singular verb form
    one = synth.Sentence(synth.Clause(synth.NounPhrase("king", plural=True), "walk", "past"))
    assert synth.target_sentence(one) == "li regen marchisen ."
    assert synth.source_sentence(one) == "the kings walked ."


# ------------------------------------------------------------------------ subwords


@pytest.fixture(scope="module")
def synthetic_text(tmp_path_factory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("synthetic")
    paths = synth.write_corpus(synth.generate_corpus(1000, 10, 10, seed=0), directory)
    return paths["train"]


def test_subword_round_trip_and_special_ids(synthetic_text, tmp_path: Path):
    model = train_subword(list(synthetic_text), tmp_path / "spm", 600, seed=0)
    assert model == tmp_path / "spm.model" and (tmp_path / "spm.vocab").exists()
    vocab = SubwordVocab.load(model)
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert [vocab.piece(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert vocab.size == len(vocab) == 600
    for path in synthetic_text:
        for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
            ids = vocab.encode(line)
            assert vocab.decode(ids) == line and min(ids) > UNK_ID
    ids = vocab.encode("the dog sleeps .")
    assert vocab.decode([BOS_ID] + ids + [EOS_ID] + vocab.encode("junk") + [PAD_ID]) == "the dog sleeps ."
    assert vocab.decode(vocab.encode("zürich qué")) == "zürich qué"  # unseen characters: byte pieces, no <unk>


def test_subword_same_seed_same_model_bytes(synthetic_text, tmp_path: Path):
    a = train_subword(list(synthetic_text), tmp_path / "a" / "spm", 600, seed=5)
    b = train_subword(list(synthetic_text), tmp_path / "b" / "other", 600, seed=5)
    assert a.read_bytes() == b.read_bytes()
    # sampled training (a line cap, as for WMT): the seed picks the sample, reproducibly
    c = train_subword(list(synthetic_text), tmp_path / "c", 500, seed=1, max_sentences=600)
    d = train_subword(list(synthetic_text), tmp_path / "d", 500, seed=1, max_sentences=600)
    e = train_subword(list(synthetic_text), tmp_path / "e", 500, seed=2, max_sentences=600)
    assert c.read_bytes() == d.read_bytes() != e.read_bytes()


def test_subword_errors_are_explicit(synthetic_text, tmp_path: Path):
    with pytest.raises(ValueError, match=r"Vocabulary size too high"):
        train_subword(list(synthetic_text), tmp_path / "big", 50_000)
    # a model with sentencepiece's default ids (unk 0, no pad) is refused
    spm.SentencePieceTrainer.train(input=str(synthetic_text[0]), model_prefix=str(tmp_path / "foreign"),
                                   vocab_size=300, model_type="bpe", minloglevel=2)
    with pytest.raises(ValueError, match="foreign.model: special ids"):
        SubwordVocab.load(tmp_path / "foreign.model")
    with pytest.raises(ValueError, match="cannot load"):
        SubwordVocab.load(tmp_path / "missing.model")


def test_prepare_synthetic_in_the_real_layout(tmp_path: Path):
    out = tmp_path / "synthetic"
    meta = prepare_synthetic(out, n_train=600, n_dev=20, n_test=20, seed=2)
    assert meta["pairs"] == {"train": 600, "dev": 20, "test": 20}
    assert meta["subword"]["vocab_size"] == VOCAB_SIZES["synthetic"] == 800
    assert (out / "raw" / "train.src").read_bytes() == (out / "train.src").read_bytes()
    assert (out / "test.ref.detok").read_bytes() == (out / "test.tgt").read_bytes()
    vocab = SubwordVocab.load(out / "subword.model")
    enc = load_encoded(out, "test", mmap=False)
    tgt = (out / "test.tgt").read_text(encoding="utf-8").split("\n")[:-1]
    assert [vocab.decode(enc[i][1]) for i in range(len(enc))] == tgt
    assert enc.tgt_lengths().sum() == len(enc.tgt_ids)
    corpus = synth.generate_corpus(600, 20, 20, seed=2)
    assert tgt == [t for _, t in corpus["test"]]
    # a second preparation with the same seed is identical, file for file
    again = tmp_path / "again"
    prepare_synthetic(again, n_train=600, n_dev=20, n_test=20, seed=2)
    for name in ("subword.model", "train.tgt.ids.npy", "train.tgt.offsets.npy", "test.ref.detok"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), name
    json.loads((out / "prepared.json").read_text())
    with pytest.raises(ValueError, match="unknown split"):
        load_encoded(out, "valid")
