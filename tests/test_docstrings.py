"""Every public method has a docstring, and every ``>>>`` example in mirrorfit's docstrings
runs, its shown output matching.

A public method (or property) of a class in a public module's ``__all__`` without a
docstring would be left out of the API reference: mkdocstrings hides it. The check reads
the classes as the reference does (griffe, ``tests/api_reference.py``): a class's own
methods and those it takes from private bases (``Model``'s ``fit``), not those of a public
base, which has its own entry, nor those of Flax's ``nn.Module``.

The examples run as ``doctest`` would, in a fresh temporary directory, with the names a
reader of the docs has at hand: ``mf``, ``nn``, ``jnp``, ``np``, ``jax``, ``optax``, the
`mirrorfit.layers` names (``Input``, ``Dense``, ...), and a
small compiled ``model`` (4 features, 3 class probabilities) with training data ``x`` ``[64, 4]`` and
``y`` ``[64]``. An example that cannot run here says so with ``# doctest: +SKIP``.
"""

import doctest
import importlib
import pkgutil
import types

import flax.linen as nn
import griffe
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from tests.api_reference import load_package, lookup, public_methods


def test_every_public_method_has_a_docstring():
    package = load_package()
    modules = ["mirrorfit"] + [f"mirrorfit.{name}" for name in mf.__all__
                               if isinstance(getattr(mf, name), types.ModuleType)]
    classes = {}
    for module in modules:
        for name in importlib.import_module(module).__all__:
            obj = lookup(package, f"{module}.{name}")
            if isinstance(obj, griffe.Class):
                classes.setdefault(obj.path, f"{module}.{name}")
    assert len(classes) >= 200  # the walk itself must find the classes
    missing = sorted(
        f"{public}.{name} ({method.relative_filepath}:{method.lineno})"
        for path, public in classes.items()
        for name, method in public_methods(lookup(package, path)).items()
        if not (method.docstring and method.docstring.value.strip()))
    assert not missing, "public methods without a docstring:\n" + "\n".join(missing)


def _examples() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = []
    for info in pkgutil.walk_packages(mf.__path__, "mirrorfit."):
        module = importlib.import_module(info.name)
        found.extend(test for test in finder.find(module) if test.examples)
    return sorted(found, key=lambda test: test.name)


EXAMPLES = _examples()


def test_docstrings_have_examples():
    # The collection itself must find the examples, or every test below passes vacuously.
    assert len(EXAMPLES) >= 15


@pytest.fixture(scope="module")
def model():
    with mf.MirroredStrategy().scope():
        model = mf.Sequential([nn.Dense(8), nn.relu, nn.Dense(3), nn.softmax], input_shape=(4,))
        model.compile("adam", "sparse_categorical_crossentropy")
    return model


@pytest.mark.parametrize("example", EXAMPLES, ids=[test.name for test in EXAMPLES])
def test_docstring_example_runs(example, model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    example.globs.update({name: getattr(mf.layers, name) for name in mf.layers.__all__})
    example.globs.update(mf=mf, nn=nn, jnp=jnp, np=np, jax=jax, optax=optax, model=model,
                         x=rng.normal(size=(64, 4)).astype(np.float32),
                         y=rng.integers(0, 3, size=64))
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    output = []
    result = runner.run(example, out=output.append, clear_globs=True)
    assert result.failed == 0, "".join(output)
