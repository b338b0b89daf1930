"""The architecture registry: one place builds a model, from a spec a checkpoint carries; and the
catalog every registry implements."""

import subprocess
import sys

import pytest
import torch
import yaml
from fake_runs import CONFIG

from resrepro import catalog, experiments, measure, models, residual
from resrepro.models import registry
from resrepro.models.preact_resnet import PreActResNet
from resrepro.models.transformer import Transformer
from resrepro.residual import ConfigError


def test_each_task_has_its_default_architecture():
    assert registry.DEFAULT_FOR_TASK == {"classification": "preact_resnet", "translation": "transformer", "captioning": "transformer_captioner"}
    assert {a.name: (a.task, a.size_key) for a in models.ARCHITECTURES.values()} == {
        "preact_resnet": ("classification", "depth"), "transformer": ("translation", "size"),
        # paper 003's nets, sized by name (paper, mini)
        "single_rep_resnet": ("classification", "size"), "avgpool_resnet": ("classification", "size"),
        "wide_resnet": ("classification", "size"),
        # and its ResNets sharing their top blocks, one per BN strategy, sized by the paper's depth
        **{f"shared_resnet_{s}": ("classification", "size") for s in ("naive", "stats", "stats_gamma", "ubn")},
        # paper 002's simplified nets, plain or residual, and their diagonal-kernel form
        "simple_net": ("classification", "depth"), "simple_net_diagonal": ("classification", "depth"),
        # and its fully fledged ResNet (He et al. 2016a's CIFAR net, post-activation)
        "resnet_cifar": ("classification", "depth"),
        # paper 000 Table 5's Transformer captioner, sized paper or mini
        "transformer_captioner": ("captioning", "size")}


def test_every_name_the_catalog_declares_is_implemented_and_nothing_else():
    assert set(residual.REGISTRY) == set(catalog.VARIANTS)
    assert all(cls.params is catalog.VARIANTS[name] for name, cls in residual.REGISTRY.items())
    assert set(registry.BUILDERS) == set(catalog.ARCHITECTURES)
    # one declaration a measurement: the module it names registers it, and its kind has a drawing
    assert all(measure.get(n).measure.__module__ == f"resrepro.measure.{spec.module}" for n, spec in catalog.MEASUREMENTS.items())
    from resrepro.report.figures import DRAWINGS

    assert {spec.kind for spec in catalog.MEASUREMENTS.values()} <= set(DRAWINGS)
    assert all(measure.get(n).name == n and measure.get(n).defaults == catalog.MEASUREMENTS[n].defaults for n in catalog.MEASUREMENTS)
    assert set(measure.MEASUREMENTS) == set(catalog.MEASUREMENTS)  # each module registers what it implements, no more


