"""Label and array helpers on the host, as ``keras.utils`` (keras/src/utils/numerical_utils.py):
`to_categorical` (one-hot class matrices) and `normalize` (unit-norm rows)."""

from __future__ import annotations

from typing import Any

import numpy as np


def to_categorical(x: Any, num_classes: int | None = None) -> np.ndarray:
    """One-hot rows for integer class ids, as ``keras.utils.to_categorical``.

    Args:
        x: integer class ids ``[...]`` in ``[0, num_classes)``; a trailing axis of size 1
            (``[batch, 1]``) is dropped first, as Keras does.
        num_classes: the number of classes; ``None`` is ``max(x) + 1``.

    Returns:
        A float64 array ``[..., num_classes]`` (class axis last), as Keras' NumPy path.

    Raises:
        ValueError: ``x`` is empty and ``num_classes`` is not given.

    Example:
        >>> mf.utils.to_categorical([0, 2, 1], num_classes=3)
        array([[1., 0., 0.],
               [0., 0., 1.],
               [0., 1., 0.]])
    """
    x = np.array(x, dtype="int64")
    shape = x.shape
    if shape and shape[-1] == 1 and len(shape) > 1:
        shape = shape[:-1]
    x = x.reshape(-1)
    if not num_classes:
        if not x.size:
            raise ValueError("to_categorical needs num_classes for empty x. "
                             f"Received: x of shape {shape}, num_classes={num_classes!r}")
        num_classes = int(np.max(x)) + 1
    categorical = np.zeros((x.shape[0], num_classes))
    categorical[np.arange(x.shape[0]), x] = 1
    return categorical.reshape((*shape, num_classes))


def normalize(x: Any, axis: int | None = -1, order: Any = 2) -> np.ndarray:
    """``x`` divided by its ``order``-norm along ``axis``, as ``keras.utils.normalize``.

    Norms of zero count as one (an all-zero row stays zero), as Keras. One difference: Keras
    3.15 re-inserts the norm's axis at ``-1`` whatever ``axis`` was (so ``axis=0`` on a
    matrix divides by the wrong norms); this re-inserts it at ``axis``.

    Args:
        x: an array; NumPy and array-likes (a JAX array comes back as NumPy).
        axis: the axis to normalize along; ``None`` normalizes by one norm of all of ``x``
            (``np.linalg.norm``'s vector or Frobenius norm).
        order: the norm order, as ``np.linalg.norm``'s ``ord`` (2: Euclidean, 1: sum of
            absolute values, ``np.inf``: max).

    Returns:
        A float array of ``x``'s shape.

    Example:
        >>> mf.utils.normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
        array([[0.6, 0.8],
               [0. , 0. ]])
    """
    x = np.asarray(x)
    norm = np.atleast_1d(np.linalg.norm(x, order, axis))
    norm[norm == 0] = 1
    return x / (np.expand_dims(norm, axis) if axis is not None else norm)
