"""Several runs of one model as one program: their weights stacked along a new leading axis, the
model called once for all of them (torch.func.vmap over functional_call).

Each operation a step dispatches then does the work of K runs: a convolution becomes one grouped
convolution over the K runs' channels, a batch norm one normalisation over K x C channels. At CIFAR
sizes a GPU step is its kernel launches (docs/gpu-h100-2026-11-26.md), so K runs stacked cost about
what one costs until the arithmetic fills the GPU. Nothing mixes the runs: every weight, buffer
(BN's running statistics and batch counter included) and gradient of run k is slice k, so a
run trained stacked is the run trained alone, to float rounding (tests/test_stacked.py: equal to
1e-12 in float64, about 1e-7 in float32 after a few steps; the stacked kernels sum in another order).

Each run keeps its own batch: `forward` takes (K, N, ...) inputs, one batch per run, or (N, ...)
shared by every run (evaluation). A run's state in the solo format (`state_dict(k)`) is what
its checkpoint holds, so a run folder does not show how the run was trained.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap


class StackedRuns:
    """K modules of one architecture (same parameter names and shapes), stacked. The stacked
    parameters are leaves an optimizer takes directly (`parameters`); element-wise optimizers (SGD,
    Adam) then update each run as its own optimizer would."""

    def __init__(self, modules: list[nn.Module]):
        if not modules:
            raise ValueError("StackedRuns needs at least one module")
        shapes = [{name: tuple(t.shape) for name, t in m.state_dict().items()} for m in modules]
        if any(s != shapes[0] for s in shapes[1:]):
            raise ValueError("StackedRuns: the modules differ in their parameters or buffers; only runs of one architecture and size stack")
        self.count = len(modules)
        self.params, self.buffers = stack_module_state(modules)
        # the structure: functional_call swaps the stacked slices in at each call. A copy, not moved
        # to the meta device: that conversion unties weights shared between modules (shared_resnet's BN)
        self.template = copy.deepcopy(modules[0])
        self.template.train(modules[0].training)
        for module in self.template.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.register_forward_pre_hook(_input_in_statistics_dtype)
        # state_dict key -> its stacked entry: a tied weight (shared_resnet's shared block) is
        # stacked once, under its first name, and appears under each of its names in a state_dict
        first = modules[0]
        names = {id(t): name for name, t in [*first.named_parameters(), *first.named_buffers()]}
        self._sources = {key: names[id(t)] for key, t in first.state_dict(keep_vars=True).items()}

    @property
    def training(self) -> bool:
        return self.template.training

    def train(self, mode: bool = True) -> StackedRuns:
        self.template.train(mode)
        return self

    def eval(self) -> StackedRuns:
        return self.train(False)

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        return list(self.params.items())

    def parameters(self) -> list[torch.Tensor]:
        return list(self.params.values())

    def __call__(self, x: torch.Tensor, shared: bool = False) -> torch.Tensor:
        """The K runs' outputs, (K, N, ...): x is (K, N, ...), run k's batch x[k], or with
        `shared` (N, ...), the same batch for every run."""
        return self.forward(self.params, self.buffers, x, shared)

    def forward(self, params: dict, buffers: dict, x: torch.Tensor, shared: bool = False) -> torch.Tensor:
        """The outputs for stacked `params` and `buffers`: the state as arguments, the form torch.compile traces."""

        def one_run(params, buffers, batch):
            return functional_call(self.template, (params, buffers), (batch,))

        return vmap(one_run, in_dims=(0, 0, None if shared else 0))(params, buffers, x)

    def compile(self, **options) -> StackedRuns:
        """Calls go through torch.compile(forward, **options) from now on."""
        self.forward = torch.compile(self.forward, **options)
        return self

    def state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Run k's weights and buffers as its own module's state_dict would hold them (copies)."""
        stacked = {**self.params, **self.buffers}
        return {key: stacked[source][k].detach().clone() for key, source in self._sources.items()}

    def module(self, k: int, like: nn.Module) -> nn.Module:
        """Run k as a module of its own: a copy of `like` (an unstacked module of the same
        architecture) holding run k's state."""
        module = copy.deepcopy(like)
        module.load_state_dict(self.state_dict(k))
        return module


def _input_in_statistics_dtype(module: nn.Module, args: tuple) -> tuple:
    """A batch norm's bf16 (fp16) input in its statistics' dtype (float32 under autocast). vmap's
    batch-norm backward rule loses the mixed-precision case: on a GPU it stops with "Expected
    running_mean to have type BFloat16" (an H200, 2026-11-27: benchmarks/stacked_modes.py;
    pytorch/pytorch pull request 192161). The next convolution rounds to bf16 again under autocast."""
    x, *rest = args
    stats = module.running_mean if module.running_mean is not None else module.weight
    if stats is None or x.dtype not in (torch.bfloat16, torch.float16) or stats.dtype == x.dtype:
        return args
    return (x.to(stats.dtype), *rest)


def optimizer_state(stacked_state: dict, k: int, params: list[torch.Tensor]) -> dict:
    """Run k's optimizer state_dict from the state_dict of an optimizer over the stacked `params`
    (in its order): each per-parameter tensor of the stacked parameter's shape sliced to run k,
    shared scalars (e.g. Adam's step) kept. Loads into an optimizer over run k's own parameters,
    built with the same groups in the same order."""
    shapes = [tuple(p.shape) for p in params]
    state = {}
    for index, entries in stacked_state["state"].items():
        state[index] = {name: (t[k].clone() if torch.is_tensor(t) and tuple(t.shape) == shapes[index] else copy.deepcopy(t))
                        for name, t in entries.items()}
    return {"state": state, "param_groups": copy.deepcopy(stacked_state["param_groups"])}


def stack_optimizer_states(states: list[dict], params: list[torch.Tensor]) -> dict:
    """The inverse of `optimizer_state`: K runs' optimizer state_dicts (their optimizers built
    alike) as one for an optimizer over the stacked `params`."""
    shapes = [tuple(p.shape[1:]) for p in params]
    stacked = {}
    for index, entries in states[0]["state"].items():
        stacked[index] = {name: (torch.stack([s["state"][index][name] for s in states])
                                 if torch.is_tensor(t) and tuple(t.shape) == shapes[index] else copy.deepcopy(t))
                          for name, t in entries.items()}
    return {"state": stacked, "param_groups": copy.deepcopy(states[0]["param_groups"])}
