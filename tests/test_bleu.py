import math
import os
from collections import Counter

import pytest

from resrepro.evaluate.bleu import (
    detokenize_moses,
    paired_bootstrap,
    read_lines,
    sacre_bleu,
    tokenized_bleu,
    write_lines,
)

# Three tokenized sentences; counts below were worked out by hand.
HYPS = ["the cat sat on mat .", "there is a dog in garden", "we like the green apples ."]
REFS = ["the cat sat on the mat .", "there is a dog in the garden .", "we like green apples ."]


def _multibleu_by_hand(hyps, refs):
    """multi-bleu.perl's formula, written out independently of sacrebleu."""
    correct, total = [0] * 4, [0] * 4
    c = r = 0
    for h, ref in zip(hyps, refs):
        ht, rt = h.split(), ref.split()
        c += len(ht)
        r += len(rt)
        for n in range(1, 5):
            hg = Counter(tuple(ht[i : i + n]) for i in range(len(ht) - n + 1))
            rg = Counter(tuple(rt[i : i + n]) for i in range(len(rt) - n + 1))
            total[n - 1] += sum(hg.values())
            correct[n - 1] += sum(min(k, rg[g]) for g, k in hg.items())
    bp = 1.0 if c >= r else math.exp(1 - r / c)
    if 0 in correct:
        return 0.0, correct, total, bp, c, r
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(correct, total)) / 4), correct, total, bp, c, r


def test_tokenized_bleu_matches_multibleu_formula():
    out = tokenized_bleu(HYPS, REFS)
    # hand count: 1-grams 17/18, 2-grams 11/15, 3-grams 6/12, 4-grams 3/9; c=18, r=20
    assert out["counts"] == [17, 11, 6, 3]
    assert out["totals"] == [18, 15, 12, 9]
    assert (out["sys_len"], out["ref_len"]) == (18, 20)
    expected_bp = math.exp(1 - 20 / 18)
    expected = 100 * expected_bp * math.exp(
        (math.log(17 / 18) + math.log(11 / 15) + math.log(6 / 12) + math.log(3 / 9)) / 4
    )
    assert out["bp"] == pytest.approx(expected_bp, rel=1e-12)
    assert out["bleu"] == pytest.approx(expected, rel=1e-12)
    assert round(out["bleu"], 2) == 52.16  # multi-bleu.perl would print "BLEU = 52.16"
    assert out["precisions"] == pytest.approx([100 * 17 / 18, 100 * 11 / 15, 50.0, 100 / 3])

    by_hand, correct, total, bp, c, r = _multibleu_by_hand(HYPS, REFS)
    assert (correct, total, c, r) == ([17, 11, 6, 3], [18, 15, 12, 9], 18, 20)
    assert out["bleu"] == pytest.approx(by_hand, rel=1e-12)
    assert "tok:none" in out["signature"] and "smooth:none" in out["signature"]


def test_tokenized_bleu_is_case_sensitive_and_unsmoothed():
    # multi-bleu: no 4-gram match anywhere -> BLEU 0 (sacrebleu's default smoothing would not)
    hyps, refs = ["a b c d e"], ["a b c x e"]
    assert tokenized_bleu(hyps, refs)["bleu"] == 0.0
    assert _multibleu_by_hand(hyps, refs)[0] == 0.0
    upper = tokenized_bleu(["The Cat sat on the mat ."], ["the cat sat on the mat ."])
    lower = tokenized_bleu(["the cat sat on the mat ."], ["the cat sat on the mat ."])
    assert upper["bleu"] < lower["bleu"] == pytest.approx(100.0)


def test_perfect_hypothesis_is_100():
    assert tokenized_bleu(REFS, REFS)["bleu"] == pytest.approx(100.0)
    assert tokenized_bleu(REFS, REFS)["bp"] == 1.0
    detok = ["It's a test, isn't it?", "Tôi đã nói \"xin chào\"."]
    assert sacre_bleu(detok, detok)["bleu"] == pytest.approx(100.0)


def test_length_mismatch_rejected():
    with pytest.raises(ValueError, match="^1 hypotheses but 2 references$"):
        tokenized_bleu(["a b"], ["a b", "c d"])
    for hyps, refs in (("a b", "a b"), ("a b", ["a b"]), (["a b"], "a b")):  # either one a bare string
        with pytest.raises(TypeError, match="^hyps and refs must be lists of sentences, not a single string$"):
            sacre_bleu(hyps, refs)
    with pytest.raises(ValueError, match="^no sentences to score$"):
        tokenized_bleu([], [])


