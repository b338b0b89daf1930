"""The rehearsal's fake sources (resrepro.data.fake_sources) read by the real readers and
preparations, and the local mirror (resrepro.data.mirror_server) through the real download code.

One write with small CIFAR and COCO sizes (the translation corpora at their default sizes, the
IWSLT files and WMT dev/test sets at their real line counts) serves the module's tests; the
translation datasets are prepared with the papers' 32,768-piece vocabulary.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import pickle
import shutil
import tarfile
import unicodedata
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from resrepro import cli
from resrepro.data import backbones, cifar, coco, fake_sources
from resrepro.data.download import ATTEMPTS, IncompleteDownload, fetch
from resrepro.data.fake_sources import CORRUPT_COCOID, LONG_WORDS, FakeSizes, write_fake_sources
from resrepro.data.images import load_prepared
from resrepro.data.mirror_server import Request, serving
from resrepro.data.subword import VOCAB_SIZES, count_lines
from resrepro.data.translation import (IWSLT15_LINES, SOURCES, fetch_source, load_encoded, prepare_translation,
                                       read_lock, read_sgm)

SIZES = FakeSizes(cifar10_per_batch=4, cifar10_test=10, cifar100_train=100, cifar100_test=20,
                  coco_train=6, coco_restval=2, coco_val=2, coco_test=3)
LINE_BREAKS = ("\r", "\u2028", "\u0085")


@pytest.fixture(scope="module")
def fakes(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    out = tmp_path_factory.mktemp("fakes")
    yield out, write_fake_sources(out, seed=0, sizes=SIZES)
    shutil.rmtree(out)  # 190 MB, mostly the ResNet-101 weights


def raw_dir(written: dict[str, Path], name: str, dest: Path) -> Path:
    """Every file of source `name` in one folder by its file name, as fetch_source places them."""
    dest.mkdir(parents=True, exist_ok=True)
    for key, path in written.items():
        if key.startswith(f"{name}/"):
            (dest / path.name).symlink_to(path)
    return dest


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------- layout


def test_every_download_has_its_key_and_real_file_name(fakes):
    out, written = fakes
    expected = ({f"{n}/{cifar.SOURCES[n]['filename']}" for n in ("cifar10", "cifar100")}
                | {f"{n}/{f.name}" for n in ("iwslt15_en_vi", "wmt14_en_de", "wmt14_en_fr") for f in SOURCES[n].files}
                | {f"mscoco/{f.name}" for f in coco.COCO_FILES} | {"resnet101/resnet101-cd907fc2.pth"})
    assert set(written) == expected
    for key, path in written.items():
        assert path.is_file() and path.name == key.split("/")[1] and path.is_relative_to(out)
    assert written["wmt14_en_de/test-full.tgz"] == written["wmt14_en_fr/test-full.tgz"] == out / "wmt14" / "test-full.tgz"
    assert written["resnet101/resnet101-cd907fc2.pth"] == out / "backbones" / "resnet101-cd907fc2.pth"
    assert backbones.weights_url("resnet101", "IMAGENET1K_V2").endswith("/" + fake_sources.RESNET101_FILE)
    assert sorted(p.name for p in (out / "wmt14").iterdir()) == sorted(
        {f.name for n in ("wmt14_en_de", "wmt14_en_fr") for f in SOURCES[n].files})


def test_sizes_are_checked():
    with pytest.raises(ValueError, match="FakeSizes.europarl is 3"):
        FakeSizes(europarl=3)
    with pytest.raises(ValueError, match="coco_train"):
        FakeSizes(coco_train=1)  # the corrupt image and a readable one


# ----------------------------------------------------------------------------------- CIFAR


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_archives_are_read_by_prepare_cifar(fakes, tmp_path, name):
    _, written = fakes
    archive = written[f"{name}/{cifar.SOURCES[name]['filename']}"]
    prepare_cifar_out = tmp_path / f"{name}.pt"
    cifar.prepare_cifar(archive, name, prepare_cifar_out)
    d = load_prepared(prepare_cifar_out)
    classes = cifar.CLASSES[name]
    n_train, n_test = (5 * SIZES.cifar10_per_batch, SIZES.cifar10_test) if name == "cifar10" else (SIZES.cifar100_train, SIZES.cifar100_test)
    assert d["train_x"].shape == (n_train, 3, 32, 32) and d["test_x"].shape == (n_test, 3, 32, 32)
    assert d["train_x"].dtype == torch.uint8
    assert set(d["train_y"].tolist()) == set(range(classes))  # every class in train
    assert 0 <= d["test_y"].min() and d["test_y"].max() < classes
    assert len(d["classes"]) == classes and d["classes"][0] == ("airplane" if name == "cifar10" else "apple")
    with tarfile.open(archive) as tar:  # Python 2 pickles: bytes keys, str under Python 3's default
        member = f"{cifar.LAYOUT[name]['folder']}/{cifar.LAYOUT[name]['test'][0]}"
        blob = tar.extractfile(member).read()
    batch = pickle.loads(blob, encoding="bytes")
    assert set(batch) >= {b"data", b"batch_label", b"filenames", cifar.LAYOUT[name]["labels_key"]}
    assert b"data" not in pickle.loads(blob, encoding="latin1")
    if name == "cifar100":
        assert len(batch[b"coarse_labels"]) == n_test and max(batch[b"coarse_labels"]) < 20


def test_cifar_classes_can_be_learned(tmp_path):
    """Nearest class mean on the pixels: the fake images carry their class."""
    written = fake_sources.write_cifar(tmp_path, "cifar10", sizes=FakeSizes(cifar10_per_batch=100, cifar10_test=200))
    cifar.prepare_cifar(written["cifar10/cifar-10-python.tar.gz"], "cifar10", tmp_path / "c.pt")
    d = load_prepared(tmp_path / "c.pt")
    x, y = d["train_x"].flatten(1).float(), d["train_y"]
    means = torch.stack([x[y == c].mean(0) for c in range(10)])
    predicted = torch.cdist(d["test_x"].flatten(1).float(), means).argmin(1)
    assert (predicted == d["test_y"]).float().mean() > 0.9


# ----------------------------------------------------------------------------- translation


def test_iwslt_files_are_luong_and_mannings_format(fakes):
    _, written = fakes
    path = {k.split("/")[1]: p for k, p in written.items() if k.startswith("iwslt15_en_vi/")}
    for stem, n in IWSLT15_LINES.items():
        assert count_lines(path[f"{stem}.en"]) == count_lines(path[f"{stem}.vi"]) == n
    en = path["train.en"].read_bytes().decode("utf-8")  # strictly valid UTF-8
    vi = path["train.vi"].read_bytes().decode("utf-8")
    assert all(e in en for e in (" &apos;s ", " &quot; ", " &amp; ", " , ", " .\n", "&#91; ", " &#93;"))
    assert all(e in vi for e in ("&#91; ", " &#93;"))  # Moses's numeric entities for [ and ], in both languages
    assert unicodedata.is_normalized("NFC", vi) and {"ư", "đ", "ơ"} <= set(vi)
    assert all(ch in en + vi for ch in LINE_BREAKS)
    en_lines, vi_lines = en.split("\n")[:-1], vi.split("\n")[:-1]
    assert len(en_lines) == IWSLT15_LINES["train"]  # only "\n" ends a line
    assert any(s == "" and t for s, t in zip(en_lines, vi_lines)) and any(t == "" and s for s, t in zip(en_lines, vi_lines))
    assert any(s.startswith(" ") and s.endswith(" ") for s in en_lines)
    assert any(len(s.split()) > LONG_WORDS for s in en_lines)


def prepared_text(out: Path) -> str:
    return "".join((out / f"{split}.{side}").read_text(encoding="utf-8") for split in ("train", "dev", "test")
                   for side in ("src", "tgt"))


def check_long_pair(out: Path) -> None:
    """The over-long pair is a training pair, and more than 1,024 subwords a side."""
    train = load_encoded(out, "train")
    longest = int(np.argmax(train.src_lengths()))
    assert train.src_lengths()[longest] > 1024 and train.tgt_lengths()[longest] > 1024
    src = (out / "train.src").read_text(encoding="utf-8").split("\n")[longest]
    assert len(src.split()) >= LONG_WORDS  # and its full stop, a token of its own in IWSLT


def test_prepare_iwslt_with_the_papers_vocabulary(fakes, tmp_path):
    _, written = fakes
    out = tmp_path / "prepared"
    meta = prepare_translation("iwslt15_en_vi", raw_dir(written, "iwslt15_en_vi", tmp_path / "raw"), out)  # counts checked
    assert meta["pairs"] == {"train": IWSLT15_LINES["train"] - 2, "dev": 1553, "test": 1268}
    assert meta["dropped_empty_train_pairs"] == 2
    assert meta["subword"]["vocab_size"] == VOCAB_SIZES["iwslt15_en_vi"] == 32768
    assert not any(ch in prepared_text(out) for ch in LINE_BREAKS)
    check_long_pair(out)
    detok = (out / "test.ref.detok").read_text(encoding="utf-8")
    assert "&quot;" not in detok and "&amp;" not in detok  # the Moses detokenizer unescaped them


@pytest.mark.parametrize("name, dev, corpora", [("wmt14_en_de", 3000, ("europarl", "commoncrawl", "news_commentary")),
                                                ("wmt14_en_fr", 6003, ("europarl", "commoncrawl", "un", "news_commentary",
                                                                       "giga_fren"))])
def test_prepare_wmt_with_the_papers_vocabulary(fakes, tmp_path, name, dev, corpora):
    _, written = fakes
    out = tmp_path / "prepared"
    meta = prepare_translation(name, raw_dir(written, name, tmp_path / "raw"), out)  # dev and test counts checked
    pairs = sum(getattr(SIZES, c) for c in corpora)
    assert meta["pairs"] == {"train": pairs - 2 * len(corpora), "dev": dev, "test": 3003}
    assert meta["dropped_empty_train_pairs"] == 2 * len(corpora)  # an empty source and an empty target each
    assert meta["subword"]["vocab_size"] == 32768
    text = prepared_text(out)
    assert not any(ch in text for ch in LINE_BREAKS)
    assert "\ufffd" in (out / "train.src").read_text(encoding="utf-8")  # commoncrawl's bytes that are not UTF-8
    assert "\ufffd" not in (out / "test.src").read_text(encoding="utf-8")
    check_long_pair(out)
    test_src = (out / "test.src").read_text(encoding="utf-8")
    assert '"' in test_src and " & " in test_src and "&quot;" not in test_src  # the .sgm entities decoded


def test_wmt_archives_have_the_real_members_and_markup(fakes):
    out, _ = fakes
    wmt = out / "wmt14"
    with tarfile.open(wmt / "test-full.tgz") as tar:
        ref = tar.extractfile("test-full/newstest2014-deen-ref.de.sgm").read().decode("utf-8")
        names = tar.getnames()
    assert {"test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-fren-src.en.sgm",
            "test-full/newstest2014-fren-ref.fr.sgm"} <= set(names)
    lines = ref.split("\n")
    assert lines[0] == '<refset setid="newstest2014" srclang="any" trglang="de">' and lines[-2] == "</refset>"
    assert lines[1].startswith('<doc sysid="ref" docid="') and 'genre="news" origlang="' in lines[1]
    assert lines[3].startswith('<seg id="1">') and ref.count('<seg id="1">') > 10  # ids restart in each document
    assert "&quot;" in ref and "&amp;" in ref
    with tarfile.open(wmt / "wmt13-test.tgz") as tar:
        assert sorted(tar.getnames()) == ["test", "test/newstest2013-src.de.sgm", "test/newstest2013-src.en.sgm",
                                          "test/newstest2013-src.fr.sgm"]
    with tarfile.open(wmt / "training-giga-fren.tar", "r:") as tar:  # a plain tar of .gz members
        fr = gzip.decompress(tar.extractfile("giga-fren.release2.fixed.fr.gz").read())
    assert fr.count(b"\n") == SIZES.giga_fren
    with tarfile.open(wmt / "training-parallel-commoncrawl.tgz") as tar:
        with pytest.raises(UnicodeDecodeError):
            tar.extractfile("commoncrawl.de-en.en").read().decode("utf-8")
    with tarfile.open(wmt / "training-parallel-europarl-v7.tgz") as tar:
        tar.extractfile("training/europarl-v7.fr-en.fr").read().decode("utf-8")  # only commoncrawl is not UTF-8
        assert tar.getmember("training/europarl-v7.de-en.de").mtime == fake_sources.MTIME


def test_sgm_text_reads_back(tmp_path):
    path = tmp_path / "newstest2013-src.de.sgm"
    path.write_text(fake_sources.sgm_text("src", "de", [("1-a", ["Eins &amp; zwei"]), ("2-b", ["drei", "vier"], "de")],
                                          setid="newstest2013"), encoding="utf-8")
    assert read_sgm(path) == ["Eins & zwei", "drei", "vier"]
    assert 'origlang="de"' in path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------- MSCOCO


def test_coco_is_read_by_the_karpathy_and_image_readers(fakes):
    out, written = fakes
    splits = coco.read_karpathy(written["mscoco/caption_datasets.zip"])
    assert {s: len(v) for s, v in splits.items()} == {"train": SIZES.coco_train + SIZES.coco_restval,
                                                      "val": SIZES.coco_val, "test": SIZES.coco_test}
    images = [im for split in splits.values() for im in split]
    assert all(len(im.captions) == 5 for im in images)
    assert len({im.cocoid for im in images}) == len(images)
    read = list(coco.read_images(out / "mscoco", images))
    unreadable = [im.member for im, pic in read if pic is None]
    assert unreadable == [f"train2014/COCO_train2014_{CORRUPT_COCOID:012d}.jpg"]
    for image, picture in read:
        if picture is None:
            continue
        assert picture.size == fake_sources.COCO_IMAGE_SIZE
        colour, place = image.captions[0][2], image.captions[1][-4]  # "a <size> <colour> ...", "... <place> of the picture"
        pixel = np.asarray(picture)[32, int(fake_sources._PLACES[place] * 80)].astype(float)  # the shape's centre
        nearest = min(fake_sources._COLOURS, key=lambda c: np.abs(pixel - fake_sources._COLOURS[c]).sum())
        assert nearest == colour, (image.member, image.captions)

    with zipfile.ZipFile(written["mscoco/caption_datasets.zip"]) as z:
        assert sorted(z.namelist()) == ["dataset_coco.json", "dataset_flickr30k.json", "dataset_flickr8k.json"]
        data = json.loads(z.read("dataset_coco.json"))
        flickr = json.loads(z.read("dataset_flickr8k.json"))
    assert data["dataset"] == "coco" and flickr["dataset"] == "flickr8k" and "cocoid" not in flickr["images"][0]
    entry = data["images"][0]
    assert set(entry) == {"filepath", "sentids", "filename", "imgid", "split", "sentences", "cocoid"}
    assert set(entry["sentences"][0]) == {"tokens", "raw", "imgid", "sentid"}
    assert entry["sentids"] == [s["sentid"] for s in entry["sentences"]]
    assert {e["split"] for e in data["images"]} == {"train", "restval", "val", "test"}
    assert all((e["filepath"] == "train2014") == (e["split"] == "train") for e in data["images"])


def test_resnet101_weights_load_into_torchvision(fakes):
    _, written = fakes
    path = written["resnet101/resnet101-cd907fc2.pth"]
    net = backbones.load_backbone("resnet101", "IMAGENET1K_V2", path)  # the pipeline's own loader
    assert net.fc.out_features == 1000
    state = torch.load(path, map_location="cpu", weights_only=True)
    assert torch.equal(net.state_dict()["layer4.2.conv3.weight"], state["layer4.2.conv3.weight"])


# ----------------------------------------------------------------------------- determinism


def members(path: Path) -> dict[str, bytes]:
    """An archive's members (or a plain file as one member)."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            return {n: z.read(n) for n in z.namelist()}
    if path.suffix in (".tgz", ".tar", ".gz"):
        with tarfile.open(path) as tar:
            return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    return {path.name: path.read_bytes()}


