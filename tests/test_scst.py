"""Self-critical sequence training (Rennie et al. 2017): the CIDEr-D reward against pycocoevalcap
and hand-computed values, sampling, the policy-gradient loss, and the stage in the training loop."""

import math

import pytest

from resrepro.evaluate.cider import CiderD, ngram_counts

REFS = [
    ["a red circle on the left", "a red ball at the left", "red circle left side"],
    ["a blue square in the middle", "a blue box in the centre", "one blue square centre"],
    ["a green triangle and a red circle", "a green triangle beside a red ball", "triangle and circle"],
]
HYPS = ["a red circle on the left", "a blue square", "a green triangle and a red ball on the left"]


def test_with_the_scored_references_as_corpus_it_equals_pycocoevalcap_cider():
    from pycocoevalcap.cider.cider import Cider

    corpus = [[r.split() for r in refs] for refs in REFS]
    ours = CiderD(corpus).scores([h.split() for h in HYPS], [0, 1, 2])
    mean, theirs = Cider().compute_score({i: refs for i, refs in enumerate(REFS)}, {i: [h] for i, h in enumerate(HYPS)})
    assert ours == pytest.approx(list(theirs), abs=1e-9)
    assert sum(ours) / 3 == pytest.approx(mean, abs=1e-9)
    # one-word captions: pycocoevalcap's length is the count of bigrams (0 here), not words - 1 (nor trigrams)
    refs, hyps = REFS[:2] + [["circle"]], ["circle", "blue", "a red circle"]
    ours = CiderD([[r.split() for r in rs] for rs in refs]).scores([h.split() for h in hyps], [0, 1, 2])
    _, theirs = Cider().compute_score({i: rs for i, rs in enumerate(refs)}, {i: [h] for i, h in enumerate(hyps)})
    assert ours == pytest.approx(list(theirs), abs=1e-9) and ours[2] > 0


def test_a_hand_computed_score_unigrams_only():
    """n = 1, two images: 'a' is in both (idf 0), 'b' and 'c' in one each (idf log 2)."""
    scorer = CiderD([[["a", "b"]], [["a", "c"]]], n=1)
    # hyp (a, b) vs ref (a, b): vectors (0, log2) and (0, log2): cosine 1; no bigrams: length 0 = 0
    assert scorer.score(["a", "b"], 0) == pytest.approx(10.0)
    # hyp (a, c) vs ref (a, b): c's weight meets b's 0: cosine 0
    assert scorer.score(["a", "c"], 0) == pytest.approx(0.0)
    # hyp (b, b) vs ref (a, b): tf 2 x log2 clipped at the reference's log2: log2*log2 / (2log2 * log2) = 0.5
    assert scorer.score(["b", "b"], 0) == pytest.approx(5.0)


def test_document_frequencies_come_from_the_corpus_not_the_scored_batch():
    corpus = [[r.split() for r in refs] for refs in REFS]
    scorer = CiderD(corpus)
    assert scorer.document_frequency[("a",)] == 3 and scorer.document_frequency[("red",)] == 2
    assert scorer.document_frequency[("blue", "square")] == 1
    alone = scorer.scores([HYPS[0].split()], [0])[0]
    assert alone == pytest.approx(scorer.scores([h.split() for h in HYPS], [0, 1, 2])[0])  # batch-independent
    assert ngram_counts(["x", "y", "x"], 2) == {("x",): 2, ("y",): 1, ("x", "y"): 1, ("y", "x"): 1}


def test_the_length_penalty_uses_bigram_counts_as_pycocoevalcap_does():
    """A longer hypothesis with the same n-gram overlap scores lower, by exp(-d^2 / 72)."""
    scorer = CiderD([[["p", "q", "r"]], [["s"]]], n=1)
    exact = scorer.score(["p", "q", "r"], 0)
    padded = scorer.score(["p", "q", "r", "s", "s", "s"], 0)  # 's' carries idf log 2, cosine shrinks too
    assert exact == pytest.approx(10.0) and padded < exact
    unigram_only = CiderD([[["p", "q", "r"]], [["t"]]], n=2)
    # bigram counts 2 (hyp p q r) against 2: no penalty; the unigram and bigram cosines are 1
    assert unigram_only.score(["p", "q", "r"], 0) == pytest.approx(10.0)
    assert math.isclose(CiderD([[["p"]], [["q"]]], n=1).score([], 0), 0.0)


