"""``model.optimizer``: the compiled optimizer as a Keras user reads it.

`OptimizerHandle` joins the optimizer given to ``compile`` (its ``get_config``) with the
model's training state, where the live values are: the learning rate is
``opt_state.hyperparams["learning_rate"]`` (read and written through
`mirrorfit._src.optimizers.learning_rate`, so a new rate applies at the next step without
recompiling) and ``iterations`` is the train-step count. Inside ``fit``'s step, a Keras 3
``train_step(self, data)`` updates the model through it: ``apply``, ``apply_gradients``,
``stateless_apply``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import jax
import optax

from mirrorfit._src.optimizers.learning_rate import get_learning_rate, set_learning_rate
from mirrorfit._src.trainers.object_step import OUTSIDE_STEP, ObjectStep, current_step
from mirrorfit._src.trainers.state import UNBUILT_MODEL

_OWNER = "model.optimizer.learning_rate"


class OptimizerHandle:
    """The optimizer of a compiled `Model`, as ``keras.Model.optimizer``.

    Args:
        model: the compiled model.
        transformation: the ``optax.GradientTransformation`` it was compiled with.

    Example:
        >>> model.optimizer.learning_rate = 0.01
        >>> round(model.optimizer.learning_rate, 6)
        0.01
    """

    def __init__(self, model: Any, transformation: optax.GradientTransformation):
        self._model = model
        self.transformation = transformation

    @property
    def learning_rate(self) -> float:
        """The current learning rate (a float), from the optimizer state.

        Assigning a float writes it into the mirrored optimizer state; it applies from the
        next train step, with no recompilation.

        Raises:
            ValueError: if the optimizer keeps no ``hyperparams["learning_rate"]`` (a raw
                optax transformation; use ``optax.inject_hyperparams``), or, on assignment,
                if the model has no weights yet.
        """
        if self._model.state is None:
            config = self._config_or_none()
            if config is not None and isinstance(config.get("learning_rate"), float):
                return config["learning_rate"]
        return get_learning_rate(self._model.opt_state, _OWNER)

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise TypeError("model.optimizer.learning_rate must be set to a float >= 0. "
                            f"Received: learning_rate={value!r}")
        if self._model.state is None:
            raise ValueError(UNBUILT_MODEL)
        self._model.assign_state(
            opt_state=set_learning_rate(self._model.opt_state, float(value), _OWNER))

    @property
    def iterations(self) -> jax.Array:
        """The number of train steps applied (int32 scalar, mirrored), as Keras' iterations."""
        if self._model.state is None:
            raise ValueError(UNBUILT_MODEL)
        return self._model.state.step

    def apply(self, grads: Sequence[Any], trainable_variables: Sequence[Any] | None = None
              ) -> None:
        """One update inside ``fit``'s step, as Keras 3's ``optimizer.apply(grads)``.

        In a ``train_step(self, data)`` override: the gradients are all-reduced across
        replicas (``MEAN``), then the compiled optimizer updates the variables and the
        optimizer state of the step (`mirrorfit._src.trainers.object_step.ObjectStep`).

        Args:
            grads: one gradient per variable, each its variable's shape.
            trainable_variables: the variables (default ``model.trainable_variables``): all
                or some of the model's trainable variables; the others keep their values.

        Raises:
            RuntimeError: outside ``fit``'s step.
            ValueError: see `ObjectStep.apply`.
        """
        _step("apply").apply(grads, trainable_variables)

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]]) -> jax.Array:
        """`apply` on ``(gradient, variable)`` pairs, as ``optimizer.apply_gradients(zip(
        grads, self.trainable_variables))`` in a tf.keras ``train_step``.

        Returns:
            `iterations` (the step count before this update), as tf.keras.
        """
        step = _step("apply_gradients")
        pairs = list(grads_and_vars)
        step.apply([g for g, _ in pairs], [v for _, v in pairs])
        return step.step

    def stateless_apply(self, optimizer_variables: Sequence[Any], grads: Sequence[Any],
                        trainable_variables: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """`apply` as a pure function of values inside ``fit``'s step, as Keras 3's JAX
        ``optimizer.stateless_apply``.

        Args:
            optimizer_variables: the values of `variables`, in order.
            grads: one gradient per ``model.trainable_variables``.
            trainable_variables: the values of ``model.trainable_variables``, in order.

        Returns:
            ``(new trainable values, new optimizer values)``, lists like the inputs.

        Raises:
            RuntimeError: outside ``fit``'s step.
        """
        return _step("stateless_apply").stateless_apply(optimizer_variables, grads,
                                                        trainable_variables)

    @property
    def variables(self) -> list[jax.Array]:
        """The optimizer state's leaves (optax's order): the step's values inside ``fit``'s
        step, else the model's."""
        step = current_step()
        return jax.tree.leaves(self._model.opt_state if step is None else step.opt_state)

    def get_config(self) -> dict[str, Any]:
        """The optimizer's configuration, as ``keras.optimizers.Optimizer.get_config``.

        Raises:
            TypeError: if the optimizer has no config (a raw optax transformation).
        """
        config = self._config_or_none()
        if config is None:
            raise TypeError(
                "get_config needs an mf.optimizers optimizer (e.g. mf.optimizers.Adam()) or a "
                "name; a raw optax transformation has no config. Received: "
                f"{type(self.transformation).__name__}")
        return config

    def _config_or_none(self) -> dict[str, Any] | None:
        get_config = getattr(self.transformation, "get_config", None)
        return None if get_config is None else get_config()

    def __repr__(self) -> str:
        return f"OptimizerHandle({self.transformation!r})"


def _step(method: str) -> ObjectStep:
    step = current_step()
    if step is None:
        raise RuntimeError(OUTSIDE_STEP.format(method=method))
    return step
