"""Keras' intersection-over-union metrics from a weighted confusion matrix.

The statistic is the ``[num_classes, num_classes]`` confusion matrix (rows: true class,
columns: predicted class), summed over examples, as ``keras/src/metrics/iou_metrics.py``.
Pixels or examples whose class lies outside ``[0, num_classes)``, or equals
``ignore_class``, do not count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.losses.loss import EPSILON
from mirrorfit._src.metrics.metric import Metric, array_namespace


class IoU(Metric):
    """Mean IoU ``tp / (tp + fp + fn)`` over ``target_class_ids``, as ``keras.metrics.IoU``.

    Args:
        num_classes: the number of classes.
        target_class_ids: the classes averaged over; classes never seen nor predicted
            are left out of the mean.
        name: key in the logs.
        ignore_class: a class id whose labels do not count.
        sparse_y_true: labels are class ids (else one-hot/scores: argmax over ``axis``).
        sparse_y_pred: predictions are class ids (else scores: argmax over ``axis``).
        axis: the class axis for the argmax.

    Sample weights are used as floats (Keras' default integer dtype would truncate them).

    Raises:
        ValueError: for a target class outside ``[0, num_classes)``.
    """

    def __init__(self, num_classes: int, target_class_ids: Sequence[int],
                 name: str | None = None, ignore_class: int | None = None,
                 sparse_y_true: bool = True, sparse_y_pred: bool = True,
                 axis: int = -1) -> None:
        super().__init__(name)
        if max(target_class_ids) >= num_classes or min(target_class_ids) < 0:
            raise ValueError(f"target_class_ids must lie in [0, num_classes={num_classes}). "
                             f"Received: target_class_ids={list(target_class_ids)!r}")
        self.num_classes = num_classes
        self.target_class_ids = list(target_class_ids)
        self.ignore_class = ignore_class
        self.sparse_y_true = sparse_y_true
        self.sparse_y_pred = sparse_y_pred
        self.axis = axis

    def update(self, y_true: jax.Array, y_pred: jax.Array,
               sample_weight: jax.Array) -> dict[str, jax.Array]:
        """``{"confusion_matrix": [num_classes, num_classes]}`` weighted counts."""
        y_true, y_pred = jnp.asarray(y_true), jnp.asarray(y_pred)
        if not self.sparse_y_true:
            y_true = jnp.argmax(y_true, axis=self.axis)
        if not self.sparse_y_pred:
            y_pred = jnp.argmax(y_pred, axis=self.axis)
        y_true = y_true.astype(jnp.int32)
        y_pred = y_pred.astype(jnp.int32)
        if y_true.ndim > 1 and y_true.shape[-1] == 1 and y_true.ndim > y_pred.ndim:
            y_true = jnp.squeeze(y_true, -1)
        weight = jnp.asarray(sample_weight, jnp.float32)
        weight = jnp.broadcast_to(weight.reshape(weight.shape + (1,) * (y_true.ndim - 1)),
                                  y_true.shape).reshape(-1)
        y_true, y_pred = y_true.reshape(-1), y_pred.reshape(-1)
        valid = ((y_true >= 0) & (y_true < self.num_classes)
                 & (y_pred >= 0) & (y_pred < self.num_classes))
        if self.ignore_class is not None:
            valid &= y_true != self.ignore_class
        weight = jnp.where(valid, weight, 0.0)
        true_one_hot = jax.nn.one_hot(y_true, self.num_classes, dtype=jnp.float32)
        pred_one_hot = jax.nn.one_hot(y_pred, self.num_classes, dtype=jnp.float32)
        return {"confusion_matrix": (true_one_hot * weight[:, None]).T @ pred_one_hot}

    def result(self, stats: Any = None) -> Any:
        """Mean IoU over the target classes that occur (Keras' epsilons included)."""
        xp = array_namespace(stats)
        cm = stats["confusion_matrix"]
        tp = xp.diagonal(cm)
        denominator = xp.sum(cm, axis=0) + xp.sum(cm, axis=1) - tp
        ids = xp.asarray(self.target_class_ids)
        tp, denominator = tp[ids], denominator[ids]
        valid = denominator > 1e-9
        iou = xp.where(valid, tp / (denominator + EPSILON), 0.0)
        return xp.sum(iou) / (xp.sum(valid.astype(iou.dtype)) + EPSILON)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments, from which `from_config` rebuilds
        the metric.
        """
        return {"num_classes": self.num_classes, "target_class_ids": self.target_class_ids,
                "name": self.name, "ignore_class": self.ignore_class,
                "sparse_y_true": self.sparse_y_true, "sparse_y_pred": self.sparse_y_pred,
                "axis": self.axis}


class MeanIoU(IoU):
    """`IoU` averaged over all ``num_classes`` classes, as ``keras.metrics.MeanIoU``.

    With model scores as ``y_pred`` pass ``sparse_y_pred=False`` (as in Keras).

    Example:
        >>> import numpy as np
        >>> m = MeanIoU(num_classes=2)
        >>> m.update_state(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]))
        >>> round(float(m.result()), 4)
        0.3333
    """

    def __init__(self, num_classes: int, name: str | None = None,
                 ignore_class: int | None = None, sparse_y_true: bool = True,
                 sparse_y_pred: bool = True, axis: int = -1) -> None:
        super().__init__(num_classes, list(range(num_classes)), name=name,
                         ignore_class=ignore_class, sparse_y_true=sparse_y_true,
                         sparse_y_pred=sparse_y_pred, axis=axis)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments (`IoU`'s but ``target_class_ids``,
        which are all classes), from which `from_config` rebuilds the metric.
        """
        config = super().get_config()
        del config["target_class_ids"]
        return config


class OneHotIoU(IoU):
    """`IoU` for one-hot labels and class scores, as ``keras.metrics.OneHotIoU``."""

    def __init__(self, num_classes: int, target_class_ids: Sequence[int],
                 name: str | None = None, ignore_class: int | None = None,
                 sparse_y_pred: bool = False, axis: int = -1) -> None:
        super().__init__(num_classes, target_class_ids, name=name, ignore_class=ignore_class,
                         sparse_y_true=False, sparse_y_pred=sparse_y_pred, axis=axis)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments (`IoU`'s but ``sparse_y_true``,
        which is ``False``), from which `from_config` rebuilds the metric.
        """
        config = super().get_config()
        del config["sparse_y_true"]
        return config


class OneHotMeanIoU(MeanIoU):
    """`MeanIoU` for one-hot labels and class scores, as ``keras.metrics.OneHotMeanIoU``."""

    def __init__(self, num_classes: int, name: str | None = None,
                 ignore_class: int | None = None, sparse_y_pred: bool = False,
                 axis: int = -1) -> None:
        super().__init__(num_classes, name=name, ignore_class=ignore_class,
                         sparse_y_true=False, sparse_y_pred=sparse_y_pred, axis=axis)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments (`MeanIoU`'s but ``sparse_y_true``,
        which is ``False``), from which `from_config` rebuilds the metric.
        """
        config = super().get_config()
        del config["sparse_y_true"]
        return config
