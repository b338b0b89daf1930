"""Every measured number against a model whose output is known.

Classification: test loss and error of a model with fixed predictions, batched; the final and
best epoch of a training log. Translation: beam search settings come from the spec, outputs come
back in the test set's order, eval.json equals BLEU recomputed from the written files.
"""

import json
import math

import pytest
import torch

from resrepro.evaluate import classification, translation
from resrepro.evaluate.bleu import read_lines, sacre_bleu, split_compounds, tokenized_bleu
from resrepro.specs import EvalSpec
from resrepro.speed import Speed
from resrepro.train.classification import summarize

# --------------------------------------------------------------------------- classification


class FirstPixelClassifier(torch.nn.Module):
    """Predicts class (first pixel value) % classes, with logit `margin` on it and 0 elsewhere."""

    def __init__(self, classes: int, margin: float):
        super().__init__()
        self.classes, self.margin = classes, margin

    def forward(self, x):
        predicted = x[:, 0, 0, 0].round().long() % self.classes
        return torch.nn.functional.one_hot(predicted, self.classes).float() * self.margin


def test_classification_error_and_loss_of_a_known_model():
    """7 images, 3 wrongly classified, batches of 3 (the last one short): error 3/7 = 42.857 %.
    Loss per image: correct -log(e^m / (e^m + 3)), wrong -log(1 / (e^m + 3)), 4 classes."""
    predicted = [0, 1, 2, 3, 0, 1, 2]
    labels = [0, 1, 3, 3, 1, 1, 0]  # images 2, 4 and 6 are wrong
    x = torch.tensor(predicted, dtype=torch.uint8).view(7, 1, 1, 1).expand(7, 1, 2, 2).contiguous()
    # normalize() computes (x / 255 - mean) / std: mean 0, std 1/255 gives back the raw value
    model = FirstPixelClassifier(classes=4, margin=2.0).train()
    loss, error = classification.evaluate(model, x, torch.tensor(labels), mean=[0.0], std=[1 / 255], batch_size=3)
    assert error == pytest.approx(100.0 * 3 / 7)
    m = 2.0
    correct, wrong = -math.log(math.exp(m) / (math.exp(m) + 3)), -math.log(1 / (math.exp(m) + 3))
    assert loss == pytest.approx((4 * correct + 3 * wrong) / 7, rel=1e-6)
    assert model.training  # evaluate() restores the mode it found


def test_a_perfect_model_has_zero_error():
    x = torch.arange(5, dtype=torch.uint8).view(5, 1, 1, 1)
    _, error = classification.evaluate(FirstPixelClassifier(5, 1.0), x, torch.arange(5), [0.0], [1 / 255], batch_size=2)
    assert error == 0.0


class InputProbe(torch.nn.Module):
    """Records, per batch, whether its input is channels-last and the dtype a linear layer computes in."""

    def __init__(self):
        super().__init__()
        self.linear, self.seen = torch.nn.Linear(12, 2), []

    def forward(self, x):
        out = self.linear(x.flatten(1))
        self.seen.append((x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous(), out.dtype))
        return out


@pytest.mark.parametrize("channels_last", [False, True])
def test_batches_take_the_runs_layout_and_bfloat16_autocast_only_with_amp(channels_last):
    """The GPU path on CPU: the training run's Speed decides the batches' memory layout and
    whether they run under bf16 autocast; the default is float32 in the contiguous layout."""
    x, y = torch.zeros(3, 3, 2, 2, dtype=torch.uint8), torch.zeros(3, dtype=torch.long)
    probe = InputProbe()
    classification.evaluate(probe, x, y, [0.0] * 3, [1.0] * 3, batch_size=2)
    assert probe.seen == [(False, torch.float32)] * 2
    for amp, dtype in [(False, torch.float32), (True, torch.bfloat16)]:
        probe = InputProbe()
        speed = Speed(amp=amp, channels_last=channels_last, compile=None, fused_optimizer=False)
        classification.evaluate(probe, x, y, [0.0] * 3, [1.0] * 3, batch_size=2, speed=speed)
        assert probe.seen == [(channels_last, dtype)] * 2


