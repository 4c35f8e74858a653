"""The ``Loss`` base class: Keras' reductions, config, and the per-example form ``fit`` uses.

A Keras loss has two faces, and this module owns both:

* ``loss(y_true, y_pred, sample_weight=None)`` returns the value Keras returns, reduced as
  ``reduction`` says (``"sum_over_batch_size"`` by default, as ``keras.losses.Loss``);
* ``loss.per_example(y_true, y_pred)`` returns one value per example, ``[batch]``: what the
  per-replica train step needs, since it weights, masks padding rows and averages over the
  global batch itself (``PerExampleLoss`` wraps a loss in that form for ``compile``).

``loss.call(y_true, y_pred)`` gives Keras' unreduced values ``[batch, ...]`` behind both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.utils.naming import snake_case

EPSILON = 1e-7
"""Keras backend epsilon (``keras.config.epsilon()``) used to clip probabilities."""

REDUCTIONS = ("sum_over_batch_size", "sum", "mean", "mean_with_sample_weight", "none", None)
"""The ``reduction`` values ``keras.losses.Loss`` accepts (`Loss` also takes ``"auto"``)."""


class Reduction:
    """tf.keras 2's ``tf.keras.losses.Reduction`` names for the ``reduction`` strings.

    ``AUTO`` is tf.keras 2's default and means ``"sum_over_batch_size"`` (inside ``fit``
    the loss is always averaged over the global batch, whatever the reduction).

    Example:
        >>> loss = mf.losses.MeanSquaredError(reduction=mf.losses.Reduction.NONE)
        >>> loss(jnp.zeros((2, 1)), jnp.ones((2, 1))).shape
        (2,)
    """

    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls) -> tuple[str, ...]:
        """The four names' values, as ``tf.keras.losses.Reduction.all()``."""
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)

    @classmethod
    def validate(cls, key: str) -> None:
        """Raises ValueError unless ``key`` is one of `all`, as tf.keras 2's ``validate``."""
        if key not in cls.all():
            raise ValueError(f"reduction must be one of {list(cls.all())}. "
                             f"Received: reduction={key!r}")

LossFn = Callable[[jax.Array, jax.Array], jax.Array]