def test_sacre_bleu_signature():
    out = sacre_bleu(["The cat sat on the mat."], ["The cat sat on a mat."])
    sig = out["signature"]
    assert "tok:13a" in sig and "version:2.6.0" in sig
    assert sig == "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    assert 0 < out["bleu"] < 100
    assert set(out) >= {"bleu", "signature", "precisions", "bp", "sys_len", "ref_len"}
    assert out["version"] == "2.6.0"


TOK_HYPS = [
    "It &apos;s a test , isn &apos;t it ?",
    "We didn &apos;t know what we &apos;d find .",
    "She &apos;s the one who &apos;ll decide .",
    "They aren &apos;t here , are they ?",
]
TOK_REFS = [
    "It &apos;s a test , wasn &apos;t it ?",
    "We don &apos;t know what we &apos;ll find .",
    "He &apos;s the one who &apos;d decide .",
    "They weren &apos;t here , were they ?",
]


def test_tokenized_bleu_exceeds_sacrebleu_on_same_outputs():
    """Moses splits contractions (isn 't), 13a does not (isn't): the tokenized score hands
    out partial credit for the split-off pieces, so it comes out higher -- the ~31 vs
    ~27.5 gap of docs/facts.md, in miniature."""
    import html

    tok = tokenized_bleu([html.unescape(s) for s in TOK_HYPS], [html.unescape(s) for s in TOK_REFS])
    hyps_detok = [detokenize_moses(s, "en") for s in TOK_HYPS]
    refs_detok = [detokenize_moses(s, "en") for s in TOK_REFS]
    assert hyps_detok[0] == "It's a test, isn't it?"
    sacre = sacre_bleu(hyps_detok, refs_detok)
    assert tok["sys_len"] > sacre["sys_len"]  # more tokens after Moses tokenization
    assert tok["precisions"][0] > sacre["precisions"][0]
    assert tok["bleu"] > sacre["bleu"] + 5


def _corpus(n=40):
    subjects = ["the cat", "a dog", "my friend", "the teacher", "our team"]
    verbs = ["saw", "liked", "found", "painted", "visited"]
    objects = ["a red house", "the old bridge", "two small boats", "the market", "a quiet garden"]
    times = ["yesterday morning .", "last week .", "on Sunday .", "at night ."]
    refs = [
        f"{subjects[i % 5]} {verbs[(i // 5) % 5]} {objects[(i * 3) % 5]} {times[i % 4]}"
        for i in range(n)
    ]
    return refs


def test_paired_bootstrap_identical_systems_not_significant():
    refs = _corpus()
    hyps = [r.replace("the", "a", 1) for r in refs]
    out = paired_bootstrap(hyps, list(hyps), refs, n=300)
    assert out["identical"]
    assert out["p_value"] == pytest.approx(1.0)
    # sacrebleu's own strict-inequality count bottoms out at 1/(n+1) here
    assert out["p_value_sacrebleu"] == pytest.approx(1 / 301)
    assert out["baseline_bleu"] == out["system_bleu"]


def test_paired_bootstrap_identical_statistics_from_different_words():
    """Two systems that write different wrong words where the other does have the same statistics
    on every sentence: there is no difference to test, though no sentence is the same."""
    refs = _corpus()
    baseline = ["zzz " + r.split(" ", 1)[1] for r in refs]  # the first word wrong, differently
    system = ["qqq " + r.split(" ", 1)[1] for r in refs]
    assert all(b != s for b, s in zip(baseline, system))
    out = paired_bootstrap(baseline, system, refs, n=200)
    assert out["identical"] and out["p_value"] == 1.0
    # one sentence the system gets right is a difference
    system[7] = refs[7]
    assert not paired_bootstrap(baseline, system, refs, n=200)["identical"]


