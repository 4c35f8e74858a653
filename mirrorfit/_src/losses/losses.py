"""The loss registry: Keras' loss names and aliases, and ``get`` for ``compile(loss=...)``.

The loss classes live in `loss` (the base), `crossentropy_losses` and `regression_losses`.
``get`` turns every accepted form (a Keras name, a ``Loss`` object or class, a config dict,
a plain callable) into what the per-replica train step calls: ``fn(y_true, y_pred)`` ->
per-example loss ``[batch]``. The step, not the loss, weights the examples, masks padding
rows and averages over the global batch.
"""

from __future__ import annotations

from typing import Any, cast

from mirrorfit._src.losses import crossentropy_losses as ce
from mirrorfit._src.losses import regression_losses as rl
from mirrorfit._src.losses.crossentropy_losses import (
    NOT_PROBABILITIES_WARNING as NOT_PROBABILITIES_WARNING,
)
from mirrorfit._src.losses.loss import Loss, LossFn, PerExampleLoss

LOSS_CLASSES: tuple[type[Loss], ...] = (
    ce.BinaryCrossentropy, ce.BinaryFocalCrossentropy, ce.CategoricalCrossentropy,
    ce.CategoricalFocalCrossentropy, ce.SparseCategoricalCrossentropy,
    rl.MeanSquaredError, rl.MeanAbsoluteError, rl.MeanAbsolutePercentageError,
    rl.MeanSquaredLogarithmicError, rl.CosineSimilarity, rl.Huber, rl.LogCosh,
    rl.Hinge, rl.SquaredHinge, rl.CategoricalHinge, rl.KLDivergence, rl.Poisson,
)
"""Every built-in loss class."""

ALIASES: dict[str, type[Loss]] = {
    **{cls.__name__: cls for cls in LOSS_CLASSES},
    # Keras' function names (keras.losses.huber, ...), each the function of its class.
    **{cls().fn.__name__: cls for cls in LOSS_CLASSES},
    # Keras 3's short aliases, and tf.keras' legacy names.
    "bce": ce.BinaryCrossentropy, "kld": rl.KLDivergence, "mae": rl.MeanAbsoluteError,
    "mse": rl.MeanSquaredError, "mape": rl.MeanAbsolutePercentageError,
    "msle": rl.MeanSquaredLogarithmicError, "logcosh": rl.LogCosh,
    "kullback_leibler_divergence": rl.KLDivergence,
    # Keras' compile picks binary, sparse or categorical crossentropy from the shapes.
    "crossentropy": ce.InferredCrossentropy, "ce": ce.InferredCrossentropy,
}
"""Keras' loss names (``keras.losses.ALL_OBJECTS_DICT``) -> class; ``get`` ignores case."""

_BY_LOWER_NAME = {name.lower(): cls for name, cls in ALIASES.items()}


def serialize(loss: Loss) -> dict[str, Any]:
    """``{"class_name": ..., "config": loss.get_config()}``, as ``keras.losses.serialize``.

    Raises:
        TypeError: if ``loss`` is not a built-in `Loss` object.
    """
    if type(loss) not in (*LOSS_CLASSES, ce.InferredCrossentropy):
        raise TypeError("serialize takes a built-in mf.losses.Loss object (e.g. "
                        f"mf.losses.Huber(delta=2.0)). Received: loss={loss!r}")
    return {"class_name": type(loss).__name__, "config": loss.get_config()}


def deserialize(config: dict[str, Any]) -> Loss:
    """The `Loss` that `serialize` described.

    Raises:
        ValueError: for an unknown ``class_name`` or a malformed dict.
    """
    classes = {c.__name__: c for c in (*LOSS_CLASSES, ce.InferredCrossentropy)}
    cls = classes.get(config.get("class_name", "")) if isinstance(config, dict) else None
    if cls is None:
        raise ValueError("A loss config must be {'class_name': <a mf.losses class name>, "
                         f"'config': {{...}}}}. Received: loss={config!r}")
    return cls.from_config(config.get("config", {}))


def get(identifier: Any) -> LossFn:
    """Returns the per-example loss callable for ``Model.compile(loss=...)``.

    Args:
        identifier: a Keras loss name or alias (case-insensitive, e.g. ``"mse"``,
            ``"huber"``, ``"BinaryFocalCrossentropy"``), a `Loss` object or class
            (instantiated with its defaults), a `serialize` dict, or any callable
            ``fn(y_true, y_pred) -> [batch]`` (returned as is).

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
        cls = _BY_LOWER_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(
                f"Unknown loss name. Expected one of {sorted(ALIASES)} (any case) or a "
                f"callable fn(y_true, y_pred) -> [batch]. Received: loss={identifier!r}")
        return PerExampleLoss(cls())
    if isinstance(identifier, dict):
        return PerExampleLoss(deserialize(identifier))
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

