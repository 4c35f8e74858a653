"""torch input: a ``torch.utils.data.DataLoader`` (or a torch ``IterableDataset``).

torch is never imported here: a loader is recognised by its class (as Keras'
``is_torch_dataloader``). The default collate yields lists ``[x, y]`` of tensors; they
become ``(x, y)`` NumPy batches (`to_numpy`). A loader over an ``IterableDataset`` has no
length and ends an epoch when exhausted.
"""

from __future__ import annotations

from typing import Any

from mirrorfit._src.trainers.data_adapters.iterable_data_adapter import IterableDataAdapter


def is_torch_dataloader(x: Any) -> bool:
    """Whether ``x`` is a torch ``DataLoader`` or ``IterableDataset``."""
    return any(cls.__name__ in ("DataLoader", "IterableDataset")
               and cls.__module__.startswith("torch.utils.data") for cls in type(x).__mro__)


def torch_data_loader_adapter(loader: Any, *, steps: int | None, num_replicas: int,
                              with_targets: bool) -> IterableDataAdapter:
    """The adapter of a torch ``DataLoader``; every epoch iterates it anew."""
    if steps is None:
        try:
            steps = len(loader)
        except TypeError:  # an IterableDataset without __len__: unknown length
            steps = None

    def items(epoch: int, start_step: int):
        del epoch
        iterator = iter(loader)
        for _ in range(start_step):
            next(iterator, None)
        return iterator

    return IterableDataAdapter(loader, steps_per_epoch=steps, num_replicas=num_replicas,
                               with_targets=with_targets, items=items, kind="torch DataLoader")
