"""Translation data: sources, verified downloads, readers, and the prepared format.

SOURCES (paper scale; the papers' 4.1.2 / 4.1 splits)
  iwslt15_en_vi  Luong & Manning's preprocessed IWSLT15 files (Moses-tokenized, HTML
                 entities such as &apos; &quot;): train 133,317 pairs, tst2012 (1,553) dev,
                 tst2013 (1,268) test.
  wmt14_en_de    statmt.org raw text, the corpora of tensor2tensor's translate_ende_wmt32k
                 with WMT14's news-commentary v9 (4.5M pairs, as the papers say):
                 europarl v7 + commoncrawl + news-commentary v9; dev newstest2013; test
                 newstest2014 *full* (3,003 lines; the "filtered" set and Stanford's copy have
                 2,737).
  wmt14_en_de_stanford  Stanford's preprocessed (tokenized) copy of the same data; its
                 newstest2014 is the filtered 2,737 lines. For comparison with Luong-style
                 setups only; wmt14_en_de is the default.
  wmt14_en_fr    statmt.org raw text: europarl v7, commoncrawl, UN, news-commentary v9,
                 giga-fren (fairseq's prepare-wmt14en2fr.sh, t2t's translate_enfr_wmt32k);
                 dev newstest2012 + newstest2013; test newstest2014 full (3,003 lines).
Why raw text for WMT: the papers used tensor2tensor, which trains its subword vocabulary on
the raw statmt corpora; train, dev and test are then all raw text and consistent (the .sgm
test sets are raw text too).

VERIFICATION, per file (`fetch_file`)
  * An md5 recorded by a public source is used where one exists (cited next to it): the WMT
    dev/test archives, whose md5s sacrebleu records (sacrebleu/dataset/__init__.py, 2.6.0).
  * Otherwise (the Stanford files, the statmt training archives) *trust on first use*: the
    first download's md5 is written to the lock file (resources/checksums.lock.json, meant
    to be committed) and every later fetch verifies against it, so a changed or truncated
    file is removed and named (resrepro.data.download.ChecksumError), with how to clear the
    record where it was wrong. The first download of a plain-text file with a known line count
    (IWSLT) is checked before it is trusted, and an archive is opened and the members the
    pipeline reads looked for (`archive_problem`): an HTML error page or a body cut short
    without a Content-Length is never recorded.
  * A config may pin an md5 (`md5=` argument), which wins over both.
  * A download shorter than its Content-Length is downloaded again (resrepro.data.download):
    a short file is never checked, kept or recorded.
Downloads send a browser User-Agent (nlp.stanford.edu refuses some clients) and accept a
mirror: a base URL or a local folder under which every file of the dataset lies by its file name.

PREPARED FORMAT (out_dir/, written by `prepare_translation` / `prepare_synthetic`)
  {train,dev,test}.{src,tgt}  text as distributed, one sentence per line, UTF-8 (tokenized
                       for IWSLT and Stanford; raw for statmt WMT). Training pairs with an
                       empty side are dropped; dev and test are kept whole.
  test.ref.detok       the test reference for sacrebleu: IWSLT/Stanford: detokenize(line, tgt)
                       (resrepro.data.moses.detokenize_moses unescapes the HTML entities and
                       undoes Moses tokenization); WMT: the .sgm text itself. For tokenized BLEU
                       as the papers report, IWSLT's test.tgt is already tokenized; for WMT the
                       evaluator tokenizes test.tgt and the hypotheses alike (prepared.json
                       "tokenized": false says which).
  subword.model/.vocab joint sentencepiece BPE model (resrepro.data.subword)
  {split}.{src,tgt}.ids.npy / .offsets.npy  the ids of each sentence (no BOS/EOS), int32,
                       flat, sentence i = ids[offsets[i]:offsets[i+1]]; load_encoded memory-maps
                       them (numpy, allow_pickle=False: no code is ever unpickled).
  prepared.json        counts, sources and checksums, vocabulary, references; written last,
                       so a killed job leaves no prepared.json and nothing looks finished.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import sentencepiece

from resrepro.data import subword
from resrepro.data import synthetic_translation as synth
from resrepro.data.download import BROWSER_USER_AGENT, ChecksumError, downloaded, fetch, md5_of
from resrepro.data.subword import SubwordVocab, count_lines, train_subword
from resrepro.files import atomic_write, write_json

DEFAULT_LOCK = Path("resources/checksums.lock.json")
SPLITS = ("train", "dev", "test")

Detokenizer = Callable[[str, str], str]  # (line, language) -> detokenized line


# ----------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class RemoteFile:
    """One file to download, stored under raw_dir by `name`."""

    name: str
    url: str
    md5: str | None = None  # from a public record (cited); None: trust on first use
    lines: int | None = None  # expected lines of a plain-text file, checked on first download
    size: int | None = None  # bytes, where the source declares them (else its Content-Length is checked)


@dataclass(frozen=True)
class Corpus:
    """One parallel text inside the downloads: two plain files, or two archive members.

    `src`/`tgt` are file names under raw_dir when `archive` is None, else member paths inside
    the archive (a ".gz" member is gunzipped). `sgm`: WMT test-set markup (see read_sgm).
    """

    src: str
    tgt: str
    archive: str | None = None
    sgm: bool = False
    lines: int | None = None  # expected sentences; checked unless check_counts=False


@dataclass(frozen=True)
class TranslationSource:
    name: str
    src_lang: str
    tgt_lang: str
    files: tuple[RemoteFile, ...]
    train: tuple[Corpus, ...]
    dev: tuple[Corpus, ...]
    test: Corpus
    tokenized: bool  # text is Moses-tokenized as distributed (references need detokenizing)
    character_coverage: float = 1.0
    note: str = ""
    vocab_size: int = field(default=0)
    # tokenized BLEU splits hyphenated compounds after Moses tokenization, as tensor2tensor's
    # get_ende_bleu.sh scores EN-DE (evaluate/bleu.split_compounds): the papers' EN-DE metric
    split_compounds: bool = False

    def __post_init__(self) -> None:
        if not self.vocab_size:
            object.__setattr__(self, "vocab_size", subword.VOCAB_SIZES[self.name])


IWSLT15_URL = "https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi/"
# Line counts of Luong & Manning's files (their page; docs/facts.md). No public md5 exists: TOFU.
IWSLT15_LINES = {"train": 133_317, "tst2012": 1_553, "tst2013": 1_268}

STANFORD_WMT14_URL = "https://nlp.stanford.edu/projects/nmt/data/wmt14.en-de/"
STATMT = "https://statmt.org/"
# md5s recorded by sacrebleu 2.6.0 (sacrebleu/dataset/__init__.py, DATASETS "wmt12", "wmt13",
# "wmt14/full"), which downloads these archives from the same URLs and verifies them.
WMT12_TEST = RemoteFile("wmt12-test.tgz", STATMT + "wmt12/test.tgz", md5="608232d34ebc4ba2ff70fead45674e47")
WMT13_TEST = RemoteFile("wmt13-test.tgz", STATMT + "wmt13/test.tgz", md5="48eca5d02f637af44e85186847141f67")
WMT14_TEST_FULL = RemoteFile("test-full.tgz", STATMT + "wmt14/test-full.tgz", md5="a8cd784e006feb32ac6f3d9ec7eb389a")
# Training archives: URLs and members as in fairseq's examples/translation/prepare-wmt14en2{de,fr}.sh
# and tensor2tensor's translate_ende.py / translate_enfr.py. No public md5: TOFU.
EUROPARL_V7 = RemoteFile("training-parallel-europarl-v7.tgz", STATMT + "wmt13/training-parallel-europarl-v7.tgz")
COMMONCRAWL = RemoteFile("training-parallel-commoncrawl.tgz", STATMT + "wmt13/training-parallel-commoncrawl.tgz")
NEWS_COMMENTARY_V9 = RemoteFile("training-parallel-nc-v9.tgz", STATMT + "wmt14/training-parallel-nc-v9.tgz")
UN = RemoteFile("training-parallel-un.tgz", STATMT + "wmt13/training-parallel-un.tgz")
GIGA_FREN = RemoteFile("training-giga-fren.tar", STATMT + "wmt10/training-giga-fren.tar")

# newstest sizes (sentences): 2012: 3,003; 2013: 3,000; 2014 full: 3,003; 2014 filtered en-de: 2,737.


def _wmt_train(pair: str, corpora: Sequence[tuple[RemoteFile, str]], src: str, tgt: str) -> tuple[Corpus, ...]:
    return tuple(Corpus(member.format(pair=pair, lang=src), member.format(pair=pair, lang=tgt), f.name)
                 for f, member in corpora)


def _newstest(archive: RemoteFile, year: int, src: str, tgt: str, lines: int) -> Corpus:
    # WMT12/13 test.tgz hold one multi-parallel file per language, all named "-src".
    return Corpus(f"test/newstest{year}-src.{src}.sgm", f"test/newstest{year}-src.{tgt}.sgm",
                  archive.name, sgm=True, lines=lines)


SOURCES: dict[str, TranslationSource] = {
    "iwslt15_en_vi": TranslationSource(
        name="iwslt15_en_vi", src_lang="en", tgt_lang="vi",
        files=tuple(RemoteFile(f"{stem}.{lang}", IWSLT15_URL + f"{stem}.{lang}", lines=n)
                    for stem, n in IWSLT15_LINES.items() for lang in ("en", "vi")),
        train=(Corpus("train.en", "train.vi", lines=IWSLT15_LINES["train"]),),
        dev=(Corpus("tst2012.en", "tst2012.vi", lines=IWSLT15_LINES["tst2012"]),),
        test=Corpus("tst2013.en", "tst2013.vi", lines=IWSLT15_LINES["tst2013"]),
        tokenized=True,
        note="Luong & Manning (2015) preprocessed IWSLT15; dev tst2012, test tst2013",
    ),
    "wmt14_en_de": TranslationSource(
        name="wmt14_en_de", src_lang="en", tgt_lang="de",
        files=(EUROPARL_V7, COMMONCRAWL, NEWS_COMMENTARY_V9, WMT13_TEST, WMT14_TEST_FULL),
        train=_wmt_train("de-en", [(EUROPARL_V7, "training/europarl-v7.{pair}.{lang}"),
                                   (COMMONCRAWL, "commoncrawl.{pair}.{lang}"),
                                   (NEWS_COMMENTARY_V9, "training/news-commentary-v9.{pair}.{lang}")],
                         "en", "de"),
        dev=(_newstest(WMT13_TEST, 2013, "en", "de", 3000),),
        test=Corpus("test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm",
                    WMT14_TEST_FULL.name, sgm=True, lines=3003),
        tokenized=False, character_coverage=0.9999, split_compounds=True,
        note="WMT14 EN-DE raw statmt text; dev newstest2013, test newstest2014 (full, 3,003)",
    ),
    "wmt14_en_de_stanford": TranslationSource(
        name="wmt14_en_de_stanford", src_lang="en", tgt_lang="de",
        files=tuple(RemoteFile(f"{stem}.{lang}", STANFORD_WMT14_URL + f"{stem}.{lang}", lines=n)
                    for stem, n in (("train", None), ("newstest2013", 3000), ("newstest2014", 2737))
                    for lang in ("en", "de")),
        train=(Corpus("train.en", "train.de"),),
        dev=(Corpus("newstest2013.en", "newstest2013.de", lines=3000),),
        test=Corpus("newstest2014.en", "newstest2014.de", lines=2737),
        tokenized=True, character_coverage=0.9999,
        note="Stanford's tokenized WMT14 EN-DE; its newstest2014 is the filtered 2,737 lines",
    ),
    "wmt14_en_fr": TranslationSource(
        name="wmt14_en_fr", src_lang="en", tgt_lang="fr",
        files=(EUROPARL_V7, COMMONCRAWL, UN, NEWS_COMMENTARY_V9, GIGA_FREN, WMT12_TEST, WMT13_TEST,
               WMT14_TEST_FULL),
        train=_wmt_train("fr-en", [(EUROPARL_V7, "training/europarl-v7.{pair}.{lang}"),
                                   (COMMONCRAWL, "commoncrawl.{pair}.{lang}"),
                                   (UN, "un/undoc.2000.{pair}.{lang}"),
                                   (NEWS_COMMENTARY_V9, "training/news-commentary-v9.{pair}.{lang}"),
                                   (GIGA_FREN, "giga-fren.release2.fixed.{lang}.gz")],
                         "en", "fr"),
        dev=(_newstest(WMT12_TEST, 2012, "en", "fr", 3003), _newstest(WMT13_TEST, 2013, "en", "fr", 3000)),
        test=Corpus("test-full/newstest2014-fren-src.en.sgm", "test-full/newstest2014-fren-ref.fr.sgm",
                    WMT14_TEST_FULL.name, sgm=True, lines=3003),
        tokenized=False, character_coverage=0.9999,
        note="WMT14 EN-FR raw statmt text; dev newstest2012+2013, test newstest2014 (full, 3,003)",
    ),
}


def get_source(name: str) -> TranslationSource:
    if name not in SOURCES:
        raise ValueError(f"unknown translation dataset {name!r}; allowed: {', '.join(SOURCES)}")
    return SOURCES[name]


# --------------------------------------------------------------------------- downloads


def source_url(file: RemoteFile, mirror: str | None = None) -> str:
    """The file's own URL, or `mirror` (a base URL or a local folder) joined with the file's name."""
    return file.url if not mirror else mirror.rstrip("/") + "/" + file.name


def read_lock(lock_path: str | Path = DEFAULT_LOCK) -> dict:
    """The lock file's entries ({key: {"md5", "url", "bytes", ...}}); {} if there is none."""
    path = Path(lock_path)
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not a checksum lock file ({err}); fix or delete it") from err