def test_a_measurement_that_reads_a_training_log_runs_without_importing_torch(tmp_path):
    """A learning_curve job only reads a CSV: it must not pay torch's import (about 2 s a job)."""
    (tmp_path / "train_log.csv").write_text("epoch,train_loss,test_loss\n1,2.0,2.5\n2,1.0,1.5\n")
    code = ("import sys; from resrepro.measure.run import run_measurement; "
            f"run_measurement('learning_curve', {str(tmp_path)!r}, 'unused', {{'quantities': ['train_loss']}}, {str(tmp_path / 'out.csv')!r}); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (tmp_path / "out.csv").read_text().splitlines()[1:] == ["1,training loss,2.0", "2,training loss,1.0"]


def test_a_name_the_catalog_does_not_declare_cannot_be_registered():
    with pytest.raises(ValueError, match="declare its arguments in catalog.VARIANTS first"):
        residual.register("xskipp")(type("XSkipp", (residual.Residual,), {}))
    with pytest.raises(ValueError, match="declare it in catalog.ARCHITECTURES first"):
        registry.register("resnext")(lambda spec: None)
    with pytest.raises(ValueError, match="declare it in catalog.MEASUREMENTS first"):
        measure.register("cushion", measure=None, summarize=None)
    assert "xskipp" not in residual.REGISTRY and "resnext" not in registry.BUILDERS


def test_checking_a_config_imports_no_torch():
    """Snakemake's parse (every call, a no-op rerun too) plans and checks the config through these."""
    code = ("import sys, yaml; from resrepro import config_types, experiments; "
            f"experiments.make_plan(yaml.safe_load(open('{CONFIG}/paper.yaml'))); print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_model_spec_takes_the_run_keys_and_the_data_dimensions():
    run = {"model": "preact_resnet", "depth": 20, "variant": "xskip", "args": {"lam": 2}, "seed": 3, "lr": 0.1}
    assert models.model_spec(run, classes=100, in_channels=3).to_dict() == {
        "arch": "preact_resnet", "depth": 20, "variant": "xskip", "args": {"lam": 2}, "classes": 100, "in_channels": 3}
    mt = {"model": "transformer", "size": "big", "variant": "xskip_ln", "args": {"lam": 1}, "pad_id": 0, "dropout": 0.1, "beam": 4}
    assert models.model_spec(mt, vocab_size=99).to_dict() == {"arch": "transformer", "size": "big", "variant": "xskip_ln", "args": {"lam": 1},
                                                    "pad_id": 0, "dropout": 0.1, "vocab_size": 99}


def test_build_gives_the_named_model_with_its_dimensions():
    net = models.build({"arch": "preact_resnet", "depth": 8, "variant": "add", "args": {}, "classes": 7, "in_channels": 1})
    assert isinstance(net, PreActResNet) and net.fc.out_features == 7 and net.stem.in_channels == 1
    mt = models.build({"arch": "transformer", "size": "mini_2block", "variant": "rskip_ln", "args": {"lam": 2}, "pad_id": 0,
                       "vocab_size": 50, "dropout": 0.25})
    assert isinstance(mt, Transformer) and mt.cfg.vocab_size == 50 and mt.cfg.dropout == 0.25 and mt.cfg.encoder_layers == 1


def test_parameters_of_counts_on_the_meta_device_as_the_built_model():
    spec = {"arch": "preact_resnet", "depth": 20, "variant": "add", "args": {}, "classes": 10, "in_channels": 3}
    assert models.parameters_of(spec) == models.count_parameters(models.build(spec)) == 272_282  # He et al.: 0.27M


def test_parameters_of_skips_initialization_and_gives_torch_its_initializers_back():
    """Counting skips nn.init (shapes only), even for a model whose build fails, and a model built
    afterwards is initialised as ever."""
    spec = {"arch": "transformer", "size": "mini_2block", "variant": "deepnorm", "args": {}, "pad_id": 0, "vocab_size": 50}
    kept = torch.nn.init.normal_
    assert models.parameters_of(spec) == models.count_parameters(models.build(spec))
    with pytest.raises(ConfigError):
        models.parameters_of({**spec, "size": "nonesuch"})
    assert torch.nn.init.normal_ is kept
    torch.manual_seed(0)
    assert models.build(spec).embed.weight.std().item() == pytest.approx(64**-0.5, rel=0.1)


def test_unknown_or_foreign_architecture_is_refused_naming_the_allowed():
    with pytest.raises(ConfigError, match="architecture 'resnext' unknown; allowed: preact_resnet, transformer"):
        models.build({"arch": "resnext", "variant": "add"})
    with pytest.raises(ConfigError, match="architecture 'transformer' unknown for classification; allowed: preact_resnet"):
        registry.get("transformer", "classification")


def test_a_table_row_names_its_architecture_of_its_task(tmp_path):
    row = {"label": "x", "dataset": "cifar10", "depth": 20, "variant": "add", "paper": 8.0, "arch": "transformer"}
    table = {"paper": "rskip", "caption": "c", "source": "s", "task": "classification", "metric": "test_error", "rows": [row]}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"bad-t1": table}))
    with pytest.raises(ConfigError, match=r"bad-t1.rows\[0\].arch: architecture 'transformer' unknown for classification"):
        experiments.load_tables(tmp_path)
    row["arch"] = "preact_resnet"  # the default, named
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"bad-t1": table}))
    assert experiments.load_tables(tmp_path)["bad-t1"]["rows"][0]["arch"] == "preact_resnet"


def test_a_checkpoint_rebuilds_its_model_alone():
    spec = {"arch": "preact_resnet", "depth": 8, "variant": "rskip_ln", "args": {"lam": 2}, "classes": 10, "in_channels": 1}
    torch.manual_seed(0)
    net = models.build(spec)
    back = models.from_checkpoint({"model": net.state_dict(), "model_spec": spec})
    assert type(back) is type(net) and back is not net
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), back.state_dict().values()))
