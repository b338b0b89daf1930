"""The mini-scale translation corpus: a seeded toy language pair with real structure.

The source language is English-like (SVO, adjectives before the noun, little morphology);
the target language differs from it in the ways that make translation more than a word
lookup, so that models of different quality score differently. Every sentence is drawn as a
small syntax tree (Clause / NounPhrase) and *rendered* into both languages, so the target
is a deterministic function of the source and BLEU 100 is reachable in principle.

Grammar (S = source, T = target; tokens are space-separated, sentences end with " .")

  NP   S: det adj* noun              T: det noun adj*  (adjectives after the noun, mirrored)
       det  the | a/an (sg) | some (pl) | this/these | two..five (pl)
       T determiners agree with the noun's gender (m/f, a property of the target noun,
       invisible in the source) and number:
                def  lo / la / li / le       indef  un / una / unos / unas
                dem  kest / kesta / kesti / kestas       numerals du tri kuar kin (invariant)
       T adjectives agree: stem + o (m.sg) a (f.sg) i (m.pl) e (f.pl)
       T nouns: plural = stem + "en" (m) or + "s" (f); irregular: om->omin, kind->kindar,
       rex->regen, musa->mis.  S nouns: regular +s and a few irregulars (men, children, mice).
  Clause
       S: subj verb [obj | "that" clause]    T: subj [obj "ko" | clause "ke"] verb   (SOV)
       T verbs agree with the subject's number and mark tense by suffix:
                present a / an    past is / isen    future ero / eron   (sg / pl)
       irregular past stems: vid->vist, manj->edit, pren->pris, skrib->skript, kur->kors,
       rid->ris, kad->kadut, dik->dit, sav->savut (past sg = stem, pl = stem + "en").
       S verbs: present 3sg -s, irregular pasts (saw, ate, ran, ...), future "will" + verb.
  Sentence
       S: main [conj sub] .   or   conj sub , main .      (conj: because when although while)
       T: [sub conj ,] main .                              (subordinate clause first, conj
                                                            after it: porke kuan malgra dum)
  A complement clause ("that ...") only under say / think / know / hope, one level deep.

Sentences are 4-14 source tokens long (the final "." included); the target is about as
long. The bound is the mini scale's budget: at 25 tokens the same 600 updates of a mini
Transformer reached BLEU 52-56, at 14 tokens 68-72, in the same time (docs/performance.md); every
construction above still fits ("the dogs ran because a cat will sing ." is 9 tokens). ``generate_corpus`` draws unique source sentences, so no test sentence is in train.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from resrepro.files import atomic_write

MIN_TOKENS, MAX_TOKENS = 4, 14
DEFAULT_SIZES = {"train": 4000, "dev": 300, "test": 300}

# (source singular, source plural, target stem, gender, irregular target plural or None)
NOUNS = [
    ("dog", "dogs", "hund", "m", None), ("cat", "cats", "gata", "f", None),
    ("man", "men", "om", "m", "omin"), ("woman", "women", "dona", "f", None),
    ("child", "children", "kind", "m", "kindar"), ("bird", "birds", "vogel", "m", None),
    ("horse", "horses", "kaval", "m", None), ("house", "houses", "kasa", "f", None),
    ("tree", "trees", "arbor", "m", None), ("river", "rivers", "flum", "m", None),
    ("book", "books", "libr", "m", None), ("letter", "letters", "karta", "f", None),
    ("city", "cities", "urba", "f", None), ("garden", "gardens", "jardin", "m", None),
    ("teacher", "teachers", "magistr", "m", None), ("student", "students", "studenta", "f", None),
    ("farmer", "farmers", "agrikol", "m", None), ("doctor", "doctors", "medik", "m", None),
    ("king", "kings", "rex", "m", "regen"), ("queen", "queens", "regina", "f", None),
    ("mouse", "mice", "musa", "f", "mis"), ("apple", "apples", "pom", "m", None),
    ("song", "songs", "melodia", "f", None), ("car", "cars", "aut", "m", None),
    ("boat", "boats", "nava", "f", None), ("road", "roads", "via", "f", None),
    ("friend", "friends", "amik", "m", None), ("girl", "girls", "puela", "f", None),
    ("boy", "boys", "puer", "m", None), ("flower", "flowers", "flora", "f", None),
    ("door", "doors", "janua", "f", None), ("window", "windows", "fenestra", "f", None),
    ("table", "tables", "tabla", "f", None), ("stone", "stones", "petra", "f", None),
    ("mountain", "mountains", "mont", "m", None), ("star", "stars", "stela", "f", None),
    ("island", "islands", "insul", "m", None), ("egg", "eggs", "ov", "m", None),
    # gender not guessable from the ending: a masculine in -a, a feminine in a consonant
    ("poet", "poets", "poeta", "m", None), ("night", "nights", "nokt", "f", None),
]

# (source, target stem)
ADJECTIVES = [
    ("big", "grand"), ("small", "pik"), ("red", "rub"), ("old", "vetul"), ("young", "jun"),
    ("happy", "feliz"), ("good", "bon"), ("bad", "mal"), ("tall", "alt"), ("green", "verd"),
    ("blue", "azur"), ("white", "blank"), ("black", "negr"), ("quick", "rapid"), ("slow", "lent"),
    ("quiet", "kiet"), ("strong", "fort"), ("poor", "paupr"), ("rich", "rik"), ("new", "nov"),
]

# (source base, 3sg present, past, target stem, kind, irregular target past or None)
# kind: "t" transitive (takes an object), "i" intransitive, "c" takes a "that" clause
VERBS = [
    ("see", "sees", "saw", "vid", "t", "vist"), ("eat", "eats", "ate", "manj", "t", "edit"),
    ("find", "finds", "found", "trov", "t", None), ("take", "takes", "took", "pren", "t", "pris"),
    ("write", "writes", "wrote", "skrib", "t", "skript"), ("love", "loves", "loved", "am", "t", None),
    ("help", "helps", "helped", "jut", "t", None), ("follow", "follows", "followed", "sekv", "t", None),
    ("carry", "carries", "carried", "port", "t", None), ("build", "builds", "built", "konstrut", "t", None),
    ("like", "likes", "liked", "plaz", "t", None), ("visit", "visits", "visited", "vizit", "t", None),
    ("open", "opens", "opened", "aper", "t", None), ("watch", "watches", "watched", "gard", "t", None),
    ("sleep", "sleeps", "slept", "dorm", "i", None), ("run", "runs", "ran", "kur", "i", "kors"),
    ("walk", "walks", "walked", "march", "i", None), ("sing", "sings", "sang", "kant", "i", None),
    ("laugh", "laughs", "laughed", "rid", "i", "ris"), ("swim", "swims", "swam", "nat", "i", None),
    ("wait", "waits", "waited", "atend", "i", None), ("fall", "falls", "fell", "kad", "i", "kadut"),
    ("arrive", "arrives", "arrived", "arriv", "i", None), ("dance", "dances", "danced", "danz", "i", None),
    ("say", "says", "said", "dik", "c", "dit"), ("think", "thinks", "thought", "pens", "c", None),
    ("know", "knows", "knew", "sav", "c", "savut"), ("hope", "hopes", "hoped", "esper", "c", None),
]

# Target determiners by kind, then (gender, plural).
DETERMINERS = {
    "def": {("m", False): "lo", ("f", False): "la", ("m", True): "li", ("f", True): "le"},
    "indef": {("m", False): "un", ("f", False): "una", ("m", True): "unos", ("f", True): "unas"},
    "dem": {("m", False): "kest", ("f", False): "kesta", ("m", True): "kesti", ("f", True): "kestas"},
}
NUMERALS = {2: ("two", "du"), 3: ("three", "tri"), 4: ("four", "kuar"), 5: ("five", "kin")}
ADJ_SUFFIX = {("m", False): "o", ("f", False): "a", ("m", True): "i", ("f", True): "e"}
VERB_SUFFIX = {("pres", False): "a", ("pres", True): "an", ("past", False): "is",
               ("past", True): "isen", ("fut", False): "ero", ("fut", True): "eron"}
CONJUNCTIONS = {"because": "porke", "when": "kuan", "although": "malgra", "while": "dum"}
OBJECT_MARKER, COMPLEMENTIZER = "ko", "ke"
TENSES = ("pres", "past", "fut")

_NOUN = {n[0]: n for n in NOUNS}
_ADJ = dict(ADJECTIVES)
_VERB = {v[0]: v for v in VERBS}


@dataclass(frozen=True)
class NounPhrase:
    noun: str                      # source singular, a key of NOUNS
    plural: bool = False
    det: str = "def"               # def | indef | dem | num
    count: int = 0                 # 2..5 when det == "num"
    adjectives: tuple[str, ...] = ()  # source adjectives, in source order


@dataclass(frozen=True)
class Clause:
    subject: NounPhrase
    verb: str                      # source base form, a key of VERBS
    tense: str = "pres"            # pres | past | fut
    obj: NounPhrase | None = None  # for transitive verbs
    complement: "Clause | None" = None  # for say/think/know/hope


@dataclass(frozen=True)
class Sentence:
    main: Clause
    conj: str | None = None        # because | when | although | while
    sub: Clause | None = None
    fronted: bool = False          # source puts the subordinate clause first


# ------------------------------------------------------------------------------ morphology


def gender(noun: str) -> str:
    return _NOUN[noun][3]


def target_noun(noun: str, plural: bool) -> str:
    _, _, stem, g, irregular = _NOUN[noun]
    if not plural:
        return stem
    return irregular or stem + ("en" if g == "m" else "s")


def target_adjective(adj: str, g: str, plural: bool) -> str:
    return _ADJ[adj] + ADJ_SUFFIX[(g, plural)]


def target_verb(verb: str, tense: str, plural: bool) -> str:
    stem, irregular_past = _VERB[verb][3], _VERB[verb][5]
    if tense == "past" and irregular_past:
        return irregular_past + ("en" if plural else "")
    return stem + VERB_SUFFIX[(tense, plural)]


def source_verb(verb: str, tense: str, plural: bool) -> list[str]:
    base, third, past = _VERB[verb][:3]
    if tense == "fut":
        return ["will", base]
    if tense == "past":
        return [past]
    return [base if plural else third]


# ------------------------------------------------------------------------------- rendering


def _source_np(np_: NounPhrase) -> list[str]:
    noun = _NOUN[np_.noun][1] if np_.plural else np_.noun
    words = list(np_.adjectives) + [noun]
    if np_.det == "num":
        det = NUMERALS[np_.count][0]
    elif np_.det == "def":
        det = "the"
    elif np_.det == "dem":
        det = "these" if np_.plural else "this"
    elif np_.plural:
        det = "some"
    else:
        det = "an" if words[0][0] in "aeiou" else "a"
    return [det] + words


def _target_np(np_: NounPhrase) -> list[str]:
    g = gender(np_.noun)
    det = NUMERALS[np_.count][1] if np_.det == "num" else DETERMINERS[np_.det][(g, np_.plural)]
    adjs = [target_adjective(a, g, np_.plural) for a in reversed(np_.adjectives)]
    return [det, target_noun(np_.noun, np_.plural)] + adjs


def _source_clause(c: Clause) -> list[str]:
    out = _source_np(c.subject) + source_verb(c.verb, c.tense, c.subject.plural)
    if c.obj is not None:
        out += _source_np(c.obj)
    if c.complement is not None:
        out += ["that"] + _source_clause(c.complement)
    return out


def _target_clause(c: Clause) -> list[str]:
    out = _target_np(c.subject)
    if c.obj is not None:
        out += _target_np(c.obj) + [OBJECT_MARKER]
    if c.complement is not None:
        out += _target_clause(c.complement) + [COMPLEMENTIZER]
    return out + [target_verb(c.verb, c.tense, c.subject.plural)]


def source_sentence(s: Sentence) -> str:
    main = _source_clause(s.main)
    if s.sub is None:
        words = main
    elif s.fronted:
        words = [s.conj] + _source_clause(s.sub) + [","] + main
    else:
        words = main + [s.conj] + _source_clause(s.sub)
    return " ".join(words + ["."])


def target_sentence(s: Sentence) -> str:
    words = _target_clause(s.main)
    if s.sub is not None:
        words = _target_clause(s.sub) + [CONJUNCTIONS[s.conj], ","] + words
    return " ".join(words + ["."])


# -------------------------------------------------------------------------------- sampling


def _sample_np(rng: random.Random) -> NounPhrase:
    noun = rng.choice(NOUNS)[0]
    det = rng.choices(["def", "indef", "dem", "num"], weights=[5, 3, 2, 1])[0]
    plural = True if det == "num" else rng.random() < 0.4
    count = rng.randint(2, 5) if det == "num" else 0
    n_adj = rng.choices([0, 1, 2], weights=[5, 4, 2])[0]
    adjectives = tuple(a for a, _ in rng.sample(ADJECTIVES, n_adj))
    return NounPhrase(noun, plural, det, count, adjectives)


def _sample_clause(rng: random.Random, allow_complement: bool) -> Clause:
    kinds = ["t", "i", "c"] if allow_complement else ["t", "i"]
    kind = rng.choices(kinds, weights=[6, 4, 2][: len(kinds)])[0]
    verb = rng.choice([v for v in VERBS if v[4] == kind])[0]
    tense = rng.choice(TENSES)
    obj = _sample_np(rng) if kind == "t" else None
    complement = _sample_clause(rng, allow_complement=False) if kind == "c" else None
    return Clause(_sample_np(rng), verb, tense, obj, complement)


def sample_sentence(rng: random.Random) -> Sentence:
    """One sentence tree; about a third carry a subordinate clause."""
    main = _sample_clause(rng, allow_complement=True)
    if rng.random() < 0.35:
        conj = rng.choice(sorted(CONJUNCTIONS))
        sub = _sample_clause(rng, allow_complement=False)
        return Sentence(main, conj, sub, fronted=rng.random() < 0.3)
    return Sentence(main)


def generate_corpus(
    n_train: int = DEFAULT_SIZES["train"],
    n_dev: int = DEFAULT_SIZES["dev"],
    n_test: int = DEFAULT_SIZES["test"],
    seed: int = 0,
) -> dict[str, list[tuple[str, str]]]:
    """{"train", "dev", "test"} -> [(source, target)], the same for the same seed.

    Source sentences are unique across all splits and MIN_TOKENS-MAX_TOKENS long (rejection sampling
    with Python's random.Random(seed), whose sequence is stable across Python versions).
    """
    rng = random.Random(seed)
    need = n_train + n_dev + n_test
    seen: set[str] = set()
    pairs: list[tuple[str, str]] = []
    for _ in range(need * 100):
        if len(pairs) == need:
            break
        s = sample_sentence(rng)
        src = source_sentence(s)
        if src in seen or not MIN_TOKENS <= len(src.split()) <= MAX_TOKENS:
            continue
        seen.add(src)
        pairs.append((src, target_sentence(s)))
    else:
        raise RuntimeError(f"could not draw {need} distinct sentences")  # pragma: no cover
    return {"train": pairs[:n_train], "dev": pairs[n_train:n_train + n_dev],
            "test": pairs[n_train + n_dev:]}


def write_corpus(corpus: dict[str, list[tuple[str, str]]], directory: str | Path) -> dict[str, tuple[Path, Path]]:
    """Write `{split}.src` and `{split}.tgt` (one sentence per line, UTF-8); return the paths."""
    directory = Path(directory)
    paths = {}
    for split, pairs in corpus.items():
        src, tgt = directory / f"{split}.src", directory / f"{split}.tgt"
        for path, side in ((src, 0), (tgt, 1)):
            text = "".join(p[side] + "\n" for p in pairs)
            atomic_write(path, lambda tmp, text=text: tmp.write_text(text, encoding="utf-8", newline="\n"))
        paths[split] = (src, tgt)
    return paths


__all__ = [
    "ADJECTIVES", "CONJUNCTIONS", "DEFAULT_SIZES", "DETERMINERS", "MAX_TOKENS", "MIN_TOKENS",
    "NOUNS", "NUMERALS", "VERBS", "Clause", "NounPhrase", "Sentence", "gender", "generate_corpus",
    "sample_sentence", "source_sentence", "source_verb", "target_adjective", "target_noun",
    "target_sentence", "target_verb", "write_corpus",
]