def test_summarize_reports_final_and_best_epoch():
    rows = [{"epoch": e, "step": 10 * e, "lr": 0.1, "train_loss": 1.0 / e, "train_error": 50.0 / e, "test_loss": 0.5,
             "test_error": err, "seconds": 2.0} for e, err in [(1, 50.0), (2, 30.0), (3, 40.0)]]
    from test_train import typed

    m = summarize(typed(seed=4), rows, None)
    assert m["final"] == {"epoch": 3, "train_loss": 1.0 / 3, "train_error": 50.0 / 3, "test_loss": 0.5, "test_error": 40.0,
                          "test_accuracy": 60.0}
    assert m["best"] == {"epoch": 2, "test_error": 30.0, "test_accuracy": 70.0, "train_loss": 0.5}  # the best epoch's own loss
    assert (m["seed"], m["diverged"], m["epochs_completed"], m["wall_time_s"]) == (4, False, 3, 6.0)
    assert m["spec"] == typed(seed=4).to_dict()  # the spec as its JSON: metrics.json, read by the aggregate
    diverged = summarize(typed(seed=0), rows[:1], {"epoch": 2, "step": 12, "loss": "nan"})
    assert diverged["diverged"] and diverged["final"] is None and diverged["best"] is None


# --------------------------------------------------------------------------- translation

SPEC = {"model": "transformer", "size": "mini_2block", "variant": "rskip_ln", "args": {"lam": 2}, "average_last": 1, "beam": 3, "alpha": 0.7,
        "max_len_a": 1.3, "max_len_b": 7, "pad_id": 0, "bos_id": 1, "eos_id": 2}


@pytest.fixture
def fake_beam_search(monkeypatch):
    """Replaces beam search by 'translate = reverse the source' and records each call's settings."""
    calls = []

    def reverse_sources(model, src, bos, eos, beam, alpha, max_len_a, max_len_b):
        calls.append({"bos": bos, "eos": eos, "beam": beam, "alpha": alpha, "max_len_a": max_len_a, "max_len_b": max_len_b,
                      "src": src.clone()})
        out = []
        for row in src.tolist():
            tokens = row[: row.index(eos)]  # source ends with EOS, then padding
            out.append(tokens[::-1])
        return out

    monkeypatch.setattr(translation, "beam_search", reverse_sources)
    return calls


SOURCES = [[5, 6, 7, 8, 9], [10], [11, 12, 13], [14, 15], [16, 17, 18, 19]]


def test_translate_restores_the_test_sets_order_and_uses_the_specs_settings(fake_beam_search):
    out = translation.translate(None, SOURCES, EvalSpec.from_dict(SPEC), torch.device("cpu"), batch_sentences=2)
    assert out == [s[::-1] for s in SOURCES]
    assert len(fake_beam_search) == 3  # 5 sentences in batches of 2
    for call in fake_beam_search:
        assert {k: call[k] for k in ("bos", "eos", "beam", "alpha", "max_len_a", "max_len_b")} == {
            "bos": 1, "eos": 2, "beam": 3, "alpha": 0.7, "max_len_a": 1.3, "max_len_b": 7}
    # batches of similar length: shortest first; each row is the source, EOS, then padding
    assert fake_beam_search[0]["src"].tolist() == [[10, 2, 0], [14, 15, 2]]
    assert fake_beam_search[2]["src"].tolist() == [[5, 6, 7, 8, 9, 2]]


WORDS = {i: f"w{i}" for i in range(5, 20)}


def test_evaluate_writes_files_in_order_and_scores_them(fake_beam_search, tmp_path):
    """Hypothesis i is the translation of source i; eval.json is BLEU of the written files."""
    def decode(ids):
        return " ".join(WORDS[i] for i in ids)

    refs = [decode(s[::-1]) for s in SOURCES]
    refs[3] = "w14 w15"  # one reference differs from its hypothesis ("w15 w14")
    result = translation.evaluate(None, SOURCES, refs, [r.upper() for r in refs], decode, str, str.upper, EvalSpec.from_dict(SPEC),
                                  torch.device("cpu"), tmp_path)
    hyps_tok = read_lines(tmp_path / "hyp.tok.txt")
    assert hyps_tok == [decode(s[::-1]) for s in SOURCES]
    assert read_lines(tmp_path / "hyp.detok.txt") == [h.upper() for h in hyps_tok]
    assert read_lines(tmp_path / "ref.tok.txt") == refs
    assert read_lines(tmp_path / "ref.detok.txt") == [r.upper() for r in refs]
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved == result
    assert saved["bleu_tokenized"] == {**tokenized_bleu(hyps_tok, refs), "tokenization": ""}
    assert saved["sacrebleu"] == sacre_bleu([h.upper() for h in hyps_tok], [r.upper() for r in refs])
    assert 0 < saved["bleu_tokenized"]["bleu"] < 100
    # by hand: 15 tokens all match; 10 bigrams, of which "w15 w14" (reference "w14 w15") is wrong
    assert saved["bleu_tokenized"]["counts"][:2] == [15, 9] and saved["bleu_tokenized"]["totals"][:2] == [15, 10]
    assert (saved["sentences"], saved["beam"], saved["alpha"]) == (5, 3, 0.7)