# --- the policy-gradient pieces ---------------------------------------------------------------

import numpy as np  # noqa: E402
import torch  # noqa: E402

from resrepro.evaluate.beam_search import draw, greedy, greedy_and_sample, sample  # noqa: E402
from resrepro.train import captioning as train_captioning  # noqa: E402
from test_captioning import captioner, scenes_dir  # noqa: E402, F401
from test_captioning import spec as caption_spec  # noqa: E402
from test_captioning import typed as caption_typed  # noqa: E402

SPECIALS = {"pad_id": 0, "bos_id": 1, "eos_id": 2}


def test_sampled_targets_end_with_eos_only_when_the_sample_drew_it():
    tin, tout = train_captioning.sampled_targets([[5, 6], [7, 8, 9]], limit=3, spec=caption_typed(**SPECIALS))
    assert tin.tolist() == [[1, 5, 6, 0], [1, 7, 8, 9]]
    assert tout.tolist() == [[5, 6, 2, 0], [7, 8, 9, 0]]  # the second reached the limit: no EOS was drawn


def test_policy_loss_by_hand():
    """Equal logits over 4 tokens, PAD and BOS banned: every allowed token has log-probability
    log 1/2. Sample 1 (2 tokens, advantage 1), sample 2 (1 token, advantage -2):
    loss = -(1 * 2 * log 1/2 + (-2) * 1 * log 1/2) / 3 = 0."""
    logits = torch.zeros(2, 2, 4)
    target = torch.tensor([[2, 3], [3, 0]])
    loss = train_captioning.policy_loss(logits, target, torch.tensor([1.0, -2.0]), pad_id=0, banned=[0, 1])
    assert loss.item() == pytest.approx(0.0, abs=1e-7)
    loss = train_captioning.policy_loss(logits, target, torch.tensor([1.0, 1.0]), pad_id=0, banned=[0, 1])
    assert loss.item() == pytest.approx(math.log(2))  # -(3 log 1/2) / 3
    loss = train_captioning.policy_loss(logits, target, torch.tensor([1.0, 1.0]), pad_id=0, banned=[])
    assert loss.item() == pytest.approx(math.log(4))  # nothing banned: 1/4 each


def test_samples_are_seeded_allowed_and_within_the_limit():
    model = captioner()
    feats = torch.rand(6, 5, 10) + 0.1
    draw = lambda seed: sample(model, feats, 1, 2, 0.0, 7, torch.Generator().manual_seed(seed))  # noqa: E731
    a, b, c = draw(0), draw(0), draw(1)
    assert a == b and a != c
    assert all(len(s) <= 7 and 0 not in s and 1 not in s and 2 not in s for s in a + c)
    assert model.training  # decoding restores the mode it found


def test_sampling_from_a_peaked_model_gives_its_greedy_caption():
    """Embeddings scaled up (tied to the output layer): the softmax is an argmax over the allowed
    tokens, even where the banned PAD or BOS would hold all the mass."""
    model = captioner()
    feats = torch.rand(4, 5, 10) + 0.1
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed" in name:
                p.mul_(200.0)
    peaked_greedy = greedy(model, feats, 1, 2, 0.0, 6)
    assert sample(model, feats, 1, 2, 0.0, 6, torch.Generator().manual_seed(3)) == peaked_greedy


def test_a_draw_is_torch_multinomials_and_takes_as_much_of_the_generator():
    logp = torch.randn(7, 50, generator=torch.Generator().manual_seed(0)).mul(3).log_softmax(-1)
    logp[:, :2] = float("-inf")  # PAD and BOS banned
    for seed in range(20):
        ours, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        assert torch.equal(draw(logp, ours), torch.multinomial(logp.softmax(-1), 1, generator=theirs).squeeze(1))
        assert torch.equal(ours.get_state(), theirs.get_state())


