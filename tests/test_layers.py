"""The package's layers point one way: what a module may import of the package, checked on its
source (imports inside functions included)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "resrepro"
# Each layer may import only the layers listed (and the top-level helper modules).
ALLOWED = {
    "models": set(),
    "data": set(),
    "evaluate": {"models", "data"},
    "train": {"models", "data", "evaluate"},
    "measure": {"models", "data", "evaluate"},
    "analysis": {"models", "data", "evaluate", "measure"},
    "report": {"analysis"},
}


def package_imports(path: Path) -> set[str]:
    """The subpackages of resrepro that a module imports (relative or absolute)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 2 and node.module:  # from ..data.x import y
                found.add(node.module.split(".")[0])
            elif node.level == 2:  # from .. import files
                found.update(alias.name for alias in node.names)
            elif node.level == 0 and (node.module or "").startswith("resrepro."):
                found.add(node.module.split(".")[1])
    return found & set(ALLOWED)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(layer):
    for path in sorted((PACKAGE / layer).glob("*.py")):
        assert package_imports(path) - {layer} <= ALLOWED[layer], f"{path.name} imports {package_imports(path) - ALLOWED[layer] - {layer}}"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from ..train.classification import pick_device\n    from .. import files, report\n")
    assert package_imports(module) == {"train", "report"}
