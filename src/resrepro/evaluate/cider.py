"""CIDEr-D (Vedantam et al. 2015) as the reward of self-critical training (Rennie et al. 2017).

pycocoevalcap's Cider scores a set of hypotheses with document frequencies taken from that set's
own references. A reward needs them from a fixed corpus instead (the training references, as
Rennie et al. and every SCST code base use), and needs to be fast on a batch: so this module
computes the same formula (n-grams 1-4, tf-idf vectors, clipped cosine, Gaussian length penalty
with sigma 6, x10, averaged over n and the references) with the corpus's frequencies, and caches
each reference's vector. With the corpus equal to the scored references it equals pycocoevalcap's
Cider (tests/test_scst.py). Words are any hashable tokens: the training loop passes token ids.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

Tokens = Sequence[Hashable]


def ngram_counts(words: Tokens, n: int = 4) -> Counter:
    return Counter(tuple(words[i : i + k]) for k in range(1, n + 1) for i in range(len(words) - k + 1))


class CiderD:
    """Scores hypotheses against the references of corpus images; `corpus[i]` is image i's
    references (token sequences), and fixes the document frequencies."""

    def __init__(self, corpus: Sequence[Sequence[Tokens]], n: int = 4, sigma: float = 6.0):
        self.n, self.sigma, self.corpus = n, sigma, corpus
        self.document_frequency: Counter = Counter()
        for refs in corpus:
            self.document_frequency.update({g for ref in refs for g in ngram_counts(ref, n)})
        self.log_images = math.log(float(len(corpus)))
        self._ref_vectors: dict[int, list] = {}

    def _vector(self, counts: Counter):
        """Per n-gram order: tf-idf weights, their norm; and the length pycocoevalcap uses (its
        count of bigrams, an off-by-one it keeps: the penalty must match its scores)."""
        vec = [{} for _ in range(self.n)]
        norm = [0.0] * self.n
        length = 0
        for gram, tf in counts.items():
            k = len(gram) - 1
            weight = float(tf) * (self.log_images - math.log(max(1.0, self.document_frequency[gram])))
            vec[k][gram] = weight
            norm[k] += weight * weight
            if k == 1:
                length += tf
        return vec, [math.sqrt(x) for x in norm], length

    def _refs(self, image: int) -> list:
        if image not in self._ref_vectors:
            self._ref_vectors[image] = [self._vector(ngram_counts(r, self.n)) for r in self.corpus[image]]
        return self._ref_vectors[image]

    def score(self, hypothesis: Tokens, image: int) -> float:
        vec, norm, length = self._vector(ngram_counts(hypothesis, self.n))
        refs = self._refs(image)
        total = 0.0
        for vec_ref, norm_ref, length_ref in refs:
            penalty = math.exp(-((length - length_ref) ** 2) / (2 * self.sigma**2))
            for k in range(self.n):
                dot = sum(min(w, vec_ref[k].get(g, 0.0)) * vec_ref[k].get(g, 0.0) for g, w in vec[k].items())
                if norm[k] != 0 and norm_ref[k] != 0:
                    dot /= norm[k] * norm_ref[k]
                total += dot * penalty
        return 10.0 * total / self.n / len(refs)

    def scores(self, hypotheses: Sequence[Tokens], images: Sequence[int]) -> list[float]:
        return [self.score(h, i) for h, i in zip(hypotheses, images)]
