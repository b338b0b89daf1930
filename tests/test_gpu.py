"""The GPU paths on a real GPU: `pytest -m gpu` (skipped without CUDA; README, "Running on GPUs").

On one GPU it trains a few steps of every architecture in bf16 with channels-last, checks that
the gates stay float32 under CUDA autocast, resumes a killed run bit-identically (deterministic
kernels; dropout draws from the GPU's generator), runs beam search, runs two torchrun ranks on
the one GPU (NCCL if it allows two ranks per GPU, else gloo on CUDA tensors), and queues jobs on
the real devices through the lock pool. The same logic is tested on CPU with CUDA patched in
test_devices.py, test_launch.py, test_checkpoint.py, test_ddp.py and test_residual.py.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before this process's first matrix product

import pytest
import torch

from resrepro import catalog, devices, models, recipes, residual
from resrepro.models import transformer
from resrepro.train import classification, translation
from test_train import digits  # noqa: F401 (a fixture: the prepared digits dataset)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

IMAGE_VARIANTS = [("add", {}), ("sas", {}), ("highway", {}), ("rskip_ln", {"lam": 2}), ("xskip_bn", {"lam": 2}),
                  ("pre_ln", {}), ("deepnorm", {}), ("admin", {})]  # beyond the papers: the hooks and Admin's profile on CUDA
TEXT_VARIANTS = [("rskip_ln", {"lam": 1}), ("rskip_ln", {"lam": 2}), ("sas", {}), ("highway", {}), ("pre_ln", {}), ("deepnorm", {}),
                 ("admin", {})]
LAUNCHER_ENV = ("SLURM_JOB_ID", "LOCAL_RANK", "RESREPRO_GPUS_HELD_BY_LAUNCH")
TINY_PRESET = dict(d_model=32, heads=4, ffn=64, encoder_layers=2, decoder_layers=2, dropout=0.1)


@pytest.fixture(autouse=True)
def own_gpu_and_default_modes(monkeypatch, tmp_path):
    """No launcher variables, locks in tmp_path, no GPU held yet, no compiled code kept; torch's
    deterministic switches back as they were afterwards; the tiny Transformer preset."""
    for name in LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(devices, "_POOL", None)
    monkeypatch.setattr(devices, "_INDEX", None)
    monkeypatch.setitem(transformer.PRESETS, "base_2block", TINY_PRESET)
    torch._dynamo.reset()  # dynamo runs a forward eagerly after 8 compiles in one process: each test compiles afresh
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, torch.backends.cuda.cudnn_sdp_enabled())
    yield
    if devices._POOL is not None:
        devices._POOL.release()
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1], saved[2]
    torch.backends.cuda.enable_cudnn_sdp(saved[3])


def image_spec(**over):
    from test_train import spec

    return spec(**{"epochs": 1, **over})


def text_spec(**over):
    from test_train_translation import spec

    return spec(**over)


def corpora():
    from test_train_translation import corpus

    return corpus(300, 0), corpus(30, 1)


def keep_built_models(monkeypatch, module) -> list:
    """The models `module`'s train() builds, kept for the test to inspect."""
    built, build = [], module.models.build

    def keeping(*args, **kwargs):
        built.append(build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(module.models, "build", keeping)
    return built


def test_auto_picks_an_indexed_gpu_and_makes_it_current():
    device = devices.pick_device("auto")
    assert device.type == "cuda" and device.index is not None
    assert torch.cuda.current_device() == device.index
    assert devices.pick_device("cuda") == device


@pytest.mark.parametrize("variant, args", IMAGE_VARIANTS)
def test_a_classifier_trains_on_the_gpu_in_bf16_and_channels_last(digits, tmp_path, monkeypatch, variant, args):
    built = keep_built_models(monkeypatch, classification)
    dtypes = []
    hook = torch.nn.modules.module.register_module_forward_hook(
        lambda module, inputs, out: dtypes.append(out.dtype) if isinstance(module, torch.nn.Conv2d) and module.training else None)
    try:
        metrics = classification.train(image_spec(variant=variant, args=args), digits, tmp_path / "run", device="auto", progress=False)
    finally:
        hook.remove()
    (model,) = built
    assert metrics["diverged"] is False and 0 <= metrics["final"]["test_error"] <= 100
    assert metrics["provenance"]["device"] == torch.cuda.get_device_name()
    assert metrics["speed"] == {"amp": True, "channels_last": True, "compile": None, "fused_optimizer": True, "tf32": True, "float64": False}  # auto on a GPU
    assert next(model.parameters()).is_cuda
    conv = model.blocks[0].conv1.weight  # 16 x 16 x 3 x 3: the two layouts differ (the stem's 1 channel would not tell)
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert dtypes and set(dtypes) == {torch.bfloat16}  # every convolution ran under bf16 autocast
    if variant == "sas":
        assert all(g.dtype == torch.float32 for b in model.blocks for g in b.residual.last_gates.values())


def test_compiled_training_runs_on_the_gpu(digits, tmp_path):
    """compile: true (inductor) on the GPU, for both loops."""
    metrics = classification.train(image_spec(compile=True), digits, tmp_path / "image", device="auto", progress=False)
    assert metrics["diverged"] is False and metrics["speed"]["compile"] == "inductor"
    train_pairs, dev_pairs = corpora()
    metrics = translation.train(text_spec(max_updates=4, checkpoint_every=2, compile=True), train_pairs, dev_pairs, 26,
                                tmp_path / "text", device="auto", progress=False)
    assert metrics["diverged"] is False and metrics["updates"] == 4


# how far each graph mode's losses may be from eager's after 3 epochs: the same kernels replayed, or
# inductor's fused kernels, which round differently
GRAPH_MODES = {"cudagraphs": 0.02, "reduce-overhead": 0.05}


@pytest.mark.parametrize("variant", ["add", "sas"])
def test_a_classifier_trains_as_cuda_graphs_as_it_does_eagerly(digits, tmp_path, variant):
    """compile: cudagraphs replays each step's kernels as recorded graphs (a paper ResNet-110 step on an
    H100: add 1.8x, SAS 3.6x faster; docs/gpu-h100-2026-11-26.md); reduce-overhead replays inductor's.
    The same training, so each mode's losses as the eager run's, to rounding. A graph that replayed
    stale inputs, kept BatchNorm's statistics or dropped a gradient would not train the same."""
    runs = {}
    for mode in (False, *GRAPH_MODES):
        run_spec = image_spec(epochs=3, deterministic=True, variant=variant, args={}, compile=mode)
        runs[mode] = classification.train(run_spec, digits, tmp_path / str(mode), device="auto", progress=False)
    eager = runs[False]
    for mode, rel in GRAPH_MODES.items():
        graphs = runs[mode]
        assert graphs["speed"]["compile"] == mode and graphs["diverged"] is False, mode
        for name in ("train_loss", "test_loss"):
            assert graphs["final"][name] == pytest.approx(eager["final"][name], rel=rel), (mode, name)
        assert abs(graphs["final"]["test_error"] - eager["final"]["test_error"]) <= 100 * rel, mode


# the kinds of image model the papers' CIFAR tables train (tests/test_speed.py holds this to the mini plan's)
PAPER_IMAGE_MODELS = ("preact_resnet", "resnet_cifar", "simple_net", "simple_net_diagonal", "single_rep_resnet", "avgpool_resnet",
                      "wide_resnet", "shared_resnet_naive", "shared_resnet_stats", "shared_resnet_stats_gamma", "shared_resnet_ubn")


def mini_run_spec(model: str) -> dict:
    """The train spec of the first float32 classification run of `model` in the mini plan: the
    papers' architecture at mini size, with its paper's recipe."""
    import contextlib
    import json
    from pathlib import Path

    import yaml

    from resrepro import experiments

    root = Path(__file__).resolve().parents[1]
    with contextlib.chdir(root):  # the config's paths are the repository's; the GPU tests run in tmp_path
        config = yaml.safe_load(Path("config/mini.yaml").read_text())
        run = next(r for r in experiments.make_plan(config).runs.values()
                   if r.task == "classification" and r.model == model and json.loads(r.recipe_json).get("dtype") != "float64")
        return experiments.train_spec(config, run).to_dict()


@pytest.mark.parametrize("model", PAPER_IMAGE_MODELS)
def test_compile_auto_trains_every_papers_classifier_as_cuda_graphs_as_eagerly(digits, tmp_path, model):
    """`compile: auto`, the paper and gpu-day recipes' default, replays each step as CUDA graphs
    for every kind of image model the papers train but the weight-shared nets (eager: they trained
    otherwise as graphs, 2026-11-27): 2 epochs in deterministic mode, each loss as the eager run's
    to 2% (the same kernels replayed)."""
    base = {**mini_run_spec(model), "epochs": 2, "lr_milestones": [], "deterministic": True}
    runs = {mode: classification.train({**base, "compile": mode}, digits, tmp_path / str(mode), device="auto", progress=False)
            for mode in (False, "auto")}
    replays = catalog.architecture(model).replays_graphs
    assert runs["auto"]["speed"]["compile"] == ("cudagraphs" if replays else None) and runs["auto"]["diverged"] is False
    for name in ("train_loss", "test_loss"):
        assert runs["auto"]["final"][name] == pytest.approx(runs[False]["final"][name], rel=0.02), name


@pytest.mark.parametrize("mode", [False, "cudagraphs"])
def test_seeds_stacked_train_on_the_gpu_as_alone(digits, tmp_path, mode):
    """train/stacked.py on CUDA, bf16 and fused SGD, eager and replayed as graphs: each seed's
    losses those of the seed trained alone, to 2% (the stacked kernels round otherwise)."""
    from resrepro.train.stacked import train_stacked

    specs = [image_spec(epochs=3, deterministic=True, variant="sas", args={}, compile=mode, seed=seed) for seed in (0, 1)]
    stacked = train_stacked(specs, digits, [tmp_path / "stacked" / str(s["seed"]) for s in specs], device="auto", progress=False)
    for spec, mine in zip(specs, stacked):
        alone = classification.train(spec, digits, tmp_path / "alone" / str(spec["seed"]), device="auto", progress=False)
        assert mine["speed"]["stacked_runs"] == 2 and mine["diverged"] is False and mine["speed"]["amp"] is True
        for name in ("train_loss", "test_loss"):
            assert mine["final"][name] == pytest.approx(alone["final"][name], rel=0.02), name


def test_a_transformer_trains_as_cuda_graphs_on_length_buckets_as_it_does_eagerly(tmp_path):
    """Batches padded to few shapes (length_bucket) let CUDA graphs replay the Transformer's step; the
    same training as eager on the same buckets, each logged loss to rounding (dropout draws from the
    GPU's generator in both)."""
    train_pairs, dev_pairs = corpora()
    runs = {}
    for mode in (False, "cudagraphs"):
        run_spec = text_spec(variant="sas", args={}, max_updates=12, checkpoint_every=4, length_bucket=4, deterministic=True, compile=mode)
        runs[mode] = translation.train(run_spec, train_pairs, dev_pairs, 26, tmp_path / str(mode), device="auto", progress=False)
    eager, graphs = runs[False], runs["cudagraphs"]
    assert graphs["speed"]["compile"] == "cudagraphs" and graphs["diverged"] is False and graphs["updates"] == 12
    for name in ("train_loss", "dev_loss"):
        assert graphs["final"][name] == pytest.approx(eager["final"][name], rel=0.02), name


@pytest.mark.parametrize("variant, args", TEXT_VARIANTS)
def test_a_transformer_trains_on_the_gpu_in_bf16(tmp_path, variant, args):
    train_pairs, dev_pairs = corpora()
    metrics = translation.train(text_spec(variant=variant, args=args, max_updates=8, checkpoint_every=4), train_pairs, dev_pairs,
                                26, tmp_path / "run", device="auto", progress=False)
    assert metrics["diverged"] is False and metrics["updates"] == 8
    assert metrics["final"]["train_loss"] < 10 and metrics["provenance"]["device"] == torch.cuda.get_device_name()


@pytest.mark.parametrize("variant, args", [("xskip_ln", {"lam": 1.0}), ("sas", {"bias_a": 0.0, "bias_b": 0.0})])
def test_a_captioner_trains_resumes_and_captions_on_the_gpu(tmp_path, monkeypatch, variant, args):
    """Paper 000 Table 5's model: bf16 training, a kill and resume that matches, beam search over
    images on the GPU giving what the CPU gives."""
    from resrepro.data import captions
    from resrepro.evaluate.captioning import caption_images
    from resrepro.train import captioning
    from test_captioning import eval_spec as caption_eval_spec
    from test_captioning import spec as caption_spec
    from test_captioning import train_killed_then_resumed

    data = tmp_path / "scenes"
    captions.prepare_scenes(data, seed=1, images={"train": 200, "val": 10, "test": 12}, min_count=2)
    # lr_scale 1, the recipes' (the CPU tests' 2 makes the SAS captioner diverge in bf16 on an
    # H100 at step 26, while fp32 trains: docs/gpu-h100-2026-11-24.md)
    run_spec = caption_spec(variant=variant, args=args, deterministic=True, lr_scale=1.0)
    whole = captioning.train(run_spec, data, tmp_path / "whole", device="auto", progress=False)
    assert whole["diverged"] is False and whole["provenance"]["device"] == torch.cuda.get_device_name()
    assert whole["speed"]["amp"] is True
    resumed = train_killed_then_resumed(run_spec, data, tmp_path / "resumed", "auto", monkeypatch)
    assert resumed["final"]["dev_loss"] == whole["final"]["dev_loss"]
    torch.manual_seed(0)
    model = models.build(models.model_spec(run_spec, vocab_size=len(captions.load_vocabulary(data)),
                                           feature_dim=captions.load_meta(data)["features"]["dim"])).eval()
    features = captions.load_split(data, "test").features
    eval_spec = caption_eval_spec(variant=variant, args=args, beam=3, alpha=0.0, max_len_b=12)
    on_cpu = caption_images(model, features, eval_spec, torch.device("cpu"))
    device = devices.pick_device("auto")
    on_gpu = caption_images(model.to(device), features, eval_spec, device)
    assert sum(a == b for a, b in zip(on_cpu, on_gpu)) >= 0.9 * len(on_cpu)


def test_self_critical_training_runs_and_resumes_bit_identically_on_the_gpu(tmp_path, monkeypatch):
    """The self-critical stage on the GPU: sampling draws from a CPU generator, the rest is
    deterministic, so a kill and resume ends with the uninterrupted run's weights."""
    from resrepro.data import captions
    from resrepro.train import captioning
    from test_scst import scst_spec

    data = tmp_path / "scenes"
    captions.prepare_scenes(data, seed=1, images={"train": 200, "val": 10, "test": 12}, min_count=2)
    run_spec = {**scst_spec(), "deterministic": True}
    whole = captioning.train(run_spec, data, tmp_path / "whole", device="auto", progress=False)
    assert whole["scst"]["updates"] == 20 and whole["diverged"] is False
    assert whole["provenance"]["device"] == torch.cuda.get_device_name()
    saved = captioning.save

    def killed_after_first_scst_checkpoint(path, *args, **kwargs):
        saved(path, *args, **kwargs)
        if path.name == "scst.pt":
            raise KeyboardInterrupt

    monkeypatch.setattr(captioning, "save", killed_after_first_scst_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        captioning.train(run_spec, data, tmp_path / "resumed", device="auto", progress=False)
    monkeypatch.setattr(captioning, "save", saved)
    resumed = captioning.train(run_spec, data, tmp_path / "resumed", device="auto", progress=False)
    assert resumed["scst"]["final"] | {"seconds": 0} == whole["scst"]["final"] | {"seconds": 0}
    a = torch.load(tmp_path / "whole" / "checkpoints" / "step50.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "checkpoints" / "step50.pt", weights_only=True)["model"]
    assert [k for k in a if not torch.equal(a[k], b[k])] == []


@pytest.mark.parametrize("layout", residual.LAYOUTS)
@pytest.mark.parametrize("name", ["sas", "highway"])
def test_gates_are_float32_under_cuda_autocast(layout, name):
    torch.manual_seed(0)
    block = residual.build(name, 16, layout).cuda()
    shape = (4, 16, 5, 5) if layout == "conv" else (4, 7, 16)
    x, f = (torch.randn(shape, device="cuda").bfloat16().float() for _ in range(2))
    gates = [block.transform] if name == "highway" else [block.gate_a, block.gate_b]
    reference = [g(x, f) for g in gates]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        mixed = [g(x.bfloat16(), f.bfloat16()) for g in gates]
    for got, want in zip(mixed, reference):
        assert got.dtype == torch.float32 and torch.allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_sas_gates_in_tf32_stay_within_a_thousandth_of_ieee_float32(layout):
    """The tf32 switch (speed.py) rounds the gates' matmul inputs to a 10-bit mantissa; their
    sigmoid stays float32, so a gate moves by far less than its distance from 0 or 1."""
    torch.manual_seed(0)
    block = residual.build("sas", 512, layout).cuda()
    shape = (4, 512, 5, 5) if layout == "conv" else (4, 7, 512)
    x, f = (torch.randn(shape, device="cuda") for _ in range(2))
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # conftest.py restores it after the test
    ieee = block.gates(x, f)
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    tf32 = block.gates(x, f)
    for got, want in zip(tf32, ieee):
        assert got.dtype == torch.float32 and torch.allclose(got, want, rtol=0, atol=1e-3)


def test_a_killed_translation_run_resumes_bit_identically_on_the_gpu(tmp_path, monkeypatch):
    """Dropout draws from the GPU's generator: its state is in the checkpoint. Deterministic
    kernels, so that the uninterrupted run is itself repeatable."""
    train_pairs, dev_pairs = corpora()
    run_spec = text_spec(deterministic=True)
    whole = translation.train(run_spec, train_pairs, dev_pairs, 26, tmp_path / "whole", device="auto", progress=False)
    saved, calls = translation._save, []

    def killed_after_first_checkpoint(*args, **kwargs):
        saved(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # stands for SIGKILL right after the step-8 checkpoint

    monkeypatch.setattr(translation, "_save", killed_after_first_checkpoint)
    monkeypatch.setattr(recipes, "RESUME_EVERY_S", 0.0)  # a resume point at every checkpoint
    with pytest.raises(KeyboardInterrupt):
        translation.train(run_spec, train_pairs, dev_pairs, 26, tmp_path / "resumed", device="auto", progress=False)
    monkeypatch.setattr(translation, "_save", saved)
    resumed = translation.train(run_spec, train_pairs, dev_pairs, 26, tmp_path / "resumed", device="auto", progress=False)
    assert resumed["final"]["dev_loss"] == whole["final"]["dev_loss"]
    a = torch.load(tmp_path / "whole" / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=True)
    assert [k for k in a["model"] if not torch.equal(a["model"][k], b["model"][k])] == []
    assert a["random_states"][0]["cuda"] is not None and torch.equal(a["random_states"][0]["cuda"], b["random_states"][0]["cuda"])


def test_a_killed_classification_run_resumes_bit_identically_on_the_gpu(digits, tmp_path, monkeypatch):
    run_spec = image_spec(epochs=2, deterministic=True, variant="sas", args={})
    whole = classification.train(run_spec, digits, tmp_path / "whole", device="auto", progress=False)
    saved = classification.save

    def killed_after_first_epoch(*args, **kwargs):
        saved(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(classification, "save", killed_after_first_epoch)
    with pytest.raises(KeyboardInterrupt):
        classification.train(run_spec, digits, tmp_path / "resumed", device="auto", progress=False)
    monkeypatch.setattr(classification, "save", saved)
    resumed = classification.train(run_spec, digits, tmp_path / "resumed", device="auto", progress=False)
    assert resumed["final"] == whole["final"]


def test_beam_search_on_the_gpu_finds_what_the_cpu_finds():
    """Float32 on both (beam search runs without autocast): the same hypotheses, up to a rare near
    tie that float rounding on the two devices can break differently."""
    from resrepro.evaluate.translation import translate

    torch.manual_seed(0)
    model = models.build(models.model_spec(text_spec(), vocab_size=26)).eval()
    sources = [s for s, _ in corpora()[1]]
    from test_evaluate import SPEC

    from resrepro.specs import EvalSpec

    eval_spec = EvalSpec.from_dict({**SPEC, "beam": 4, "alpha": 0.6, "max_len_a": 1.0, "max_len_b": 10})
    on_cpu = translate(model, sources, eval_spec, torch.device("cpu"))
    device = devices.pick_device("auto")
    on_gpu = translate(model.to(device), sources, eval_spec, device)
    same = sum(a == b for a, b in zip(on_cpu, on_gpu))
    assert same >= 0.9 * len(sources), (same, len(sources))


def test_two_ranks_share_the_one_gpu(tmp_path):
    """NCCL refuses two ranks on one GPU in most versions; then gloo carries the CUDA tensors.
    Either way the ranks stay identical and train on the GPU."""
    from test_ddp import spec as ddp_spec
    from test_ddp import torchrun

    run_spec = ddp_spec(max_updates=8, checkpoint_every=4)
    outcome = {}
    for backend in ("nccl", "gloo"):
        try:
            code, output = torchrun(tmp_path / backend, run_spec, DDP_TEST_DEVICE="cuda:0", DDP_TEST_BACKEND=backend)
        except pytest.fail.Exception as stuck:  # a hung NCCL start: try gloo
            code, output = -1, str(stuck)
        outcome[backend] = code
        if code == 0:
            break
    print(f"two ranks on one GPU: {outcome}")
    assert code == 0, output[-4000:]
    ranks = [torch.load(tmp_path / backend / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert all(r["device"] == "cuda:0" and r["backend"] == backend and r["updates"] == 8 for r in ranks)
    assert all(torch.equal(ranks[0]["model"][k], ranks[1]["model"][k]) for k in ranks[0]["model"])


HOLDER = textwrap.dedent(
    """
    import sys, time
    from resrepro.devices import pick_device
    print(pick_device("auto"), flush=True)
    time.sleep(60)
    """
)


def test_more_jobs_than_gpus_queue_for_the_real_devices(tmp_path):
    """Each job holds a GPU of its own; one more waits until a holder ends, then gets its GPU."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    n = torch.cuda.device_count()
    start = lambda: subprocess.Popen([sys.executable, "-c", HOLDER], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    holders = [start() for _ in range(n)]
    waiter = None
    try:
        got = [h.stdout.readline().strip() for h in holders]
        assert sorted(got) == sorted(f"cuda:{i}" for i in range(n))
        waiter = start()
        assert select.select([waiter.stdout], [], [], 5)[0] == []  # still waiting: every GPU is held
        holders[0].kill()
        holders[0].wait()
        assert select.select([waiter.stdout], [], [], 30)[0] == [waiter.stdout]
        assert waiter.stdout.readline().strip() == got[0]  # the GPU the ended job held
    finally:
        for proc in holders + ([waiter] if waiter else []):
            proc.kill()
            proc.wait()
