"""A job's time limit: when a run stops, what a job asks Slurm for, and how many jobs a run takes."""

import pytest
import torch

from resrepro import experiments
from resrepro.catalog import ConfigError
from resrepro.models import transformer
from resrepro.train import time_limit, translation
from resrepro.train.time_limit import TimeLimitReached, deadline, must_stop


def test_the_deadline_keeps_a_margin_of_a_tenth_of_the_limit_at_most_five_minutes():
    assert deadline(10, 1000.0) == 1000.0 + 600 - 60
    assert deadline(1440, 0.0) == 1440 * 60 - 300
    assert deadline(0, 5.0) is None and deadline(None, 5.0) is None


def test_a_run_stops_when_twice_the_last_stretch_would_pass_the_deadline(monkeypatch):
    monkeypatch.setattr(time_limit.time, "time", lambda: 100.0)
    assert must_stop(120.0, 10.0) is False  # 100 + 20 = 120: it fits
    assert must_stop(119.9, 10.0) is True
    assert must_stop(None, 1e9) is False


CONFIG = {"max_job_minutes": 1440, "resources": {"train_translator": {"runtime": 4320}, "evaluate_translation": {"runtime": 500},
                                                 "train_classifier": {"runtime": 1440}}}


def test_a_training_job_asks_for_at_most_a_day_and_continues_in_the_next_jobs():
    assert experiments.job_minutes(CONFIG, "train_translator") == 1440
    assert experiments.continuations(CONFIG, "train_translator", [1]) == 2  # 72 h: three jobs of 24 h
    assert experiments.continuations(CONFIG, "train_translator", [1, 2]) == 5  # two seeds one after another: 144 h
    assert experiments.job_minutes(CONFIG, "train_classifier") == 1440
    assert experiments.continuations(CONFIG, "train_classifier", [1]) == 0  # exactly a day: one job
    assert experiments.continuations(CONFIG, "train_classifier", [2]) == 1


def test_seeds_side_by_side_take_fewer_rounds():
    assert [experiments.training_rounds({"seeds_in_parallel": 2}, "translation", n) for n in (1, 2, 3, 5)] == [1, 1, 2, 3]
    assert experiments.training_rounds({}, "classification", 3) == 3
    assert experiments.seeds_at_once({"seeds_in_parallel": 4}, "classification", 3) == 3
    per_task = {"seeds_in_parallel": {"classification": 4}}  # a task the mapping leaves out trains its seeds one by one
    assert [experiments.seeds_at_once(per_task, task, 5) for task in ("classification", "translation")] == [4, 1]
    assert [experiments.training_rounds(per_task, task, 5) for task in ("classification", "captioning")] == [2, 5]


def test_a_job_asks_for_the_memory_of_each_run_it_trains_at_once():
    config = {"resources": {"train_classifier": {"mem_mb": 8000}}}
    assert [experiments.job_memory(config, "train_classifier", k) for k in (1, 4)] == [8000, 32000]


def test_any_other_job_over_the_limit_is_refused_naming_the_rule():
    assert experiments.job_minutes(CONFIG, "evaluate_translation", 2) == 1000
    with pytest.raises(ConfigError, match=r"resources.evaluate_translation.runtime: a job of 3 run\(s\) needs 1500 minutes, more than "
                                          r"max_job_minutes \(1440\)"):
        experiments.job_minutes(CONFIG, "evaluate_translation", 3)


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(transformer.PRESETS, "base_2block", dict(d_model=16, heads=2, ffn=32, encoder_layers=1, decoder_layers=1, dropout=0.1))


def test_a_translation_run_stopped_at_its_time_limit_continues_to_the_uninterrupted_numbers(tmp_path, tiny):
    g = torch.Generator().manual_seed(0)
    pairs = [(s, s[::-1]) for s in (torch.randint(4, 20, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist() for _ in range(80))]
    spec = dict(task="translation", dataset="synthetic", arch="transformer_base_2block", model="transformer", size="base_2block", variant="add",
                args={}, seed=0, world_size=1, max_tokens=200, update_freq=1,
                warmup=10, lr_scale=1.0, label_smoothing=0.1, max_updates=12, checkpoint_every=4, keep_checkpoints=3, pad_id=0, bos_id=1, eos_id=2)
    whole = translation.train(spec, pairs, pairs[:8], 21, tmp_path / "whole", device="cpu", progress=False)
    with pytest.raises(TimeLimitReached, match="stopped after update 4 of 12, checkpointed"):
        translation.train(spec, pairs, pairs[:8], 21, tmp_path / "limited", device="cpu", progress=False, stop_by=0.0)
    assert torch.load(tmp_path / "limited" / "checkpoints" / "last.pt", weights_only=True)["step"] == 4
    resumed = translation.train(spec, pairs, pairs[:8], 21, tmp_path / "limited", device="cpu", progress=False)
    assert resumed["final"] == {**whole["final"], "seconds": resumed["final"]["seconds"], "tokens_per_s": resumed["final"]["tokens_per_s"]}
    a = torch.load(tmp_path / "whole" / "checkpoints" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "limited" / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
