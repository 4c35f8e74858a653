"""Checks of `Model`'s constructor arguments: the seed, the example input shape, and whether
the Flax module can be called as mirrorfit calls it, and whether its outputs have one row
per example.

Each runs when the model is built (before any step), so a wrong argument fails at
``Model(...)`` or the first ``fit`` with the argument named, not later inside a trace.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax

from mirrorfit._src.modules.adapters import ModuleAdapter, call_inputs
from mirrorfit._src.utils.checks import is_int


def check_module_call(module: Any, sample: Any) -> None:
    """Raises a clear ``TypeError`` if ``module`` cannot be called as mirrorfit calls it.

    mirrorfit calls ``module(*inputs)`` (a tuple or list input unpacked), adding
    ``train=``/``training=`` when ``__call__`` has such a parameter. The check binds that
    call to ``__call__`` 's signature without running it, so it holds for linen and nnx
    modules alike, before any parameter is created.

    Args:
        module: the Flax module.
        sample: an example batch, as the model passes it.

    Raises:
        TypeError: naming the module and its signature, saying what mirrorfit passes.
    """
    try:
        signature = inspect.signature(type(module).__call__)
    except (TypeError, ValueError):  # no signature to check against
        return
    modes = {name: False for name in ("train", "training") if name in signature.parameters}
    try:
        signature.bind(module, *call_inputs(sample), **modes)
    except TypeError as err:
        name = type(module).__name__
        raise TypeError(
            f"The module {name} cannot be called with the arguments mirrorfit passes ({err}). "
            "mirrorfit calls module(*inputs): one positional argument per model input (a "
            "tuple or list input is unpacked, a dict is passed whole), plus train=True/False "
            "or training=True/False when __call__ has a parameter of that name. Give every "
            "other parameter a default, or make it a module attribute. Received: "
            f"{name}.__call__{signature}") from None


OUTPUTS_WITHOUT_BATCH_AXIS = (
    "The module {name} must return outputs [batch, ...], one row per example of its input "
    "x: mirrorfit splits and gathers every output by rows. Compute the outputs from x (a "
    "module that ignores x, e.g. returns a parameter, has no row per example), or broadcast "
    "one, e.g. jnp.broadcast_to(w, (x.shape[0], *w.shape)). Received: outputs of shapes "
    "{shapes} for an input batch of {rows} rows"
)


def check_outputs_per_example(module: Any, adapter: ModuleAdapter, params: Any,
                              model_state: Any, sample: Any) -> None:
    """Raises a clear ``ValueError`` if the module's outputs lack the batch axis.

    Traces (``jax.eval_shape``: nothing runs) one forward pass on a batch of 2 rows and
    checks that every output has 2 rows. A forward pass that fails on 2 rows is left to
    fail at the first step with its own error.

    Args:
        module: the Flax module (for its name).
        adapter: its `ModuleAdapter`.
        params: the params ``adapter.init`` created.
        model_state: the other collections ``adapter.init`` created.
        sample: the example batch of 1 row the model was built from.

    Raises:
        ValueError: naming the module, its output shapes and the input rows.
    """
    rows = 2
    batch = jax.tree.map(lambda a: jax.ShapeDtypeStruct((rows, *a.shape[1:]), a.dtype), sample)

    def forward(params, model_state, x):
        return adapter.apply(params, model_state, x, train=False, rng=jax.random.PRNGKey(0))[0]

    try:
        outputs = jax.eval_shape(forward, params, model_state, batch)
    except Exception:  # noqa: BLE001 - not this check's error: the first step reports it
        return
    shapes = [tuple(leaf.shape) for leaf in jax.tree.leaves(outputs)]
    if any(not shape or shape[0] != rows for shape in shapes):
        raise ValueError(OUTPUTS_WITHOUT_BATCH_AXIS.format(
            name=type(module).__name__, shapes=shapes, rows=rows))


def checked_seed(seed: Any) -> int:
    """``seed`` as an int, or a clear error.

    Raises:
        TypeError: if ``seed`` is not an int.
        ValueError: if it is negative.
    """
    if not is_int(seed):
        raise TypeError(f"seed must be an int. Received: seed={seed!r}")
    if seed < 0:
        raise ValueError("seed must be a non-negative int (it seeds param init, dropout and "
                         f"shuffling), e.g. seed=0. Received: seed={seed!r}")
    return int(seed)


def example_shape(input_shape: Any) -> Any:
    """``input_shape`` with an int read as one axis: ``8`` -> ``(8,)``, as Keras' ``Input``;
    a leading ``None`` is Keras' batch axis and dropped: ``(None, 8)`` -> ``(8,)``, as a
    subclassed model's ``build((None, 8))`` is written."""
    if is_int(input_shape):
        return (int(input_shape),)
    if isinstance(input_shape, tuple) and input_shape and input_shape[0] is None:
        return input_shape[1:]
    return input_shape