# ------------------------------------------------------- evaluate_prepared on a prepared dataset

EN = ["the", "cat", "dog", "sees", "a", "house", "big", "small", "runs", "today", "it", "is", "good"]
VI = ["con", "mèo", "chó", "thấy", "một", "nhà", "lớn", "nhỏ", "chạy", "hôm", "nay", "tốt", "rất", "e-mail"]  # a compound: EN-DE's scoring splits it


def _moses_lines(words, n, seed):
    """Moses-tokenized lines as IWSLT distributes them: entities, spaced punctuation."""
    import random

    rng = random.Random(seed)
    extras = ["", " , isn &apos;t it", " &quot; yes &quot;", " it &apos;s"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 8))) + rng.choice(extras) + rng.choice([" .", " ?"])
            for _ in range(n)]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A tokenized (IWSLT-like) dataset in the prepared format, and a tiny model's averaged.pt."""
    from resrepro.data.translation import write_prepared
    from resrepro.models.transformer import Transformer, TransformerConfig

    root = tmp_path_factory.mktemp("prepared")
    pairs = {}
    for split, n, seed in (("train", 120, 0), ("dev", 6, 1), ("test", 8, 2)):
        for side, words in (("src", EN), ("tgt", VI)):
            path = root / "raw" / f"{split}.{side}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(line + "\n" for line in _moses_lines(words, n, seed + (10 if side == "tgt" else 0))),
                            encoding="utf-8")
        pairs[split] = (root / "raw" / f"{split}.src", root / "raw" / f"{split}.tgt")
    data = root / "data"
    meta = write_prepared(data, name="iwslt15_en_vi", src_lang="en", tgt_lang="vi", train=[pairs["train"]], dev=[pairs["dev"]],
                          test=pairs["test"], tokenized=True, vocab_size=400, seed=0)
    spec = EvalSpec.from_dict(SPEC)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("mini_2block", meta["subword"]["vocab_size"], variant="rskip_ln", args={"lam": 2},
                                                 pad_id=SPEC["pad_id"]))
    model_spec = {"arch": "transformer", "size": "mini_2block", "variant": "rskip_ln", "args": {"lam": 2}, "pad_id": SPEC["pad_id"],
                  "vocab_size": meta["subword"]["vocab_size"]}
    torch.save({"model": model.state_dict(), "model_spec": model_spec, "averaged_from": ["step1.pt"]}, root / "averaged.pt")
    return {"data": data, "averaged": root / "averaged.pt", "spec": spec, "state": model.state_dict()}


