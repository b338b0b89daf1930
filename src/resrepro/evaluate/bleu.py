"""BLEU for the translation cells: the papers' tokenized number and sacrebleu's, side by side.

Why two BLEUs
-------------
The papers are tensor2tensor-era and report *tokenized* BLEU: multi-bleu.perl run on the
Moses-tokenized references and hypotheses. That number depends on the tokenization
(Moses splits ``isn't`` into ``isn 't``, which hands out extra matching tokens), so it is
not comparable across papers or toolkits. On the same EN-VI outputs, tokenized multi-bleu
gives ~31, t2t-bleu ~28 and sacrebleu on detokenized text ~27.5 (docs/facts.md, "BLEU: three
numbers for one set of translations"): the 3-4 point gap is bookkeeping, not model quality.

The report therefore carries both:

* :func:`tokenized_bleu` -- the number compared with the papers' tables. It is
  multi-bleu.perl's formula (case-sensitive, whitespace tokens, clipped n-gram
  precisions up to 4, brevity penalty, no smoothing), computed by sacrebleu with
  ``tokenize="none", smooth_method="none", force=True``.
* :func:`sacre_bleu` -- the honest number: sacrebleu with its default ``13a``
  tokenization on *detokenized* text, always quoted with its signature.

Both are computed with sacrebleu's own code (``sacrebleu.metrics.BLEU``); only the
settings differ. :func:`paired_bootstrap` wraps sacrebleu's paired bootstrap resampling
(``sacrebleu.significance.PairedTest``, ``test_type="bs"``), and
:func:`detokenize_moses` turns the Stanford IWSLT15 files (Moses-tokenized, HTML
entities) into the plain text sacrebleu expects, via sacremoses' ``MosesDetokenizer``.

Hypotheses and references are kept per cell as UTF-8 text files, one sentence per line
(:func:`write_lines` / :func:`read_lines`).
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Sequence

import sacrebleu
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from resrepro.data.moses import detokenize_moses  # re-exported: scoring's inputs are made with it
from resrepro.files import atomic_write

__all__ = [
    "tokenized_bleu",
    "split_compounds",
    "sacre_bleu",
    "paired_bootstrap",
    "detokenize_moses",
    "write_lines",
    "read_lines",
]


# --------------------------------------------------------------------------- metrics

# tensor2tensor's EN-DE BLEU (utils/get_ende_bleu.sh), which the papers' EN-DE numbers come from:
# after Moses tokenization, on the hypotheses and the references alike,
#     perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'
# "Put compounds in ATAT format (comparable to papers like GNMT, ConvS2S)": a hyphen between two
# non-space characters becomes a token of its own, so "Rot-Grün" scores as three tokens. Perl's
# global match resumes after each match, as Python's re.sub does: "a-b-c" -> "a ##AT##-##AT## b-c".
_COMPOUND = re.compile(r"(\S)-(\S)")


def split_compounds(line: str) -> str:
    """One Moses-tokenized line with its hyphenated compounds split as get_ende_bleu.sh does."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)



def _multibleu_metric() -> BLEU:
    """sacrebleu configured to reproduce multi-bleu.perl on pre-tokenized text.

    ``tokenize="none"``: split on whitespace only; ``force=True``: silence the
    "looks tokenized" warning (it is tokenized on purpose); ``smooth_method="none"``:
    multi-bleu does not smooth -- a zero corpus-level n-gram precision gives BLEU 0
    (sacrebleu's default ``exp`` smoothing would not). Case-sensitive, 4-grams,
    closest reference length: sacrebleu's defaults, and multi-bleu's.
    """
    return BLEU(tokenize="none", force=True, smooth_method="none")


def _sacre_metric() -> BLEU:
    """sacrebleu's defaults: 13a tokenization, mixed case, exp smoothing."""
    return BLEU()


