"""K runs trained stacked (models/stacked.py) against the same K runs trained alone: every residual
variant and every classification architecture, weights, BN's running statistics and SAS's gates."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from resrepro import catalog, models, residual
from resrepro.models.stacked import StackedRuns, optimizer_state, stack_optimizer_states
from resrepro.speed import default_dtype

K = 3
SGD = {"lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4}
# the smallest size of each classification architecture
SIZES = {"preact_resnet": {"depth": 8}, "resnet_cifar": {"depth": 8}, "simple_net": {"depth": 5}, "simple_net_diagonal": {"depth": 5},
         "single_rep_resnet": {"size": "mini"}, "avgpool_resnet": {"size": "mini"}, "wide_resnet": {"size": "mini"},
         **{name: {"size": "mini110"} for name in catalog.ARCHITECTURES if name.startswith("shared_resnet_")}}
DEFAULT_VARIANT = {"simple_net": "plain", "simple_net_diagonal": "plain"}


def build(arch: str, variant: str, seed: int, dtype=torch.float64) -> torch.nn.Module:
    torch.manual_seed(seed)
    spec = {"arch": arch, **SIZES[arch], "variant": variant, "args": {}, "classes": 10, "in_channels": 3, "image_size": 8}
    with default_dtype(dtype):
        return models.build(spec)


def batches(steps: int, dtype=torch.float64, n: int = 4):
    """Each run's own batch at each step: (K, N, 3, 8, 8) images and (K, N) labels."""
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(K, n, 3, 8, 8, generator=g, dtype=dtype), torch.randint(0, 10, (K, n), generator=g)) for _ in range(steps)]


def train_alone(modules, data):
    for k, module in enumerate(modules):
        opt = torch.optim.SGD(module.parameters(), **SGD)
        for x, y in data:
            opt.zero_grad()
            F.cross_entropy(module(x[k]), y[k]).backward()
            opt.step()


def train_stacked(stack: StackedRuns, data, opt=None):
    opt = opt or torch.optim.SGD(stack.parameters(), **SGD)
    for x, y in data:
        opt.zero_grad()
        logits = stack(x)  # (K, N, classes)
        # each run's mean loss, summed: run k's gradient is its own loss's
        F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(K, -1).mean(1).sum().backward()
        opt.step()
    return opt


def largest_difference(stack: StackedRuns, modules) -> float:
    worst = 0.0
    for k, module in enumerate(modules):
        mine = stack.state_dict(k)
        for key, value in module.state_dict().items():
            worst = max(worst, (mine[key].double() - value.double()).abs().max().item())
    return worst


def cases():
    for variant in sorted(residual.REGISTRY):
        yield "preact_resnet", variant
    for arch in sorted(SIZES):
        if arch != "preact_resnet":
            yield arch, DEFAULT_VARIANT.get(arch, "add")


@pytest.mark.parametrize(("arch", "variant"), list(cases()))
def test_runs_trained_stacked_equal_runs_trained_alone(arch, variant):
    """Weights, BN running statistics and batch counters, SAS's gate weights (every entry of its
    state_dict, tied weights under each name): run k of the stack
    after 3 SGD steps with momentum and decay equals run k trained alone, in float64 to 1e-12."""
    alone = [build(arch, variant, seed) for seed in range(K)]
    stack = StackedRuns([copy.deepcopy(m) for m in alone])
    data = batches(3)
    train_alone(alone, data)
    train_stacked(stack, data)
    assert largest_difference(stack, alone) < 1e-12
    # the runs differ from each other: a stack that trained one run K times would pass the above only for K equal seeds
    assert (stack.state_dict(0)[next(iter(stack.params))] - stack.state_dict(1)[next(iter(stack.params))]).abs().max() > 1e-3


def test_stacked_float32_differs_only_by_rounding():
    alone = [build("preact_resnet", "sas", seed, torch.float32) for seed in range(K)]
    stack = StackedRuns([copy.deepcopy(m) for m in alone])
    data = batches(3, torch.float32)
    train_alone(alone, data)
    train_stacked(stack, data)
    assert largest_difference(stack, alone) < 1e-5


def test_shared_batch_in_eval_mode_gives_each_runs_logits():
    alone = [build("preact_resnet", "sas", seed) for seed in range(K)]
    data = batches(2)
    train_alone(alone, data)
    stack = StackedRuns(alone).eval()
    x = torch.randn(5, 3, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        logits = stack(x, shared=True)
        for k, module in enumerate(alone):
            assert torch.allclose(logits[k], module.eval()(x), atol=1e-12, rtol=0)


def test_optimizer_state_round_trip_continues_each_run():
    """Run k's slice of the stacked optimizer's state, loaded into its own optimizer, continues
    the run as the stack does; stacking the K states again gives the stacked state."""
    modules = [build("preact_resnet", "add", seed) for seed in range(K)]
    stack = StackedRuns(modules)
    opt = train_stacked(stack, batches(2))
    params = stack.parameters()
    states = [optimizer_state(opt.state_dict(), k, params) for k in range(K)]
    restacked = stack_optimizer_states(states, params)
    for index, entries in opt.state_dict()["state"].items():
        assert torch.equal(restacked["state"][index]["momentum_buffer"], entries["momentum_buffer"])
    alone = [stack.module(k, modules[0]) for k in range(K)]
    more = batches(4)[2:]
    for k, module in enumerate(alone):
        own = torch.optim.SGD(module.parameters(), **SGD)
        own.load_state_dict(states[k])
        for x, y in more:
            own.zero_grad()
            F.cross_entropy(module(x[k]), y[k]).backward()
            own.step()
    train_stacked(stack, more, opt)
    assert largest_difference(stack, alone) < 1e-12


def test_modules_of_different_shapes_refuse_to_stack():
    with pytest.raises(ValueError, match="one architecture and size"):
        StackedRuns([build("preact_resnet", "add", 0), build("preact_resnet", "sas", 0)])


def test_batch_norm_takes_a_bf16_input_in_its_statistics_dtype():
    """vmap's batch-norm backward fails on a GPU for a bf16 input beside float32 statistics (the
    case of bf16 autocast): a stack's batch norms take their input in their statistics' dtype."""
    stack = StackedRuns([nn.Sequential(nn.BatchNorm2d(3)) for _ in range(2)])
    out = stack(torch.randn(2, 4, 3, 5, 5).bfloat16())
    assert out.dtype == torch.float32
    out.sum().backward()
    bf16 = StackedRuns([nn.Sequential(nn.BatchNorm2d(3)).bfloat16() for _ in range(2)])
    assert bf16(torch.randn(2, 4, 3, 5, 5).bfloat16()).dtype == torch.bfloat16
    float64 = StackedRuns([nn.Sequential(nn.BatchNorm2d(3)).double() for _ in range(2)])
    assert float64(torch.randn(2, 4, 3, 5, 5, dtype=torch.float64)).dtype == torch.float64
