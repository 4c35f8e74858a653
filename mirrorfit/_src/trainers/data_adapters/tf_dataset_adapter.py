"""``tf.data.Dataset`` input, read as NumPy through ``as_numpy_iterator``.

TensorFlow is never imported here: a dataset is recognised by its class (as Keras'
``is_tf_dataset``). Known cardinality sets the steps per epoch; unknown cardinality ends an
epoch when the dataset is exhausted; infinite cardinality needs ``steps_per_epoch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirrorfit._src.trainers.data_adapters.iterable_data_adapter import IterableDataAdapter

INFINITE_CARDINALITY = -1  # tf.data.INFINITE_CARDINALITY
UNKNOWN_CARDINALITY = -2  # tf.data.UNKNOWN_CARDINALITY


def is_tf_dataset(x: Any) -> bool:
    """Whether ``x`` is a ``tf.data.Dataset``."""
    return any(cls.__name__ == "DatasetV2" and "tensorflow.python." in cls.__module__
               for cls in type(x).__mro__)


def tf_dataset_adapter(dataset: Any, *, steps: int | None, num_replicas: int,
                       with_targets: bool, class_weight: Mapping[int, float] | None
                       ) -> IterableDataAdapter:
    """The adapter of a ``tf.data.Dataset``; every epoch iterates it anew.

    Raises:
        ValueError: for an infinite dataset without ``steps``.
    """
    cardinality = int(dataset.cardinality()) if hasattr(dataset, "cardinality") else (
        UNKNOWN_CARDINALITY)
    if cardinality == INFINITE_CARDINALITY and steps is None:
        raise ValueError("An infinite tf.data.Dataset (e.g. after .repeat()) needs "
                         "steps_per_epoch (or steps) to end an epoch. Received: "
                         "steps_per_epoch=None")
    if cardinality >= 0:
        steps = cardinality if steps is None else min(steps, cardinality)

    def items(epoch: int, start_step: int):
        del epoch
        return iter(dataset.skip(start_step).as_numpy_iterator())

    return IterableDataAdapter(dataset, steps_per_epoch=steps, num_replicas=num_replicas,
                               with_targets=with_targets, class_weight=class_weight,
                               items=items, kind="tf.data.Dataset")
