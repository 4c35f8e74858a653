"""The API reference documents every public name and every public method.

``docs/api/`` has pages by topic, as keras.io's and optax's references: each renders objects
with mkdocstrings, one ``::: mirrorfit.layers.Dense`` line per object (or a whole module, or a
method such as ``::: mirrorfit.Model.fit`` shown on another topic's page than its class).
These tests load mirrorfit with griffe as mkdocstrings does (``tests/api_reference.py``) and
check that every name in every public module's ``__all__`` is on a page in the site's
navigation, public and documented, once; and that every public method of a class shown is
shown too, under its class or on its own. A new public name without a page or a docstring
fails here. ``mkdocs build --strict`` (in ``.ci/run``) checks the rest: links, snippets and
references.
"""

import collections
import inspect
import types

import flax.linen as nn
import griffe
import pytest

import mirrorfit as mf
from tests.api_reference import (
    CONFIG,
    directives,
    load_package,
    lookup,
    public_methods,
    rendered,
    target,
)

PUBLIC_MODULES = ["mirrorfit"] + sorted(
    f"mirrorfit.{name}" for name in mf.__all__ if isinstance(getattr(mf, name), types.ModuleType))


def _nav_pages(nav) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    items = nav.values() if isinstance(nav, dict) else nav
    return set().union(*(_nav_pages(item) for item in items))


@pytest.fixture(scope="module")
def package() -> griffe.Module:
    return load_package()


@pytest.fixture(scope="module")
def shown(package):
    return rendered(package)


def _member(package: griffe.Module, module: str, name: str) -> griffe.Object | griffe.Alias:
    return lookup(package, module).members[name]


def test_public_modules_found():
    # The list is derived from mf.__all__; it must hold the modules the docs promise.
    assert {"mirrorfit", "mirrorfit.callbacks", "mirrorfit.layers", "mirrorfit.losses",
            "mirrorfit.metrics", "mirrorfit.optimizers", "mirrorfit.regularizers",
            "mirrorfit.mixed_precision", "mirrorfit.saving", "mirrorfit.utils"} <= set(
                PUBLIC_MODULES)


def test_api_pages_are_in_nav():
    pages = {page for page, _, _ in directives()}
    assert len(pages) >= 30, "the reference is organised by topic, not one page per module"
    missing = sorted(pages - _nav_pages(CONFIG["nav"]))
    assert not missing, f"pages of docs/api/ not in mkdocs.yml nav: {missing}"


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_is_on_a_page(package, shown, module):
    objects, _ = shown
    on_pages = {path for _, path in objects}
    names = __import__(module, fromlist=["__all__"]).__all__
    missing = [name for name in names if f"mirrorfit.{name}" not in PUBLIC_MODULES
               and target(_member(package, module, name)).path not in on_pages]
    assert not missing, (
        f"{module}.__all__ names on no page of docs/api/ (add '::: {module}.<name>' to the "
        f"page of their topic): {missing}")


def test_no_name_is_shown_twice(shown):
    objects, _ = shown
    pages = collections.defaultdict(list)
    for page, path in objects:
        pages[path].append(page)
    twice = {path: where for path, where in pages.items() if len(where) > 1}
    assert not twice, f"objects with two entries in the reference: {twice}"


def test_every_public_method_of_a_shown_class_is_shown(package, shown):
    objects, members = shown
    hidden = []
    for path in sorted({path for _, path in objects}):
        cls = lookup(package, path)
        if isinstance(cls, griffe.Class):
            hidden += [f"{path}.{name}" for name in public_methods(cls)
                       if (path, name) not in members]
    assert not hidden, (
        f"public methods that no page shows (give each a docstring, or a '::: ' line on the "
        f"page of their topic if the class's entry filters them out): {hidden}")


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_is_documented(package, module):
    names = __import__(module, fromlist=["__all__"]).__all__
    undocumented = []
    for name in names:
        if module == "mirrorfit" and f"mirrorfit.{name}" in PUBLIC_MODULES:
            continue  # a public module has its own pages (test above)
        member = _member(package, module, name)
        documented = target(member)
        if not member.is_public or not (
                documented.docstring and documented.docstring.value.strip()):
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
