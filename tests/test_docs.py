"""The API reference documents every public name.

``docs/api/`` has one page per public module, and each renders its module with mkdocstrings
(``::: mirrorfit.<module>``), which documents the names in the module's ``__all__``. These
tests load mirrorfit with griffe as mkdocstrings does (the search paths, the griffe extension
and the docstring options of ``mkdocs.yml``) and check that every name in every public
module's ``__all__`` is there, public and documented, on a page in the site's navigation: a
new public name without a docstring, or a new public module without a page, fails here.
``mkdocs build --strict`` (in ``.ci/run``) checks the rest: links, snippets and references.
"""

import inspect
import re
import types
from pathlib import Path

import flax.linen as nn
import griffe
import pytest
import yaml

import mirrorfit as mf

REPO = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((REPO / "mkdocs.yml").read_text())
PYTHON = next(plugin["mkdocstrings"] for plugin in CONFIG["plugins"]
              if isinstance(plugin, dict) and "mkdocstrings" in plugin)["handlers"]["python"]
OPTIONS = PYTHON["options"]
PUBLIC_MODULES = ["mirrorfit"] + sorted(
    f"mirrorfit.{name}" for name in mf.__all__ if isinstance(getattr(mf, name), types.ModuleType))


def _nav_pages(nav) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    items = nav.values() if isinstance(nav, dict) else nav
    return set().union(*(_nav_pages(item) for item in items))


def _api_pages() -> dict[str, str]:
    """Module path -> the page under docs/ that renders it (``::: module`` on a line)."""
    pages = {}
    for page in sorted((REPO / "docs" / "api").glob("*.md")):
        for module in re.findall(r"^::: (\S+)\s*$", page.read_text(), re.MULTILINE):
            pages[module] = page.relative_to(REPO / "docs").as_posix()
    return pages


@pytest.fixture(scope="module")
def package() -> griffe.Module:
    extensions = griffe.load_extensions(*(str(REPO / ext) for ext in OPTIONS["extensions"]))
    return griffe.load("mirrorfit", search_paths=[str(REPO / p) for p in PYTHON["paths"]],
                       extensions=extensions, docstring_parser="google",
                       docstring_options=OPTIONS["docstring_options"], resolve_aliases=True)


def _member(package: griffe.Module, module: str, name: str) -> griffe.Object | griffe.Alias:
    parent = package if module == "mirrorfit" else package[module.removeprefix("mirrorfit.")]
    return parent.members[name]


def test_public_modules_found():
    # The list is derived from mf.__all__; it must hold the modules the docs promise.
    assert {"mirrorfit", "mirrorfit.callbacks", "mirrorfit.layers", "mirrorfit.losses",
            "mirrorfit.metrics", "mirrorfit.optimizers", "mirrorfit.regularizers",
            "mirrorfit.mixed_precision", "mirrorfit.saving", "mirrorfit.utils"} <= set(
                PUBLIC_MODULES)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_public_module_has_api_page_in_nav(module):
    pages = _api_pages()
    assert module in pages, f"no page in docs/api/ renders {module} with '::: {module}'"
    assert pages[module] in _nav_pages(CONFIG["nav"]), f"{pages[module]} is not in mkdocs.yml nav"


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_is_documented(package, module):
    names = __import__(module, fromlist=["__all__"]).__all__
    undocumented = []
    for name in names:
        if module == "mirrorfit" and f"mirrorfit.{name}" in PUBLIC_MODULES:
            continue  # a public module has its own page (test above)
        member = _member(package, module, name)
        target = member.final_target if member.is_alias else member
        if not member.is_public or not (target.docstring and target.docstring.value.strip()):
            undocumented.append(name)
    assert not undocumented, (
        f"{module}.__all__ names that the API reference would leave out (give each a "
        f"docstring): {undocumented}")


def test_model_documents_its_training_api(package):
    # Model inherits compile/fit/evaluate/predict from private mixins; the griffe extension
    # puts them on Model's entry, or the reference would not show them at all.
    model = _member(package, "mirrorfit", "Model").final_target
    for name in ("compile", "fit", "evaluate", "predict", "save", "get_weights"):
        assert name in model.members and model.members[name].docstring, name


def test_examples_render_as_code(package):
    # A Google "Example:" section must parse as doctest examples: left as an admonition,
    # its ">>>" lines would render as Markdown block quotes.
    adam = _member(package, "mirrorfit.optimizers", "Adam").final_target
    kinds = [section.kind for section in adam.docstring.parsed]
    assert griffe.DocstringSectionKind.examples in kinds
    assert griffe.DocstringSectionKind.admonition not in kinds
    # The signature comes from Adam.__new__, with Keras' defaults.
    assert str(adam.parameters["learning_rate"].default) == "0.001"


LAYER_CLASSES = sorted(name for name in mf.layers.__all__
                       if isinstance(getattr(mf.layers, name), type)
                       and issubclass(getattr(mf.layers, name), nn.Module))


@pytest.mark.parametrize("name", LAYER_CLASSES)
def test_layer_signature_matches_flax_init(package, name):
    # Flax builds a layer's __init__ from its dataclass fields at import time; the griffe
    # extension rebuilds it statically for the reference. Both must agree (Flax's internal
    # ``parent`` argument left out).
    documented = _member(package, "mirrorfit.layers", name).final_target.parameters
    runtime = [p for p in inspect.signature(getattr(mf.layers, name)).parameters.values()
               if p.name != "parent"]
    assert [(p.name, p.kind.description, None if p.default is p.empty else repr(p.default))
            for p in runtime] == [
        (p.name, p.kind.value, None if p.default is None else str(p.default))
        for p in documented]
