"""The architectures, registered by name (registry.py): importing the package registers them all."""

from . import captioner, iter_resnets, preact_resnet, resnet_cifar, shared_resnet, simple_net, transformer  # noqa: F401  (registers each architecture)
from .registry import (ARCHITECTURES, build, count_parameters, first_step_path, from_checkpoint, load_checkpoint, model_spec, parameters_of,
                       snapshot_path, snapshots)

__all__ = ["ARCHITECTURES", "build", "count_parameters", "first_step_path", "from_checkpoint", "load_checkpoint", "model_spec", "parameters_of", "snapshot_path",
           "snapshots"]
