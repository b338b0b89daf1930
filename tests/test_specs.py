"""Typed specs (specs.py): JSON in, the same JSON out; absent is not None; a wrong key is named."""

import argparse
import json
import subprocess
import sys

import pytest

from resrepro import jobs, specs
from resrepro.specs import MISSING, CaptioningTrainSpec, ClassificationTrainSpec, EvalSpec, ScstSpec, SpecError, TranslationTrainSpec

CLASSIFICATION = {"task": "classification", "dataset": "digits", "arch": "preact_resnet8", "model": "preact_resnet", "depth": 8,
                  "variant": "rskip_ln", "args": {"lam": 2}, "epochs": 3, "batch_size": 128, "lr": 0.1, "momentum": 0.9,
                  "weight_decay": 2e-4, "lr_milestones": [2], "warmup_lr": 0.01, "warmup_iterations": 0, "warmup_min_depth": 110,
                  "augment_pad": 1, "augment_flip": False}
SCST = {"updates": 20, "lr": 5e-4, "batch_images": 20, "checkpoint_every": 10, "max_len": 12}
CAPTIONING = {"task": "captioning", "dataset": "scenes", "arch": "captioner_mini", "model": "transformer_captioner", "size": "mini",
              "variant": "add", "args": None, "world_size": 1, "pad_id": 0, "bos_id": 1, "eos_id": 2, "batch_size": 50, "update_freq": 1,
              "max_updates": 30, "warmup": 10, "lr_scale": 2.0, "label_smoothing": 0.1, "checkpoint_every": 10, "keep_checkpoints": 3,
              "scst": SCST}


def test_a_spec_reads_its_json_and_writes_it_back_byte_for_byte():
    for values in (CLASSIFICATION, CAPTIONING, {**CAPTIONING, "scst": None}, {**CLASSIFICATION, "lr_decay": [0.2, 0.5], "seed": 3}):
        text = json.dumps(values, sort_keys=True)
        spec = specs.TrainSpec.from_json(text)
        assert spec.to_json() == text and json.loads(spec.to_json()) == values


def test_the_folder_is_arch_dir_and_the_architecture_is_model():
    spec = ClassificationTrainSpec.from_dict(CLASSIFICATION)
    assert (spec.arch_dir, spec.model) == ("preact_resnet8", "preact_resnet")
    assert spec.to_dict()["arch"] == "preact_resnet8" and "arch_dir" not in spec.to_dict()


def test_absent_keys_stay_absent_and_none_is_a_value():
    spec = ClassificationTrainSpec.from_dict(CLASSIFICATION)
    assert spec.lr_decay is MISSING and spec.get("lr_decay", 0.1) == 0.1 and "lr_decay" not in spec.to_dict()
    assert spec.seed is MISSING and spec.replace(seed=4).to_dict()["seed"] == 4
    captioning = CaptioningTrainSpec.from_dict({**CAPTIONING, "scst": None})
    assert captioning.args is None and captioning.to_dict()["args"] is None  # a variant without arguments: null, written
    assert captioning.scst is None and captioning.to_dict()["scst"] is None
    assert CaptioningTrainSpec.from_dict({k: v for k, v in CAPTIONING.items() if k != "scst"}).get("scst") is None
    assert spec.get("dtype", "float32") == "float32" and TranslationTrainSpec.__dataclass_fields__.get("dtype") is None
    # a switch one task's recipe has and another's not: the default, as for a key left out
    translation = TranslationTrainSpec.from_dict({**{k: v for k, v in CAPTIONING.items() if k not in ("scst", "batch_size")},
                                                  "task": "translation", "max_tokens": 4096})
    assert translation.get("dtype", "float32") == "float32" and translation.get("length_bucket", 0) == 0


def test_a_nested_stage_is_its_own_spec():
    spec = CaptioningTrainSpec.from_dict(CAPTIONING)
    assert spec.scst == ScstSpec(**SCST) and spec.scst.batch_images == 20
    assert spec.to_dict()["scst"] == SCST
    assert "scst" not in spec.replace(scst=MISSING).to_dict()  # the cross-entropy stage's spec


def test_values_are_taken_as_they_are():
    spec = ClassificationTrainSpec.from_dict({**CLASSIFICATION, "lr": "0.1"})  # the schema types the config, not the spec
    assert spec.lr == "0.1"


