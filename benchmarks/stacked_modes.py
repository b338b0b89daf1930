"""Which ways of training stacked runs (models/stacked.py) get through three training steps on
this GPU under bf16 autocast: layout (channels-last or NCHW) x deterministic mode x eager or traced
by torch.compile (the cudagraphs backend; aot_eager, the same tracing, on the CPU). One line each: ok, or the error's first line. A tiny
PreAct-ResNet SAS net, two runs, CIFAR-shaped batches. On an H200 (2026-11-27,
docs/gpu-h200-2026-11-27-costs.md) only NCHW with the batch norms' input in float32 got through
every mode, which speed.Speed.stacked and StackedRuns now fix.

    PYTHONPATH=src python benchmarks/stacked_modes.py [--device cpu]"""

from __future__ import annotations

import argparse
import itertools

import torch
from torch.nn import functional as F

from resrepro import models
from resrepro.models.stacked import StackedRuns


def step(layout: str, deterministic: bool, mode: str, device: torch.device) -> str:
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    torch._dynamo.reset()
    nets = []
    for seed in range(2):
        torch.manual_seed(seed)
        net = models.build({"arch": "preact_resnet", "depth": 8, "variant": "sas", "args": {}, "classes": 10, "in_channels": 3})
        net = net.to(device, memory_format=torch.channels_last if layout == "channels_last" else torch.contiguous_format)
        nets.append(net)
    stack = StackedRuns(nets)
    if mode == "traced":
        stack.compile(backend="cudagraphs" if device.type == "cuda" else "aot_eager", dynamic=False)
    opt = torch.optim.SGD(stack.parameters(), lr=0.1, momentum=0.9, fused=device.type == "cuda")
    x, y = torch.randn(2, 32, 3, 32, 32, device=device), torch.randint(0, 10, (2, 32), device=device)
    try:
        for _ in range(3):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(stack(x).float().flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return f"ok (loss {loss.item():.4f})"
    except Exception as e:  # noqa: BLE001 (what fails is the finding)
        return "FAIL " + f"{type(e).__name__}: {e}".splitlines()[0][:160]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    device = torch.device(p.parse_args(argv).device)
    print(torch.__version__, torch.cuda.get_device_name() if device.type == "cuda" else "CPU")
    for layout, deterministic, mode in itertools.product(("channels_last", "nchw"), (True, False), ("eager", "traced")):
        print(f"{layout:13} deterministic={deterministic!s:5} {mode:6}", step(layout, deterministic, mode, device), flush=True)


if __name__ == "__main__":
    main()
