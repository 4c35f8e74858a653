"""The getting-started page's and the porting guide's Keras object-model examples run as
written.

Each test runs the ```python blocks of one section of a page, in order, in one namespace
holding what the text assumes: ``mf``, ``np``, ``jnp``, ``jax``, ``strategy`` (a
`MirroredStrategy` over the 8 simulated devices) and ``x_train``/``y_train`` (scikit-learn's
1,797 digits, 64 pixels in [0, 1], int labels). A block whose code (not its comments) names
``tf.`` is the TensorFlow "before" of a port and is not run. ``mkdocs build --strict`` checks the
pages' links and snippets; this checks that their code works.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.datasets import load_digits

import mirrorfit as mf
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.slow  # each section trains models with fit (seconds each)


def _section(page: str, start: str, end: str) -> str:
    """The text of ``page`` from the line ``start`` up to the next line ``end`` (or its end)."""
    text = (REPO_ROOT / page).read_text()
    begin = text.index(start)
    stop = text.find(end, begin + len(start))
    return text[begin:stop if stop >= 0 else None]


def _run_blocks(section: str) -> dict:
    """Runs the section's python blocks in order; returns the namespace they filled."""
    blocks = [block for block in re.findall(r"```python\n(.*?)```", section, re.DOTALL)
              if not any("tf." in line.split("#")[0] for line in block.splitlines())]
    assert blocks, "the section lost its examples"
    x, y = load_digits(return_X_y=True)
    namespace = {"mf": mf, "np": np, "jnp": jnp, "jax": jax,
                 "strategy": mf.MirroredStrategy(),
                 "x_train": (x / 16.0).astype(np.float32), "y_train": y.astype(np.int32)}
    for number, block in enumerate(blocks):
        exec(compile(block, f"<python block {number}>", "exec"), namespace)  # noqa: S102
    return namespace


def test_getting_started_porting_example_trains_a_subclassed_model_with_the_gradient_line():
    names = _run_blocks(_section("docs/getting-started.md", "## Porting a tf.keras model",
                                 "\n## "))
    model = names["model"]
    assert names["strategy"].num_replicas_in_sync == 8
    assert type(model).train_step is not mf.Model.train_step  # its own step trained it
    losses = model.history.history["loss"]
    assert len(losses) == 5 and losses[-1] < losses[0]
    # fit wrote the trained values back into the layers' variables
    np.testing.assert_array_equal(model.head.get_weights()[0], model.get_weights()[2])


def test_porting_guide_subclassing_examples_run():
    names = _run_blocks(_section("docs/guides/porting.md", "## Subclassed layers and models",
                                 "\n## "))
    layer = names["layer"]
    # (The default name is numbered by the Linear layers made before in this process.)
    assert [(w.path, w.shape) for w in layer.weights] == [
        (f"{layer.name}/kernel", (3, 4)), (f"{layer.name}/bias", (4,))]
    assert layer.name.startswith("linear")
    # The encoder model was trained as a layer of WithEncoder: its own predict uses the
    # trained weights (Dense(16, relu) in NumPy).
    kernel, bias = names["encoder"].get_weights()
    np.testing.assert_allclose(names["codes"],
                               np.maximum(names["x_train"] @ kernel + bias, 0.0),
                               rtol=1e-5, atol=1e-5)
    assert names["model"].history.history.keys() == {"loss", "mae"}  # CustomModel's logs
    assert names["model"].metrics == [names["model"].loss_tracker, names["model"].mae_metric]