def squeeze_or_expand_to_same_rank(
    y_true: jax.Array, y_pred: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Matches ranks as Keras' function of that name, keeping a feature axis.

    ``[batch]`` targets against ``[batch, 1]`` outputs become ``[batch, 1]``; two
    ``[batch]`` arrays become ``[batch, 1]`` so a last-axis reduction stays per example
    (Keras would reduce such a pair to one scalar).
    """
    if y_true.ndim == y_pred.ndim + 1 and y_true.shape[-1] == 1:
        y_true = jnp.squeeze(y_true, -1)
    elif y_pred.ndim == y_true.ndim + 1 and y_pred.shape[-1] == 1:
        y_true = jnp.expand_dims(y_true, -1)
    if y_pred.ndim == 1:
        y_true, y_pred = y_true[:, None], y_pred[:, None]
    return y_true, y_pred


def _match_weight_rank(values: jax.Array, weight: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Keras' rank matching of losses and sample weights, then ``weight`` broadcast over
    the trailing axes of ``values``."""
    if values.ndim == weight.ndim + 1 and values.shape[-1] == 1:
        if weight.ndim == 1:
            weight = weight[:, None]
        else:
            values = jnp.squeeze(values, -1)
    elif weight.ndim == values.ndim + 1 and weight.shape[-1] == 1:
        if values.ndim == 1:
            values = values[:, None]
        else:
            weight = jnp.squeeze(weight, -1)
    while weight.ndim < values.ndim:
        weight = weight[..., None]
    return values, weight


def reduce_weighted_values(values: jax.Array, sample_weight: jax.Array | None,
                           reduction: str | None) -> jax.Array:
    """Keras' ``reduce_weighted_values``: weight, then sum or average.

    Args:
        values: float32 ``[batch, ...]`` unreduced losses.
        sample_weight: ``None`` or float ``[batch]`` / ``[batch, ...]``.
        reduction: one of `REDUCTIONS`.

    Returns:
        A scalar, or ``values * sample_weight`` for ``None``/``"none"``.
    """
    if sample_weight is not None:
        sample_weight = jnp.asarray(sample_weight, values.dtype)
        values, sample_weight = _match_weight_rank(values, sample_weight)
        values = values * sample_weight
    if reduction in (None, "none") or values.ndim == 0:
        return values
    total = jnp.sum(values)
    if reduction == "sum":
        return total
    if reduction == "mean_with_sample_weight" and sample_weight is not None:
        divisor = jnp.sum(sample_weight)
    else:
        divisor = jnp.asarray(values.size, values.dtype)
    return jnp.where(divisor == 0, 0.0, total / jnp.where(divisor == 0, 1.0, divisor))


class Loss:
    """Base class of mirrorfit losses, as ``keras.losses.Loss``.

    Subclasses implement ``call``. Losses that expect probabilities override
    ``not_probabilities``. Any plain ``fn(y_true, y_pred) -> [batch]`` also works in
    ``compile``.

    Args:
        name: the loss's name; defaults to the class name in snake_case.
        reduction: one of ``"sum_over_batch_size"`` (default), ``"sum"``, ``"mean"``,
            ``"mean_with_sample_weight"``, ``"none"`` or ``None`` (or tf.keras 2's
            `Reduction` names, ``"auto"`` meaning the default); applies when the loss is
            called directly. Inside ``fit``/``evaluate`` the loss is always the weighted
            mean over the real rows of the global batch (``tf.distribute``'s
            ``compute_average_loss``).

    Attributes:
        expects_probabilities: whether ``y_pred`` must be probabilities (crossentropies
            without ``from_logits``).

    Raises:
        ValueError: for a ``reduction`` not in that list.

    Example:
        >>> class Cubed(Loss):
        ...     def call(self, y_true, y_pred):
        ...         return jnp.mean(jnp.abs(y_pred - y_true) ** 3, axis=-1)
        >>> float(Cubed()(jnp.zeros((2, 1)), jnp.full((2, 1), 2.0)))
        8.0
    """

    expects_probabilities: bool = False

    def __init__(self, name: str | None = None,
                 reduction: str | None = "sum_over_batch_size") -> None:
        if reduction == Reduction.AUTO:
            reduction = Reduction.SUM_OVER_BATCH_SIZE
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, as in Keras. "
                             f"Received: reduction={reduction!r}")
        self.name = name or snake_case(type(self).__name__)
        self.reduction = reduction

    def call(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """Keras' unreduced loss values.

        Args:
            y_true: targets, ``[batch, ...]``.
            y_pred: model outputs, ``[batch, ...]``.

        Returns:
            float32 ``[batch, ...]`` (usually ``[batch]``, the last axis reduced).
        """
        raise NotImplementedError

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> jax.Array:
        """The loss reduced as ``self.reduction`` says, as calling a Keras loss.

        Args:
            y_true: targets, ``[batch, ...]``.
            y_pred: model outputs, ``[batch, ...]``.
            sample_weight: ``None`` or ``[batch]`` (or ``[batch, ...]``) weights.

        Returns:
            A float32 scalar, or the weighted unreduced values for ``reduction=None``.
        """
        return reduce_weighted_values(self.call(y_true, y_pred), sample_weight, self.reduction)

    def per_example(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """One value per example: ``call`` averaged over its non-batch axes.

        Returns:
            float32 ``[batch]``.
        """
        values = jnp.asarray(self.call(y_true, y_pred), jnp.float32)
        return jnp.mean(values, axis=tuple(range(1, values.ndim)))

    def not_probabilities(self, y_pred: jax.Array) -> jax.Array | None:
        """Flags examples whose outputs are clearly not probabilities.

        Args:
            y_pred: model outputs, ``[batch, ...]``.

        Returns:
            bool ``[batch]`` (True = not probabilities), or None when this loss
            does not expect probabilities.
        """
        del y_pred
        return None

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, as ``keras.losses.Loss.get_config``."""
        return {"name": self.name, "reduction": self.reduction}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Loss:
        """Rebuilds a loss from ``get_config()``."""
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.get_config() == self.get_config()

    def __hash__(self) -> int:
        return hash((type(self), repr(sorted(self.get_config().items(), key=str))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class LossFunctionWrapper(Loss):
    """A ``Loss`` around a function ``fn(y_true, y_pred, **kwargs) -> [batch, ...]``.

    As ``keras.losses.LossFunctionWrapper``; the built-in losses are such wrappers, and
    their keyword arguments are their config.

    Args:
        fn: the unreduced loss function.
        reduction: see `Loss`.
        name: see `Loss`; defaults to ``fn.__name__``.
        **kwargs: passed to ``fn`` on every call.

    Example:
        >>> loss = LossFunctionWrapper(lambda t, p: jnp.abs(p - t)[:, 0], name="l1")
        >>> loss.per_example(jnp.zeros((2, 1)), jnp.ones((2, 1))).shape
        (2,)
    """

    def __init__(self, fn: Callable[..., jax.Array], reduction: str | None = "sum_over_batch_size",
                 name: str | None = None, **kwargs: Any) -> None:
        super().__init__(name=name or getattr(fn, "__name__", None), reduction=reduction)
        self.fn = fn
        self.fn_kwargs = kwargs

    def call(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """``fn(y_true, y_pred, **kwargs)``: the unreduced loss ``[batch, ...]``."""
        return self.fn(y_true, y_pred, **self.fn_kwargs)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: ``name``, ``reduction`` and the keyword arguments given to
        ``fn`` (and ``fn`` itself for a plain `LossFunctionWrapper`, which has no JSON
        form).
        """
        config = super().get_config()
        if type(self) is LossFunctionWrapper:
            config["fn"] = self.fn
        return {**config, **self.fn_kwargs}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Loss:
        """The loss of a `get_config` output."""
        return cls(**config)

    def __getattr__(self, name: str) -> Any:
        kwargs = self.__dict__.get("fn_kwargs", {})
        if name in kwargs:  # e.g. loss.from_logits, loss.label_smoothing
            return kwargs[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class PerExampleLoss:
    """A `Loss` in the per-example form ``compile`` uses: ``fn(y_true, y_pred) -> [batch]``.

    ``mf.losses.get`` returns this for names and ``Loss`` objects, so the train step can
    weight, mask and average every loss the same way.

    Attributes:
        loss: the wrapped `Loss`.
        name: ``loss.name``.
    """

    def __init__(self, loss: Loss) -> None:
        self.loss = loss
        self.name = loss.name

    def __call__(self, y_true: jax.Array, y_pred: Any) -> jax.Array:
        """float32 ``[batch]``: ``loss.per_example(y_true, y_pred)``."""
        return self.loss.per_example(y_true, y_pred)

    def elements(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """float32 ``[batch, ...]``: ``loss.call(y_true, y_pred)``, unreduced (what an output
        mask weights, as in Keras' ``Loss.__call__``)."""
        return jnp.asarray(self.loss.call(y_true, y_pred), jnp.float32)

    def not_probabilities(self, y_pred: jax.Array) -> jax.Array | None:
        """See `Loss.not_probabilities`."""
        return self.loss.not_probabilities(y_pred)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PerExampleLoss) and other.loss == self.loss

    def __hash__(self) -> int:
        return hash(self.loss)

    def __repr__(self) -> str:
        return f"PerExampleLoss({self.loss!r})"
