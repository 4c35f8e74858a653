"""``class_weight``: per-class weights turned into per-example sample weights, as Keras.

The class of an example is its label for sparse labels ``[batch]`` (rounded, as Keras), the
squeezed label for ``[batch, 1]``, and the argmax for one-hot (or probability) labels
``[batch, num_classes]``. A class missing from the dict weighs 1. Given together with
``sample_weight``, the two multiply, as tf.keras 2 did (Keras 3 rejects the combination).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def check_class_weight(class_weight: Any) -> dict[int, float] | None:
    """Validates ``class_weight`` as ``{int class: float weight}`` (``None`` passes).

    Raises:
        TypeError: if it is not a mapping, or a key is not an integer class index.
        ValueError: for a non-numeric weight.
    """
    if class_weight is None:
        return None
    if not isinstance(class_weight, Mapping):
        raise TypeError("class_weight must be a dict {class index: weight}, e.g. {{0: 1.0, "
                        f"1: 5.0}}. Received: class_weight={class_weight!r}")
    clean = {}
    for key, value in class_weight.items():
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
            raise TypeError("class_weight keys must be integer class indices (the label, or "
                             f"the argmax of a one-hot label). Received: key {key!r} in "
                             f"class_weight={class_weight!r}")
        try:
            clean[int(key)] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"class_weight values must be numbers. Received: "
                             f"class_weight[{key!r}]={value!r}") from None
    return clean


def class_weights_to_sample_weights(y: Any, class_weight: Mapping[int, float]) -> np.ndarray:
    """Per-example weights from targets, as ``keras``' ``class_weight_to_sample_weights``.

    Args:
        y: targets ``[batch]`` (sparse), ``[batch, 1]`` or ``[batch, num_classes]``
            (one-hot: the class is the argmax).
        class_weight: ``{class: weight}``; classes not in it weigh 1.

    Returns:
        float32 ``[batch]``.

    Raises:
        TypeError: if ``y`` is not a single array (several outputs).
        ValueError: if ``y`` is a scalar or has more than two dimensions.
    """
    if isinstance(y, (dict, tuple, list)):
        raise TypeError("class_weight is only supported for models with a single output "
                         f"(one target array). Received: y of type {type(y).__name__}")
    labels = np.asarray(y)
    if labels.ndim == 0:
        raise ValueError("class_weight needs targets [batch, ...]. Received: y of shape ()")
    if labels.ndim > 1:
        labels = labels.argmax(-1) if labels.shape[-1] != 1 else labels.squeeze(-1)
    classes = np.round(labels).astype(np.int64)
    if classes.ndim != 1:
        raise ValueError("class_weight needs targets [batch], [batch, 1] or [batch, num_classes]."
                         f" Received: y of shape {np.shape(y)}")
    weights = np.ones(len(classes), np.float32)
    for cls, weight in class_weight.items():
        weights[classes == cls] = weight
    return weights
