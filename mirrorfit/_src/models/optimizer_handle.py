"""``model.optimizer``: the compiled optimizer as a Keras user reads it.

`OptimizerHandle` joins the optimizer given to ``compile`` (its ``get_config``) with the
model's training state, where the live values are: the learning rate is
``opt_state.hyperparams["learning_rate"]`` (read and written through
`mirrorfit._src.optimizers.learning_rate`, so a new rate applies at the next step without
recompiling) and ``iterations`` is the train-step count. Both are Keras variables
(`OptimizerVariable`: ``.numpy()``, ``.assign(x)``, ``float(v)``) whose value is the one in
the state now, as ``keras.optimizers.Optimizer.learning_rate`` and ``iterations`` are.
(`mirrorfit._src.models.variable_views` shows a model's weights the same way.) Inside
``fit``'s step, a Keras 3 ``train_step(self, data)`` updates the model through it:
``apply``, ``apply_gradients``, ``stateless_apply``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mirrorfit._src.optimizers.learning_rate import get_learning_rate, set_learning_rate
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer
from mirrorfit._src.trainers.object_step import OUTSIDE_STEP, ObjectStep, current_step
from mirrorfit._src.trainers.state import UNBUILT_MODEL
from mirrorfit._src.variables.variable import Variable

_OWNER = "model.optimizer.learning_rate"


class OptimizerVariable(Variable):
    """A scalar `Variable` whose value lives in a model's training state, not in itself.

    Reading it (``.value``, ``.numpy()``, ``float(v)``, ``round(v, 6)``, operators,
    ``v == 0.1``) reads the state now; ``v.assign(x)`` writes ``x`` into the state through
    the model (mirrored on its devices). ``model.optimizer.learning_rate`` and
    ``model.optimizer.iterations`` are ones: a scalar each.

    Args:
        name: the variable's name.
        read: returns the current value (array or number, ``[]``).
        write: stores a new value (a ``jax.Array`` of the variable's dtype and shape).
    """

    _mf_not_carried = True  # its value is the model's state: fit's step never carries it

    def __init__(self, name: str, read: Callable[[], Any], write: Callable[[jax.Array], None]):
        self._read = read
        self._write = write
        value = jnp.asarray(read())  # traced inside fit's step: only its shape is kept
        with jax.ensure_compile_time_eval():  # a placeholder; reads always call ``read``
            super().__init__(np.zeros(value.shape, value.dtype), trainable=False, name=name)
        self._bound = True

    # Variable keeps its value in ``_value``; here that attribute reads and writes the state.
    @property
    def _value(self) -> jax.Array:  # pyright: ignore[reportIncompatibleVariableOverride]
        return jnp.asarray(self._read())

    @_value.setter
    def _value(self, value: jax.Array) -> None:
        if getattr(self, "_bound", False):  # Variable.__init__ stores the value read: skip
            self._write(value)

    def __eq__(self, other: object) -> Any:
        other = other.value if isinstance(other, Variable) else other
        if not isinstance(other, (bool, int, float, np.generic, np.ndarray, jax.Array)):
            return NotImplemented
        equal = np.asarray(self.value) == np.asarray(other)
        return bool(equal) if equal.ndim == 0 else equal

    def __ne__(self, other: object) -> Any:
        equal = self.__eq__(other)
        if equal is NotImplemented:
            return equal
        return not equal if isinstance(equal, bool) else np.logical_not(equal)

    __hash__ = Variable.__hash__  # identity, as every Variable's


def _checked_rate(value: Any) -> float:
    """``value`` as a learning rate, or the error for anything but a number >= 0."""
    value = value.value if isinstance(value, Variable) else value
    if (isinstance(value, bool) or not isinstance(
            value, (int, float, np.generic, np.ndarray, jax.Array))
            or np.ndim(value) != 0 or not float(value) >= 0):
        raise TypeError("model.optimizer.learning_rate must be set to a float >= 0. "
                        f"Received: learning_rate={value!r}")
    return float(value)


class OptimizerHandle:
    """The optimizer of a compiled `Model`, as ``keras.Model.optimizer``.

    Args:
        model: the compiled model.
        transformation: the ``optax.GradientTransformation`` it was compiled with.

    Example:
        >>> model.optimizer.learning_rate = 0.01
        >>> round(model.optimizer.learning_rate, 6)
        0.01
        >>> model.optimizer.learning_rate.assign(0.005).numpy()
        array(0.005, dtype=float32)
    """

    def __init__(self, model: Any, transformation: optax.GradientTransformation):
        self._model = model
        self.transformation = transformation

    @property
    def learning_rate(self) -> OptimizerVariable:
        """The learning rate: a scalar float `OptimizerVariable` reading the optimizer state.

        ``model.optimizer.learning_rate.numpy()`` (or ``float(...)``) is the current rate.
        Assigning a number (``model.optimizer.learning_rate = 0.01``) or calling
        ``.assign(0.01)`` writes it into the mirrored optimizer state; it applies from the
        next train step, with no recompilation. Before the model is built it reads the
        compiled rate.

        Raises:
            ValueError: if the optimizer keeps no ``hyperparams["learning_rate"]`` (a raw
                optax transformation; use ``optax.inject_hyperparams``), or, on assignment,
                if the model has no weights yet.
            TypeError: on assignment of anything but a number >= 0.
        """
        return OptimizerVariable(  # reads the rate now: raises for an optimizer without one
            "learning_rate", self._read_learning_rate, self._write_learning_rate)

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._write_learning_rate(value)

    def _read_learning_rate(self) -> Any:
        step = current_step()
        if step is not None:  # inside fit's step: this step's (traced) optimizer state
            return get_learning_rate(step.opt_state, _OWNER)
        if self._model.state is None:
            config = self._config_or_none()
            if config is not None and isinstance(config.get("learning_rate"), float):
                return config["learning_rate"]
        return get_learning_rate(self._model.opt_state, _OWNER)

    def _write_learning_rate(self, value: Any) -> None:
        rate = _checked_rate(value)
        if self._model.state is None:
            raise ValueError(UNBUILT_MODEL)
        self._model.assign_state(opt_state=set_learning_rate(self._model.opt_state, rate,
                                                             _OWNER))

    @property
    def iterations(self) -> OptimizerVariable:
        """The number of train steps applied, as Keras' ``optimizer.iterations``: an int32
        scalar `OptimizerVariable` reading the model's step counter (``assign`` sets it).

        Raises:
            ValueError: if the model has no weights yet.
        """
        return OptimizerVariable(  # reads the step now: raises for an unbuilt model
            "iterations", self._step, lambda value: self._model.assign_state(step=value))

    def _step(self) -> jax.Array:
        step = current_step()
        if step is not None:  # inside fit's step: the updates before this one (traced)
            return step.iterations
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
        _running_step("apply").apply(grads, trainable_variables)

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]]) -> jax.Array:
        """`apply` on ``(gradient, variable)`` pairs, as ``optimizer.apply_gradients(zip(
        grads, self.trainable_variables))`` in a tf.keras ``train_step``.

        Returns:
            `iterations` after this update (traced), as Keras.
        """
        step = _running_step("apply_gradients")
        pairs = list(grads_and_vars)
        step.apply([g for g, _ in pairs], [v for _, v in pairs])
        return step.iterations

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
        return _running_step("stateless_apply").stateless_apply(optimizer_variables, grads,
                                                        trainable_variables)

    def scale_loss(self, loss: jax.Array) -> jax.Array:
        """``loss`` times the loss scale inside ``fit``'s step under ``"mixed_float16"`` (a
        `LossScaleOptimizer`, whose ``apply`` divides the gradients by it), else ``loss``, as
        Keras 3's ``optimizer.scale_loss``: differentiate the scaled loss."""
        step = current_step()
        if step is None or not isinstance(self.transformation, LossScaleOptimizer):
            return loss
        return self.transformation.scale_loss(loss, step.opt_state)

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


def _running_step(method: str) -> ObjectStep:
    step = current_step()
    if step is None:
        raise RuntimeError(OUTSIDE_STEP.format(method=method))
    return step
