"""The loss registry: Keras' loss names and aliases, and ``get`` for ``compile(loss=...)``.

The loss classes live in `loss` (the base), `crossentropy_losses` and `regression_losses`;
`LOSSES` (a `mirrorfit._src.utils.registry.Registry`) names them. ``get`` turns every
accepted form (a Keras name, a ``Loss`` object or class, a config dict, a plain callable)
into what the per-replica train step calls: ``fn(y_true, y_pred)`` -> per-example loss
``[batch]``. The step, not the loss, weights the examples, masks padding rows and averages
over the global batch.
"""

from __future__ import annotations

from typing import Any, cast

from mirrorfit._src.losses import crossentropy_losses as ce
from mirrorfit._src.losses import regression_losses as rl
from mirrorfit._src.losses.crossentropy_losses import (
    NOT_PROBABILITIES_WARNING as NOT_PROBABILITIES_WARNING,
)
from mirrorfit._src.losses.loss import Loss, LossFn, PerExampleLoss
from mirrorfit._src.utils import registry

LOSSES = registry.Registry("loss", "mirrorfit.losses")
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


def serialize(loss: Loss) -> dict[str, Any]:
    """``{"module", "class_name", "config", "registered_name"}``, as ``keras.losses.serialize``.

    Raises:
        TypeError: if ``loss`` is not a `Loss` object.
    """
    if not isinstance(loss, Loss):
        raise TypeError("serialize takes a mf.losses.Loss object (e.g. "
                        f"mf.losses.Huber(delta=2.0)). Received: loss={loss!r}")
    return registry.serialize(loss)


def deserialize(config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Loss:
    """The `Loss` that `serialize` described; your classes come from
    ``@mf.saving.register_serializable`` or ``custom_objects`` (``{class name: class}``).

    Raises:
        ValueError: for an unknown class or a malformed dict.
    """
    return LOSSES.deserialize(config, custom_objects)


def get(identifier: Any) -> LossFn:
    """Returns the per-example loss callable for ``Model.compile(loss=...)``.

    Args:
        identifier: a Keras loss name or alias (case-insensitive, e.g. ``"mse"``,
            ``"huber"``, ``"BinaryFocalCrossentropy"``) or the registered name of your
            loss (``"Custom>MyLoss"``, see ``mf.saving.register_serializable``), a `Loss`
            object or class (instantiated with its defaults), a `serialize` dict, or any
            callable ``fn(y_true, y_pred) -> [batch]`` (returned as is).

    Returns:
        A callable ``loss(y_true, y_pred) -> float32 [batch]``; `Loss` objects come back
        wrapped in `PerExampleLoss` (with the loss's ``name`` and ``not_probabilities``).

    Raises:
        ValueError: for an unknown name or config.
        TypeError: for anything that is neither a string, a dict nor a callable.

    Example:
        >>> get("mse")
        PerExampleLoss(MeanSquaredError(name='mean_squared_error', reduction='sum_over_batch_size'))
    """
    if isinstance(identifier, str):
        found = LOSSES.get(identifier)
        if found is None:
            raise ValueError(
                f"Unknown loss name. Expected one of {LOSSES.names()} (any case), a name "
                "registered with mf.saving.register_serializable, or a callable "
                f"fn(y_true, y_pred) -> [batch]. Received: loss={identifier!r}")
        return get(found() if isinstance(found, type) else found)
    if isinstance(identifier, dict):
        return get(deserialize(identifier))
    if isinstance(identifier, type) and issubclass(identifier, Loss):
        return PerExampleLoss(identifier())
    if isinstance(identifier, Loss):
        return PerExampleLoss(identifier)
    if callable(identifier):
        return cast(LossFn, identifier)  # taken as fn(y_true, y_pred) -> [batch]
    raise TypeError(
        "loss must be a loss name (e.g. 'sparse_categorical_crossentropy'), a mf.losses.Loss "
        f"or a callable fn(y_true, y_pred) -> [batch]. Received: loss={identifier!r} "
        f"of type {type(identifier).__name__}")

