"""The layering the README's "Architecture" section states holds in the code.

Imports inside ``mirrorfit/_src`` form no cycle, none hides in a function body (a lazy import
that would hide a cycle), every package imports only packages on a lower level (`LEVELS`),
the bottom modules import nothing else from mirrorfit, and every module stays small enough
to read in one sitting.
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "mirrorfit" / "_src"
BOTTOM = ("distribute.mesh", "distribute.batch", "utils.checks", "distribute.values",
          "trainers.state", "utils.naming", "distribute.devices")
LEVELS = {"utils": 1, "distribute": 2, "layers": 2, "losses": 2, "optimizers": 2, "metrics": 3,
          "modules": 3, "saving": 4, "callbacks": 5, "trainers": 6, "models": 7}
"""Each package of ``mirrorfit/_src`` by level: a package imports only lower ones."""
MAX_LINES, MAX_MODEL_LINES = 450, 350


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> tuple[set[str], list[str]]:
    """Modules of ``mirrorfit._src`` imported by ``path``; and those imported inside functions."""
    tree = ast.parse(path.read_text())
    found, nested = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                "mirrorfit._src"):
            prefix = node.module.removeprefix("mirrorfit._src").lstrip(".")
            names = [f"{prefix}.{a.name}".lstrip(".") for a in node.names]
            found |= {n for n in [prefix, *names] if n in MODULES}
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested += [n.module for n in ast.walk(func) if isinstance(n, ast.ImportFrom)
                       and n.module and n.module.startswith("mirrorfit")]
    return found, nested


GRAPH = {name: _imports(path)[0] for name, path in MODULES.items()}


def test_the_import_graph_has_no_cycle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name, path):
        state[name] = 1
        for dep in sorted(GRAPH[name]):
            if state.get(dep) == 1:
                pytest.fail(f"import cycle: {' -> '.join([*path, dep])}")
            if dep not in state:
                visit(dep, [*path, dep])
        state[name] = 2

    assert len(GRAPH) > 30
    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])


def test_no_mirrorfit_import_hides_in_a_function():
    nested = {name: _imports(path)[1] for name, path in MODULES.items()}
    assert {name: found for name, found in nested.items() if found} == {}


def test_packages_import_only_packages_on_a_lower_level():
    def package(name):
        return name.split(".")[0]

    names = [name for name in MODULES if name != "__init__"]  # mirrorfit/_src/__init__.py
    assert {package(name) for name in names} == set(LEVELS)
    upward = sorted(f"{name} -> {dep}" for name in names for dep in GRAPH[name]
                    if package(dep) != package(name)
                    and LEVELS[package(dep)] >= LEVELS[package(name)])
    assert upward == []


@pytest.mark.parametrize("name", BOTTOM)
def test_bottom_modules_import_nothing_from_mirrorfit(name):
    assert GRAPH[name] == set()


def test_modules_stay_small():
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}
    assert sizes["models.model"] <= MAX_MODEL_LINES