def archive_problem(path: str | Path, members: Sequence[str]) -> str | None:
    """Why the file at `path` is not the archive that holds `members` (fnmatch patterns; None when
    it is): not a tar (any compression) or zip at all, e.g. an HTML error page, or one that ends
    early or lacks a member. A tar is read until every pattern has matched."""
    import fnmatch

    path = Path(path)
    wanted = set(members)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
            wanted = {p for p in wanted if not fnmatch.filter(names, p)}
        else:
            with tarfile.open(path, "r|*") as tar:
                for info in tar:
                    wanted = {p for p in wanted if not fnmatch.fnmatchcase(info.name.removeprefix("./"), p)}
                    if not wanted:
                        break
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as err:
        with open(path, "rb") as f:
            head = f.read(64)
        return f"not a readable tar or zip archive ({type(err).__name__}: {err}; it starts {head!r})"
    if wanted:
        return f"no member {', '.join(sorted(wanted))} inside"
    return None


def fetch_file(
    file: RemoteFile,
    dest_dir: str | Path,
    *,
    key: str,
    lock_path: str | Path = DEFAULT_LOCK,
    md5: str | None = None,
    mirror: str | None = None,
    user_agent: str = BROWSER_USER_AGENT,
    members: Sequence[str] = (),
    mirrors: Sequence[str] = (),
) -> Path:
    """Get `file` into dest_dir/file.name, verified; return its path.

    Its sources are tried in order: its own URL (or the dataset's `mirror`), then `mirrors`
    (the config's download_mirrors for this file: each its URL or path, or a folder holding it
    by name). The first that gives the right file wins; when none does, the error lists each
    with what went wrong and says where to place the file by hand. A file already at the
    destination (e.g. placed by hand) is checked as a download would be and needs no source.

    The md5 checked is, in order: `md5` (a pin from config), `file.md5` (a public record),
    the lock file's entry under `key`. With none of them this is the first use: the file is
    downloaded (or a file already at the destination, e.g. fetched by hand, is taken), its
    line count checked when known, an archive's `members` (fnmatch patterns) looked for, and
    only then its md5 written to the lock. A download that arrives short is tried again and
    never recorded (download.IncompleteDownload). Raises ChecksumError naming the file when it
    differs from the expected md5 (the file is removed; where the md5 came from the lock, the
    message says how to clear the record), ValueError when a first download has the wrong
    number of lines or is not the archive it should be (a download is removed; a file placed
    by hand is left, and not recorded).
    """
    dest = Path(dest_dir) / file.name
    sources = [source_url(file, mirror), *(file_location(m, file.name) for m in mirrors)]
    failures: list[tuple[str, Exception]] = []
    for url in sources:
        try:
            return _fetch_from(url, file, dest, key=key, lock_path=lock_path, md5=md5, user_agent=user_agent, members=members)
        except PlacedFileError:
            raise  # a file placed by hand that is not the right one: no source replaces it
        except (RuntimeError, ValueError) as err:  # a network failure, a short body, a wrong md5, an error page
            failures.append((url, err))
    hint = (f"Place the file by hand at {dest} (it is then checked, and its md5 recorded where none is published), "
            f"or add another source for it under download_mirrors['{key}'] in the config.")
    if len(failures) == 1:
        failures[0][1].add_note(hint)
        raise failures[0][1]
    raise RuntimeError(f"{file.name}: none of its {len(failures)} sources gave the file:\n"
                       + "".join(f"  {url}: {err}\n" for url, err in failures) + hint) from failures[-1][1]


