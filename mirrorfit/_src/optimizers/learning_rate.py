"""The learning rate held in an optimizer's state: reading it, and writing a new one.

Every named mirrorfit optimizer is built with ``optax.inject_hyperparams``, so its rate is a
leaf of the optimizer state (``hyperparams["learning_rate"]``), not a constant compiled into
the train step: a new value written there applies from the next step, without recompiling.
`mirrorfit.callbacks.LearningRateScheduler`, `mirrorfit.callbacks.ReduceLROnPlateau` and
``model.optimizer.learning_rate`` go through this module.

Both functions take the optimizer state alone (a pytree) and know nothing of models or
devices: the caller gives the new state to its owner (``Model.assign_state``), which places
it mirrored on the replicas.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.core import Tracer

NO_LEARNING_RATE = (
    "{name} needs an optimizer whose learning rate lives in its state: a mirrorfit optimizer "
    "(e.g. compile(optimizer=\"adam\") or mf.optimizers.SGD(0.1)) or one built with "
    "optax.inject_hyperparams(optax.adam)(learning_rate=1e-3). Received: an optimizer state "
    "without hyperparams[\"learning_rate\"] ({state})"
)


SCHEDULED_LEARNING_RATE = (
    "{name} cannot set the learning rate: the optimizer's learning_rate is an optax schedule, "
    "which sets it again at every step, so the callback's value would be silently replaced. "
    "Use a float learning_rate with this callback, or drop the callback and let the schedule "
    "drive the rate. Received: an optimizer with a scheduled learning_rate"
)


def _is_lr_state(node: Any) -> bool:
    hyperparams = getattr(node, "hyperparams", None)
    return isinstance(hyperparams, dict) and "learning_rate" in hyperparams


def get_learning_rate(opt_state: Any, owner: str = "This callback") -> Any:
    """The learning rate in ``opt_state`` (the first one, in a chain).

    Args:
        opt_state: an optax optimizer state (``None`` before the model is compiled or built).
        owner: who asks, named in the error (``"ReduceLROnPlateau"``).

    Returns:
        The rate as a Python float; inside a trace (a train step's own state), the traced
        float32 ``[]`` rate.

    Raises:
        ValueError: naming ``owner``, if ``opt_state`` has no ``hyperparams["learning_rate"]``
            (a raw optax transformation, or no optimizer state yet).
    """
    found = [n for n in jax.tree.leaves(opt_state, is_leaf=_is_lr_state) if _is_lr_state(n)]
    if not found:
        raise ValueError(NO_LEARNING_RATE.format(name=owner, state=type(opt_state).__name__))
    rate = found[0].hyperparams["learning_rate"]
    return rate if isinstance(rate, Tracer) else float(np.asarray(rate))


def set_learning_rate(opt_state: Any, value: float, owner: str = "This callback") -> Any:
    """A copy of ``opt_state`` with every ``hyperparams["learning_rate"]`` set to ``value``.

    Each new rate is a NumPy scalar of the old leaf's dtype, so once the state is placed
    back (``model.assign_state(opt_state=...)`` mirrors it) the compiled train step is
    reused as is. ``opt_state`` itself is not changed.

    Args:
        opt_state: an optax optimizer state holding an injected learning rate.
        value: the new rate.
        owner: who sets it, named in errors.

    Returns:
        The new optimizer state (same structure; the rates are host values).

    Raises:
        ValueError: naming ``owner``, if the optimizer has no injectable rate, or its rate is
            an optax schedule (``optax.inject_hyperparams`` re-evaluates the schedule at
            every step, so a written value would be silently replaced).
    """
    get_learning_rate(opt_state, owner)  # raises a clear error without an injectable rate
    nodes = jax.tree.leaves(opt_state, is_leaf=_is_lr_state)
    if any("learning_rate" in getattr(n, "hyperparams_states", {}) for n in nodes
           if _is_lr_state(n)):
        raise ValueError(SCHEDULED_LEARNING_RATE.format(name=owner))

    def replace(node):
        if not _is_lr_state(node):
            return node
        old = node.hyperparams["learning_rate"]
        new = np.asarray(value, dtype=old.dtype)
        return node._replace(hyperparams={**node.hyperparams, "learning_rate": new})

    return jax.tree.map(replace, opt_state, is_leaf=_is_lr_state)
