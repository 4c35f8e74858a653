"""Every ``>>>`` example in mirrorfit's docstrings runs, and its shown output matches.

The examples run as ``doctest`` would, in a fresh temporary directory, with the names a
reader of the docs has at hand: ``mf``, ``nn``, ``jnp``, ``np``, ``jax``, ``optax``, the
`mirrorfit.layers` names (``Input``, ``Dense``, ...), and a
small compiled ``model`` (4 features, 3 class probabilities) with training data ``x`` ``[64, 4]`` and
``y`` ``[64]``. An example that cannot run here says so with ``# doctest: +SKIP``.
"""

import doctest
import importlib
import pkgutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf


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
