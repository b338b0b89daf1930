"""The shape of the papers' data files (config/tables, config/figures, config/claims.yaml): JSON
schemas beside the scale profile's (workflow/schemas/), and their errors in the config's words
("<file>: <entry>.rows[2]: missing key 'dataset'"). Python keeps what a schema cannot say: the
cross-references (a variant's arguments, a baseline's row, a claim's evidence).
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from .catalog import ConfigError

SCHEMAS = Path(__file__).resolve().parents[2] / "workflow" / "schemas"


@functools.lru_cache(maxsize=None)
def validator(name: str):
    """The validator of workflow/schemas/<name>.schema.yaml."""
    import jsonschema

    return jsonschema.Draft202012Validator(yaml.safe_load((SCHEMAS / f"{name}.schema.yaml").read_text()))


def check(instance, name: str, where: str) -> None:
    """Raise ConfigError on an error of `instance` against schema `name`, located from `where`: the
    outermost one (a table's unknown plot before its rows' errors), the first of those."""
    errors = list(validator(name).iter_errors(instance))
    if errors:
        raise ConfigError(message(min(errors, key=lambda e: len(e.absolute_path)), where))


def location(where: str, path) -> str:
    """`where` and the path below it: "f.yaml: t1" and ["rows", 2] -> "f.yaml: t1.rows[2]"; a
    `where` that ends in ": " takes the first key bare ("claims.yaml: " -> "claims.yaml: sas[1]")."""
    out = where
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else part if out.endswith(": ") else f".{part}"
    return out.removesuffix(": ")


def message(error, where: str) -> str:
    """A schema error as the config's other errors read: where, then what is wrong."""
    path = list(error.absolute_path)
    described = f" in {error.schema['description']}" if error.schema.get("description") else ""
    if error.validator == "required":
        missing = next(k for k in error.validator_value if k not in error.instance)
        return f"{location(where, path)}: missing key {missing!r}"
    if error.validator == "dependentRequired":
        key, missing = next((k, n) for k, needs in error.validator_value.items() if k in error.instance for n in needs if n not in error.instance)
        return f"{location(where, path)}: missing key {missing!r} (a row with {key!r} needs it)"
    if error.validator == "additionalProperties" and error.validator_value is False:
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))[0]
        return f"{location(where, path)}: unknown key {unknown!r}{described}; allowed: {allowed}"
    if error.validator == "enum" and path:
        return f"{location(where, path[:-1])}: {path[-1]}={error.instance!r} unknown; allowed: {', '.join(map(str, error.validator_value))}"
    expected = error.schema.get("description") or f"{error.validator} {error.validator_value!r}"
    return f"{location(where, path)}: expected {expected}; got {error.instance!r}"