class PlacedFileError(ValueError):
    """A file already at the destination (placed by hand) that is not the file: left, not recorded."""


def file_location(mirror: str, name: str) -> str:
    """A download_mirrors entry as the file's location: as it is, or joined with the file's name
    where it is a folder (a path that is a directory, or a URL ending in "/")."""
    if mirror.endswith("/") or Path(mirror).is_dir():
        return mirror.rstrip("/") + "/" + name
    return mirror


def _fetch_from(url: str, file: RemoteFile, dest: Path, *, key: str, lock_path: str | Path, md5: str | None, user_agent: str,
                members: Sequence[str]) -> Path:
    """fetch_file from one source."""
    recorded = read_lock(lock_path).get(key, {})
    expected = md5 or file.md5 or recorded.get("md5")
    if expected:
        try:
            return fetch(url, dest, expected, user_agent=user_agent, size=file.size)
        except ChecksumError as err:
            if md5 or file.md5:
                raise
            raise ChecksumError(err.path, err.expected, err.actual,
                                f"{err.note}; the expected md5 is the one recorded on first use ({recorded.get('recorded', 'date not recorded')}, from {recorded.get('url', 'an unrecorded URL')}). "
                                f"If that first file was wrong (an error page, cut short) and this one is right, delete the entry "
                                f"{key!r} from {lock_path} and run again") from None

    if not dest.exists():
        with downloaded(url, dest, user_agent=user_agent, size=file.size) as tmp:
            if file.lines is not None:
                check_lines(tmp, file.lines, name=f"{dest} (downloaded from {url}; removed)")
            if members and (why := archive_problem(tmp, members)):
                raise ValueError(f"{dest} (downloaded from {url}; removed, nothing recorded): {why}. Is the source up and "
                                 "serving the file itself, not an error page?")
            os.replace(tmp, dest)
    else:
        why = archive_problem(dest, members) if members else None
        if file.lines is not None and count_lines(dest) != file.lines:
            why = f"{count_lines(dest):,} lines, expected {file.lines:,}"
        if why:
            raise PlacedFileError(f"{dest} (a file already there; nothing recorded): {why}. Delete it, or put the right file there")
    actual = md5_of(dest)
    _record(lock_path, key, {"md5": actual, "url": url, "bytes": dest.stat().st_size,
                             "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%d")}, dest)
    print(f"trust on first use: {dest} md5 {actual} recorded in {lock_path} (commit it)", file=sys.stderr)
    return dest


