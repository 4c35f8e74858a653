"""``model.optimizer``: the compiled optimizer as a Keras user reads it.

`OptimizerHandle` joins the optimizer given to ``compile`` (its ``get_config``) with the
model's training state, where the live values are: the learning rate is
``opt_state.hyperparams["learning_rate"]`` (read and written through
`mirrorfit._src.optimizers.learning_rate`, so a new rate applies at the next step without
recompiling) and ``iterations`` is the train-step count.
"""

from __future__ import annotations

from typing import Any

import jax
import optax

from mirrorfit._src.optimizers.learning_rate import get_learning_rate, set_learning_rate
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
