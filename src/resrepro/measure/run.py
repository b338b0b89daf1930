"""Run one registered measurement on one trained run: its checkpoint in, a tidy CSV out."""

from __future__ import annotations

from pathlib import Path

from .. import files, models
from ..devices import pick_device
from . import get


def load_data(task: str, data_path: str | Path) -> dict:
    if task != "classification":
        raise NotImplementedError(f"measurements of {task} runs: no measurement reads them yet")
    from ..data.images import load_prepared

    return load_prepared(data_path)


def run_measurement(name: str, run_dir: str | Path, data_path: str | Path, settings: dict, out: str | Path, device: str = "auto") -> None:
    """Rebuild the run's final model from checkpoints/last.pt (its model_spec) and measure it; a
    measurement that reads the training log gets the run's folder instead."""
    measurement = get(name)
    if measurement.reads == "log":
        files.write_text(out, measurement.measure(Path(run_dir), settings).to_csv(index=False))
        return
    ckpt = models.load_checkpoint(Path(run_dir) / "checkpoints" / "last.pt")
    dev = pick_device(device)
    model = models.from_checkpoint(ckpt).to(dev).eval()
    frame = measurement.measure(model, load_data(measurement.task, data_path), settings, dev)
    files.write_text(out, frame.to_csv(index=False))
