"""``model.optimizer``: the compiled optimizer as a Keras user reads it.

`OptimizerHandle` joins the optimizer given to ``compile`` (its ``get_config``) with the
model's training state, where the live values are: the learning rate is
``opt_state.hyperparams["learning_rate"]`` (read and written through
`mirrorfit._src.optimizers.learning_rate`, so a new rate applies at the next step without
recompiling) and ``iterations`` is the train-step count. Both are Keras variables
(`OptimizerVariable`: ``.numpy()``, ``.assign(x)``, ``float(v)``) whose value is the one in
the state now, as ``keras.optimizers.Optimizer.learning_rate`` and ``iterations`` are.
(`mirrorfit._src.models.variable_views` shows a model's weights the same way.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mirrorfit._src.optimizers.learning_rate import get_learning_rate, set_learning_rate
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

    def __init__(self, name: str, read: Callable[[], Any], write: Callable[[jax.Array], None]):
        self._read = read
        self._write = write
        super().__init__(read(), trainable=False, name=name)  # its own copy is not kept
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

    def _read_learning_rate(self) -> float:
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
        if self._model.state is None:
            raise ValueError(UNBUILT_MODEL)
        return self._model.state.step

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