def test_one_seed_gives_the_same_bytes(fakes, tmp_path):
    out, written = fakes
    again = write_fake_sources(tmp_path / "again", seed=0, sizes=SIZES)
    assert list(again) == list(written)
    for key, path in written.items():
        if key.startswith("resnet101/"):
            assert md5(again[key]) == md5(path), key
            continue
        assert members(again[key]) == members(path), key  # the text and pickles inside
        assert again[key].read_bytes() == path.read_bytes(), key  # and the archives themselves (fixed mtimes)
    other = fake_sources.write_cifar(tmp_path / "other", "cifar10", seed=1, sizes=SIZES)
    assert md5(other["cifar10/cifar-10-python.tar.gz"]) != md5(written["cifar10/cifar-10-python.tar.gz"])


def test_the_cli_writes_and_prints_the_keys(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_write(out, *, seed):
        calls.append((out, seed))
        return {"cifar10/cifar-10-python.tar.gz": out / "cifar10" / "cifar-10-python.tar.gz", "mscoco/val2014.zip": out}

    monkeypatch.setattr(fake_sources, "write_fake_sources", fake_write)
    cli.main(["fake-sources", "--out", str(tmp_path / "x"), "--seed", "3"])
    assert calls == [(tmp_path / "x", 3)]
    assert capsys.readouterr().out == "cifar10/cifar-10-python.tar.gz\nmscoco/val2014.zip\n"


# ---------------------------------------------------------------------------------- mirror


def test_a_cut_short_download_from_the_mirror_is_resumed_and_whole(fakes, tmp_path):
    out, written = fakes
    archive = written["cifar10/cifar-10-python.tar.gz"]
    with serving(out, cut_short=["cifar10/cifar-10-python.tar.gz", "iwslt15_en_vi/train.vi"]) as server:
        got = fetch(server.url + "cifar10/cifar-10-python.tar.gz", tmp_path / "cifar10.tgz", md5(archive))
        lock = tmp_path / "lock.json"
        fetched = fetch_source("iwslt15_en_vi", tmp_path / "iwslt", lock_path=lock, mirror=server.url + "iwslt15_en_vi/")
    assert got.read_bytes() == archive.read_bytes()
    size = archive.stat().st_size
    train_vi = written["iwslt15_en_vi/train.vi"].stat().st_size
    cut = [r for r in server.requests if r.path in ("cifar10/cifar-10-python.tar.gz", "iwslt15_en_vi/train.vi")]
    assert cut == [Request("cifar10/cifar-10-python.tar.gz", size // 2),  # then resumed from where it was cut
                   Request("cifar10/cifar-10-python.tar.gz", size - size // 2, 206, size // 2),
                   Request("iwslt15_en_vi/train.vi", train_vi // 2), Request("iwslt15_en_vi/train.vi", train_vi - train_vi // 2, 206, train_vi // 2)]
    assert len(server.requests) == 2 + 7  # one resumption each; the five other IWSLT files once
    for path in fetched:
        assert path.read_bytes() == written[f"iwslt15_en_vi/{path.name}"].read_bytes()
    assert read_lock(lock)["iwslt15_en_vi/train.vi"]["md5"] == md5(written["iwslt15_en_vi/train.vi"])


def test_the_archives_en_de_and_en_fr_share_are_downloaded_once(fakes, tmp_path):
    """Europarl, CommonCrawl, news-commentary and the test sets: EN-FR links EN-DE's verified copies."""
    from resrepro.data.translation import SOURCES

    out, written = fakes
    lock, downloads = tmp_path / "checksums.lock.json", tmp_path / "downloads"
    pins = {d: {k.split("/")[1]: md5(p) for k, p in written.items() if k.startswith(f"{d}/") and k.split("/")[1].startswith(("wmt1", "test"))}
            for d in ("wmt14_en_de", "wmt14_en_fr")}  # the fake test sets are not the published ones: pinned, as the rehearsal does
    with serving(out) as server:
        de = fetch_source("wmt14_en_de", downloads / "wmt14_en_de", lock_path=lock, mirror=server.url + "wmt14/", md5=pins["wmt14_en_de"])
    with serving(out) as server:  # a server of its own: its requests are EN-FR's alone, each recorded when it closes
        fr = fetch_source("wmt14_en_fr", downloads / "wmt14_en_fr", lock_path=lock, mirror=server.url + "wmt14/", md5=pins["wmt14_en_fr"])
    shared = {f.name for f in SOURCES["wmt14_en_de"].files} & {f.name for f in SOURCES["wmt14_en_fr"].files}
    assert shared == {"training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz", "training-parallel-nc-v9.tgz",
                      "wmt13-test.tgz", "test-full.tgz"}
    assert sorted(r.path.split("/")[1] for r in server.requests) == sorted({f.name for f in SOURCES["wmt14_en_fr"].files} - shared)
    for name in shared:
        assert (downloads / "wmt14_en_fr" / name).stat().st_ino == (downloads / "wmt14_en_de" / name).stat().st_ino  # one copy on disk
    entries = read_lock(lock)
    assert all(entries.get(f"wmt14_en_fr/{name}", {}).get("md5") == entries[f"wmt14_en_de/{name}"]["md5"]
               for name in shared if f"wmt14_en_de/{name}" in entries)  # each recorded under both
    assert [p.name for p in fr] == [f.name for f in SOURCES["wmt14_en_fr"].files] and len(de) == 5


def test_the_mirror_refuses_what_it_does_not_hold_and_can_always_cut(tmp_path):
    (tmp_path / "site" / "a").mkdir(parents=True)
    (tmp_path / "site" / "a" / "f.bin").write_bytes(b"x" * 1001)
    (tmp_path / "secret").write_bytes(b"no")
    with serving(tmp_path / "site", cut_short={"a/f.bin": None}) as server:
        for path in ("a/missing", "../secret", "a/../../secret", "a"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(server.url + path)
            assert err.value.code == 404
        head = urllib.request.urlopen(urllib.request.Request(server.url + "a/f.bin", method="HEAD"))
        assert head.headers["Content-Length"] == "1001"
        with pytest.raises(IncompleteDownload, match="expected 1,001 bytes, received 500"):
            fetch(server.url + "a/f.bin", tmp_path / "f.bin", "0" * 32)
    fetched = [(r.start, r.sent) for r in server.requests if r.path == "a/f.bin"][1:]  # after the HEAD
    assert fetched == [(0, 500)] + [(500, 0)] * ATTEMPTS  # resumed at the byte it was cut at, which it always is
    assert not (tmp_path / "f.bin").exists()
