"""Nested `--config` overrides arrive as strings; the schema says which become numbers or booleans."""

from pathlib import Path

import jsonschema
import pytest
import yaml

from resrepro.config_types import coerce_overrides, parse_scalar
from resrepro.speed import INDUCTOR_MODES

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"


def test_strings_become_the_types_the_schema_expects():
    config = {
        "scale": "2024", "note": "123", "partial": "true", "seeds": 3, "table_seeds": {"rskip-t1": "5"},
        "classification": {"epochs": "20", "lr": "0.05", "weight_decay": "1e-4", "lr_milestones": ["81", "122"],
                           "augment_flip": "False", "depths": {"110": "32"}, "datasets": {"cifar10": "digits"}},
        "translation": {"gpus": {"wmt14_en_de": "4"}, "lr_scale": "2"},
        "resources": {"train_classifier": {"mem_mb": "8000"}},
        "download_urls": {"cifar10": "file:///mirror/1"},
    }
    coerce_overrides(config, SCHEMA)
    assert config["scale"] == "2024" and config["note"] == "123"  # strings in the schema stay strings
    assert config["partial"] is True and config["table_seeds"] == {"rskip-t1": 5}
    c = config["classification"]
    assert (c["epochs"], c["lr"], c["weight_decay"], c["lr_milestones"]) == (20, 0.05, 1e-4, [81, 122])
    assert c["augment_flip"] is False and c["depths"] == {"110": 32} and c["datasets"] == {"cifar10": "digits"}
    assert config["translation"] == {"gpus": {"wmt14_en_de": 4}, "lr_scale": 2}
    assert config["resources"] == {"train_classifier": {"mem_mb": 8000}}
    assert config["download_urls"] == {"cifar10": "file:///mirror/1"}


def test_a_per_task_sharing_setting_takes_a_count_or_a_mapping_of_tasks():
    """seeds_per_job and seeds_in_parallel: one value for every task, or per task (the mapping
    alternative of the schema's oneOf is where its strings are typed)."""
    config = {"seeds_per_job": {"classification": "4", "translation": "all"}, "seeds_in_parallel": {"classification": "4"}}
    coerce_overrides(config, SCHEMA)
    assert config == {"seeds_per_job": {"classification": 4, "translation": "all"}, "seeds_in_parallel": {"classification": 4}}
    schema = yaml.safe_load(SCHEMA.read_text())
    sharing = {"type": "object", "$defs": schema["$defs"],
               "properties": {key: schema["properties"][key] for key in ("seeds_per_job", "seeds_in_parallel")}}
    for good in ({"seeds_per_job": "all", "seeds_in_parallel": 2}, config):
        jsonschema.validate(good, sharing)
    for bad in ({"seeds_per_job": {"classifier": 4}}, {"seeds_in_parallel": {"classification": 0}}, {"seeds_in_parallel": "all"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, sharing)


def test_what_does_not_parse_is_left_for_the_schema_to_reject():
    config = {"classification": {"epochs": "many", "lr": "fast"}, "partial": "maybe", "unknown": "1"}
    coerce_overrides(config, SCHEMA)
    assert config == {"classification": {"epochs": "many", "lr": "fast"}, "partial": "maybe", "unknown": "1"}


def test_parse_scalar_prefers_the_narrowest_allowed_type():
    assert parse_scalar("3", {"integer"}) == 3 and type(parse_scalar("3", {"number"})) is int
    assert parse_scalar("3.5", {"integer"}) == "3.5"  # not an integer: the schema names the key
    assert parse_scalar("TRUE", {"boolean"}) is True and parse_scalar("1", {"boolean"}) == "1"
    assert parse_scalar("7", {"string"}) == "7"


def test_the_schema_takes_every_compile_value_the_speed_switch_takes():
    """speed.py's `compile`: booleans, a backend's name, or an inductor mode (with hyphens)."""
    schema = yaml.safe_load(SCHEMA.read_text())
    compile_schema = {**schema["$defs"]["compile"], "$defs": schema["$defs"]}
    for value in (True, False, "inductor", "aot_eager", "cudagraphs", *INDUCTOR_MODES):
        jsonschema.validate(value, compile_schema)
    for value in ("Reduce Overhead", 3):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(value, compile_schema)


def test_the_schema_takes_a_translation_length_bucket_and_refuses_a_negative_one():
    schema = yaml.safe_load(SCHEMA.read_text())
    bucket = schema["properties"]["translation"]["properties"]["length_bucket"]
    jsonschema.validate(8, bucket)
    jsonschema.validate(0, bucket)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(-1, bucket)


def test_the_schema_takes_a_max_train_len_for_translation_and_captioning_and_refuses_a_non_positive_one():
    schema = yaml.safe_load(SCHEMA.read_text())
    for task in ("translation", "captioning"):
        limit = {**schema["properties"][task]["properties"]["max_train_len"], "$defs": schema["$defs"]}
        jsonschema.validate(256, limit)
        for value in (0, 25.6, "256"):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(value, limit)
    config = {"translation": {"max_train_len": "256"}}
    coerce_overrides(config, SCHEMA)  # from --config translation='{max_train_len: 256}' on a shell that quotes it
    assert config == {"translation": {"max_train_len": 256}}
