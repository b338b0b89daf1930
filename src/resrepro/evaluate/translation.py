"""Translate a test set with the averaged checkpoints and score it both ways.

The papers: "a single model by averaging the last 10 checkpoints ... beam search of 4 and length
penalty of 0.6". The hypotheses are decoded from subwords back to the dataset's own (tokenized)
form for tokenized BLEU, as the papers report it, and detokenized for sacreBLEU, the honest
number. Both texts and both references are kept next to eval.json, one sentence per line.
With the recipe's `test_sentences: N`, only the first N test sentences and their references are
decoded and scored; eval.json says how many (`test_sentences`) of how many (`test_split_sentences`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Callable

import torch

from .. import files
from ..data.moses import detokenize_moses, moses_tokenize
from .. import models
from ..models.transformer import Transformer
from ..specs import EvalSpec, ModelSpec
from .beam_search import beam_search
from .bleu import sacre_bleu, split_compounds, tokenized_bleu, write_lines


def load_model(averaged: str | Path, spec: EvalSpec, device: torch.device) -> Transformer:
    """The averaged model, rebuilt from the spec its checkpoints carry; that must be the model the
    evaluation spec names (a stale averaged.pt from another model would be scored silently)."""
    ckpt = torch.load(averaged, map_location="cpu", weights_only=True)
    holds = ModelSpec.from_dict(ckpt["model_spec"])
    for key in ("model", "size", "variant", "args"):
        held = holds.arch if key == "model" else holds.get(key)
        if held != getattr(spec, key):
            raise RuntimeError(f"{averaged} holds a model with {key}={held!r}, the evaluation asks for {getattr(spec, key)!r}; "
                               "rerun its averaging (delete the file)")
    return models.from_checkpoint(ckpt).to(device).eval()


def translate(model: Transformer, sources: list[list[int]], spec: EvalSpec, device: torch.device, batch_sentences: int = 64) -> list[list[int]]:
    """Beam search over the test set in batches of similar length (order restored)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int] | None] = [None] * len(sources)
    for start in range(0, len(order), batch_sentences):
        idx = order[start : start + batch_sentences]
        width = max(len(sources[i]) for i in idx) + 1
        src = torch.full((len(idx), width), spec.pad_id, dtype=torch.long)
        for row, i in enumerate(idx):
            src[row, : len(sources[i]) + 1] = torch.tensor(sources[i] + [spec.eos_id])
        hyps = beam_search(model, src.to(device), spec.bos_id, spec.eos_id, beam=spec.beam, alpha=spec.alpha,
                           max_len_a=spec.max_len_a, max_len_b=spec.max_len_b)
        for i, hyp in zip(idx, hyps):
            out[i] = hyp
    return out  # type: ignore[return-value]


def evaluate(model, sources, refs_tok: list[str], refs_detok: list[str], decode: Callable[[list[int]], str],
             to_tokenized: Callable[[str], str], to_detokenized: Callable[[str], str], spec: EvalSpec, device, out_dir: str | Path,
             split_sentences: int | None = None, also: dict | None = None, tokenization: str = "") -> dict:
    """`decode` gives the dataset's own form (tokenized as distributed, or raw text); the two
    functions make the tokenized and the detokenized forms from it (`tokenization` says how, in
    eval.json). `split_sentences`: the test split's size when `sources` are only its first
    sentences (test_sentences), said in eval.json, with the values of `also`."""
    out_dir = Path(out_dir)
    decoded = [decode(ids) for ids in translate(model, sources, spec, device)]
    hyps_tok = [to_tokenized(h) for h in decoded]
    hyps_detok = [to_detokenized(h) for h in decoded]
    write_lines(out_dir / "hyp.tok.txt", hyps_tok)
    write_lines(out_dir / "hyp.detok.txt", hyps_detok)
    write_lines(out_dir / "ref.tok.txt", refs_tok)
    write_lines(out_dir / "ref.detok.txt", refs_detok)
    result = {
        "bleu_tokenized": {**tokenized_bleu(hyps_tok, refs_tok), "tokenization": tokenization},
        "sacrebleu": sacre_bleu(hyps_detok, refs_detok),
        "sentences": len(hyps_tok),
        "test_sentences": len(hyps_tok),
        "test_split_sentences": split_sentences or len(hyps_tok),
        "beam": spec.beam,
        "alpha": spec.alpha,
        **(also or {}),
    }
    files.write_json(out_dir / "eval.json", result)
    return result