def fetch_source(
    name: str,
    raw_dir: str | Path,
    *,
    lock_path: str | Path = DEFAULT_LOCK,
    md5: Mapping[str, str] | None = None,
    mirror: str | None = None,
    user_agent: str = BROWSER_USER_AGENT,
    mirrors: Mapping[str, Sequence[str]] | None = None,
) -> list[Path]:
    """Fetch every file of dataset `name` into raw_dir (see fetch_file); `md5` pins by file name,
    `mirrors` lists more sources by file name. A file another dataset also uses (EN-DE's and
    EN-FR's Europarl, CommonCrawl, news-commentary and test sets), already fetched into that
    dataset's folder beside raw_dir and verified, is linked instead of downloaded again; one job
    at a time fetches a file, so the second waits for the first and shares its copy."""
    spec = get_source(name)
    md5, mirrors = md5 or {}, mirrors or {}
    fetched = []
    for f in spec.files:
        with _one_fetch_at_a_time(lock_path, f):
            _share_from_siblings(name, f, Path(raw_dir), lock_path, md5.get(f.name))
            fetched.append(fetch_file(f, raw_dir, key=f"{name}/{f.name}", lock_path=lock_path, md5=md5.get(f.name), mirror=mirror,
                                      user_agent=user_agent, members=archive_members(spec, f.name), mirrors=mirrors.get(f.name, ())))
    return fetched


