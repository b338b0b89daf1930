"""Fake copies of every paper-scale download, in the real file formats: the rehearsal's sources.

`write_fake_sources(out)` writes, from one seed, a stand-in for each file the paper-scale
pipeline downloads, so that the real download code (served by resrepro.data.mirror_server)
and the real readers and preparations run on them unchanged, only on less data.

REAL (what the readers rely on, as the hosts distribute it):
  * file names, archive kinds and member paths: the CIFAR "python version" .tar.gz
    (cifar.LAYOUT), Luong & Manning's IWSLT15 files, the statmt .tgz/.tar archives with
    their members (translation.SOURCES; giga-fren's members are .gz files inside a plain
    .tar), the WMT .sgm test sets, COCO's image zips and Karpathy's caption_datasets.zip,
    torchvision's weight file name;
  * formats: CIFAR batches are Python 2 style protocol-2 pickles of dicts with bytes keys
    (b"data" uint8 (N, 3072), b"labels" or b"fine_labels"/b"coarse_labels", b"batch_label",
    b"filenames"; meta b"label_names" or b"fine_label_names"/b"coarse_label_names", the real
    class names); IWSLT text is Moses-tokenized with HTML entities (&apos; &quot; &amp;, and the
    numeric &#91; &#93; that Moses writes for square brackets) and
    Vietnamese diacritics (NFC), strictly valid UTF-8; WMT training text is raw (untokenized);
    .sgm files are <srcset>/<refset>, <doc sysid docid genre origlang>, <p>, <seg id> (ids
    restart in each document) with XML entities; Karpathy's json schema (images: filepath,
    sentids, filename, imgid, split train/restval/val/test, sentences: tokens, raw, imgid,
    sentid; cocoid), five captions an image, restval/val/test images in val2014; real JPEGs;
    the weight file is torch.save of a torchvision resnet101 state_dict (1000 classes);
  * counts that the pipeline checks: IWSLT15 133,317 / 1,553 / 1,268 lines (IWSLT15_LINES),
    newstest2012 3,003, newstest2013 3,000, newstest2014 full 3,003 segments;
  * the hard cases of the real text (HARD CASES below).

FAKE:
  * all content: words are random letter strings (a ~40k-word lexicon per language, drawn
    Zipf-like) and sentence i of a corpus says the same word ids in both languages (a
    word-for-word "translation", learnable but meaningless); CIFAR images are a per-class
    colour and stripe pattern plus noise; COCO images are one coloured shape on a background,
    their captions name its colour, shape, size and place; the ResNet-101 weights are random
    (seeded), so its features mean nothing;
  * sizes (FakeSizes): CIFAR images, WMT training pairs per corpus, COCO images per split;
  * only the members and language pairs the pipeline reads (the real archives hold more);
  * checksums: files with a public md5 or hash (CIFAR, the WMT test archives, torchvision's
    sha256 prefix "cd907fc2") do not match it; a rehearsal pins the fakes' own md5s.

HARD CASES (in every WMT training corpus, and in IWSLT's train files where the strict UTF-8
reading allows): a carriage return, a U+2028 LINE SEPARATOR and a U+0085 NEXT LINE inside a
line, an empty line on either side, a line with leading and trailing spaces; in commoncrawl
also bytes that are not UTF-8; in IWSLT train and in both europarl pairs one pair of 1,500
words a side (more than 1,024 subwords). Sentences are otherwise short (1-12 words), dev and
test sets too, so decoding them is cheap; the lexicons are rich enough that sentencepiece BPE
trains the papers' 32,768-piece vocabulary on each dataset's training text.

Deterministic: the same seed and sizes give the same bytes (fixed mtimes in the tar, gzip and
zip headers; numpy/torch generators seeded per source), given the same zlib, libjpeg and torch.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
import struct
import tarfile
import unicodedata
import zipfile
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Sequence

import numpy as np

from resrepro.data import cifar
from resrepro.files import atomic_write

# resrepro.data.translation and .coco (which import torchvision) are imported where they are
# needed: tests/conftest.py imports this module for its CIFAR builders.

# mtime of every archive member and gzip header (2014-05-13): reruns give the same bytes
MTIME = 1_400_000_000
ZIP_DATE = (2014, 5, 13, 16, 53, 20)

# Source numbers for per-source generators: one source's sizes never change another's bytes.
_STREAMS = {"cifar10": 1, "cifar100": 2, "iwslt15_en_vi": 3, "wmt14": 4, "mscoco": 5, "resnet101": 6, "lexicon": 7}

LEXICON_SIZE = 40_000  # distinct words per language
MIN_PAIRS = 12  # the fewest pairs a WMT corpus may have: room for its hard cases
LONG_WORDS = 1_500  # words a side of the over-long pair (more than 1,024 subwords)


@dataclass(frozen=True)
class FakeSizes:
    """How much fake data to write. IWSLT's files and the WMT dev/test sets always have their
    real line counts; these are the counts that are free. sentencepiece trains 32,768 pieces on
    EN-DE's fake training text from about 1,100 pairs on (the defaults give it 4,500)."""

    cifar10_per_batch: int = 64  # images in each of CIFAR-10's 5 training batches
    cifar10_test: int = 100
    cifar100_train: int = 320
    cifar100_test: int = 100
    # WMT training pairs per corpus (each language pair of an archive gets this many)
    europarl: int = 2000
    commoncrawl: int = 1500
    news_commentary: int = 1000
    un: int = 500
    giga_fren: int = 2000
    # COCO images per Karpathy split; train includes the one corrupt JPEG
    coco_train: int = 128
    coco_restval: int = 32
    coco_val: int = 16
    coco_test: int = 16

    def __post_init__(self) -> None:
        least = {"europarl": MIN_PAIRS, "commoncrawl": MIN_PAIRS, "news_commentary": MIN_PAIRS, "un": MIN_PAIRS,
                 "giga_fren": MIN_PAIRS, "coco_train": 2, "coco_restval": 0}
        for f in fields(self):
            value, low = getattr(self, f.name), least.get(f.name, 1)
            if not isinstance(value, int) or value < low:
                raise ValueError(f"FakeSizes.{f.name} is {value!r}; it must be an integer >= {low}")


