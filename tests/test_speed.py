"""The recipe's speed switches (speed.py): how each resolves on a CPU and a GPU, and each one's code
path in both training loops, run on the CPU (bf16 autocast, channels-last, fused optimizers and
torch.compile all exist there too)."""

from __future__ import annotations

import pytest
import torch

from resrepro import speed
from resrepro.models import transformer
from resrepro.specs import TranslationTrainSpec
from resrepro.speed import Speed, speed_of
from resrepro.train import classification, translation
from test_train import digits, spec  # noqa: F401 (digits: a fixture, the prepared digits dataset)
from test_train_translation import corpus
from test_train_translation import spec as text_spec

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)  # a device object needs no GPU


def test_auto_means_on_a_gpu_and_off_on_the_cpu():
    assert speed_of({}, GPU, image_model=True) == Speed(amp=True, channels_last=True, compile=None, fused_optimizer=True, tf32=True)
    assert speed_of({}, CPU, image_model=True) == Speed(amp=False, channels_last=False, compile=None, fused_optimizer=False)
    # channels-last is a layout of image tensors: a Transformer never takes it
    assert speed_of({"channels_last": True}, GPU).channels_last is False


def test_compile_auto_replays_cuda_graphs_for_a_float32_image_model_on_a_gpu_only():
    """What the paper recipes ask for: graphs where the GPU tests showed them training as eager
    does (classifiers in float32), eager everywhere else (the CPU; sequence models, whose batches
    take many shapes; float64 runs)."""
    assert speed_of({"compile": "auto"}, GPU, image_model=True).compile == "cudagraphs"
    assert speed_of({"compile": "auto"}, GPU, image_model=True).replays_graphs
    assert speed_of({"compile": "auto"}, CPU, image_model=True).compile is None
    assert speed_of({"compile": "auto"}, GPU).compile is None  # a Transformer or a captioner
    assert speed_of({"compile": "auto", "dtype": "float64"}, GPU, image_model=True).compile is None
    assert speed_of({"compile": "auto", "model": "preact_resnet"}, GPU, image_model=True).compile == "cudagraphs"


def test_compile_auto_leaves_the_weight_shared_nets_eager():
    """On an H200 they trained otherwise as CUDA graphs than eagerly (losses 5-50% apart after 2 epochs)."""
    for strategy in ("naive", "stats", "stats_gamma", "ubn"):
        assert speed_of({"compile": "auto", "model": f"shared_resnet_{strategy}"}, GPU, image_model=True).compile is None


@pytest.mark.config
def test_the_gpu_tests_of_compile_auto_cover_every_kind_of_image_model_the_papers_train():
    """tests/test_gpu.py trains each of them as graphs against eager: a new architecture joins it."""
    import yaml

    from resrepro.experiments import make_plan
    from test_gpu import PAPER_IMAGE_MODELS

    config = yaml.safe_load(open("config/mini.yaml"))
    assert set(PAPER_IMAGE_MODELS) == {r.model for r in make_plan(config).runs.values() if r.task == "classification"}


@pytest.mark.config
def test_the_gpu_tests_find_each_models_mini_run_from_their_own_folder(tmp_path, monkeypatch):
    """tests/test_gpu.py runs each test in its tmp_path: the mini plan is read from the repository."""
    from test_gpu import PAPER_IMAGE_MODELS, mini_run_spec

    monkeypatch.chdir(tmp_path)
    for model in PAPER_IMAGE_MODELS:
        assert mini_run_spec(model)["model"] == model


def test_explicit_switches_override_the_device():
    on = speed_of({"amp": "bf16", "channels_last": True, "fused_optimizer": True, "compile": True}, CPU, image_model=True)
    assert on == Speed(amp=True, channels_last=True, compile="inductor", fused_optimizer=True)
    off = speed_of({"amp": "fp32", "channels_last": False, "fused_optimizer": False, "compile": False, "tf32": False}, GPU,
                   image_model=True)
    assert off == Speed(amp=False, channels_last=False, compile=None, fused_optimizer=False, tf32=False)
    assert speed_of({"compile": "aot_eager"}, GPU).compile == "aot_eager"