def test_greedy_and_sample_in_one_batch_equal_them_decoded_apart(monkeypatch):
    """The same captions, and the generator where `sample` leaves it. With EOS's logit raised, some
    batches' samples all end before the greedy captions do: the draws stop there, as apart."""
    model = captioner()
    decode_step = model.decode_step
    samples_ended_first = 0
    for eos_bias, images in ((0.0, 3), (2.5, 1)):
        monkeypatch.setattr(model, "decode_step", lambda *a, **k: decode_step(*a, **k) + torch.eye(20)[2] * eos_bias)
        for seed in range(8):
            feats = torch.rand(images, 5, 10, generator=torch.Generator().manual_seed(seed)) + 0.1
            apart, together = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
            expected = greedy(model, feats, 1, 2, 0.0, 9), sample(model, feats, 1, 2, 0.0, 9, apart)
            assert greedy_and_sample(model, feats, 1, 2, 0.0, 9, together) == expected
            assert torch.equal(apart.get_state(), together.get_state())
            samples_ended_first += max(map(len, expected[1])) + 1 < max(map(len, expected[0]))
    assert samples_ended_first > 0


# --- the stage in the training loop -------------------------------------------------------------

SCST = {"updates": 20, "lr": 5e-4, "batch_images": 20, "checkpoint_every": 10, "max_len": 12}


def scst_spec(**over):
    return caption_spec(lr_scale=1.0, scst={**SCST, **over})


def test_the_stage_follows_cross_entropy_and_continues_its_checkpoints(scenes_dir, tmp_path):  # noqa: F811
    import pandas as pd

    run = tmp_path / "run"
    metrics = train_captioning.train(scst_spec(), scenes_dir, run, device="cpu", progress=False)
    assert metrics["updates"] == 30 and metrics["scst"]["updates"] == 20 and metrics["diverged"] is False
    assert metrics["spec"]["scst"] == SCST
    log = pd.read_csv(run / "scst_log.csv")
    assert list(log["step"]) == [40, 50] and list(log.columns) == list(train_captioning.SCST_LOG_FIELDS)
    assert (log["reward"] >= 0).all() and (log["dev_cider"] >= 0).all()
    assert sorted(p.name for p in (run / "checkpoints").glob("step*.pt")) == ["step30.pt", "step40.pt", "step50.pt"]
    xe = torch.load(run / "checkpoints" / "step30.pt", weights_only=True)["model"]
    last = torch.load(run / "checkpoints" / "step50.pt", weights_only=True)["model"]
    assert any(not torch.equal(xe[k], last[k]) for k in xe)  # the stage trained the model
    written = json_of(run / "metrics.json")
    assert written["scst"]["final"]["step"] == 50 and written["final"]["step"] == 30


def json_of(path):
    import json

    return json.loads(path.read_text())


def test_a_killed_stage_resumes_bit_identically_and_a_new_stage_keeps_cross_entropy(scenes_dir, tmp_path, monkeypatch):  # noqa: F811
    whole = train_captioning.train(scst_spec(), scenes_dir, tmp_path / "whole", device="cpu", progress=False)
    saved, calls = train_captioning.save, []

    def killed_after_first_scst_checkpoint(path, *args, **kwargs):
        saved(path, *args, **kwargs)
        if path.name == "scst.pt":
            raise KeyboardInterrupt

    monkeypatch.setattr(train_captioning, "save", killed_after_first_scst_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        train_captioning.train(scst_spec(), scenes_dir, tmp_path / "resumed", device="cpu", progress=False)
    monkeypatch.setattr(train_captioning, "save", saved)
    assert len((tmp_path / "resumed" / "scst_log.csv").read_text().splitlines()) == 2  # header + step 40
    resumed = train_captioning.train(scst_spec(), scenes_dir, tmp_path / "resumed", device="cpu", progress=False)
    assert resumed["scst"]["final"]["reward"] == whole["scst"]["final"]["reward"]
    assert resumed["scst"]["final"]["dev_cider"] == whole["scst"]["final"]["dev_cider"]
    a = torch.load(tmp_path / "whole" / "checkpoints" / "step50.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "checkpoints" / "step50.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)

    xe_log = (tmp_path / "whole" / "train_log.csv").read_text()
    shorter = train_captioning.train(scst_spec(updates=10), scenes_dir, tmp_path / "whole", device="cpu", progress=False)
    assert (tmp_path / "whole" / "train_log.csv").read_text() == xe_log  # cross-entropy not retrained
    assert shorter["scst"]["updates"] == 10
    names = sorted(p.name for p in (tmp_path / "whole" / "checkpoints").glob("step*.pt"))
    assert names == ["step30.pt", "step40.pt"]  # the earlier stage's step50 is gone, not averaged
