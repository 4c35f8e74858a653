"""Checks of what the user feeds a step: shapes at the first trace, labels while training.

* `per_example_loss` calls the loss inside a step and checks, once per compiled step (the
  checks read static shapes, so they run while JAX traces and cost nothing afterwards):
  that targets fit the outputs for a built-in loss (one-hot targets given to a sparse loss,
  ``[batch, 3]`` targets against ``[batch, 1]`` outputs) and that the loss returns one
  value per example (a scalar mean counts padding rows, so it is rejected, with the
  per-example form shown). Errors name the loss, the target shape and the output shape.
* `label_range_statistic` counts sparse labels outside ``[0, num_classes)`` as one more
  entry of the step's sufficient statistics (no extra all-reduce), and
  `label_range_warning` turns the accumulated count into the warning ``fit`` shows once.
* `check_numeric`, `check_sample_weight` and `check_not_nested_lists` refuse, in the data
  adapters, inputs that JAX would reject with an unclear message or misread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.losses.crossentropy_losses import (
    InferredCrossentropy,
    SparseCategoricalCrossentropy,
)
from mirrorfit._src.losses.loss import Loss, squeeze_or_expand_to_same_rank

LABELS_OUT_OF_RANGE = "_labels_out_of_range"
"""Statistics key: float32 ``[2]``, ``[count, count * num_classes]`` of out-of-range labels.