def test_tf32_sets_the_gpus_float32_matmul_precision_and_never_the_cpus():
    """torch keeps the precision process-wide; a run on a GPU sets it either way, so a run with
    tf32 off after one with it on gets IEEE float32 back. The CPU has no TF32: asked for, it stays off.
    (conftest.py restores the precision after the test.)"""
    torch.backends.cuda.matmul.fp32_precision = "none"
    assert speed_of({"tf32": True}, CPU).tf32 is False and speed_of({}, CPU).tf32 is False
    assert torch.backends.cuda.matmul.fp32_precision == "none"  # a CPU run leaves the GPU flag alone
    assert speed_of({}, GPU).tf32 is True and torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert speed_of({"tf32": False}, GPU).tf32 is False and torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert speed_of({"tf32": "auto"}, GPU).tf32 is True and torch.backends.cuda.matmul.fp32_precision == "tf32"


@pytest.mark.parametrize("spec, message", [({"amp": "fp16"}, "amp: expected auto, bf16 or fp32"),
                                           ({"fused_optimizer": "yes"}, "expected auto, true or false"),
                                           ({"tf32": "on"}, "expected auto, true or false")])
def test_an_unknown_value_is_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        speed_of(spec, CPU)


def test_each_switch_does_what_it_says():
    on = Speed(amp=True, channels_last=True, compile="aot_eager", fused_optimizer=True)
    off = Speed(amp=False, channels_last=False, compile=None, fused_optimizer=False)
    linear = torch.nn.Linear(4, 4)
    with on.autocast(CPU):
        assert linear(torch.randn(2, 4)).dtype == torch.bfloat16
    with off.autocast(CPU):
        assert linear(torch.randn(2, 4)).dtype == torch.float32
    assert on.optimizer_options() == {"fused": True} and off.optimizer_options() == {}
    x = torch.randn(2, 3, 4, 4)
    assert on.layout(x).is_contiguous(memory_format=torch.channels_last) and not on.layout(x).is_contiguous()
    assert off.layout(x) is x
    conv = torch.nn.Conv2d(3, 3, 3)
    assert on.place(conv, CPU) is conv and conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert off.compiled(conv) is conv
    compiled = on.compiled(conv)
    assert compiled is not conv and torch.allclose(compiled(x), conv(x))
    assert set(speed.DEFAULTS) == {"amp", "channels_last", "compile", "fused_optimizer", "tf32", "dtype"}


@pytest.mark.parametrize("value, call", [("cudagraphs", {"backend": "cudagraphs", "dynamic": False}), ("inductor", {"backend": "inductor"}),
                                         ("reduce-overhead", {"mode": "reduce-overhead", "dynamic": False}),
                                         ("max-autotune-no-cudagraphs", {"mode": "max-autotune-no-cudagraphs"})])
def test_compile_takes_a_backend_or_one_of_inductors_modes(monkeypatch, value, call):
    """A mode is not a backend: torch.compile(backend="reduce-overhead") fails, mode= runs inductor so.
    A graph-replaying one is static: over dynamic sizes, the cudagraphs backend replayed the first
    length bucket's recording for the next (an H200, 2026-11-27)."""
    calls = []
    monkeypatch.setattr(torch, "compile", lambda module, **kw: calls.append(kw) or module)
    chosen = speed_of({"compile": value}, GPU)
    assert chosen.compile == value
    chosen.compiled(torch.nn.Linear(2, 2))
    assert calls == [call]


def conv_dtypes_during(fn) -> list[torch.dtype]:
    seen = []
    hook = torch.nn.modules.module.register_module_forward_hook(
        lambda module, inputs, out: seen.append((out.dtype, inputs[0].is_contiguous(memory_format=torch.channels_last)))
        if isinstance(module, torch.nn.Conv2d) and module.training else None)
    try:
        fn()
    finally:
        hook.remove()
    return seen


SWITCHES_ON = {"amp": "bf16", "channels_last": True, "fused_optimizer": True, "compile": "aot_eager"}


