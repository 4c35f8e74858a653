"""Checks of `Model`'s constructor arguments: the seed, the example input shape, and whether
the Flax module can be called as mirrorfit calls it.

Each runs before any parameter is created, so a wrong argument fails at ``Model(...)`` with
the argument named, not later inside a trace.
"""

from __future__ import annotations

import inspect
from typing import Any

from mirrorfit._src.modules.adapters import call_inputs
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
    """``input_shape`` with an int read as one axis: ``8`` -> ``(8,)``, as Keras' ``Input``."""
    return (int(input_shape),) if is_int(input_shape) else input_shape