@contextmanager
def _one_fetch_at_a_time(lock_path: str | Path, file: RemoteFile):
    """An exclusive flock per file name beside the lock file, for the fetch jobs of two datasets."""
    guard_path = Path(lock_path).with_name(f".{file.name}.fetching")
    guard_path.parent.mkdir(parents=True, exist_ok=True)
    with open(guard_path, "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        yield


def _share_from_siblings(name: str, file: RemoteFile, raw_dir: Path, lock_path: str | Path, pinned: str | None) -> None:
    """Link `file` from another dataset's folder beside raw_dir when that dataset uses the same file
    and its copy has the md5 this fetch would check (`pinned`, else the published one), or, with
    neither, the one recorded for it there."""
    dest = raw_dir / file.name
    if dest.exists():
        return
    entries = read_lock(lock_path)
    for other, source in SOURCES.items():
        there = raw_dir.parent / other / file.name
        if other == name or file not in source.files or not there.exists():
            continue
        if (expected := pinned or file.md5 or entries.get(f"{other}/{file.name}", {}).get("md5")) and md5_of(there) == expected:
            raw_dir.mkdir(parents=True, exist_ok=True)
            try:
                os.link(there, dest)
            except OSError:  # another file system
                shutil.copyfile(there, dest)
            print(f"{dest}: the file {other} fetched ({there}), linked rather than downloaded again", file=sys.stderr)
            return


def archive_members(spec: TranslationSource, archive: str) -> tuple[str, ...]:
    """The members of `archive` that the dataset's corpora read (none for a plain file)."""
    corpora = (*spec.train, *spec.dev, spec.test)
    return tuple(dict.fromkeys(m for c in corpora if c.archive == archive for m in (c.src, c.tgt)))


def _record(lock_path: str | Path, key: str, entry: dict, dest: Path) -> None:
    """Add `entry` to the lock under an exclusive flock (parallel download jobs share it)."""
    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path.with_name(f".{lock_path.name}.flock"), "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        entries = read_lock(lock_path)
        old = entries.get(key, {}).get("md5")
        if old and old != entry["md5"]:
            raise ChecksumError(dest, old, entry["md5"], f" (recorded in {lock_path} meanwhile)")
        entries[key] = entry
        write_json(lock_path, entries)


# ----------------------------------------------------------------------------- readers

# Characters that str.splitlines() treats as line ends. They occur inside lines of the web
# corpora; written as they are, they would misalign any reader that uses splitlines().
_LINE_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_SEG = re.compile(r"<seg\b[^>]*>(.*?)</seg\s*>", re.IGNORECASE | re.DOTALL)
_XML_ENTITY = re.compile(r"&(amp|lt|gt|quot|apos|#[0-9]+|#[xX][0-9a-fA-F]+);")
_XML_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def _clean(line: str) -> str:
    """The line without its "\n" (or "\r\n"); other line-break characters become spaces."""
    return _LINE_BREAKS.sub(" ", line.rstrip("\n").removesuffix("\r"))


def iter_lines(path: str | Path, errors: str = "strict") -> Iterator[str]:
    """Lines of a UTF-8 file without their "\\n"; only "\\n" ends a line (not \\r or U+2028).
    Under errors="strict", a byte that is not UTF-8 is a ValueError naming the file, the line and
    the byte (a wrong or damaged download); "replace" puts U+FFFD in its place (web corpora)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8", errors)
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}, line {number:,}: byte {raw[err.start]:#04x} at byte {err.start + 1} of the line is not "
                                 f"UTF-8 ({err.reason}); the file is not the UTF-8 text its source distributes: download it again") from None
            yield _clean(line)


def iter_parallel(src_path: str | Path, tgt_path: str | Path, errors: str = "strict") -> Iterator[tuple[str, str]]:
    """Stream aligned (source, target) lines; ValueError naming both files if lengths differ."""
    src_it, tgt_it = iter_lines(src_path, errors), iter_lines(tgt_path, errors)
    for src in src_it:
        tgt = next(tgt_it, None)
        if tgt is None:
            break
        yield src, tgt
    else:
        if next(tgt_it, None) is None:
            return
    raise ValueError(f"parallel files differ in length: {src_path} has {count_lines(src_path):,} lines, "
                     f"{tgt_path} has {count_lines(tgt_path):,}")


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """All aligned (source, target) lines; ValueError naming both files and their line counts."""
    return list(iter_parallel(src_path, tgt_path))


def unescape_xml(text: str) -> str:
    """Decode the five XML entities and numeric references, once; nothing else.

    Deliberately narrower than html.unescape, which also decodes entities without a ";"
    ("R&D&not" would lose its "&not"), and raw "&" in the WMT files stays as it is.
    """
    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name[0] != "#":
            return _XML_NAMED[name]
        code = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
        return chr(code) if 0 < code <= 0x10FFFF else m.group(0)

    return _XML_ENTITY.sub(sub, text)


def read_sgm(path: str | Path) -> list[str]:
    """Segments of a WMT .sgm file (<srcset>/<refset>, <doc>, <seg id="...">), in file order.

    Each segment's whitespace is collapsed to single spaces (as sacrebleu does when it reads
    these files) and its XML entities are decoded (unescape_xml; sacrebleu keeps them, so a
    segment holding "&amp;" differs from sacrebleu's built-in reference there: ours is what a
    model trained on raw text can produce).
    """
    text = Path(path).read_text(encoding="utf-8")
    segs = [" ".join(unescape_xml(m.group(1)).split()) for m in _SEG.finditer(text)]
    if not segs:
        raise ValueError(f"{path}: no <seg> elements; is it a WMT .sgm file?")
    return segs


def check_lines(path: str | Path, expected: int, name: str | None = None) -> None:
    """ValueError unless `path` has `expected` lines (a truncated or wrong download)."""
    n = count_lines(path)
    if n != expected:
        what = "truncated" if n < expected else "longer than expected"
        raise ValueError(f"{name or path} has {n:,} lines, expected {expected:,} ({what}: a partial "
                         f"or wrong download?); delete it and download it again")


def extract_members(archive: str | Path, members: Sequence[str], dest_dir: str | Path) -> list[Path]:
    """Copy `members` of a .tar/.tgz into dest_dir (by base name; a ".gz" member is gunzipped).

    One sequential pass over the archive however many members are wanted (random access
    into a .tgz would decompress it again for every member). ValueError names a missing one.
    """
    wanted = {m.removeprefix("./"): Path(dest_dir) / Path(m.removesuffix(".gz")).name for m in members}
    found: set[str] = set()
    with tarfile.open(archive, "r|*") as tar:
        for info in tar:
            name = info.name.removeprefix("./")
            if name not in wanted or not info.isfile():
                continue
            f = tar.extractfile(info)
            stream = gzip.GzipFile(fileobj=f) if name.endswith(".gz") else f

            def write(tmp: Path) -> None:
                with open(tmp, "wb") as out:
                    shutil.copyfileobj(stream, out, 1 << 20)

            atomic_write(wanted[name], write)
            found.add(name)
            if len(found) == len(wanted):
                break
    missing = sorted(set(wanted) - found)
    if missing:
        raise ValueError(f"{archive}: no file {', '.join(missing)} inside; is it the right archive?")
    return [wanted[m.removeprefix("./")] for m in members]


# ------------------------------------------------------------------------- preparation


def prepare_translation(
    name: str,
    raw_dir: str | Path,
    out_dir: str | Path,
    *,
    vocab_size: int | None = None,
    seed: int = 0,
    detokenize: Detokenizer | None = None,
    check_counts: bool = True,
    max_sentences: int = subword.SPM_MAX_SENTENCES,
    work_dir: str | Path | None = None,
) -> dict:
    """Prepare dataset `name` from the files fetch_source put in raw_dir; return prepared.json.

    Archives are read where they lie; members are extracted to a temporary folder in
    `work_dir` (default: next to out_dir; WMT EN-FR needs ~10 GB there). `vocab_size`
    defaults to subword.VOCAB_SIZES[name]. `detokenize(line, lang)` makes the sacrebleu
    reference of tokenized datasets (default resrepro.data.moses.detokenize_moses).
    `check_counts=False` skips the expected sentence counts (for small fixtures only).
    """
    spec = get_source(name)
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    work = Path(work_dir) if work_dir else out_dir.parent
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work, prefix=f".{name}-extract-") as tmp:
        def files(corpora: Sequence[Corpus], split: str) -> list[tuple[Path, Path]]:
            return [_materialize(c, raw_dir, Path(tmp) / f"{split}{i}", check_counts)
                    for i, c in enumerate(corpora)]

        train = files(spec.train, "train")
        dev = files(spec.dev, "dev")
        test = files([spec.test], "test")[0]
        sources = [{"name": f.name, "url": f.url, "md5": f.md5,
                    "verified_by": "public md5" if f.md5 else "trust on first use (checksums lock)"}
                   for f in spec.files]
        return write_prepared(
            out_dir, name=name, src_lang=spec.src_lang, tgt_lang=spec.tgt_lang,
            train=train, dev=dev, test=test, tokenized=spec.tokenized, detokenize=detokenize,
            vocab_size=vocab_size or spec.vocab_size, seed=seed, max_sentences=max_sentences,
            character_coverage=spec.character_coverage, sources=sources, note=spec.note,
            errors="strict" if spec.tokenized else "replace",
        )


def _materialize(c: Corpus, raw_dir: Path, tmp: Path, check_counts: bool) -> tuple[Path, Path]:
    """Plain-text (source, target) files of corpus `c`: raw files, or extracted/parsed into tmp."""
    tmp.mkdir(parents=True, exist_ok=True)
    if c.archive is None:
        paths = [raw_dir / c.src, raw_dir / c.tgt]
        for path in paths:
            if not path.exists():
                raise FileNotFoundError(f"{path} missing; fetch the dataset first (fetch_source)")
        names = [str(p) for p in paths]
    else:
        paths = extract_members(raw_dir / c.archive, [c.src, c.tgt], tmp)
        names = [f"{m} in {raw_dir / c.archive}" for m in (c.src, c.tgt)]
    if c.sgm:
        for k, path in enumerate(paths):
            text = "".join(s + "\n" for s in read_sgm(path))
            paths[k] = tmp / f"{path.name}.txt"
            paths[k].write_text(text, encoding="utf-8", newline="\n")
    if check_counts and c.lines is not None:
        for path, name in zip(paths, names):
            check_lines(path, c.lines, name=name)
    return paths[0], paths[1]


def write_prepared(
    out_dir: str | Path,
    *,
    name: str,
    src_lang: str,
    tgt_lang: str,
    train: Sequence[tuple[Path, Path]],
    dev: Sequence[tuple[Path, Path]],
    test: tuple[Path, Path],
    tokenized: bool,
    vocab_size: int,
    seed: int = 0,
    detokenize: Detokenizer | None = None,
    max_sentences: int = subword.SPM_MAX_SENTENCES,
    character_coverage: float = 1.0,
    sources: list[dict] | None = None,
    note: str = "",
    errors: str = "strict",
) -> dict:
    """Write the PREPARED FORMAT into out_dir from plain parallel files; return prepared.json.

    `train`/`dev` are lists of (source file, target file) concatenated in order; `errors`
    is the UTF-8 decoding policy for training text ("replace" for the web-crawled WMT
    corpora; dev and test are always strict).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prepared.json").unlink(missing_ok=True)  # nothing looks finished until the end

    counts = {"train": _write_split(out, "train", train, drop_empty=True, errors=errors),
              "dev": _write_split(out, "dev", dev),
              "test": _write_split(out, "test", [test])}

    refs = list(iter_lines(out / "test.tgt"))
    if tokenized:
        if detokenize is None:
            from .moses import detokenize_moses as detokenize
        refs = [detokenize(line, tgt_lang) for line in refs]
    _write_lines(out / "test.ref.detok", refs)
    detokenizer = (f"{detokenize.__module__}.{detokenize.__qualname__}(line, {tgt_lang!r})"
                   if tokenized else "none: the test set is raw text")

    model = train_subword([out / "train.src", out / "train.tgt"], out / "subword", vocab_size, seed,
                          max_sentences=max_sentences, character_coverage=character_coverage)
    vocab = SubwordVocab.load(model)
    for split in SPLITS:
        for side in ("src", "tgt"):
            _write_encoded(out, split, side, vocab)

    meta = {
        "name": name, "src_lang": src_lang, "tgt_lang": tgt_lang, "note": note,
        "tokenized": tokenized,
        "pairs": {s: c[0] for s, c in counts.items()},
        "dropped_empty_train_pairs": counts["train"][1],
        "references": {"tokenized": "test.tgt" if tokenized else None, "as_distributed": "test.tgt",
                       "detokenized": "test.ref.detok", "detokenizer": detokenizer},
        "subword": {"model": model.name, "md5": md5_of(model), "type": "bpe",
                    "library": f"sentencepiece {sentencepiece.__version__}",
                    "vocab_size": vocab.size, "requested_vocab_size": vocab_size, "seed": seed,
                    "max_sentences": max_sentences, "character_coverage": character_coverage,
                    "trained_on": ["train.src", "train.tgt"],
                    "special_ids": {"pad": vocab.pad_id, "bos": vocab.bos_id, "eos": vocab.eos_id,
                                    "unk": vocab.unk_id},
                    "deviation": "papers: tensor2tensor SubwordTextEncoder (word pieces) of this size"},
        "encoded": "{split}.{side}.ids.npy (int32, no BOS/EOS) + {split}.{side}.offsets.npy (int64)",
        "sources": sources or [],
    }
    write_json(out / "prepared.json", meta)
    return meta