The second entry carries the class count through sums over replicas and steps, so the host
can state the valid range: ``num_classes = entry[1] / entry[0]``.
"""

SCALAR_LOSS = (
    "The loss {name} returned a scalar (shape ()), but mirrorfit needs one value per "
    "example, shape [batch]: it leaves out the padding rows of a partial batch and averages "
    "over the global batch itself, so a mean taken inside the loss would be wrong on the "
    "last batch. Return the per-example values instead of their mean (a loss object called "
    "as loss(y_true, y_pred) reduces too: call loss.per_example(y_true, y_pred), or pass the "
    "loss object to compile), e.g.\n"
    "    def {func}(y_true, y_pred):\n"
    "        return jnp.mean(jnp.square(y_pred - y_true), axis=-1)  # [batch], not a scalar\n"
    "Received: loss={name} returning shape () for targets of shape {y_true} and outputs of "
    "shape {y_pred}")
"""Error for a loss that reduces over the batch (Keras' ``tf.reduce_mean(...)`` idiom)."""


def _name(loss: Any) -> str:
    return getattr(loss, "name", None) or getattr(loss, "__name__", None) or type(loss).__name__


def _dims(shape: tuple[int, ...]) -> str:
    """``[batch, 3]`` for a ``(per_replica_batch, 3)`` shape: the batch size varies."""
    return "[" + ", ".join(["batch", *map(str, shape[1:])]) + "]" if shape else "()"


def _shape(value: Any) -> str:
    return _dims(np.shape(value))


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _unwrapped(loss: Any) -> Any:
    """The `Loss` behind ``compile`` 's per-example wrapper (``PerExampleLoss.loss``)."""
    return getattr(loss, "loss", loss)


def _check_targets(loss: Any, y_true: Any, y_pred: Any) -> None:
    """Targets against outputs for mirrorfit's losses (the user's define their own rules).

    Sparse losses take one label per output row; every other built-in loss compares targets
    and outputs element by element, after Keras' rank matching.
    """
    name, loss = _name(loss), _unwrapped(loss)
    if not (isinstance(loss, Loss) and _is_array(y_true) and _is_array(y_pred)):
        return
    if isinstance(loss, InferredCrossentropy) or not (
            isinstance(loss, SparseCategoricalCrossentropy)
            or type(loss).__module__.startswith("mirrorfit.")):
        return  # it picks its form from the shapes, or it is the user's own
    received = (f"Received: targets of shape {_shape(y_true)} and outputs of shape "
                f"{_shape(y_pred)}")
    if isinstance(loss, SparseCategoricalCrossentropy):
        classes = y_pred.shape[:-1]
        if y_true.shape in (classes, (*classes, 1)):
            return
        hint = (" They look one-hot: pass integer labels (y.argmax(-1)) or use "
                "loss=\"categorical_crossentropy\"." if y_true.shape == y_pred.shape else "")
        raise ValueError(
            f"The loss {name} expects integer class labels of shape {_dims(classes)} "
            f"(or with a trailing 1) for outputs of shape {_shape(y_pred)}, one score per "
            f"class.{hint} {received}")
    labels, outputs = jax.eval_shape(squeeze_or_expand_to_same_rank,  # shapes only
                                     jax.ShapeDtypeStruct(y_true.shape, jnp.float32),
                                     jax.ShapeDtypeStruct(y_pred.shape, jnp.float32))
    if labels.shape != outputs.shape:
        hint = (" For integer class labels use loss=\"sparse_categorical_crossentropy\"."
                if y_pred.ndim == y_true.ndim + 1 else "")
        raise ValueError(
            f"The loss {name} needs targets of the outputs' shape {_shape(y_pred)}, one target "
            f"per output.{hint} Reshape y, or change the model's last layer. {received}")


def per_example_loss(loss: Callable[[Any, Any], jax.Array], y_true: Any, y_pred: Any
                     ) -> jax.Array:
    """``loss(y_true, y_pred)``, checked: float ``[batch]``, one value per example.

    Args:
        loss: the compiled loss, ``(y_true, y_pred) -> [batch]``.
        y_true: one replica's targets ``[batch, ...]``.
        y_pred: one replica's model outputs ``[batch, ...]``.

    Raises:
        ValueError: naming the loss, the target shape and the output shape, if targets do
            not fit the outputs, the loss fails on the shapes, or it returns anything but
            ``[batch]`` (a scalar mean included).
    """
    _check_targets(loss, y_true, y_pred)
    name = _name(loss)
    try:
        values = loss(y_true, y_pred)
    except (TypeError, ValueError) as err:
        if "shape" not in str(err):
            raise
        raise ValueError(
            f"The loss {name} failed on targets of shape {_shape(y_true)} and outputs of "
            f"shape {_shape(y_pred)}: {err}. Give targets that fit the model's outputs, or "
            f"a loss for this output shape. Received: loss={name}") from err
    batch = np.shape(jax.tree.leaves(y_pred)[0])[:1]
    if np.ndim(values) == 0:
        func = name if name.isidentifier() else "per_example_loss"
        raise ValueError(SCALAR_LOSS.format(name=name, func=func, y_true=_shape(y_true),
                                            y_pred=_shape(y_pred)))
    if np.shape(values) != batch:
        raise ValueError(
            f"The loss {name} must return one value per example, shape [batch]; reduce the "
            f"other axes per example, e.g. jnp.mean(values, axis=-1). Received: loss={name} "
            f"returning shape {_shape(values)} for targets of shape {_shape(y_true)} and "
            f"outputs of shape {_shape(y_pred)}")
    return values


def masked_loss(loss: Any, y_true: Any, y_pred: Any, mask: Any,
                rows: jax.Array | None = None) -> tuple[jax.Array, jax.Array | None]:
    """The loss per example and, under an output mask, its count of unmasked elements.

    With ``mask`` (the output's Keras mask, bool ``[batch, timesteps]``) and a built-in loss,
    each example's value is the **sum** of its unmasked element losses (``loss.call``'s
    ``[batch, timesteps, ...]``, the mask broadcast over trailing axes) and its count is the
    number of those elements: summed over real rows and replicas, their ratio is Keras'
    ``sum(l * sample_weight * mask) / sum(mask)`` (``"sum_over_batch_size"`` with a mask).
    A loss given as a plain function ``fn(y_true, y_pred)`` is masked the same way when it
    returns element losses the mask describes (``[batch, timesteps, ...]``, as Keras'
    ``LossFunctionWrapper`` masks what the function returns). A multi-output loss masks each
    output by its own mask and scales it to the rows' divisor itself
    (`MultiOutputLoss.per_output`; counts ``None``). Otherwise (no mask, a function
    returning one value per example, or element losses that the mask does not describe) it
    is `per_example_loss` and ``None``: the mean per example, counted once.

    Args:
        loss: the compiled loss.
        y_true: one replica's targets ``[batch, ...]``.
        y_pred: one replica's model outputs ``[batch, ...]``.
        mask: the output's mask, or ``None`` (for several outputs, their masks in the
            outputs' structure).
        rows: bool ``[batch]``, the real rows (used by a multi-output loss under a mask;
            ``None`` for shapes only, see `MultiOutputLoss.per_output`).

    Returns:
        ``(values, counts)``: float32 ``[batch]`` each, or ``(values, None)``.
    """
    if mask is not None and hasattr(loss, "per_output"):  # a MultiOutputLoss
        return loss(y_true, y_pred, mask, rows), None
    # A built-in loss's unreduced values, or what a plain function returns.
    elements = getattr(loss, "elements", loss)
    if mask is None or not (_is_array(y_pred) and _is_array(mask)):
        return per_example_loss(loss, y_true, y_pred), None
    _check_targets(loss, y_true, y_pred)
    values = elements(y_true, y_pred)
    if (not _is_array(values) or values.ndim < mask.ndim
            or values.shape[:mask.ndim] != mask.shape):
        return per_example_loss(loss, y_true, y_pred), None
    mask = jnp.broadcast_to(mask.reshape(mask.shape + (1,) * (values.ndim - mask.ndim)),
                            values.shape)
    axes = tuple(range(1, values.ndim))
    return (jnp.sum(jnp.where(mask, jnp.asarray(values, jnp.float32), 0.0), axis=axes),
            jnp.sum(mask, axis=axes, dtype=jnp.float32))


def label_range_statistic(loss: Any, y_true: Any, y_pred: Any, mask: jax.Array
                          ) -> jax.Array | None:
    """float32 ``[2]``: ``[n, n * num_classes]`` for ``n`` real labels outside the classes.

    ``None`` unless ``loss`` takes sparse labels. Padding rows (``mask`` False) never count.
    """
    if not (isinstance(_unwrapped(loss), SparseCategoricalCrossentropy) and _is_array(y_true)
            and _is_array(y_pred)):
        return None
    num_classes = y_pred.shape[-1]
    labels = y_true.astype(jnp.int32) if jnp.issubdtype(y_true.dtype, jnp.integer) else y_true
    outside = (labels < 0) | (labels >= num_classes)
    real = mask.reshape(mask.shape + (1,) * (outside.ndim - mask.ndim))
    count = jnp.sum(outside & real, dtype=jnp.float32)
    return jnp.stack([count, count * num_classes])


def label_range_warning(loss: Any, statistic: np.ndarray) -> str | None:
    """The warning for accumulated `label_range_statistic` s, or ``None`` if all were valid."""
    count = float(statistic[0])
    if count <= 0:
        return None
    num_classes = round(float(statistic[1]) / count)
    return (f"{int(count)} sparse labels given to the loss {_name(loss)} so far in this epoch "
            f"are outside the valid range [0, {num_classes}) for the model's {num_classes} "
            "outputs (a label of -1, or one >= the number of classes): their loss is NaN or 0 "
            "and they train nothing useful. Check y: class ids must be 0 .. "
            f"{num_classes - 1}; give the model more outputs for more classes.")


def check_numeric(tree: Any, name: str) -> None:
    """Raises a ``TypeError`` naming ``name`` if any array in ``tree`` holds strings/objects.

    Raises:
        TypeError: with the dtype received and how to encode the values as numbers.
    """
    for leaf in jax.tree.leaves(tree):
        kind = np.asarray(leaf).dtype.kind if not hasattr(leaf, "dtype") else leaf.dtype.kind
        if kind in "USO":
            raise TypeError(
                f"{name} must hold numbers (int class ids or floats). Encode strings as "
                f"integers, e.g. classes, {name}_ids = np.unique({name}, return_inverse=True); "
                "an object array usually means rows of different lengths: pad them to one "
                f"shape. Received: {name} with dtype {np.asarray(leaf).dtype}")


def check_sample_weight(sample_weight: np.ndarray | None, where: str = "sample_weight") -> None:
    """Raises a ``ValueError`` unless ``sample_weight`` is ``None`` or 1-D (one per row).

    Raises:
        ValueError: naming ``where`` and the shape received, with the fix.
    """
    if sample_weight is not None and np.ndim(sample_weight) != 1:
        raise ValueError(
            "sample_weight must have shape [num_examples], one weight per example. Flatten "
            "it, e.g. sample_weight.reshape(-1). Received: "
            f"{where} of shape {np.shape(sample_weight)}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, complex, bool, np.number))


def check_not_nested_lists(value: Any, name: str) -> None:
    """Raises a ``TypeError`` if ``value`` is a (nested) Python list or tuple of numbers.

    Such a list is not a list of inputs (those hold arrays) nor of batches (those hold
    tuples), so it would be misread as either.

    Raises:
        TypeError: naming ``name``, with the fix (``np.asarray``).
    """
    if isinstance(value, (list, tuple)) and value and all(
            _is_number(leaf) for leaf in jax.tree.leaves(value)):
        raise TypeError(
            f"{name} must be a NumPy or JAX array (or a dict/tuple/list of arrays, one per "
            f"model input), not a Python list of numbers. Convert it first: "
            f"{name} = np.asarray({name}, dtype=np.float32). Received: {name} as a "
            f"{type(value).__name__} of {len(value)} {type(value[0]).__name__}s")