REHEARSAL_SIZES = FakeSizes(cifar10_per_batch=3, cifar10_test=16, cifar100_train=100, cifar100_test=20)  # resrepro.rehearsal: paper 003's nets at their size on CPUs


# ------------------------------------------------------------------------------- all sources


def write_fake_sources(out: str | Path, *, seed: int = 0, sizes: FakeSizes = FakeSizes()) -> dict[str, Path]:
    """Write every fake source under `out`; return {download key: path} for every file.

    Layout: out/cifar10/, out/cifar100/, out/iwslt15_en_vi/, out/wmt14/ (the archives of both
    WMT datasets, keyed under wmt14_en_de/ and wmt14_en_fr/ for the files each uses),
    out/mscoco/, out/backbones/ (keyed resnet101/<torchvision's file name>).
    """
    out = Path(out)
    written: dict[str, Path] = {}
    for name in ("cifar10", "cifar100"):
        written |= write_cifar(out / name, name, seed=seed, sizes=sizes)
    written |= write_iwslt(out / "iwslt15_en_vi", seed=seed)
    written |= write_wmt(out / "wmt14", seed=seed, sizes=sizes)
    written |= write_coco(out / "mscoco", seed=seed, sizes=sizes)
    written |= write_resnet101(out / "backbones", seed=seed)
    return written


def _rng(seed: int, source: str) -> np.random.Generator:
    return np.random.default_rng([seed, _STREAMS[source]])


# ------------------------------------------------------------------------------- archives


def write_tar(path: str | Path, members: Iterable[tuple[str, bytes]], *, gz: bool = True) -> Path:
    """A .tar (or .tar.gz) of `members` (name, bytes), with their folders as GNU tar adds them;
    fixed mtimes and owners, so the same members give the same bytes."""
    path = Path(path)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as raw:
            stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=MTIME, compresslevel=6) if gz else raw
            with tarfile.open(fileobj=stream, mode="w", format=tarfile.GNU_FORMAT) as tar:
                folders: set[str] = set()
                for name, data in members:
                    parts = name.split("/")[:-1]
                    for k in range(1, len(parts) + 1):
                        folder = "/".join(parts[:k])
                        if folder not in folders:
                            folders.add(folder)
                            info = tarfile.TarInfo(folder)
                            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, MTIME
                            tar.addfile(info)
                    add_member(tar, name, data)
            if gz:
                stream.close()

    atomic_write(path, write)
    return path


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add a file member `name` holding `data` to an open tar (fixed mtime, mode 0644)."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), MTIME, 0o644
    tar.addfile(info, io.BytesIO(data))


