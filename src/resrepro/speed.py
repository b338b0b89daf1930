"""How a run uses its device: the recipe's speed switches, shared by both training loops.

Each switch changes how fast a run trains and the rounding of its numbers, never the model or
the recipe's formulas, so each is a recipe key (changing one retrains: the bits of the result
differ) that a recipe may leave out:

- ``amp``: ``auto`` (bf16 autocast on a GPU, float32 on the CPU), ``bf16`` or ``fp32``. The
  residual gates stay float32 under it (residual.in_float32).
- ``channels_last``: ``auto`` (on a GPU), ``true`` or ``false``: NHWC convolutions, which
  cuDNN's fastest kernels and oneDNN on the CPU both prefer (image models only).
- ``compile``: ``false``, ``auto`` (``cudagraphs`` for an image model in float32 on a GPU, off
  otherwise, and for the architectures the catalog marks as not replaying graphs, the weight-shared
  nets: the GPU tests train every other classifier so as it trains eagerly, to rounding, and a paper
  ResNet-110 step takes 1.8x (add) to 3.6x (SAS) less; docs/gpu-h200-2026-11-27.md), ``true``
  (torch.compile with its default inductor backend), a backend's name (``aot_eager`` traces without generating code: a quick check of the graph;
  ``cudagraphs`` replays the step's own kernels as CUDA graphs) or one of inductor's modes
  (``reduce-overhead``: inductor's fused kernels, replayed as CUDA graphs). On a GPU at CIFAR
  sizes an eager step is the host's kernel launches, which graphs take away
  (docs/gpu-h100-2026-11-26.md). A replayed graph holds one shape: a Transformer's batches need
  `length_bucket` under a graph mode (the plan refuses it without), a classifier's last, shorter
  batch of an epoch runs eagerly (docs/gpu-h200-2026-11-27.md).
- ``fused_optimizer``: ``auto`` (on a GPU), ``true`` or ``false``: torch's fused SGD/Adam, one
  kernel for the whole update instead of one per tensor and operation.
- ``tf32``: ``auto`` (on a GPU), ``true`` or ``false``: a GPU's float32 matrix products in
  TensorFloat-32 (inputs rounded to a 10-bit mantissa, float32 range and sums). Under bf16
  autocast the float32 products left are the gates' (in_float32), 4h^2 weights a Transformer
  sublayer for SAS; a recent GPU's tensor cores take TF32, not IEEE float32 (NVIDIA gives an
  H100 several times the float32 rate in TF32). The gates' sigmoid and outputs stay float32.
  cuDNN's convolutions use TF32 by torch's default already; the CPU has no TF32, so the switch
  is off there.
- ``dtype``: ``float32`` or ``float64``: the weights, inputs and loss in double precision, as
  paper 002's equivalent training (its SM B); no autocast then.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from .catalog import architecture
from .recipes import GRAPH_REPLAYS
from .specs import MISSING, TrainSpec

# `compile` values that name one of inductor's modes rather than a backend
INDUCTOR_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DEFAULTS = {"amp": "auto", "channels_last": "auto", "compile": False, "fused_optimizer": "auto", "tf32": "auto", "dtype": "float32"}


@dataclass(frozen=True)
class Speed:
    amp: bool
    channels_last: bool
    compile: str | None  # the backend or inductor's mode, or None
    fused_optimizer: bool
    tf32: bool = False
    float64: bool = False

    @property
    def replays_graphs(self) -> bool:
        return self.compile in GRAPH_REPLAYS

    @property
    def dtype(self) -> torch.dtype:
        """The weights' and inputs' dtype, and the loss's under autocast too."""
        return torch.float64 if self.float64 else torch.float32

    def building(self):
        """Modules built inside draw their initial weights in the run's dtype: a float64 run's
        init is not a float32 draw rounded first (paper 002's equivalent nets start equal to 1e-17)."""
        return default_dtype(self.dtype)

    def autocast(self, device: torch.device):
        """bf16 autocast when amp is on, a no-op context otherwise."""
        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)

    def optimizer_options(self) -> dict:
        return {"fused": True} if self.fused_optimizer else {}

    def layout(self, x: torch.Tensor) -> torch.Tensor:
        """An image batch in the dtype and memory layout the model's weights use."""
        x = x.to(self.dtype)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def place(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The model on `device` in the run's dtype, channels-last when asked (in place: the same module)."""
        return model.to(device, self.dtype, memory_format=torch.channels_last if self.channels_last else torch.contiguous_format)

    def stacked(self) -> Speed:
        """The switches for runs stacked as one program (models/stacked.py): NCHW. Under vmap a
        tensor cannot say whether it is channels-last contiguous (torch: not yet implemented), which
        cuDNN's batch norm and a stack's float32 cast before it (StackedRuns) ask on a GPU (an H200,
        2026-11-27: benchmarks/stacked_modes.py, docs/gpu-h200-2026-11-27-costs.md)."""
        return replace(self, channels_last=False)

    def compiled(self, module, shapes: int = 1):
        """What the loop calls forward on: `module` itself, or torch.compile's wrapper of it. The
        checkpoint keeps `module`'s own state_dict (the wrapper's keys carry a prefix). `shapes`: the
        input shapes the loop feeds it (a Transformer's length buckets); under a graph mode each is a
        graph of its own (`allow_recompiles`)."""
        if not self.compile:
            return module
        if self.replays_graphs:
            allow_recompiles(shapes)
        return torch.compile(module, **self.compile_options())

    def compile_options(self) -> dict:
        """torch.compile's arguments for the `compile` switch."""
        # a replayed graph is recorded for one shape: each shape (a length bucket) gets a static graph
        # of its own, as a graph over dynamic sizes would replay the first shape's recording
        shapes = {"dynamic": False} if self.replays_graphs else {}
        return {"mode" if self.compile in INDUCTOR_MODES else "backend": self.compile, **shapes}


def allow_recompiles(shapes: int) -> None:
    """Let torch.compile record a graph for each of `shapes` input shapes. Dynamo compiles a function
    at most `recompile_limit` times (8) and then runs it eagerly for every new shape, with a warning
    only: a Transformer with 32 length buckets would train most of its batches without graphs."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, shapes)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, shapes)


def own_gradients(model: torch.nn.Module) -> None:
    """Each parameter's .grad as a tensor of its own. A replayed backward's gradients are its graph's
    output buffers, which autograd installs as .grad; the next micro-batch's replay writes into the
    same buffers, so accumulating gradients over micro-batches needs copies (torch issue 169545;
    without them the sum is wrong or the backward stops on an overwritten output)."""
    for weight in model.parameters():
        if weight.grad is not None:
            weight.grad = weight.grad.clone()


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """torch's default dtype inside the block (what new modules' weights are), restored after."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _on(value, device: torch.device) -> bool:
    if value == "auto":
        return device.type == "cuda"
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected auto, true or false, got {value!r}")