def test_paired_bootstrap_better_system_significant_and_deterministic():
    refs = _corpus()
    baseline = [" ".join(r.split()[:3]) + " something ." for r in refs]  # truncated, wrong
    system = [r if i % 4 else r.replace("the", "a", 1) for i, r in enumerate(refs)]
    before = os.environ.get("SACREBLEU_SEED")
    out = paired_bootstrap(baseline, system, refs)
    assert os.environ.get("SACREBLEU_SEED") == before  # environment restored
    assert not out["identical"]
    assert out["system_bleu"] > out["baseline_bleu"] + 20
    assert out["p_value"] < 0.05 and out["p_value"] == out["p_value_sacrebleu"]
    assert out["ci"] > 0 and abs(out["mean"] - out["system_bleu"]) < 3 * out["ci"]
    assert "bs:1000" in out["signature"] and "seed:12345" in out["signature"]

    again = paired_bootstrap(baseline, system, refs)
    assert again == out
    other = paired_bootstrap(baseline, system, refs, seed=7)
    assert "seed:7" in other["signature"]

    # a modest difference: same seed -> same p-value (and same CI)
    close = [r if i % 3 else " ".join(r.split()[:-2]) + " ." for i, r in enumerate(refs)]
    a = paired_bootstrap(system, close, refs, n=500, seed=3)
    b = paired_bootstrap(system, close, refs, n=500, seed=3)
    assert a["p_value"] == b["p_value"] and a["ci"] == b["ci"]

    tok = paired_bootstrap(baseline, system, refs, n=200, tokenized=True)
    assert "tok:none" in tok["signature"] and tok["p_value"] < 0.05


def test_paired_bootstrap_rejects_seed_zero():
    refs = _corpus(5)
    with pytest.raises(ValueError, match="seed must be a positive int, got 0"):
        paired_bootstrap(refs, refs, refs, seed=0)
    with pytest.raises(ValueError, match="seed must be a positive int, got True"):
        paired_bootstrap(refs, refs, refs, seed=True)
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        paired_bootstrap(refs, refs, refs, n=0)
    assert paired_bootstrap(refs, refs, refs, n=1, seed=1)["n"] == 1  # the smallest allowed of each


def test_paired_bootstrap_returns_every_field_with_its_value():
    """The whole result on a fixed case: the bootstrap (not approximate randomisation) of
    sacreBLEU on detokenized text by default, 20 of 200 resampled differences not above 0
    (seed 5 with the pinned numpy), and each field under its documented name."""
    refs = _corpus()
    baseline = [r if i % 3 else " ".join(r.split()[:-2]) + " ." for i, r in enumerate(refs)]
    system = [r if i % 4 else r.replace("the", "a", 1) for i, r in enumerate(refs)]
    out = paired_bootstrap(baseline, system, refs, n=200, seed=5)
    assert set(out) == {"p_value", "p_value_sacrebleu", "baseline_bleu", "system_bleu", "mean", "ci", "baseline_mean",
                        "baseline_ci", "n", "seed", "signature", "identical"}
    assert out["p_value"] == out["p_value_sacrebleu"] == pytest.approx(20 / 201)
    assert (out["n"], out["seed"], out["identical"]) == (200, 5, False)
    assert out["baseline_bleu"] == pytest.approx(sacre_bleu(baseline, refs)["bleu"])
    assert out["system_bleu"] == pytest.approx(sacre_bleu(system, refs)["bleu"])
    assert out["mean"] == pytest.approx(94.8218, abs=1e-4) and out["ci"] == pytest.approx(3.6311, abs=1e-4)
    assert out["baseline_mean"] == pytest.approx(91.8674, abs=1e-4) and out["baseline_ci"] == pytest.approx(3.5565, abs=1e-4)
    assert out["signature"] == "nrefs:1|bs:200|seed:5|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"


@pytest.mark.parametrize(
    "line, lang, expected",
    [
        ("It &apos;s a test , isn &apos;t it ?", "en", "It's a test, isn't it?"),
        (
            "He said &quot; hello &quot; &amp; left &#91; laughs &#93; .",
            "en",
            'He said "hello" & left [laughs].',
        ),
        ("I was 5 &lt; 6 , &quot; right &quot; ?", "en", 'I was 5 < 6, "right"?'),
        ("Tôi đã nói &quot; xin chào &quot; , và họ cười .", "vi", 'Tôi đã nói "xin chào", và họ cười.'),
        ("Đó là một ngày đẹp trời ( thật sự ) .", "vi", "Đó là một ngày đẹp trời (thật sự)."),
        ("Chúng tôi không biết điều đó .", "vi", "Chúng tôi không biết điều đó."),
        ("&amp;lt; stays escaped once", "en", "&lt; stays escaped once"),
        ("", "en", ""),
    ],
)
def test_detokenize_moses(line, lang, expected):
    assert detokenize_moses(line, lang) == expected