def _with_meta(prepared, tmp_path, **changes):
    """The same prepared files, with prepared.json saying something else (name, tokenized)."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(prepared["data"], data)
    meta = json.loads((data / "prepared.json").read_text())
    (data / "prepared.json").write_text(json.dumps({**meta, **changes}))
    return data


def _copy_source(monkeypatch):
    """Beam search replaced by 'output the source': hypotheses are known without a trained model."""
    def copy_source(model, src, bos, eos, beam, alpha, max_len_a, max_len_b):
        assert isinstance(model, torch.nn.Module) and not model.training  # the loaded model, in eval mode
        assert src.device == next(model.parameters()).device
        return [row[: row.index(eos)] for row in src.tolist()]

    monkeypatch.setattr(translation, "beam_search", copy_source)


def test_load_model_rebuilds_the_spec_model_with_the_averaged_weights(prepared):
    model = translation.load_model(prepared["averaged"], prepared["spec"], torch.device("cpu"))
    assert not model.training
    assert (model.cfg.variant, model.cfg.args, model.cfg.pad_id, model.cfg.encoder_layers) == ("rskip_ln", {"lam": 2}, 0, 1)
    state = model.state_dict()
    assert state.keys() == prepared["state"].keys()
    assert all(torch.equal(state[k], prepared["state"][k]) for k in state)


@pytest.mark.parametrize("kind", ["iwslt", "iwslt-fr", "synthetic", "raw", "raw-fr"])
def test_evaluate_prepared_scores_each_kind_of_dataset(prepared, tmp_path, monkeypatch, kind):
    """Tokenized as distributed (IWSLT: Moses-detokenized for sacreBLEU), the synthetic corpus
    (its own detokenized form), raw text (WMT: Moses-tokenized for tokenized BLEU, EN-DE's
    compounds then split as tensor2tensor's get_ende_bleu.sh; EN-FR's not)."""
    from resrepro.data.subword import SubwordVocab
    from resrepro.data.translation import load_encoded
    from resrepro.evaluate.bleu import detokenize_moses

    _copy_source(monkeypatch)
    meta_changes = {"iwslt": None, "iwslt-fr": {"tgt_lang": "fr"}, "synthetic": {"name": "synthetic"},
                    "raw": {"name": "wmt14_en_de", "tokenized": False}, "raw-fr": {"name": "wmt14_en_fr", "tokenized": False}}[kind]
    data = _with_meta(prepared, tmp_path, **meta_changes) if meta_changes else prepared["data"]
    out = tmp_path / "run"
    result = translation.evaluate_prepared(prepared["spec"], data, prepared["averaged"], out, device="cpu")
    vocab = SubwordVocab.load(data / "subword.model")
    test = load_encoded(data, "test")
    decoded = [vocab.decode(test[i][0].tolist()) for i in range(len(test))]  # the copied sources, in order
    refs_as_distributed = read_lines(data / "test.tgt")
    refs_detok = read_lines(data / "test.ref.detok")
    if kind.startswith("raw"):
        split = split_compounds if kind == "raw" else (lambda line: line)
        expected = {"hyp.tok.txt": [split(translation.moses_tokenize(h, "vi")) for h in decoded], "hyp.detok.txt": decoded,
                    "ref.tok.txt": [split(translation.moses_tokenize(r, "vi")) for r in refs_detok], "ref.detok.txt": refs_detok}
        assert any("##AT##-##AT##" in line for line in expected["ref.tok.txt"]) == (kind == "raw")
    else:
        lang = "fr" if kind == "iwslt-fr" else "vi"  # the target language's rules: French joins l' homme
        detok = (lambda h: h) if kind == "synthetic" else (lambda h: detokenize_moses(h, lang))
        expected = {"hyp.tok.txt": decoded, "hyp.detok.txt": [detok(h) for h in decoded],
                    "ref.tok.txt": refs_as_distributed, "ref.detok.txt": refs_detok}
    for name, lines in expected.items():
        assert read_lines(out / name) == lines, name
    tokenization = {"iwslt": "as distributed (Moses-tokenized)", "iwslt-fr": "as distributed (Moses-tokenized)", "synthetic": "the synthetic corpus's own tokens",
                    "raw": "Moses (sacremoses, no escaping), then compounds split (##AT##-##AT##) as tensor2tensor's get_ende_bleu.sh",
                    "raw-fr": "Moses (sacremoses, no escaping)"}[kind]
    assert result["bleu_tokenized"] == {**tokenized_bleu(expected["hyp.tok.txt"], expected["ref.tok.txt"]), "tokenization": tokenization}
    assert result["sacrebleu"] == sacre_bleu(expected["hyp.detok.txt"], expected["ref.detok.txt"])
    assert result["sentences"] == len(decoded) == 8
    if kind == "iwslt-fr":
        assert expected["hyp.detok.txt"] != [detokenize_moses(h, "en") for h in decoded]  # the language matters here
    if kind == "iwslt":
        assert any("'" in h for h in expected["hyp.detok.txt"]) and all("&apos;" not in h for h in expected["hyp.detok.txt"])
        assert expected["hyp.detok.txt"] != decoded


@pytest.mark.parametrize("key, value", [("size", "mini_base"), ("variant", "xskip_ln"), ("args", {"lam": 1})])
def test_load_model_refuses_an_averaged_file_of_another_model(prepared, key, value):
    with pytest.raises(RuntimeError, match=f"holds a model with {key}="):
        translation.load_model(prepared["averaged"], prepared["spec"].replace(**{key: value}), torch.device("cpu"))


def test_evaluate_prepared_loads_and_decodes_on_the_picked_device(prepared, tmp_path, monkeypatch):
    """The device comes from pick_device ("auto" unless the rule says otherwise), and both the
    model and the decoding get it (on a GPU machine: cuda, not wherever the checkpoint was saved)."""
    picked, seen = [], {}
    device = torch.device("cpu")
    monkeypatch.setattr("resrepro.devices.pick_device", lambda name: picked.append(name) or device)
    real_load = translation.load_model
    monkeypatch.setattr(translation, "load_model", lambda *args: seen.update(load=args[2]) or real_load(*args))
    monkeypatch.setattr(translation, "evaluate", lambda model, *args: seen.update(decode=args[7]) or {})  # sources .. spec, device
    translation.evaluate_prepared(prepared["spec"], prepared["data"], prepared["averaged"], tmp_path / "run")
    assert picked == ["auto"] and seen["load"] is device and seen["decode"] is device


def test_moses_tokenize_splits_without_escaping():
    assert translation.moses_tokenize("It's a test, isn't it? A&B", "en") == "It 's a test , isn 't it ? A & B"


def _half_right(monkeypatch, data):
    """Beam search replaced by: the reference's subwords for even test sentences, the source for odd
    ones, so that a BLEU over the first sentences differs from the whole set's."""
    from resrepro.data.translation import load_encoded

    test = load_encoded(data, "test")
    index = {tuple(test[i][0].tolist()): i for i in range(len(test))}

    def half_right(model, src, bos, eos, beam, alpha, max_len_a, max_len_b):
        out = []
        for row in src.tolist():
            tokens = row[: row.index(eos)]
            i = index[tuple(tokens)]
            out.append(test[i][1].tolist() if i % 2 == 0 else tokens)
        return out

    monkeypatch.setattr(translation, "beam_search", half_right)