@pytest.mark.parametrize("values, error", [
    ({**CLASSIFICATION, "lr_decya": 0.2}, "unknown key 'lr_decya'; its keys: amp, arch, args, augment_flip, augment_pad, batch_size, "),
    ({k: v for k, v in CLASSIFICATION.items() if k != "epochs"}, "key 'epochs' is required"),
    ({**CLASSIFICATION, "task": "regression"}, "task is one of classification, translation, captioning; got 'regression'"),
    ({**CAPTIONING, "scst": {**SCST, "lr_scale": 1}}, "ScstSpec: unknown key 'lr_scale'"),
])
def test_a_wrong_key_is_named(values, error):
    with pytest.raises(SpecError, match=error):
        specs.TrainSpec.from_dict(values)


def test_a_task_spec_holds_only_its_task():
    with pytest.raises(SpecError, match="^CaptioningTrainSpec: task 'classification', not 'captioning'$"):
        CaptioningTrainSpec.from_dict({**CAPTIONING, "task": "classification"})


def test_an_eval_spec_keeps_translation_only_keys_optional():
    captioning = {"model": "transformer_captioner", "size": "mini", "variant": "add", "args": {}, "pad_id": 0, "bos_id": 1, "eos_id": 2,
                  "average_last": 2, "beam": 3, "alpha": 0.0, "max_len_b": 16}
    spec = EvalSpec.from_dict(captioning)
    assert spec.max_len_a is MISSING and spec.to_dict() == captioning
    assert EvalSpec.of(spec) is spec and EvalSpec.of(captioning) == spec


def test_a_job_refuses_a_spec_of_another_task():
    a = argparse.Namespace(command="train", task="translation", threads=0, spec=json.dumps(CLASSIFICATION))
    with pytest.raises(SystemExit, match="train translation: its --spec is a classification spec"):
        jobs.training(a)


def test_the_specs_import_no_torch():
    """The workflow builds specs while Snakemake parses: the module must not pull torch in."""
    code = "import sys, resrepro.specs, resrepro.experiments; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_model_spec_names_what_a_builder_needs_and_checkpoints_hold_its_dict(tmp_path):
    import torch

    from resrepro import models
    from resrepro.specs import ModelSpec
    from resrepro.train.checkpoint import save_snapshot

    with pytest.raises(SpecError, match="^ModelSpec: 'classes' is required here; the spec has arch, depth, variant$"):
        models.build({"arch": "preact_resnet", "depth": 8, "variant": "add"})
    with pytest.raises(SpecError, match="'nonesuch' is required here"):
        ModelSpec(arch="preact_resnet", variant="add").need("nonesuch")
    spec = models.model_spec({**CLASSIFICATION, "seed": 0}, classes=10, in_channels=1, image_size=8)
    assert spec == ModelSpec(arch="preact_resnet", depth=8, variant="rskip_ln", args={"lam": 2}, classes=10, in_channels=1, image_size=8)
    save_snapshot(tmp_path, 0, models.build(spec), spec)
    held = torch.load(next((tmp_path / "checkpoints").iterdir()), weights_only=True)["model_spec"]
    assert type(held) is dict and held == spec.to_dict() and held["arch"] == "preact_resnet"


def test_a_table_row_has_the_keys_the_tables_schema_allows_and_an_extra_rows_new():
    import yaml

    schema = yaml.safe_load(open("workflow/schemas/tables.schema.yaml"))
    keys = {f.metadata.get("key", f.name) for f in specs.dataclasses.fields(specs.TableRow)}
    assert keys == set(schema["$defs"]["row"]["properties"]) | {"new"}


def test_every_key_a_recipe_may_set_has_its_field():
    """A key the config's schema lets a task's recipe set is a field of that task's training spec, or
    of the evaluation spec where it only scores (recipes.EVAL_KEYS): else the plan would refuse it."""
    import yaml

    from resrepro import recipes

    tasks = yaml.safe_load(open("workflow/schemas/config.schema.yaml"))["properties"]
    eval_fields = {f.name for f in specs.dataclasses.fields(EvalSpec)}
    for task, spec_class in specs.TRAIN_SPECS.items():
        recipe_keys = set(tasks[task]["properties"]) - recipes.SCALE_KEYS
        train_fields = {f.metadata.get("key", f.name) for f in specs.dataclasses.fields(spec_class)}
        assert recipe_keys - recipes.EVAL_KEYS[task] <= train_fields, task
        assert recipes.EVAL_KEYS[task] <= eval_fields and not recipes.EVAL_KEYS[task] & train_fields, task
