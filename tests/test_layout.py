"""The results layout (layout.py): a run's, job's and cell's paths built and parsed in one place,
the rules' patterns the same paths with wildcards; and the command line's modules import no circle."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from resrepro import layout

CELL = "translation/iwslt15_en_vi/transformer_base/default/xskip_ln"


def test_a_run_path_is_its_cell_and_seed_and_parses_back():
    cell = layout.cell_path("translation", "iwslt15_en_vi", "transformer_base", "default", "xskip_ln")
    assert cell == CELL
    run = layout.run_path(cell, 3)
    assert run == f"{CELL}/seed3"
    assert layout.parse_run(run) == {"task": "translation", "dataset": "iwslt15_en_vi", "arch": "transformer_base",
                                     "recipe": "default", "variant_id": "xskip_ln", "seed": 3}
    assert layout.seed_label(run) == "seed3" and layout.cell_of(run) == CELL
    assert layout.run_dir(f"results/paper/{CELL}", 12) == Path(f"results/paper/{CELL}/seed12")


@pytest.mark.parametrize("bad", [f"{CELL}/seeds0-2", f"{CELL}/seedx", f"{CELL}/seed", "translation/x/seed0", f"{CELL}/extra/seed0"])
def test_what_is_not_a_run_path_is_refused_naming_the_layout(bad):
    with pytest.raises(ValueError, match="not a run path"):
        layout.parse_run(bad)


def test_a_job_names_its_seeds_as_a_range_of_consecutive_ones():
    assert layout.job_path(CELL, [0, 1, 2]) == f"{CELL}/seeds0-2"
    assert layout.job_path(CELL, [3]) == f"{CELL}/seeds3"
    assert layout.cell_of(layout.job_path(CELL, [4, 5])) == CELL
    for seeds in ([0, 2], [2, 1]):
        with pytest.raises(ValueError, match="consecutive"):
            layout.job_path(CELL, seeds)


def test_the_rules_patterns_become_the_paths_the_plan_names():
    """A rule's output pattern with its wildcards filled is the path built from the same parts."""
    w = SimpleNamespace(scale="paper", task="translation", dataset="iwslt15_en_vi", arch="transformer_base", recipe="default",
                        variant="xskip_ln", seeds="0-2", seed="1", measurement="gates")
    job = layout.job_of_wildcards("translation", w)
    assert job == layout.job_path(CELL, [0, 1, 2])
    assert layout.job_file("trained.json", "translation").format(**vars(w)) == f"results/paper/{job}/trained.json"
    assert layout.job_file("trained.json", scale="paper", job=job) == f"results/paper/{job}/trained.json"
    run = layout.run_of_wildcards(w)
    assert run == layout.run_path(CELL, 1)
    assert layout.measurement_file().format(**vars(w)) == f"results/paper/{run}/measure/gates.csv"
    assert layout.measurement_file("gates", "log", scale="paper", run=run) == f"results/paper/{run}/measure/gates.log"
    assert layout.aggregate_file("rows.csv", "mini") == "results/mini/aggregate/rows.csv"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function, relative ones as resrepro.<name>."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = "resrepro." * bool(node.level) + (node.module or "")
            names |= {base} | {f"{base}.{alias.name}".replace("..", ".") for alias in node.names}
    return names


@pytest.mark.parametrize("module", ["launch", "preload", "jobs"])
def test_the_modules_the_command_line_calls_import_nothing_of_it(module):
    """cli.py calls launch, preload and jobs; they are handed cli.main where they run a command, so
    no import runs back to it (a circle)."""
    source = Path(__file__).parents[1] / "src" / "resrepro" / f"{module}.py"
    assert not {name for name in imported_modules(source) if name.startswith("resrepro.cli") or name.endswith(".cli")}