def _write_split(out: Path, split: str, corpora: Sequence[tuple[Path, Path]],
                 drop_empty: bool = False, errors: str = "strict") -> tuple[int, int]:
    """Concatenate `corpora` into out/{split}.src and .tgt; return (pairs kept, pairs dropped)."""
    kept = dropped = 0

    def write_src(tmp_src: Path) -> None:
        def write_tgt(tmp_tgt: Path) -> None:
            nonlocal kept, dropped
            with open(tmp_src, "w", encoding="utf-8", newline="\n") as fs, \
                 open(tmp_tgt, "w", encoding="utf-8", newline="\n") as ft:
                for src_path, tgt_path in corpora:
                    for s, t in iter_parallel(src_path, tgt_path, errors):
                        if drop_empty and not (s.strip() and t.strip()):
                            dropped += 1
                            continue
                        fs.write(s + "\n")
                        ft.write(t + "\n")
                        kept += 1

        atomic_write(out / f"{split}.tgt", write_tgt)

    atomic_write(out / f"{split}.src", write_src)
    return kept, dropped


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    text = "".join(_clean(s) + "\n" for s in lines)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8", newline="\n"))


def _write_encoded(out: Path, split: str, side: str, vocab: SubwordVocab) -> None:
    """Encode out/{split}.{side} into {split}.{side}.ids.npy and .offsets.npy, streaming."""
    prefix = f"{split}.{side}"
    lengths: list[np.ndarray] = []
    with tempfile.TemporaryFile(dir=out) as raw:
        for ids, lens in vocab.encode_to_arrays(iter_lines(out / prefix)):
            raw.write(ids.astype("<i4").tobytes())
            lengths.append(lens)
        total = raw.tell() // 4
        raw.seek(0)

        def write_ids(tmp: Path) -> None:
            arr = np.lib.format.open_memmap(tmp, mode="w+", dtype="<i4", shape=(total,))
            done = 0
            while chunk := raw.read(1 << 24):
                block = np.frombuffer(chunk, dtype="<i4")
                arr[done:done + len(block)] = block
                done += len(block)
            arr.flush()
            del arr

        atomic_write(out / f"{prefix}.ids.npy", write_ids)
    offsets = np.zeros(sum(map(len, lengths)) + 1, dtype=np.int64)
    if lengths:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])

    def write_offsets(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.save(f, offsets, allow_pickle=False)

    atomic_write(out / f"{prefix}.offsets.npy", write_offsets)


@dataclass
class EncodedPairs:
    """One split's subword ids: pair i is (src ids, tgt ids) as int32 arrays, no BOS/EOS."""

    src_ids: np.ndarray
    src_offsets: np.ndarray
    tgt_ids: np.ndarray
    tgt_offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return (self.src_ids[self.src_offsets[i]:self.src_offsets[i + 1]],
                self.tgt_ids[self.tgt_offsets[i]:self.tgt_offsets[i + 1]])

    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)


