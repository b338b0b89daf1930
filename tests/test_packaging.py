"""The conda environment for `--sdm conda` pins exactly what pyproject.toml pins."""

import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def pins(requirements: list[str]) -> dict[str, str]:
    out = {}
    for req in requirements:
        name, sep, version = req.partition("==")
        if sep:
            out[name.strip().lower()] = version.strip()
    return out


def test_conda_env_pins_match_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = pins(project["dependencies"])
    assert declared["torch"] == "2.14.1" and declared["torchvision"] == "0.29.1"
    assert declared["snakemake"].startswith("9.")
    assert len(declared) == len(project["dependencies"]), "every dependency is pinned with =="
    for env_file in sorted((REPO / "envs").glob("*.yaml")):
        env = yaml.safe_load(env_file.read_text())
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        assert pins(pip) == declared, env_file.name
        assert "python=3.11" in env["dependencies"]


def test_every_rule_uses_a_pinned_env():
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        text = smk.read_text()
        for conda in [line for line in text.splitlines() if line.strip().startswith('"../../envs/')]:
            assert (smk.parent / conda.strip().strip('",')).resolve().exists()