def _check_pair(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if isinstance(hyps, str) or isinstance(refs, str):
        raise TypeError("hyps and refs must be lists of sentences, not a single string")
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("no sentences to score")


def _score_dict(metric: BLEU, hyps: Sequence[str], refs: Sequence[str]) -> dict:
    _check_pair(hyps, refs)
    score = metric.corpus_score(list(hyps), [list(refs)])
    return {
        "bleu": float(score.score),
        # percentages (0-100), as sacrebleu reports them; multi-bleu prints the same
        "precisions": [float(p) for p in score.precisions],
        "bp": float(score.bp),
        "sys_len": int(score.sys_len),
        "ref_len": int(score.ref_len),
        "counts": [int(c) for c in score.counts],
        "totals": [int(t) for t in score.totals],
        "signature": metric.get_signature().format(),
    }


def tokenized_bleu(hyps: list[str], refs: list[str]) -> dict:
    """Corpus BLEU on already-tokenized text, as multi-bleu.perl computes it.

    One reference per sentence. Returns ``{"bleu", "precisions", "bp", "sys_len",
    "ref_len", "counts", "totals", "signature"}``; ``bleu`` and ``precisions`` are on the
    0-100 scale. This is the number to put next to the papers' (tokenized) BLEU.
    """
    return _score_dict(_multibleu_metric(), hyps, refs)


def sacre_bleu(hyps_detok: list[str], refs_detok: list[str]) -> dict:
    """sacrebleu corpus BLEU (default 13a tokenization) on detokenized text.

    Returns the same keys as :func:`tokenized_bleu`; ``signature`` is sacrebleu's full
    signature string, e.g. ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``,
    and must be reported with the score. sacrebleu logs a warning if the input looks
    tokenized -- that is a real problem here (feed it :func:`detokenize_moses` output).
    """
    out = _score_dict(_sacre_metric(), hyps_detok, refs_detok)
    out["version"] = sacrebleu.__version__
    return out


# ------------------------------------------------------------------- significance


@contextmanager
def _sacrebleu_seed(seed: int):
    """PairedTest reads its seed from $SACREBLEU_SEED (no argument); set it for the call
    and restore the caller's environment afterwards. Not thread-safe (os.environ)."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old


def _same_segment_stats(metric_factory, hyps_a: Sequence[str], hyps_b: Sequence[str], refs: Sequence[str]) -> bool:
    """Whether two systems have the same BLEU sufficient statistics (hyp length, ref length,
    matches and totals per order) on every sentence, via the public sentence_score API. A sentence
    both systems translate alike has the same statistics without scoring it, and the first sentence
    that differs answers: two real systems differ within a few sentences. effective_order only
    changes the final score, not these statistics; it is set to keep sacrebleu from warning."""
    metric = metric_factory()
    metric.effective_order = True

    def stats(hyp: str, ref: str) -> tuple:
        s = metric.sentence_score(hyp, [ref])
        return s.sys_len, s.ref_len, tuple(s.counts), tuple(s.totals)

    return all(a == b or stats(a, r) == stats(b, r) for a, b, r in zip(hyps_a, hyps_b, refs))


def paired_bootstrap(
    baseline_hyps: list[str],
    system_hyps: list[str],
    refs: list[str],
    n: int = 1000,
    seed: int = 12345,
    tokenized: bool = False,
) -> dict:
    """sacrebleu's paired bootstrap resampling of ``system_hyps`` against ``baseline_hyps``.

    Runs ``sacrebleu.significance.PairedTest(..., test_type="bs", n_samples=n)`` (a port of
    Moses' bootstrap-hypothesis-difference-significance.pl) with the seed fixed, so the
    result is deterministic for a given ``seed``. The metric is :func:`sacre_bleu`'s
    (detokenized text, 13a) unless ``tokenized=True``, which uses :func:`tokenized_bleu`'s
    multi-bleu settings on tokenized text.

    Returns ``{"p_value", "p_value_sacrebleu", "baseline_bleu", "system_bleu", "mean",
    "ci", "baseline_mean", "baseline_ci", "n", "seed", "signature", "identical"}``:
    ``mean`` and ``ci`` are sacrebleu's bootstrap mean of the system's BLEU and the
    half-width of its 95% interval (so the interval is mean +- ci).

    ``p_value`` is sacrebleu's, except in one degenerate case: when the two systems have
    identical per-sentence statistics, every resampled difference is exactly 0, and
    sacrebleu's strict ``>`` count returns its floor ``1/(n+1)`` (~0.001, "significant").
    There is no difference to test, so ``p_value`` is 1.0 then; ``identical`` is True
    and sacrebleu's raw number stays in ``p_value_sacrebleu``.
    """
    _check_pair(baseline_hyps, refs)
    _check_pair(system_hyps, refs)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 1:
        # PairedTest passes `seed if seed else None` to numpy: seed 0 would silently
        # become an unseeded (non-reproducible) run; negative seeds are rejected by numpy.
        raise ValueError(f"seed must be a positive int, got {seed!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")

    factory = _multibleu_metric if tokenized else _sacre_metric
    with _sacrebleu_seed(seed):
        test = PairedTest(
            [("baseline", list(baseline_hyps)), ("system", list(system_hyps))],
            {"BLEU": factory()},
            references=[list(refs)],
            test_type="bs",
            n_samples=n,
            n_jobs=1,
        )
        signatures, scores = test()

    (name,) = [k for k in scores if k != "System"]
    baseline, system = scores[name]
    identical = _same_segment_stats(factory, baseline_hyps, system_hyps, refs)
    p_raw = float(system.p_value)
    return {
        "p_value": 1.0 if identical else p_raw,
        "p_value_sacrebleu": p_raw,
        "baseline_bleu": float(baseline.score),
        "system_bleu": float(system.score),
        "mean": float(system.mean),
        "ci": float(system.ci),
        "baseline_mean": float(baseline.mean),
        "baseline_ci": float(baseline.ci),
        "n": int(n),
        "seed": int(seed),
        "signature": signatures[name].format(),
        "identical": identical,
    }


# ----------------------------------------------------------------------------- files


def write_lines(path: str | Path, lines: Iterable[str]) -> None:
    """Write one sentence per line, UTF-8, atomically (resrepro.files.atomic_write).

    UTF-8 and ``\n`` whatever the platform (Vietnamese and German text; ``\r\n`` would
    add a character to every line). A sentence containing a line break is rejected: it
    would shift every later line out of alignment with its reference.
    """
    lines = list(lines)
    for i, s in enumerate(lines):
        if not isinstance(s, str):
            raise TypeError(f"line {i} is {type(s).__name__}, not str")
        if "\n" in s or "\r" in s:
            raise ValueError(f"line {i} contains a line break: {s!r}")
    text = "".join(s + "\n" for s in lines)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8", newline="\n"))


def read_lines(path: str | Path) -> list[str]:
    """Read a file written by :func:`write_lines`: UTF-8, split on ``\\n`` only.

    (``str.splitlines`` would also split on U+2028, U+0085 ... that can occur inside a
    sentence and misalign hypotheses and references.)
    """
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    if not text:
        return []
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return parts
