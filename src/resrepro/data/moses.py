"""Moses tokenization both ways, as the translation data and its scoring need it.

The Stanford IWSLT15 files are Moses-tokenized with HTML entities; sacreBLEU wants plain text,
and the papers' tokenized BLEU wants Moses tokens. Data preparation detokenizes the references
once; evaluation tokenizes raw test sets (WMT) and detokenizes hypotheses. Both live here, below
data and evaluation, so that neither layer imports the other.
"""

from __future__ import annotations

import html
from functools import lru_cache


@lru_cache(maxsize=None)
def _detokenizer(lang: str):
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang=lang)


def detokenize_moses(line: str, lang: str) -> str:
    """Undo Moses tokenization of one line of the Stanford IWSLT15 files.

    First ``html.unescape`` (``&apos; &quot; &amp; &lt; &gt; &#91; &#93;`` ...), then
    sacremoses' ``MosesDetokenizer(lang)`` with its own unescaping off, so ``&amp;lt;``
    decodes once to ``&lt;`` and not twice to ``<``. Moses does the same (unescape, then
    rejoin). Letters, including Vietnamese diacritics, pass through unchanged.

    >>> detokenize_moses("It &apos;s a test , isn &apos;t it ?", "en")
    "It's a test, isn't it?"
    """
    text = html.unescape(line.strip())
    if not text:
        return ""
    return _detokenizer(lang).detokenize(text.split(), unescape=False)


def moses_tokenize(line: str, lang: str) -> str:
    """Tokenize raw text for the papers' tokenized BLEU (multi-bleu on Moses tokens), no escaping."""
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang).tokenize(line, return_str=True, escape=False)