def test_read_write_round_trip(tmp_path):
    lines = [
        "Tôi đã nói \"xin chào\", và họ cười.",
        "",
        "日本語のテキスト — with an em dash",
        "line with a U+2028\u2028inside and \x85 too",
        "emoji 🙂 and combining e\u0301",
    ]
    path = tmp_path / "cell" / "hyps.vi"
    write_lines(path, lines)
    assert read_lines(path) == lines
    raw = path.read_bytes()
    assert raw.decode("utf-8").count("\n") == len(lines) and raw.endswith(b"\n")
    assert not list(path.parent.glob(".*.tmp"))

    write_lines(path, [])
    assert read_lines(path) == []
    with pytest.raises(ValueError):
        write_lines(path, ["two\nlines"])


def test_lines_are_split_on_newlines_only_and_written_as_str(tmp_path):
    """A carriage return inside a sentence is text when read (universal newlines would split or
    translate it), and is refused when written, as a line feed is; only str is written."""
    path = tmp_path / "hyp.txt"
    path.write_bytes("one\rtwo\nthree\n".encode("utf-8"))
    assert read_lines(path) == ["one\rtwo", "three"]
    for bad in ("a\rb", "a\nb"):
        with pytest.raises(ValueError, match="^line 1 contains a line break: "):
            write_lines(path, ["fine", bad])
    with pytest.raises(TypeError, match="^line 0 is int, not str$"):
        write_lines(path, [3])



# tensor2tensor's get_ende_bleu.sh, `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`: each output
# below is what that perl line printed for the input.
@pytest.mark.parametrize("line, perl", [
    ("Rot-Grün", "Rot ##AT##-##AT## Grün"),
    ("E-Mail-Adresse", "E ##AT##-##AT## Mail ##AT##-##AT## Adresse"),
    ("a-b-c", "a ##AT##-##AT## b-c"),  # the match resumes after "b": one-letter parts stay joined
    ("Er kam - und ging", "Er kam - und ging"),  # a hyphen between spaces is no compound
    ("-5 Grad", "-5 Grad"),
    ("US-Präsident Obama-", "US ##AT##-##AT## Präsident Obama-"),
    ("x--y", "x ##AT##-##AT## -y"),
])
def test_compounds_split_as_tensor2tensors_ende_script(line, perl):
    from resrepro.evaluate.bleu import split_compounds

    assert split_compounds(line) == perl


# Five EN-DE pairs (raw text, as newstest2014's .sgm holds it), their n-gram matches counted by hand
# on the Moses tokens with compounds split: e.g. pair 2's hypothesis "Der US ##AT##-##AT## Präsident
# kam ." (6 tokens) against "Der Präsident kam ." matches Der, Präsident, kam and "." (4 of 6), then
# "Präsident kam" and "kam ." (2 of 5 bigrams), "Präsident kam ." (1 of 4), no 4-gram (0 of 3).
ENDE_PAIRS = [("Das ist eine E-Mail-Adresse.", "Das ist eine E-Mail-Adresse."),
              ("Der US-Präsident kam.", "Der Präsident kam."),
              ("Sie fuhr nach Baden-Württemberg.", "Sie fuhr nach Baden-Baden."),
              ("Er kam - und ging.", "Er kam und ging."),
              ("Rot-Grün regiert.", "Rot-Grün regiert.")]


@pytest.mark.parametrize("dataset, counts, totals, lengths", [
    # per pair, matches / n-grams: 1-grams 9/9, 4/6, 6/7, 5/6, 5/5; 2-grams 8/8, 2/5, 4/6, 3/5, 4/4;
    # 3-grams 7/7, 1/4, 3/5, 1/4, 3/3; 4-grams 6/6, 0/3, 2/4, 0/3, 2/2
    ("wmt14_en_de", [29, 21, 15, 10], [33, 28, 23, 18], (33, 30)),
    # Moses alone (EN-FR's scoring): "E-Mail-Adresse" is one token, "US-Präsident" matches nothing
    ("wmt14_en_fr", [20, 12, 6, 2], [23, 18, 13, 8], (23, 22)),
])
def test_raw_text_is_scored_with_its_datasets_tokenization(dataset, counts, totals, lengths):
    from resrepro.evaluate.translation import raw_text_tokenizer

    tokenize, how = raw_text_tokenizer(dataset, "de")
    score = tokenized_bleu([tokenize(h) for h, _ in ENDE_PAIRS], [tokenize(r) for _, r in ENDE_PAIRS])
    assert (score["counts"], score["totals"], (score["sys_len"], score["ref_len"])) == (counts, totals, lengths)
    assert score["bleu"] == pytest.approx(100 * math.exp(sum(math.log(c / t) for c, t in zip(counts, totals)) / 4))  # BP 1: longer
    assert ("get_ende_bleu.sh" in how) == (dataset == "wmt14_en_de")
