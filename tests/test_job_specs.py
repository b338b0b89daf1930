"""The JSON every job is started with, pinned: a job's spec is its rule's params, so a spec that
changes by one byte reruns that job (at the paper scale, GPU-days). A refactor of how specs are
built must leave every job's spec and the resolved plan as they were; a change that means to alter
them updates the pinned digests and says so in its commit:

    .venv/bin/python tests/test_job_specs.py --update

The digests cover every job of mini, paper and gpu-day over tests/fixtures/config."""

import hashlib
import json
import sys

import pytest
import yaml
from fake_runs import CONFIG

from resrepro import experiments

PINNED = "tests/fixtures/specs/digests.json"
SCALES = ("mini", "paper", "gpu-day")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def scale_config(scale: str) -> dict:
    """A fixture scale profile with the schema's defaults filled in, as the Snakefile reads it."""
    from snakemake.utils import validate

    with open(f"{CONFIG}/{scale}.yaml") as f:
        config = yaml.safe_load(f)
    validate(config, "workflow/schemas/config.schema.yaml")
    return config


def job_texts(scale: str) -> dict[str, str]:
    """Each job's train spec and, for translation and captioning, eval spec, as the rules' params
    (workflow/rules/common.smk: run_spec, eval_spec, by Spec.to_json); and the resolved plan's files."""
    config = scale_config(scale)
    plan = experiments.make_plan(config)
    texts = {}
    for job, paths in plan.jobs.items():
        runs = [plan.runs[path] for path in paths]
        texts[f"train {job}"] = experiments.job_train_spec(config, runs).to_json()
        if runs[0].task != "classification":
            texts[f"eval {job}"] = experiments.eval_spec(runs[0]).to_json()
    resolved = experiments.resolved_plan(plan, config)
    for name in experiments.PLAN_FILES:
        texts[f"plan {name}"] = json.dumps(experiments.plan_part(resolved, name), sort_keys=True)
    return texts


def current() -> dict[str, dict[str, str]]:
    return {scale: {key: digest(text) for key, text in sorted(job_texts(scale).items())} for scale in SCALES}


@pytest.fixture(scope="module")
def pinned():
    with open(PINNED) as f:
        return json.load(f)


@pytest.mark.parametrize("scale", SCALES)
def test_every_job_spec_and_the_plan_are_as_pinned(pinned, scale):
    texts = job_texts(scale)
    now = {key: digest(text) for key, text in texts.items()}
    assert sorted(now) == sorted(pinned[scale]), "the jobs themselves changed"
    changed = [key for key in sorted(now) if now[key] != pinned[scale][key]]
    assert not changed, f"{len(changed)} of {len(now)} changed; the first, {changed[0]}, is now:\n{texts[changed[0]][:2000]}"


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    with open(PINNED, "w") as f:
        json.dump(current(), f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {PINNED}")