def load_encoded(out_dir: str | Path, split: str, mmap: bool = True) -> EncodedPairs:
    """Load a prepared split's ids (memory-mapped by default); ValueError naming a bad file."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    out = Path(out_dir)
    arrays = {}
    for side in ("src", "tgt"):
        for kind in ("ids", "offsets"):
            path = out / f"{split}.{side}.{kind}.npy"
            try:
                arrays[f"{side}_{kind}"] = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
            except (OSError, ValueError) as err:
                raise ValueError(f"{path}: cannot read encoded split ({err}); prepare it again") from err
    pairs = EncodedPairs(**arrays)
    if len(pairs.tgt_offsets) != len(pairs.src_offsets):
        raise ValueError(f"{out}: {split} has {len(pairs)} source but {len(pairs.tgt_offsets) - 1} "
                         f"target sentences; prepare it again")
    return pairs


def load_prepared_meta(out_dir: str | Path) -> dict:
    """prepared.json of a finished preparation; ValueError if the preparation did not finish."""
    path = Path(out_dir) / "prepared.json"
    if not path.exists():
        raise ValueError(f"{path} missing: {out_dir} was not (completely) prepared")
    return json.loads(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- mini scale


def prepare_synthetic(
    out_dir: str | Path,
    *,
    n_train: int = synth.DEFAULT_SIZES["train"],
    n_dev: int = synth.DEFAULT_SIZES["dev"],
    n_test: int = synth.DEFAULT_SIZES["test"],
    seed: int = 0,
    vocab_size: int = subword.VOCAB_SIZES["synthetic"],
) -> dict:
    """Generate the seeded synthetic corpus (resrepro.data.synthetic_translation) and prepare it.

    The raw files go to out_dir/raw/{split}.{src,tgt}; then the same write_prepared as the
    real datasets runs. The text is already space-tokenized with nothing to undo, so the
    detokenized reference equals test.tgt.
    """
    corpus = synth.generate_corpus(n_train, n_dev, n_test, seed)
    raw = synth.write_corpus(corpus, Path(out_dir) / "raw")
    return write_prepared(
        out_dir, name="synthetic", src_lang="src", tgt_lang="tgt",
        train=[raw["train"]], dev=[raw["dev"]], test=raw["test"],
        tokenized=True, detokenize=_identity, vocab_size=vocab_size, seed=seed,
        sources=[{"name": "synthetic", "generator": "resrepro.data.synthetic_translation.generate_corpus",
                  "seed": seed, "sizes": {s: len(p) for s, p in corpus.items()}}],
        note="seeded synthetic corpus with reordering, agreement and morphology (mini scale)",
    )


def _identity(line: str, lang: str) -> str:
    """The synthetic text is its own detokenized form."""
    return line


__all__ = [
    "DEFAULT_LOCK", "IWSLT15_LINES", "SOURCES", "SPLITS", "Corpus", "EncodedPairs", "RemoteFile",
    "TranslationSource", "check_lines", "extract_members", "fetch_file", "fetch_source", "get_source",
    "iter_lines", "iter_parallel", "load_encoded", "load_prepared_meta", "prepare_synthetic",
    "prepare_translation", "read_lock", "read_parallel", "read_sgm", "source_url", "unescape_xml",
    "write_prepared",
]