def test_a_classifier_trains_in_bf16_channels_last_with_a_fused_optimizer(digits, tmp_path, monkeypatch):
    optimizers = []
    real_sgd = torch.optim.SGD
    monkeypatch.setattr(torch.optim, "SGD", lambda *a, **kw: optimizers.append(kw) or real_sgd(*a, **kw))
    metrics = {}
    switches = {"amp": "bf16", "channels_last": True, "fused_optimizer": True}
    seen = conv_dtypes_during(lambda: metrics.update(classification.train(
        spec(epochs=1, lr_milestones=[], **switches), digits, tmp_path / "run", device="cpu", progress=False)))
    assert metrics["diverged"] is False and 0 <= metrics["final"]["test_error"] <= 100
    assert metrics["speed"] == {"amp": True, "channels_last": True, "compile": None, "fused_optimizer": True, "tf32": False, "float64": False}
    assert optimizers[0]["fused"] is True
    assert seen and all(dtype == torch.bfloat16 and channels_last for dtype, channels_last in seen)


def test_a_compiled_classifier_trains_and_matches_the_eager_one(digits, tmp_path, monkeypatch):
    """aot_eager traces forward and backward as inductor would, without generating code: the same
    numbers as eager up to rounding, and the checkpoint holds the model's own keys."""
    compiled = []
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda module, **kw: compiled.append(kw) or real_compile(module, **kw))
    eager = classification.train(spec(epochs=1, lr_milestones=[]), digits, tmp_path / "eager", device="cpu", progress=False)
    traced = classification.train(spec(epochs=1, lr_milestones=[], compile="aot_eager"), digits, tmp_path / "traced", device="cpu",
                                  progress=False)
    assert compiled == [{"backend": "aot_eager"}] and traced["speed"]["compile"] == "aot_eager"
    assert traced["final"]["train_loss"] == pytest.approx(eager["final"]["train_loss"], rel=1e-3)
    saved = torch.load(tmp_path / "traced" / "checkpoints" / "last.pt", weights_only=False)["model"]
    assert not any(key.startswith("_orig_mod") for key in saved)


def test_a_classifier_on_the_cpu_by_default_is_float32_and_contiguous(digits, tmp_path):
    metrics = {}
    seen = conv_dtypes_during(lambda: metrics.update(classification.train(
        spec(epochs=1, lr_milestones=[]), digits, tmp_path / "run", device="cpu", progress=False)))
    assert metrics["speed"] == {"amp": False, "channels_last": False, "compile": None, "fused_optimizer": False, "tf32": False, "float64": False}
    assert seen and all(dtype == torch.float32 for dtype, _ in seen)


def test_a_transformer_trains_with_every_switch_on(tmp_path, monkeypatch):
    monkeypatch.setitem(transformer.PRESETS, "base_2block", dict(d_model=32, heads=4, ffn=64, encoder_layers=2, decoder_layers=2, dropout=0.1))
    optimizers = []
    real_adam = torch.optim.Adam
    monkeypatch.setattr(torch.optim, "Adam", lambda *a, **kw: optimizers.append(kw) or real_adam(*a, **kw))
    train_pairs, dev_pairs = corpus(300, 0), corpus(30, 1)
    metrics = translation.train(text_spec(max_updates=4, checkpoint_every=2, **SWITCHES_ON), train_pairs, dev_pairs, 26,
                                tmp_path / "run", device="cpu", progress=False)
    assert metrics["diverged"] is False and metrics["updates"] == 4 and metrics["final"]["train_loss"] < 10
    assert metrics["speed"] == {"amp": True, "channels_last": False, "compile": "aot_eager", "fused_optimizer": True, "tf32": False, "float64": False}
    assert optimizers[0]["fused"] is True
    # the checkpoint holds the model's own keys, not the compiled wrapper's (_orig_mod.)
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=False)["model"]
    assert not any(key.startswith("_orig_mod") for key in saved)


def recording_compile(monkeypatch) -> list:
    """torch.compile replaced by a wrapper that runs the module eagerly and records each call's batch size."""
    calls = []

    def compile_(module, **kw):
        return lambda *inputs: calls.append(inputs[0].shape[0]) or module(*inputs)

    monkeypatch.setattr(torch, "compile", compile_)
    return calls


