"""Keras 3's stateless JAX hooks, ``train_step(self, state, data)`` and
``test_step(self, state, data)``, inside ``fit``/``evaluate``'s compiled per-replica step.

Keras' guide "Customizing what happens in fit() with JAX" writes the step as a pure function
of the variables' values; ported by renaming (``keras`` -> ``mf``) it runs here unchanged:

* ``train_step`` gets ``state = (trainable_variables, non_trainable_variables,
  optimizer_variables, metrics_variables)``: lists of this step's values in the order of
  ``self.trainable_variables``, ``self.non_trainable_variables``, ``self.optimizer.variables``
  (the compiled optax state's leaves) and ``self.metrics_variables``; it returns
  ``(logs, state)`` with the new values in the same four lists. ``test_step`` gets
  ``(trainable_variables, non_trainable_variables, metrics_variables)`` and returns
  ``(logs, (trainable_variables, non_trainable_variables, metrics_variables))``; the
  trainable values it returns are not used (evaluation changes no weight).
* Inside it ``self.stateless_call``, ``self.stateless_compute_loss``/``self.compute_loss``,
  ``jax.value_and_grad``, ``self.optimizer.stateless_apply`` and the metrics'
  ``stateless_update_state``/``stateless_result`` work as in Keras. The gradients are this
  replica's: ``stateless_apply`` all-reduces them (``MEAN``, as ``optimizer.apply``) before
  the optax update, so every replica returns the same new weights.

The returned values are written into the step's variables (`ObjectStep`), so they become
the `TrainState` 's ``params``/``model_state``/``opt_state`` and the tracker statistics the
object form carries; each is combined across replicas by its variable's ``aggregation``
(a metric's ``"sum"``: ``old + psum(new - old)``, the global statistics on every replica).

**Logs.** A replica's ``stateless_result`` is of its own rows, which Keras on one device
never sees. So a log whose key is the name of one of ``self.metrics`` is replaced by that
metric's ``result()`` of the combined statistics (the same on every replica, as a
``tf.distribute`` metric's); any other log is averaged over the replicas
(`mirrorfit._src.trainers.keras_steps`). The loss tracker's per-replica loss is this
replica's share of the global batch's mean (``compute_loss``), so its combined mean is the
global batch's loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.trainers.object_step import ObjectStep
from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable

_TRAIN_STATE = ("trainable_variables", "non_trainable_variables", "optimizer_variables",
                "metrics_variables")
_TEST_STATE = ("trainable_variables", "non_trainable_variables", "metrics_variables")


def run_jax_hook(model: Any, step: ObjectStep, data: Any, training: bool) -> Any:
    """``model.train_step(state, data)`` (``training``) or ``model.test_step(state, data)``
    on this replica, inside ``step.running``: the step's variables get the returned values.

    Args:
        model: the `Model` whose hook runs.
        step: the running `ObjectStep` (its values are the ``state`` passed in).
        data: the hook's ``data`` (``x``, ``(x, y)`` or ``(x, y, sample_weight)``).
        training: ``True`` for ``train_step``.

    Returns:
        The hook's logs, with each log named after a metric of ``model.metrics`` replaced
        by that metric's global ``result()``.

    Raises:
        TypeError: if the hook does not return ``(logs, state)`` with ``state`` a tuple of
            the lists it was given.
        ValueError: if a returned list does not have one value per variable.
    """
    name = "train_step" if training else "test_step"
    groups = {"trainable_variables": list(model.trainable_variables),
              "non_trainable_variables": list(model.non_trainable_variables),
              "metrics_variables": list(model.metrics_variables)}
    values = {key: [step.value(v) for v in variables] for key, variables in groups.items()}
    values["optimizer_variables"] = jax.tree.leaves(step.opt_state)
    keys = _TRAIN_STATE if training else _TEST_STATE
    hook = model.train_step if training else model.test_step
    returned = hook(tuple(values[key] for key in keys), data)
    if (not isinstance(returned, tuple) or len(returned) != 2
            or not isinstance(returned[1], (tuple, list)) or len(returned[1]) != len(keys)):
        raise TypeError(
            f"{name}(self, state, data) is Keras 3's JAX form: it returns (logs, state) with "
            f"state = ({', '.join(keys)}), as keras.io's custom_train_step_in_jax guide. "
            f"Received: {_describe(returned)}")
    logs, new_state = returned
    new = dict(zip(keys, new_state))
    for key in keys:
        _check_count(name, key, new[key], len(values[key]))
    if training:
        _assign(groups["trainable_variables"], new["trainable_variables"])
        step.opt_state = jax.tree.unflatten(jax.tree.structure(step.opt_state),
                                            list(new["optimizer_variables"]))
    _assign(groups["non_trainable_variables"], new["non_trainable_variables"])
    _assign(groups["metrics_variables"], new["metrics_variables"])  # "sum": combined now
    if not isinstance(logs, dict):
        return logs  # the caller's check names what a hook must return
    by_name = {metric.name: metric for metric in model.metrics}
    return {key: by_name[key].result() if key in by_name else value
            for key, value in logs.items()}


def stateless_compute_loss(model: Any, values: Sequence[Sequence[Any]],
                           compute_loss: Callable[[], Any]
                           ) -> tuple[jax.Array, tuple[list[Any], ...]]:
    """``compute_loss()`` with the model's variables mapped to ``values``: the body of
    `mirrorfit._src.trainers.model_hooks.ModelHooks.stateless_compute_loss`.

    Args:
        model: the `Model`.
        values: the values of ``model.trainable_variables``, ``non_trainable_variables``
            and ``metrics_variables``, three lists in that order.
        compute_loss: runs the model's ``compute_loss`` on the step's inputs.

    Returns:
        ``(loss, (trainable, non_trainable, metrics))``: the loss (float32) and the three
        lists after it (an assignment ``compute_loss`` made is returned, not stored).

    Raises:
        ValueError: if a list of values does not match its variables in number.
    """
    groups = list(zip(("trainable_variables", "non_trainable_variables", "metrics_variables"),
                      (model.trainable_variables, model.non_trainable_variables,
                       model.metrics_variables), values))
    mapping = []
    for name, variables, given in groups:
        if len(given) != len(variables):
            raise ValueError(f"stateless_compute_loss needs one value per model.{name}, in "
                             f"order ({len(variables)}). Received: {len(given)} values")
        mapping += list(zip(variables, given))
    with StatelessScope(mapping) as scope:
        loss = compute_loss()
    new = tuple([scope.get_current_value(v) for v in variables] for _, variables, _ in groups)
    return jnp.asarray(loss, jnp.float32), new


def _assign(variables: Sequence[Variable], values: Sequence[Any]) -> None:
    for variable, value in zip(variables, values):
        variable.assign(value)


def _check_count(name: str, key: str, values: Any, expected: int) -> None:
    if not isinstance(values, (list, tuple)) or len(values) != expected:
        count = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise ValueError(f"{name} must return the new {key} as a list of {expected} values, "
                         f"in the order it got them. Received: {count}")


def _describe(returned: Any) -> str:
    if isinstance(returned, tuple) and len(returned) == 2:
        state = returned[1]
        size = len(state) if isinstance(state, (tuple, list)) else type(state).__name__
        return f"(logs, state) with a state of {size} items"
    return f"a {type(returned).__name__}"
