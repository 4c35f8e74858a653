"""The input layer: whatever ``fit``, ``evaluate`` and ``predict`` receive, as padded batches.

One adapter per input kind, chosen in one place (`get_data_adapter`), as Keras 3's
``trainers/data_adapters``:

* `ArrayDataAdapter`: NumPy/JAX arrays, or dicts/tuples/lists of them;
* `IterableDataAdapter`: any iterable or generator of global batches.

Every adapter has ``steps`` (steps per epoch, ``None`` when unknown) and
``batches(epoch, start_step=0, group=1)``, which yields `mirrorfit._src.batch.Batch` es of
one static shape. `train_and_validation` applies ``fit``'s validation arguments.
"""

from __future__ import annotations

import warnings
from typing import Any

from mirrorfit._src import input_checks
from mirrorfit._src.checks import MirrorfitWarning, positive_int
from mirrorfit._src.data_adapters.array_data_adapter import ArrayDataAdapter, is_array_input
from mirrorfit._src.data_adapters.iterable_data_adapter import IterableDataAdapter

DEFAULT_BATCH_SIZE = 32
"""Keras' default global batch size."""


def check_batch_size(batch_size: Any) -> int:
    """Validates a global batch size (``None`` means Keras' default of 32)."""
    if batch_size is None:
        return DEFAULT_BATCH_SIZE
    return positive_int(batch_size, "batch_size", "the global batch, split across replicas, "
                        "e.g. 32 * strategy.num_replicas_in_sync")


def get_data_adapter(x: Any, y: Any = None, sample_weight: Any = None, *, batch_size: Any,
                     num_replicas: int, shuffle: bool = False, steps: Any = None, seed: int = 0,
                     with_targets: bool = True) -> ArrayDataAdapter | IterableDataAdapter:
    """The adapter for ``x`` (and ``y``, ``sample_weight``).

    Args:
        x: arrays ``[num_examples, ...]`` (or a dict/tuple/list of them), or an iterable of
            global batches.
        y: targets for array ``x``; ``None`` for an iterable or for predict.
        sample_weight: float ``[num_examples]`` for array ``x``, or ``None``.
        batch_size: global batch size for array ``x`` (``None``: 32).
        num_replicas: replica count; batches are padded to a multiple of it.
        shuffle: reshuffle array rows every epoch.
        steps: steps per epoch (``steps_per_epoch``); ``None`` for a whole pass.
        seed: base seed of the shuffle order.
        with_targets: ``False`` for predict (inputs only).

    Raises:
        ValueError: for a missing ``x``/``y``, ``y`` given with an iterable, or a
            non-positive ``batch_size``/``steps``.
        TypeError: if ``x`` is neither arrays nor an iterable, is a Python list of numbers,
            or holds strings or objects.
    """
    if x is None:
        raise ValueError("x is required: arrays, a dict/tuple of arrays, or an iterable of "
                         "batches. Received: x=None")
    steps = None if steps is None else positive_int(steps, "steps_per_epoch")
    input_checks.check_not_nested_lists(x, "x")
    input_checks.check_not_nested_lists(y, "y")
    if is_array_input(x):
        if with_targets and y is None:
            raise ValueError("y is required when x is an array (targets for the loss). "
                             "Received: y=None")
        data = ArrayDataAdapter(x, y if with_targets else None, sample_weight,
                                batch_size=check_batch_size(batch_size),
                                num_replicas=num_replicas, shuffle=shuffle, seed=seed)
        if steps is not None:
            data.steps = min(data.steps, steps)
        return data
    if y is not None:
        raise ValueError("y must be None when x is an iterable of (x, y) batches. "
                         f"Received: y of type {type(y).__name__}")
    try:
        iter(x)
    except TypeError:
        raise TypeError("x must be an array, a dict/tuple of arrays, or an iterable of "
                        f"batches. Received: x of type {type(x).__name__}") from None
    return IterableDataAdapter(x, steps_per_epoch=steps, num_replicas=num_replicas,
                               with_targets=with_targets)


def train_and_validation(train: Any, *, validation_split: Any, validation_data: Any,
                         batch_size: Any, num_replicas: int, steps: Any = None
                         ) -> tuple[Any, Any]:
    """``fit``'s training adapter and its validation adapter (or ``None``).

    ``validation_split`` takes the last fraction of array rows, before shuffling, as Keras;
    otherwise ``validation_data`` (``(x, y)`` or ``(x, y, sample_weight)``) is adapted. Given
    both, ``validation_data`` wins, with a warning, as in Keras.

    Raises:
        ValueError: for a split outside ``[0, 1)``, a split of an iterable, or a malformed
            ``validation_data``.
    """
    if not 0.0 <= float(validation_split) < 1.0:
        raise ValueError("validation_split must be in [0, 1), the fraction of rows held out "
                         f"for validation. Received: validation_split={validation_split!r}")
    if validation_split and validation_data is not None:
        warnings.warn("fit got both validation_split and validation_data: validation_data is "
                      "used and validation_split ignored, as in Keras. Pass only one. Received: "
                      f"validation_split={validation_split!r}", MirrorfitWarning, stacklevel=4)
        validation_split = 0.0
    if validation_split:
        if not isinstance(train, ArrayDataAdapter):
            raise ValueError("validation_split needs array inputs; for an iterable pass "
                             "validation_data. Received: x of type "
                             f"{type(train).__name__}")
        train, validation = train.split(validation_split, num_replicas)
        if steps is not None:
            train.steps = min(train.steps, positive_int(steps, "steps_per_epoch"))
        return train, validation
    if validation_data is None:
        return train, None
    if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
        raise ValueError("validation_data must be a tuple (x_val, y_val) or (x_val, y_val, "
                         f"sample_weight). Received: validation_data of type "
                         f"{type(validation_data).__name__}")
    x_val, y_val, *rest = validation_data
    return train, get_data_adapter(x_val, y_val, rest[0] if rest else None,
                                   batch_size=batch_size, num_replicas=num_replicas)


__all__ = [
    "ArrayDataAdapter",
    "DEFAULT_BATCH_SIZE",
    "IterableDataAdapter",
    "check_batch_size",
    "get_data_adapter",
    "is_array_input",
    "train_and_validation",
]