def speed_of(spec: TrainSpec | Mapping, device: torch.device, image_model: bool = False) -> Speed:
    """The switches of a run's spec (DEFAULTS for those it leaves out) resolved for `device`.
    channels_last applies to image models only. For a GPU this also sets the process's float32
    matrix-product precision (`tf32`): torch keeps it process-wide, not per module."""
    options = {**DEFAULTS, **{k: spec.get(k) for k in DEFAULTS if spec.get(k, MISSING) is not MISSING}}
    amp, dtype = options["amp"], options["dtype"]
    if amp not in ("auto", "bf16", "fp32"):
        raise ValueError(f"amp: expected auto, bf16 or fp32, got {amp!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype: expected float32 or float64, got {dtype!r}")
    if dtype == "float64" and amp == "bf16":
        raise ValueError("dtype float64 with amp bf16: double precision runs without autocast (amp: auto or fp32)")
    backend = options["compile"]
    if backend is True:
        backend = "inductor"
    elif backend == "auto":
        replays = spec.get("model") is None or architecture(spec.get("model")).replays_graphs
        backend = "cudagraphs" if device.type == "cuda" and image_model and dtype == "float32" and replays else None
    tf32 = _on(options["tf32"], device) and device.type == "cuda"
    if device.type == "cuda":
        # the new API only: torch refuses a mix of it and the legacy allow_tf32 flag
        torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"
    return Speed(
        amp=dtype == "float32" and (device.type == "cuda" if amp == "auto" else amp == "bf16"),
        channels_last=image_model and _on(options["channels_last"], device),
        compile=backend or None,
        fused_optimizer=_on(options["fused_optimizer"], device),
        tf32=tf32,
        float64=dtype == "float64",
    )
