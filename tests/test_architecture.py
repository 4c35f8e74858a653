"""The layering that docs/architecture.md ("Packages and levels") states holds in the code.

``mirrorfit/_src`` holds one package per concept and nothing else. Each package sits on a
level, and a package imports only packages on lower levels. Imports form no cycle, none
hides in a function body (a lazy import that would hide a cycle), the bottom modules import
nothing else from mirrorfit, and every module stays small enough to read in one sitting.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "mirrorfit"
SRC = ROOT / "_src"
# docs/architecture.md's table, bottom to top: a package imports only packages of a lower level.
LEVELS = {
    "utils": 1, "variables": 1,
    "activations": 2, "constraints": 2, "distribute": 2, "initializers": 2, "losses": 2,
    "ops": 2, "regularizers": 2,
    "layers": 3, "metrics": 3, "optimizers": 3, "random": 3,
    "export": 4, "modules": 4, "saving": 4,
    "callbacks": 5,
    "trainers": 6,
    "models": 7,
}
BOTTOM = ("distribute.mesh", "distribute.batch", "distribute.values", "distribute.devices",
          "utils.checks", "utils.naming", "utils.object_registration", "trainers.state",
          "variables.stateless_scope", "variables.placement")
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


def _package(module: str) -> str:
    return module.split(".")[0]


def test_src_holds_only_the_packages_of_the_levels_table():
    loose = sorted(p.name for p in SRC.glob("*.py") if p.name != "__init__.py")
    packages = sorted(p.name for p in SRC.iterdir() if (p / "__init__.py").exists())
    assert loose == []
    assert packages == sorted(LEVELS)


@pytest.mark.parametrize("package", sorted(LEVELS))
def test_a_package_imports_only_packages_on_lower_levels(package):
    upward = {f"{name} -> {dep}" for name, deps in GRAPH.items() if _package(name) == package
              for dep in deps
              if _package(dep) != package and LEVELS[_package(dep)] >= LEVELS[package]}
    assert upward == set()


@pytest.mark.parametrize("package", sorted(LEVELS))
def test_every_package_says_what_it_owns(package):
    assert ast.get_docstring(ast.parse((SRC / package / "__init__.py").read_text()))


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


@pytest.mark.parametrize("name", [n for n in BOTTOM if n in MODULES])
def test_bottom_modules_import_nothing_from_mirrorfit(name):
    assert GRAPH[name] == set()


def test_modules_stay_small():
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}
    assert sizes["models.model"] <= MAX_MODEL_LINES


@pytest.mark.parametrize("path", sorted(p.name for p in ROOT.glob("*.py")))
def test_public_modules_only_re_export(path):
    tree = ast.parse((ROOT / path).read_text())
    defined = [node.name for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    assert defined == []
    exported = [node for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "__all__" for t in node.targets)]
    assert len(exported) == 1