def write_zip(path: str | Path, members: Iterable[tuple[str, bytes]], *, folders: Sequence[str] = ()) -> Path:
    """A deflated .zip of `members` (name, bytes), `folders` first as directory entries; fixed dates."""
    path = Path(path)

    def write(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w") as z:
            for folder in folders:
                info = zipfile.ZipInfo(folder.rstrip("/") + "/", date_time=ZIP_DATE)
                info.external_attr = (0o40755 << 16) | 0x10
                z.writestr(info, b"")
            for name, data in members:
                info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
                info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
                z.writestr(info, data)

    atomic_write(path, write)
    return path


def text_bytes(lines: Iterable[str]) -> bytes:
    """Lines as a UTF-8 file, each ended by "\\n". Lone surrogates (U+DC80..U+DCFF, Python's
    "surrogateescape") become the single bytes they stand for: text that is not UTF-8."""
    return "".join(s + "\n" for s in lines).encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------------- CIFAR

CIFAR10_LABEL_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
# CIFAR-100's 20 superclasses and their 5 classes each (the dataset's page); the meta file lists
# both in alphabetical order.
CIFAR100_SUPERCLASSES = {
    "aquatic_mammals": ("beaver", "dolphin", "otter", "seal", "whale"),
    "fish": ("aquarium_fish", "flatfish", "ray", "shark", "trout"),
    "flowers": ("orchid", "poppy", "rose", "sunflower", "tulip"),
    "food_containers": ("bottle", "bowl", "can", "cup", "plate"),
    "fruit_and_vegetables": ("apple", "mushroom", "orange", "pear", "sweet_pepper"),
    "household_electrical_devices": ("clock", "keyboard", "lamp", "telephone", "television"),
    "household_furniture": ("bed", "chair", "couch", "table", "wardrobe"),
    "insects": ("bee", "beetle", "butterfly", "caterpillar", "cockroach"),
    "large_carnivores": ("bear", "leopard", "lion", "tiger", "wolf"),
    "large_man-made_outdoor_things": ("bridge", "castle", "house", "road", "skyscraper"),
    "large_natural_outdoor_scenes": ("cloud", "forest", "mountain", "plain", "sea"),
    "large_omnivores_and_herbivores": ("camel", "cattle", "chimpanzee", "elephant", "kangaroo"),
    "medium_mammals": ("fox", "porcupine", "possum", "raccoon", "skunk"),
    "non-insect_invertebrates": ("crab", "lobster", "snail", "spider", "worm"),
    "people": ("baby", "boy", "girl", "man", "woman"),
    "reptiles": ("crocodile", "dinosaur", "lizard", "snake", "turtle"),
    "small_mammals": ("hamster", "mouse", "rabbit", "shrew", "squirrel"),
    "trees": ("maple_tree", "oak_tree", "palm_tree", "pine_tree", "willow_tree"),
    "vehicles_1": ("bicycle", "bus", "motorcycle", "pickup_truck", "train"),
    "vehicles_2": ("lawn_mower", "rocket", "streetcar", "tank", "tractor"),
}
CIFAR100_LABEL_NAMES = tuple(sorted(n for names in CIFAR100_SUPERCLASSES.values() for n in names))
CIFAR100_COARSE_NAMES = tuple(sorted(CIFAR100_SUPERCLASSES))
CIFAR100_COARSE_OF = tuple(next(CIFAR100_COARSE_NAMES.index(s) for s, names in CIFAR100_SUPERCLASSES.items() if n in names)
                           for n in CIFAR100_LABEL_NAMES)


class _Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 `str` opcodes (SHORT_BINSTRING/BINSTRING), as the real
    CIFAR files do; they load as bytes only with encoding="bytes"."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def py2_pickle(obj) -> bytes:
    """`obj` pickled as Python 2's cPickle (protocol 2) wrote the CIFAR batches."""
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def write_cifar_archive(
    path: str | Path,
    name: str,
    train: Sequence[tuple[np.ndarray, Sequence[int]]],
    test: tuple[np.ndarray, Sequence[int]],
    label_names: Sequence[str],
    *,
    coarse_label_names: Sequence[str] = (),
    coarse_of: Sequence[int] = (),
) -> Path:
    """The CIFAR "python version" archive of dataset `name` ("cifar10": 5 training batches;
    "cifar100": 1, with coarse labels `coarse_of[fine label]`). Each batch is (uint8 images
    (N, 3072) as the files store them, labels); file names follow the real "<class>_s_<n>.png"."""
    layout = cifar.LAYOUT[name]
    if len(train) != len(layout["train"]):
        raise ValueError(f"{name} has {len(layout['train'])} training batches, not {len(train)}")
    members, first = [], 0
    for member, (images, labels), label in zip(layout["train"] + layout["test"], [*train, test],
                                                [f"training batch {{}} of {len(train)}"] * len(train) + ["testing batch 1 of 1"]):
        labels = [int(y) for y in labels]
        images = np.ascontiguousarray(images, dtype=np.uint8)
        if images.shape != (len(labels), 3072):
            raise ValueError(f"{name} {member}: images of shape {images.shape} for {len(labels)} labels; expected (N, 3072)")
        filenames = [f"{label_names[y]}_s_{first + i:06d}.png".encode() for i, y in enumerate(labels)]
        batch_label = label.format(len(members) + 1).encode()
        if name == "cifar10":
            batch = {b"batch_label": batch_label, b"labels": labels, b"data": images, b"filenames": filenames}
        else:
            batch = {b"filenames": filenames, b"batch_label": batch_label, b"fine_labels": labels,
                     b"coarse_labels": [int(coarse_of[y]) for y in labels], b"data": images}
        members.append((f"{layout['folder']}/{member}", py2_pickle(batch)))
        first += len(labels)
    if name == "cifar10":
        meta = {b"num_cases_per_batch": len(train[0][1]), b"label_names": [n.encode() for n in label_names], b"num_vis": 3072}
        members.append((f"{layout['folder']}/readme.html", b"<meta HTTP-EQUIV=\"REFRESH\" content=\"0; "
                        b"url=http://www.cs.toronto.edu/~kriz/cifar.html\">\n"))
    else:
        meta = {b"fine_label_names": [n.encode() for n in label_names],
                b"coarse_label_names": [n.encode() for n in coarse_label_names]}
    members.append((f"{layout['folder']}/{layout['meta']}", py2_pickle(meta)))
    return write_tar(path, members)


def cifar_images(rng: np.random.Generator, labels: np.ndarray, classes: int) -> np.ndarray:
    """uint8 (N, 3072) images, R, G and B planes of 32 x 32: the class's colour and stripe
    pattern (orientation and frequency by class) plus noise, so a classifier can learn them."""
    c = np.arange(classes)
    colour = 60 + (np.stack([c * 37, c * 91 + 40, c * 53 + 90], axis=1) % 140)  # (classes, 3)
    angle = np.pi * (c % 8) / 8
    freq = 1 + (c // 8) % 4
    yy, xx = np.mgrid[0:32, 0:32]
    phase = (np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy) * freq[:, None, None] * 2 * np.pi / 32
    prototype = colour[:, :, None, None] + 45 * np.sin(phase)[:, None]  # (classes, 3, 32, 32)
    pixels = prototype[labels] + rng.normal(0, 20, (len(labels), 3, 32, 32))
    return np.clip(pixels, 0, 255).astype(np.uint8).reshape(len(labels), 3072)


def write_cifar(folder: str | Path, name: str, *, seed: int = 0, sizes: FakeSizes = FakeSizes()) -> dict[str, Path]:
    """folder/cifar-10-python.tar.gz or cifar-100-python.tar.gz; every class in train when
    there are at least as many training images as classes."""
    rng = _rng(seed, name)
    classes = cifar.CLASSES[name]
    if name == "cifar10":
        n_train, n_test, batches = 5 * sizes.cifar10_per_batch, sizes.cifar10_test, 5
    else:
        n_train, n_test, batches = sizes.cifar100_train, sizes.cifar100_test, 1
    train_y = rng.permutation(np.arange(n_train) % classes)
    test_y = rng.permutation(np.arange(n_test) % classes)
    train_x, test_x = cifar_images(rng, train_y, classes), cifar_images(rng, test_y, classes)
    per = n_train // batches
    train = [(train_x[k * per:(k + 1) * per], train_y[k * per:(k + 1) * per]) for k in range(batches)]
    extra = {} if name == "cifar10" else {"coarse_label_names": CIFAR100_COARSE_NAMES, "coarse_of": CIFAR100_COARSE_OF}
    names = CIFAR10_LABEL_NAMES if name == "cifar10" else CIFAR100_LABEL_NAMES
    filename = cifar.SOURCES[name]["filename"]
    path = write_cifar_archive(Path(folder) / filename, name, train, (test_x, test_y), names, **extra)
    return {f"{name}/{filename}": path}


# ------------------------------------------------------------------------------ text: words

_ZIPF = 1.0 / (np.arange(1, LEXICON_SIZE + 1) + 2.7) ** 1.05
_ZIPF /= _ZIPF.sum()

_LETTERS = {"en": "", "de": "äöüß", "fr": "éèêàçôîûë"}  # each language's letters besides a-z
_VI_ONSETS = ("", "b", "c", "ch", "d", "đ", "g", "gi", "h", "k", "kh", "l", "m", "n", "ng", "nh", "ph", "qu", "r", "s",
              "t", "th", "tr", "v", "x")
_VI_NUCLEI = ("a", "ă", "â", "e", "ê", "i", "o", "ô", "ơ", "u", "ư", "y", "ai", "ao", "au", "ay", "ia", "iê", "oa", "oi",
              "ôi", "ơi", "ua", "uô", "ưa", "ươ", "ui", "ưu")
_VI_TONES = ("", "\u0301", "\u0300", "\u0309", "\u0303", "\u0323")  # level, acute, grave, hook, tilde, dot below
_VI_CODAS = ("", "c", "m", "n", "ng", "nh", "p", "t")


def _words(rng: np.random.Generator, extra: str, n: int) -> list[str]:
    """`n` distinct random words of 2-11 letters, a-z and the language's `extra` letters (rarer;
    vowels twice as likely as consonants), in drawn order."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz" + extra))
    weights = np.array([(2.0 if ch in "aeiouy" else 1.0) for ch in "abcdefghijklmnopqrstuvwxyz"] + [0.3] * len(extra))
    weights /= weights.sum()
    out: dict[str, None] = {}
    while len(out) < n:
        lengths = rng.integers(2, 12, 2 * (n - len(out)))
        text = "".join(letters[rng.choice(len(letters), int(lengths.sum()), p=weights)].tolist())
        ends = np.cumsum(lengths)
        for start, end in zip(ends - lengths, ends):
            out.setdefault(text[start:end])
            if len(out) == n:
                break
    return list(out)


def _vi_words(rng: np.random.Generator, n: int) -> list[str]:
    """`n` distinct Vietnamese-looking words of one or two syllables (NFC, diacritics included)."""
    out: dict[str, None] = {}
    while len(out) < n:
        syllables = []
        for _ in range(2):
            o, v, t, c = (rng.integers(0, len(x), 2 * n) for x in (_VI_ONSETS, _VI_NUCLEI, _VI_TONES, _VI_CODAS))
            syllables.append([unicodedata.normalize("NFC", _VI_ONSETS[a] + _VI_NUCLEI[b] + _VI_TONES[d] + _VI_CODAS[e])
                              for a, b, d, e in zip(o, v, t, c)])
        two = rng.random(2 * n) < 0.4
        for first, second, both in zip(*syllables, two):
            out.setdefault(f"{first} {second}" if both else first)
            if len(out) == n:
                break
    return list(out)


@lru_cache(maxsize=2)
def lexicons(seed: int = 0) -> dict[str, np.ndarray]:
    """Per language ("en", "de", "fr", "vi"), LEXICON_SIZE distinct words in Zipf rank order.
    Word i of one language "translates" word i of every other."""
    rng = _rng(seed, "lexicon")
    words = {lang: _words(rng, extra, LEXICON_SIZE) for lang, extra in _LETTERS.items()}
    words["vi"] = _vi_words(rng, LEXICON_SIZE)
    return {lang: np.array(w, dtype=object) for lang, w in words.items()}


def _sentences(rng: np.random.Generator, n: int, low: int = 1, high: int = 12) -> list[np.ndarray]:
    """`n` sentences as arrays of word ids (Zipf-distributed), `low` to `high` words each."""
    lengths = rng.integers(low, high + 1, n)
    ids = rng.choice(LEXICON_SIZE, int(lengths.sum()), p=_ZIPF)
    return np.split(ids, np.cumsum(lengths)[:-1])


class _Style(NamedTuple):
    """Where one sentence has its punctuation (word positions; -1: none), the same in both languages."""

    comma: int
    quote: int
    amp: int
    apos: int
    bracket: int
    end: str


def _styles(rng: np.random.Generator, sentences: Sequence[np.ndarray]) -> list[_Style]:
    n = len(sentences)
    u, r = rng.random((n, 5)), rng.integers(0, 1 << 30, (n, 5))
    ends = rng.choice([".", "?", "!"], n, p=[0.85, 0.1, 0.05])
    out = []
    for i, ids in enumerate(sentences):
        k = len(ids)
        at = [int(r[i, j] % k) if u[i, j] < p and k > 1 else -1 for j, p in enumerate((0.25, 0.1, 0.05, 0.15, 0.05))]
        out.append(_Style(*at, str(ends[i])))
    return out


def _render(words: np.ndarray, ids: np.ndarray, style: _Style, lang: str, tokenized: bool) -> str:
    """One sentence: Moses-tokenized with HTML entities (IWSLT), or raw text (WMT)."""
    toks = words[ids].tolist()
    if style.apos >= 0 and lang in ("en", "fr"):
        t = toks[style.apos]
        if lang == "en":
            toks[style.apos] = f"{t} &apos;s" if tokenized else f"{t}'s"
        else:
            toks[style.apos] = f"l&apos; {t}" if tokenized else f"l'{t}"
    if style.quote >= 0:
        t = toks[style.quote]
        toks[style.quote] = f"&quot; {t} &quot;" if tokenized else f'"{t}"'
    if style.amp >= 0:
        toks[style.amp] += " &amp;" if tokenized else " &"
    if style.bracket >= 0:  # Moses escapes [ and ] as numeric entities
        t = toks[style.bracket]
        toks[style.bracket] = f"&#91; {t} &#93;" if tokenized else f"[{t}]"
    if style.comma >= 0 and style.comma < len(toks) - 1:
        toks[style.comma] += " ," if tokenized else ","
    toks[0] = toks[0][:1].upper() + toks[0][1:]
    return " ".join(toks) + (" " if tokenized else "") + style.end


def _parallel(rng: np.random.Generator, n: int, langs: Sequence[str], lex: dict[str, np.ndarray], tokenized: bool,
              low: int = 1, high: int = 12) -> dict[str, list[str]]:
    """`n` parallel sentences in each of `langs`: the same word ids and punctuation in each."""
    sentences = _sentences(rng, n, low, high)
    styles = _styles(rng, sentences)
    return {lang: [_render(lex[lang], ids, st, lang, tokenized) for ids, st in zip(sentences, styles)] for lang in langs}


def _long_pair(rng: np.random.Generator, src: str, tgt: str, lex: dict[str, np.ndarray], tokenized: bool) -> tuple[str, str]:
    """LONG_WORDS uniformly random words a side: far over 1,024 subwords."""
    ids = rng.integers(0, LEXICON_SIZE, LONG_WORDS)
    style = _Style(-1, -1, -1, -1, -1, ".")
    return _render(lex[src], ids, style, src, tokenized), _render(lex[tgt], ids, style, tgt, tokenized)


def _inside(line: str, ch: str) -> str:
    """`line` with `ch` in place of its first space: inside the line, never at its end."""
    return line.replace(" ", ch, 1) if " " in line else f"{line}{ch}{line}"


def _hard_pairs(rng: np.random.Generator, src: str, tgt: str, lex: dict[str, np.ndarray], tokenized: bool, *,
                long_pair: bool, not_utf8: bool) -> list[tuple[str, str]]:
    """The hard cases of real parallel text (see the module's doc), each next to a normal line."""
    base = _parallel(rng, 7, (src, tgt), lex, tokenized, low=4)
    s, t = base[src], base[tgt]
    pairs = [
        (_inside(s[0], "\r"), t[0]),  # a carriage return inside a line
        (s[1], _inside(t[1], "\u2028")),  # LINE SEPARATOR: str.splitlines() splits there
        (_inside(s[2], "\u0085"), t[2]),  # NEXT LINE, likewise
        ("", t[3]),  # an empty side
        (s[4], ""),
        (f"  {s[5]} ", f" {t[5]}  "),  # leading and trailing spaces
    ]
    if not_utf8:  # Latin-1 and cp1252 bytes, a lone 0xFF, a cut 3-byte sequence (surrogateescape)
        pairs.append((f"{s[6]} caf\udce9 \udc93quoted\udc94", f"\udcff {t[6]} \udce2\udc82"))
    if long_pair:
        pairs.append(_long_pair(rng, src, tgt, lex, tokenized))
    return pairs


def _with_hard_pairs(src_lines: list[str], tgt_lines: list[str], hard: Sequence[tuple[str, str]]) -> None:
    """Put the hard pairs in place of normal ones, spread evenly (the line count stays)."""
    n = len(src_lines)
    if n <= len(hard):
        raise ValueError(f"{n} pairs leave no room for {len(hard)} hard cases")
    for k, (s, t) in enumerate(hard):
        at = (k + 1) * n // (len(hard) + 1)
        src_lines[at], tgt_lines[at] = s, t


# ---------------------------------------------------------------------------------- IWSLT


def write_iwslt(folder: str | Path, *, seed: int = 0) -> dict[str, Path]:
    """Luong & Manning's six files, {train,tst2012,tst2013}.{en,vi}, with their real line counts."""
    from resrepro.data.translation import IWSLT15_LINES, SOURCES

    rng, lex = _rng(seed, "iwslt15_en_vi"), lexicons(seed)
    folder = Path(folder)
    written = {}
    for stem, n in IWSLT15_LINES.items():
        text = _parallel(rng, n, ("en", "vi"), lex, tokenized=True)
        if stem == "train":
            _with_hard_pairs(text["en"], text["vi"],
                             _hard_pairs(rng, "en", "vi", lex, True, long_pair=True, not_utf8=False))
        for lang in ("en", "vi"):
            path = folder / f"{stem}.{lang}"
            data = text_bytes(text[lang])
            atomic_write(path, lambda tmp: tmp.write_bytes(data))
            written[path.name] = path
    return {f"iwslt15_en_vi/{f.name}": written[f.name] for f in SOURCES["iwslt15_en_vi"].files}


# ------------------------------------------------------------------------------------ WMT

_NEWS = ("bbc", "lemonde", "spiegel", "guardian", "nytimes", "dw", "lefigaro", "zeit", "reuters")


def xml_escape(text: str) -> str:
    """Text as the .sgm files carry it: & < > and double quotes as XML entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class SgmDoc(NamedTuple):
    docid: str
    segs: Sequence[str]  # markup: text with its XML entities
    origlang: str = "en"
    genre: str = "news"


def sgm_text(kind: str, lang: str, docs: Iterable[Sequence], setid: str = "newstest2014", sysid: str = "ref") -> str:
    """A WMT test set's markup, one <seg> a line as statmt distributes it: kind "src"
    (<srcset>) or "ref" (<refset trglang=lang>); `docs` are SgmDoc or (docid, segs[, origlang])."""
    tag = "srcset" if kind == "src" else "refset"
    trglang = f' trglang="{lang}"' if kind == "ref" else ""
    out = [f'<{tag} setid="{setid}" srclang="any"{trglang}>']
    for doc in (SgmDoc(*d) for d in docs):
        out.append(f'<doc sysid="{sysid}" docid="{doc.docid}" genre="{doc.genre}" origlang="{doc.origlang}">')
        out.append("<p>")
        out.extend(f'<seg id="{i}">{s}</seg>' for i, s in enumerate(doc.segs, 1))
        out.append("</p>")
        out.append("</doc>")
    out.append(f"</{tag}>")
    return "\n".join(out) + "\n"


def _test_set(rng: np.random.Generator, n: int, langs: Sequence[str], lex: dict[str, np.ndarray]) -> tuple[list, dict[str, list[str]]]:
    """`n` parallel raw segments in `langs`, cut into documents of 5-40: (docs (docid, size, origlang), lines)."""
    lines = _parallel(rng, n, langs, lex, tokenized=False)
    docs, done = [], 0
    while done < n:
        size = min(int(rng.integers(5, 41)), n - done)
        docs.append((f"{len(docs) + 1000}-{_NEWS[int(rng.integers(len(_NEWS)))]}", size, str(rng.choice(list(langs)))))
        done += size
    return docs, lines


def _sgm_member(kind: str, lang: str, setid: str, docs: list, lines: list[str]) -> bytes:
    start, out = 0, []
    for docid, size, origlang in docs:
        out.append(SgmDoc(docid, [xml_escape(s) for s in lines[start:start + size]], origlang))
        start += size
    return sgm_text(kind, lang, out, setid=setid).encode("utf-8")


def write_wmt(folder: str | Path, *, seed: int = 0, sizes: FakeSizes = FakeSizes()) -> dict[str, Path]:
    """Every statmt archive of wmt14_en_de and wmt14_en_fr by its real name, with the members
    the pipeline reads; keys wmt14_en_de/<name> and wmt14_en_fr/<name> for the files each uses."""
    from resrepro.data.translation import SOURCES

    rng, lex = _rng(seed, "wmt14"), lexicons(seed)
    folder = Path(folder)

    def corpus(n: int, foreign: str, *, long_pair: bool = False, not_utf8: bool = False) -> dict[str, bytes]:
        text = _parallel(rng, n, ("en", foreign), lex, tokenized=False)
        _with_hard_pairs(text["en"], text[foreign],
                         _hard_pairs(rng, "en", foreign, lex, False, long_pair=long_pair, not_utf8=not_utf8))
        return {lang: text_bytes(lines) for lang, lines in text.items()}

    def pairs(stem: str, n: int, foreigns: Sequence[str] = ("de", "fr"), **hard) -> list[tuple[str, bytes]]:
        members = []
        for foreign in foreigns:
            text = corpus(n, foreign, **hard)
            pair = f"{foreign}-en"
            members += [(f"{stem.format(pair=pair)}.{foreign}", text[foreign]), (f"{stem.format(pair=pair)}.en", text["en"])]
        return members

    archives: dict[str, Callable[[Path], Path]] = {
        "training-parallel-europarl-v7.tgz": lambda p: write_tar(
            p, pairs("training/europarl-v7.{pair}", sizes.europarl, long_pair=True)),
        "training-parallel-commoncrawl.tgz": lambda p: write_tar(
            p, pairs("commoncrawl.{pair}", sizes.commoncrawl, not_utf8=True)),
        "training-parallel-nc-v9.tgz": lambda p: write_tar(
            p, pairs("training/news-commentary-v9.{pair}", sizes.news_commentary)),
        "training-parallel-un.tgz": lambda p: write_tar(p, pairs("un/undoc.2000.{pair}", sizes.un, ("fr",))),
        "training-giga-fren.tar": lambda p: write_tar(p, [
            (f"giga-fren.release2.fixed.{lang}.gz", gzip.compress(data, compresslevel=6, mtime=MTIME))
            for lang, data in sorted(corpus(sizes.giga_fren, "fr").items())], gz=False),
        "wmt12-test.tgz": lambda p: write_tar(p, _newstest(rng, lex, 2012, 3003, ("en", "fr"))),
        "wmt13-test.tgz": lambda p: write_tar(p, _newstest(rng, lex, 2013, 3000, ("en", "de", "fr"))),
        "test-full.tgz": lambda p: write_tar(p, _newstest2014(rng, lex)),
    }
    paths = {name: write(folder / name) for name, write in archives.items()}
    return {f"{source}/{f.name}": paths[f.name] for source in ("wmt14_en_de", "wmt14_en_fr") for f in SOURCES[source].files}


def _newstest(rng: np.random.Generator, lex: dict[str, np.ndarray], year: int, n: int, langs: Sequence[str]) -> list[tuple[str, bytes]]:
    """WMT12/13 test.tgz: one multi-parallel source file per language, test/newstest<year>-src.<lang>.sgm."""
    docs, lines = _test_set(rng, n, langs, lex)
    return [(f"test/newstest{year}-src.{lang}.sgm", _sgm_member("src", lang, f"newstest{year}", docs, lines[lang]))
            for lang in langs]


def _newstest2014(rng: np.random.Generator, lex: dict[str, np.ndarray]) -> list[tuple[str, bytes]]:
    """test-full.tgz: newstest2014 (full, 3,003 segments) per pair, source and reference both ways."""
    members = []
    for foreign in ("de", "fr"):
        docs, lines = _test_set(rng, 3003, ("en", foreign), lex)
        for lang in ("en", foreign):
            for kind in ("src", "ref"):
                members.append((f"test-full/newstest2014-{foreign}en-{kind}.{lang}.sgm",
                                _sgm_member(kind, lang, "newstest2014", docs, lines[lang])))
    return members


# ---------------------------------------------------------------------------------- MSCOCO

COCO_IMAGE_SIZE = (80, 64)  # width, height
CORRUPT_COCOID = 167126  # COCO_train2014_000000167126.jpg is corrupt in the real train2014.zip too
_COLOURS = {"red": (205, 35, 35), "green": (40, 165, 60), "blue": (40, 70, 205), "yellow": (235, 215, 40),
            "white": (245, 245, 245), "black": (20, 20, 20), "orange": (240, 140, 30), "purple": (130, 50, 170)}
_BACKGROUNDS = {"grey": (128, 128, 128), "brown": (120, 80, 45), "pink": (235, 170, 190), "teal": (40, 130, 130)}
_SHAPES = {"circle": "ball", "square": "box", "triangle": "wedge"}
_PLACES = {"left": 0.25, "middle": 0.5, "right": 0.75}


class _Scene(NamedTuple):
    colour: str
    shape: str
    size: str  # small or large
    place: str
    background: str


def _scene(rng: np.random.Generator) -> _Scene:
    pick = lambda options: str(options[int(rng.integers(len(options)))])  # noqa: E731
    return _Scene(pick(list(_COLOURS)), pick(list(_SHAPES)), pick(["small", "large"]), pick(list(_PLACES)),
                  pick(list(_BACKGROUNDS)))


def _jpeg(rng: np.random.Generator, scene: _Scene) -> bytes:
    from PIL import Image, ImageDraw

    w, h = COCO_IMAGE_SIZE
    pixels = np.asarray(_BACKGROUNDS[scene.background], float) + rng.normal(0, 8, (h, w, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    r = 10 if scene.size == "small" else 20
    cx, cy = int(_PLACES[scene.place] * w), h // 2
    draw, fill = ImageDraw.Draw(image), _COLOURS[scene.colour]
    if scene.shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    elif scene.shape == "square":
        draw.rectangle((cx - r, cy - r, cx + r, cy + r), fill=fill)
    else:
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _captions(scene: _Scene) -> list[str]:
    """Five captions, as crowd workers wrote them: they name the colour, shape, size and place."""
    c, s, z, p, b = scene
    where = "in the middle" if p == "middle" else f"on the {p}"
    a = "an" if c[0] in "aeiou" else "a"
    return [f"A {z} {c} {s} on a {b} background.", f"{a.title()} {c} {s} {where} of the picture.",
            f"There is {a} {c} {s} against a {b} wall. ", f"a {s} that is {c}", f"A picture of a {z} {c} {_SHAPES[s]}."]


def _tokens(raw: str) -> list[str]:
    return raw.lower().replace(".", " ").replace(",", " ").split()


def _karpathy_images(rng: np.random.Generator, entries: Sequence[dict], scenes: Sequence[_Scene]) -> list[dict]:
    """Karpathy's json entries: sentences with tokens, raw, imgid, sentid; sentids; imgid in file order."""
    out, sentid = [], 0
    for imgid, (entry, scene) in enumerate(zip(entries, scenes)):
        sentences = []
        for raw in _captions(scene):
            sentences.append({"tokens": _tokens(raw), "raw": raw, "imgid": imgid, "sentid": sentid})
            sentid += 1
        image = {"filepath": entry["filepath"]} if "filepath" in entry else {}  # COCO's entries only
        image |= {"sentids": [x["sentid"] for x in sentences], "filename": entry["filename"], "imgid": imgid,
                  "split": entry["split"], "sentences": sentences}
        if "cocoid" in entry:
            image["cocoid"] = entry["cocoid"]
        out.append(image)
    return out


def write_coco(folder: str | Path, *, seed: int = 0, sizes: FakeSizes = FakeSizes()) -> dict[str, Path]:
    """train2014.zip, val2014.zip (COCO_<folder>_<cocoid:012d>.jpg, one corrupt in train2014) and
    caption_datasets.zip (dataset_coco.json, dataset_flickr8k.json, dataset_flickr30k.json)."""
    from resrepro.data import coco

    rng = _rng(seed, "mscoco")
    folder = Path(folder)
    # Karpathy's train is train2014; restval, val and test are val2014 images
    splits = ["train"] * sizes.coco_train + ["restval"] * sizes.coco_restval + ["val"] * sizes.coco_val + ["test"] * sizes.coco_test
    order = rng.permutation(len(splits))
    cocoids = rng.choice(np.setdiff1d(np.arange(1, 581_930), [CORRUPT_COCOID]), len(splits), replace=False)
    cocoids[sizes.coco_train // 2] = CORRUPT_COCOID  # a train image
    entries, scenes, pictures = [], [], {"train2014": [], "val2014": []}
    for k in order:
        split, cocoid = splits[k], int(cocoids[k])
        where = "train2014" if split == "train" else "val2014"
        name = f"COCO_{where}_{cocoid:012d}.jpg"
        scene = _scene(rng)
        data = bytes(16) + rng.bytes(2000) if cocoid == CORRUPT_COCOID else _jpeg(rng, scene)  # not a JPEG (nor any image)
        pictures[where].append((f"{where}/{name}", data))
        entries.append({"filepath": where, "filename": name, "split": split, "cocoid": cocoid})
        scenes.append(scene)
    written = {}
    for where, members in pictures.items():
        written[f"{where}.zip"] = write_zip(folder / f"{where}.zip", sorted(members), folders=[where])
    datasets = {"coco": _karpathy_images(rng, entries, scenes)}
    for name, n in (("flickr8k", 8), ("flickr30k", 10)):
        flickr = [{"filename": f"{int(rng.integers(10**9, 4 * 10**9))}" + ("_" + rng.bytes(5).hex() if name == "flickr8k" else "") + ".jpg",
                   "split": split} for split in ["train"] * (n - 2) + ["val", "test"]]
        datasets[name] = _karpathy_images(rng, flickr, [_scene(rng) for _ in flickr])
    written["caption_datasets.zip"] = write_zip(folder / "caption_datasets.zip", [
        (f"dataset_{name}.json", json.dumps({"images": images, "dataset": name}).encode())
        for name, images in sorted(datasets.items())])
    return {f"mscoco/{f.name}": written[f.name] for f in coco.COCO_FILES}


# ------------------------------------------------------------------------------ ResNet-101

RESNET101_FILE = "resnet101-cd907fc2.pth"  # torchvision's IMAGENET1K_V2 file (backbones.weights_url)


def write_resnet101(folder: str | Path, *, seed: int = 0) -> dict[str, Path]:
    """folder/resnet101-cd907fc2.pth: torch.save of a randomly initialised (seeded) torchvision
    resnet101 state_dict with 1000 classes, its residual branches at zero (finite features); the
    global torch generator is left as it was."""
    import torch
    import torchvision

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(np.random.default_rng([seed, _STREAMS["resnet101"]]).integers(1 << 62))
        # zero-initialised residual branches: random weights otherwise grow the activations past float16's range
        state = torchvision.models.resnet101(num_classes=1000, zero_init_residual=True).state_dict()

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: the records' folder is "archive", not the temp name
            torch.save(state, f)

    path = Path(folder) / RESNET101_FILE
    atomic_write(path, write)
    return {f"resnet101/{RESNET101_FILE}": path}


__all__ = [
    "CIFAR100_COARSE_NAMES", "CIFAR100_COARSE_OF", "CIFAR100_LABEL_NAMES", "CIFAR10_LABEL_NAMES", "CORRUPT_COCOID",
    "FakeSizes", "LEXICON_SIZE", "LONG_WORDS", "MTIME", "REHEARSAL_SIZES", "RESNET101_FILE", "SgmDoc", "add_member", "cifar_images",
    "lexicons", "py2_pickle", "sgm_text", "text_bytes", "write_cifar", "write_cifar_archive", "write_coco",
    "write_fake_sources", "write_iwslt", "write_resnet101", "write_tar", "write_wmt", "write_zip", "xml_escape",
]
