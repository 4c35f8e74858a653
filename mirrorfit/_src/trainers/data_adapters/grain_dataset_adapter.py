"""grain input: ``grain.MapDataset``, ``grain.IterDataset`` (batched) and ``grain.DataLoader``.

grain is never imported here: a dataset is recognised by its class (as Keras'
``is_grain_dataset``). Each epoch iterates the dataset anew. A ``MapDataset`` has a length
(batches per epoch); an ``IterDataset`` or ``DataLoader`` ends an epoch when exhausted. Dict
elements (``{"image": ..., "label": ...}``) are rejected with the one-line ``map`` to
``(x, y)``. A grain source here gives every process the whole global batch; for one
pipeline per process, shard the data source (``grain.sharding.ShardByJaxProcess``) inside a
``dataset_fn`` and pass ``strategy.distribute_datasets_from_function(dataset_fn)`` to ``fit``
(``distributed_dataset_adapter``).
"""

from __future__ import annotations

from typing import Any

from mirrorfit._src.trainers.data_adapters.iterable_data_adapter import IterableDataAdapter


def is_grain_dataset(x: Any) -> bool:
    """Whether ``x`` is a grain ``MapDataset``, ``IterDataset`` or ``DataLoader``."""
    return any(cls.__name__ in ("MapDataset", "IterDataset", "DataLoader")
               and cls.__module__.startswith("grain") for cls in type(x).__mro__)


def grain_dataset_adapter(dataset: Any, *, steps: int | None, num_replicas: int,
                          with_targets: bool) -> IterableDataAdapter:
    """The adapter of a batched grain dataset or ``DataLoader``."""
    if steps is None and hasattr(dataset, "__len__"):
        steps = len(dataset)

    def items(epoch: int, start_step: int):
        del epoch
        if start_step and hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
            return (dataset[i] for i in range(start_step, len(dataset)))  # MapDataset
        iterator = iter(dataset)
        for _ in range(start_step):
            next(iterator, None)
        return iterator

    return IterableDataAdapter(dataset, steps_per_epoch=steps, num_replicas=num_replicas,
                               with_targets=with_targets, items=items, kind="grain dataset")