def test_a_compiled_classifier_runs_an_epochs_shorter_last_batch_eagerly(digits, tmp_path, monkeypatch):
    """A replayed CUDA graph holds one batch size: digits' 1,297 training images make a last batch of
    17, which a cudagraphs step replayed into 128 rows (an H200, 2026-11-27). The compiled forward
    sees full batches only."""
    calls = recording_compile(monkeypatch)
    classification.train(spec(epochs=1, lr_milestones=[], compile="cudagraphs"), digits, tmp_path / "run", device="cpu", progress=False)
    assert calls and set(calls) == {128} and len(calls) == 1297 // 128


def test_gradients_accumulated_over_micro_batches_under_graph_replays_are_copies(tmp_path, monkeypatch):
    """A replayed backward installs its output buffers as .grad, and the next micro-batch's replay
    writes into them: each micro-batch but an update's last hands its gradients over as copies."""
    recording_compile(monkeypatch)
    owned = []
    monkeypatch.setattr(translation, "own_gradients", lambda model: owned.append(model))
    monkeypatch.setitem(transformer.PRESETS, "base_2block", dict(d_model=16, heads=2, ffn=32, encoder_layers=1, decoder_layers=1, dropout=0.0))
    for mode, expected in (("cudagraphs", 3), ("aot_eager", 0)):
        owned.clear()
        translation.train(text_spec(max_updates=3, checkpoint_every=3, update_freq=2, compile=mode), corpus(300, 0), corpus(30, 1), 26,
                          tmp_path / mode, device="cpu", progress=False)
        assert len(owned) == expected, mode


def test_own_gradients_detaches_each_gradient_from_the_buffer_it_was_written_in():
    net = torch.nn.Linear(3, 2)
    buffers = [torch.ones_like(w) for w in net.parameters()]
    for w, buffer in zip(net.parameters(), buffers):
        w.grad = buffer
    speed.own_gradients(net)
    for buffer in buffers:
        buffer.fill_(7.0)  # the next replay
    assert all(torch.equal(w.grad, torch.ones_like(w)) for w in net.parameters())
    net.bias.grad = None
    speed.own_gradients(net)
    assert net.bias.grad is None



def test_a_graph_mode_records_a_graph_for_every_shape_the_loop_feeds():
    """Dynamo compiles a function at most 8 times by default, then runs every new shape eagerly with
    only a warning: a Transformer's 32 length buckets (max_train_len 256, bucket 8) would have trained
    most batches without graphs. On the CPU the cudagraphs backend records nothing, but dynamo still
    compiles a frame a shape, which is what is counted."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    # torch's own config.patch, which restores the limits after (pytest's monkeypatch hides a
    # config entry on undo: dynamo then fails to read it in every later test of the worker)
    with torch._dynamo.config.patch(recompile_limit=8, accumulated_recompile_limit=8):
        linear = torch.nn.Linear(4, 2)
        forward = Speed(amp=False, channels_last=False, compile="cudagraphs", fused_optimizer=False).compiled(linear, shapes=12)
        for rows in range(1, 13):
            forward(torch.randn(rows, 4)).sum().backward()
    assert counters["stats"]["unique_graphs"] == 12
    assert torch._dynamo.config.recompile_limit == 8 and torch._dynamo.config.accumulated_recompile_limit > 8  # restored
    torch._dynamo.reset()


def test_the_translation_loop_compiles_for_each_of_its_length_buckets(monkeypatch, tmp_path):
    assert translation.length_buckets({"max_train_len": 256, "length_bucket": 8}) == 32
    assert translation.length_buckets({"max_train_len": 10, "length_bucket": 4}) == 3  # 4, 8, 12
    assert translation.length_buckets({"max_train_len": 256}) == 1
    pairs = corpus(60, 0)
    data = translation.TokenPairs(pairs, TranslationTrainSpec.from_dict(text_spec(max_tokens=64, length_bucket=4, max_train_len=12)), max_len=12)
    shapes = {data.collate(idx)[0].shape for idx in data.batches(torch.Generator().manual_seed(0))}
    assert len(shapes) <= translation.length_buckets({"max_train_len": 12, "length_bucket": 4})
    asked = []
    monkeypatch.setattr(Speed, "compiled", lambda self, module, shapes=1: asked.append(shapes) or module)
    translation.train(text_spec(max_updates=2, length_bucket=4, max_train_len=12), pairs, corpus(10, 1), 26, tmp_path, device="cpu",
                      progress=False)
    assert asked == [3]
