"""Typed `--config` overrides: Snakemake parses a nested value such as
`--config classification='{epochs: 20, lr: 0.05}'` with YAML's BaseLoader, so every scalar in it
arrives as a string ("20", "0.05"). Before validation the Snakefile turns each such string into
the integer, number or boolean that the config schema expects there; a string the schema wants as
a string (a note, a URL, a table id) is left alone, and one that does not parse is left for the
schema to reject with its key.
"""

from __future__ import annotations

from pathlib import Path

import yaml

NUMERIC = {"integer", "number"}


def coerce_overrides(config: dict, schema: dict | str | Path) -> None:
    """Retype, in place, the strings of `config` where `schema` expects a number or a boolean."""
    if not isinstance(schema, dict):
        schema = yaml.safe_load(Path(schema).read_text())
    defs = schema.get("$defs", {})

    def resolve(node: dict) -> dict:
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        return node

    def types(node: dict) -> set[str]:
        node = resolve(node)
        found = set(node["type"]) if isinstance(node.get("type"), list) else {node["type"]} if "type" in node else set()
        if "enum" in node:
            found |= {"boolean" for v in node["enum"] if isinstance(v, bool)} | {"integer" for v in node["enum"] if type(v) is int}
        for alternative in node.get("anyOf", []) + node.get("oneOf", []):
            found |= types(alternative)
        return found

    def as_object(node: dict) -> dict:
        """The node, or its alternative that is an object (a count or a per-task mapping)."""
        objects = [resolve(n) for n in node.get("anyOf", []) + node.get("oneOf", []) if resolve(n).get("type") == "object"]
        return objects[0] if objects and "properties" not in node else node

    def walk(value, node: dict):
        node = resolve(node)
        if isinstance(value, dict):
            node = as_object(node)
            for key, item in value.items():
                child = node.get("properties", {}).get(key, node.get("additionalProperties"))
                if isinstance(child, dict):
                    value[key] = walk(item, child)
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            return [walk(item, node["items"]) for item in value]
        elif isinstance(value, str):
            return parse_scalar(value, types(node))
        return value

    walk(config, schema)


def parse_scalar(text: str, wanted: set[str]):
    """`text` as the first of boolean, integer, number that `wanted` allows and it parses as."""
    if "boolean" in wanted and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if wanted & NUMERIC:
        try:
            return int(text)
        except ValueError:
            pass
    if "number" in wanted:
        try:
            return float(text)
        except ValueError:
            pass
    return text


def validate_refinements(config: dict, schema: dict | str | Path) -> None:
    """Check each `refine` entry's `set` as the task's own keys are checked: the task's block with
    the set applied must satisfy the schema (a refinement is validated where it is written, not
    when the first run it matches starts)."""
    import jsonschema

    from .catalog import ConfigError

    if not isinstance(schema, dict):
        schema = yaml.safe_load(Path(schema).read_text())
    for task in ("classification", "translation", "captioning"):
        validator = jsonschema.Draft202012Validator({**schema["properties"][task], "$defs": schema.get("$defs", {})})
        for i, refinement in enumerate(config[task].get("refine", [])):
            for error in validator.iter_errors({**config[task], **refinement["set"]}):
                raise ConfigError(f"{task}.refine[{i}] ({refinement['name']}).set: {error.message}")