def evaluate_prepared(spec: EvalSpec | Mapping, data_dir: str | Path, averaged: str | Path, out_dir: str | Path, device: str = "auto",
                      also: dict | None = None) -> dict:
    """Evaluate the averaged model of one run on a prepared dataset (data/translation.py format);
    `also`: more values eval.json records beside the scores (the dev losses averaging gave).

    Tokenized datasets (IWSLT15, synthetic) are scored as distributed for tokenized BLEU and
    detokenized for sacreBLEU; raw datasets (WMT test sets) are Moses-tokenized for tokenized BLEU,
    and EN-DE's compounds then split as tensor2tensor scored it (TranslationSource.split_compounds).
    """
    from functools import partial

    from ..data.subword import SubwordVocab
    from ..data.translation import load_encoded, load_prepared_meta
    from ..devices import pick_device
    from .bleu import read_lines

    spec = EvalSpec.of(spec)
    data_dir = Path(data_dir)
    meta = load_prepared_meta(data_dir)
    vocab = SubwordVocab.load(data_dir / meta["subword"]["model"])
    dev = pick_device(device)
    model = load_model(averaged, spec, dev)
    test = load_encoded(data_dir, "test")
    scored = scored_sentences(spec, len(test))
    sources = [test[i][0].tolist() for i in range(scored)]
    refs_detok = read_lines(data_dir / meta["references"]["detokenized"])[:scored]
    lang = meta["tgt_lang"]
    def same(text: str) -> str:
        return text

    if meta["tokenized"]:
        refs_tok = read_lines(data_dir / meta["references"]["tokenized"])[:scored]
        identity = meta["name"] == "synthetic"  # its text is its own detokenized form
        detok = same if identity else partial(detokenize_moses, lang=lang)
        how = "the synthetic corpus's own tokens" if identity else "as distributed (Moses-tokenized)"
        return evaluate(model, sources, refs_tok, refs_detok, vocab.decode, same, detok, spec, dev, out_dir, len(test), also, how)
    tokenize, how = raw_text_tokenizer(meta["name"], lang)
    refs_tok = [tokenize(r) for r in refs_detok]
    return evaluate(model, sources, refs_tok, refs_detok, vocab.decode, tokenize, same, spec, dev, out_dir, len(test), also, how)


def raw_text_tokenizer(dataset: str, lang: str) -> tuple[Callable[[str], str], str]:
    """How a raw dataset's hypotheses and references are tokenized for the papers' tokenized BLEU,
    and its description for eval.json: Moses, then, where the dataset's source says so (EN-DE), the
    compounds split as tensor2tensor's get_ende_bleu.sh does. The code's record of the dataset
    decides, not its prepared files, so data prepared before a change is scored the current way."""
    from functools import partial

    from ..data.translation import SOURCES

    tokenize, how = partial(moses_tokenize, lang=lang), "Moses (sacremoses, no escaping)"
    if (source := SOURCES.get(dataset)) is not None and source.split_compounds:
        return (lambda text: split_compounds(tokenize(text))), how + ", then compounds split (##AT##-##AT##) as tensor2tensor's get_ende_bleu.sh"
    return tokenize, how


def scored_sentences(spec: EvalSpec, split_size: int) -> int:
    """How many test sentences, from the first, are decoded and scored: the recipe's
    `test_sentences` (a scale whose paper-size models cannot beam-decode a 3,000 sentence test set
    on its CPUs), else the whole split."""
    return min(spec.get("test_sentences", split_size), split_size)