@pytest.mark.parametrize("kind", ["iwslt", "raw"])
def test_test_sentences_scores_the_first_n_hypotheses_against_the_first_n_references(prepared, tmp_path, monkeypatch, kind):
    import sacrebleu

    data = _with_meta(prepared, tmp_path, name="wmt14_en_de", tokenized=False) if kind == "raw" else prepared["data"]
    _half_right(monkeypatch, data)
    whole = translation.evaluate_prepared(prepared["spec"], data, prepared["averaged"], tmp_path / "whole", device="cpu")
    result = translation.evaluate_prepared(prepared["spec"].replace(test_sentences=3), data, prepared["averaged"], tmp_path / "cut", device="cpu")
    written = {name: read_lines(tmp_path / "cut" / name) for name in ("hyp.tok.txt", "hyp.detok.txt", "ref.tok.txt", "ref.detok.txt")}
    assert written == {name: read_lines(tmp_path / "whole" / name)[:3] for name in written}  # the first 3, in order
    assert written["ref.detok.txt"] == read_lines(data / "test.ref.detok")[:3]
    expected = sacrebleu.corpus_bleu(written["hyp.detok.txt"], [written["ref.detok.txt"]]).score
    assert result["sacrebleu"]["bleu"] == pytest.approx(expected)
    assert {k: v for k, v in result["bleu_tokenized"].items() if k != "tokenization"} == tokenized_bleu(written["hyp.tok.txt"], written["ref.tok.txt"])
    assert result["sacrebleu"]["bleu"] != whole["sacrebleu"]["bleu"]
    assert (result["test_sentences"], result["test_split_sentences"], result["sentences"]) == (3, 8, 3)
    assert (whole["test_sentences"], whole["test_split_sentences"]) == (8, 8)  # absent: the whole split, as before
    assert json.loads((tmp_path / "cut" / "eval.json").read_text()) == result
    over = translation.evaluate_prepared(prepared["spec"].replace(test_sentences=50), data, prepared["averaged"], tmp_path / "over", device="cpu")
    assert (over["test_sentences"], over["sacrebleu"]) == (8, whole["sacrebleu"])  # more than the split: the split
