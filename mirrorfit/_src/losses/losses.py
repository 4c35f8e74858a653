"""The loss registry: Keras' loss names and aliases, and ``get`` for ``compile(loss=...)``.

The loss classes live in `loss` (the base), `crossentropy_losses` and `regression_losses`;
`LOSSES` (a `mirrorfit._src.utils.registry.Registry`) names them. ``get`` turns every
accepted form (a Keras name, a ``Loss`` object or class, a config dict, a plain callable)
into what the per-replica train step calls: ``fn(y_true, y_pred)`` -> per-example loss
``[batch]``. The step, not the loss, weights the examples, masks padding rows and averages
over the global batch.
"""

from __future__ import annotations

import inspect
from typing import Any, cast

from mirrorfit._src.losses import crossentropy_losses as ce
from mirrorfit._src.losses import regression_losses as rl
from mirrorfit._src.losses.crossentropy_losses import (
    NOT_PROBABILITIES_WARNING as NOT_PROBABILITIES_WARNING,
)
from mirrorfit._src.losses.loss import Loss, LossFn, PerExampleLoss
from mirrorfit._src.utils import registry


class LossRegistry(registry.Registry):
    """The loss registry, whose `get` gives what ``compile(loss=...)``'s train step calls."""

    def convert(self, value: Any, name: str | None) -> LossFn:
        """A `Loss` (or a `Loss` class, or a class found by a name, built with its defaults)
        wrapped in `PerExampleLoss`; any other callable ``fn(y_true, y_pred) -> [batch]`` as
        is."""
        if inspect.isclass(value) and (name is not None or issubclass(value, Loss)):
            value = self.build(value, name)
        if isinstance(value, Loss):
            return PerExampleLoss(value)
        if callable(value):
            return cast(LossFn, value)
        self.refuse(value)


LOSSES = LossRegistry("loss", "mirrorfit.losses", base=(Loss,), expected=(
    "a mf.losses.Loss or a callable fn(y_true, y_pred) -> [batch]"))
"""Keras' loss names (``keras.losses.ALL_OBJECTS_DICT``) -> class; lookups ignore case."""

for _cls in (ce.BinaryCrossentropy, ce.BinaryFocalCrossentropy, ce.CategoricalCrossentropy,
             ce.CategoricalFocalCrossentropy, ce.SparseCategoricalCrossentropy,
             rl.MeanSquaredError, rl.MeanAbsoluteError, rl.MeanAbsolutePercentageError,
             rl.MeanSquaredLogarithmicError, rl.CosineSimilarity, rl.Huber, rl.LogCosh,
             rl.Hinge, rl.SquaredHinge, rl.CategoricalHinge, rl.KLDivergence, rl.Poisson):
    # Keras' function names (keras.losses.huber, ...), each the function of its class.
    LOSSES.register(_cls, aliases=(_cls().fn.__name__,))
# Keras 3's short aliases, and tf.keras' legacy names.
LOSSES.register(ce.BinaryCrossentropy, aliases=("bce",))
LOSSES.register(rl.KLDivergence, aliases=("kld", "kullback_leibler_divergence"))
LOSSES.register(rl.MeanAbsoluteError, aliases=("mae",))
LOSSES.register(rl.MeanSquaredError, aliases=("mse",))
LOSSES.register(rl.MeanAbsolutePercentageError, aliases=("mape",))
LOSSES.register(rl.MeanSquaredLogarithmicError, aliases=("msle",))
LOSSES.register(rl.LogCosh, aliases=("logcosh",))
# Keras' compile picks binary, sparse or categorical crossentropy from the shapes.
LOSSES.register(ce.InferredCrossentropy, aliases=("crossentropy", "ce"))


serialize = LOSSES.serialize
"""A loss's config, ``{"module", "class_name", "config", "registered_name"}``, as
``keras.losses.serialize``; anything else raises a TypeError."""

deserialize = LOSSES.deserialize
"""The `Loss` that `serialize` described, as ``keras.losses.deserialize``; your classes come
from ``@mf.saving.register_serializable`` or ``custom_objects`` (``{class name: class}``). An
unknown class, or anything but a config, raises a ValueError."""

get = LOSSES.get
"""The per-example loss callable for ``Model.compile(loss=...)`` (`Registry.get` and
`LossRegistry.convert`): from a Keras loss name or alias (any case: ``"mse"``, ``"huber"``,
``"BinaryFocalCrossentropy"``) or the registered name of your loss (``"Custom>MyLoss"``, see
``mf.saving.register_serializable``), a `Loss` object or class, a `serialize` dict, or any
callable ``fn(y_true, y_pred) -> [batch]`` (returned as is). `Loss` objects come back wrapped
in `PerExampleLoss` (``loss(y_true, y_pred) -> float32 [batch]``, with the loss's ``name``
and ``not_probabilities``). An unknown name or config raises a ValueError, anything else a
TypeError."""
