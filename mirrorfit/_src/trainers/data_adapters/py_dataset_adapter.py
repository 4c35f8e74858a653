"""`PyDataset` (``mf.utils.PyDataset``), Keras' indexable dataset of batches, and its adapter.

A `PyDataset` has ``__len__`` (batches per epoch) and ``__getitem__(index)`` returning one
global batch ``x``, ``(x, y)`` or ``(x, y, sample_weight)``, as ``keras.utils.PyDataset``.
``fit(shuffle=True)`` visits the batches in a new order every epoch (deterministic in the
model seed and the epoch); ``workers > 1`` loads batches on that many threads, in order.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator, Mapping, Sized
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from mirrorfit._src.trainers.data_adapters.iterable_data_adapter import IterableDataAdapter
from mirrorfit._src.utils.checks import positive_int


class PyDataset:
    """Base class of a dataset of global batches in Python, as ``keras.utils.PyDataset``.

    Subclasses implement ``__getitem__(index)``, returning the batch ``index`` as ``x``,
    ``(x, y)`` or ``(x, y, sample_weight)`` (leaves ``[global_batch, ...]``), and
    ``__len__`` (batches per epoch). A dataset without ``__len__`` is infinite: ``fit`` then
    needs ``steps_per_epoch``. ``on_epoch_begin``/``on_epoch_end`` run around every epoch.

    Args:
        workers: threads that call ``__getitem__`` ahead of the step (1: the prefetch
            thread alone).
        use_multiprocessing: must be ``False``; use threads (``workers``) instead.
        max_queue_size: batches loaded ahead when ``workers > 1``.

    Raises:
        ValueError: for ``use_multiprocessing=True`` or a non-positive ``workers`` or
            ``max_queue_size``.

    Example:
        >>> class Batches(mf.utils.PyDataset):
        ...     def __len__(self):
        ...         return 2
        ...     def __getitem__(self, index):
        ...         return x[index * 32:(index + 1) * 32], y[index * 32:(index + 1) * 32]
        >>> history = model.fit(Batches(), epochs=1, verbose=0)
    """

    def __init__(self, workers: int = 1, use_multiprocessing: bool = False,
                 max_queue_size: int = 10):
        self.workers = positive_int(workers, "workers", "threads loading batches")
        if use_multiprocessing:
            raise ValueError("use_multiprocessing=True is not supported: mirrorfit loads "
                             "PyDataset batches on threads; pass workers=N instead. Received: "
                             "use_multiprocessing=True")
        self.use_multiprocessing = False
        self.max_queue_size = positive_int(max_queue_size, "max_queue_size")

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__(index), "
                                  "returning one batch (x, y)")

    @property
    def num_batches(self) -> int | None:
        """Batches per epoch: ``len(self)``, or ``None`` for an infinite dataset."""
        return len(self) if isinstance(self, Sized) else None

    def on_epoch_begin(self) -> None:
        """Called before every epoch's first batch is loaded."""

    def on_epoch_end(self) -> None:
        """Called after every epoch's last batch is loaded."""


def _load(dataset: PyDataset, indices: Iterator[int]) -> Iterator[Any]:
    """``dataset[i]`` for ``i`` in ``indices``, in order; on threads when ``workers > 1``."""
    workers = getattr(dataset, "workers", 1)
    if workers == 1:
        yield from map(dataset.__getitem__, indices)
        return
    ahead = max(getattr(dataset, "max_queue_size", 10), workers)
    with ThreadPoolExecutor(workers, thread_name_prefix="mirrorfit-pydataset") as pool:
        pending: collections.deque = collections.deque()
        for index in indices:
            pending.append(pool.submit(dataset.__getitem__, index))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def py_dataset_adapter(dataset: PyDataset, *, shuffle: bool, seed: int, steps: int | None,
                       num_replicas: int, with_targets: bool,
                       class_weight: Mapping[int, float] | None) -> IterableDataAdapter:
    """The adapter of a `PyDataset`: batch order reshuffled per epoch when ``shuffle``.

    Raises:
        ValueError: for an infinite dataset (no ``__len__``) without ``steps``.
    """
    size = dataset.num_batches
    if size is None and steps is None:
        raise ValueError("An infinite PyDataset (no __len__) needs steps_per_epoch (or steps) "
                         "to end an epoch. Received: steps_per_epoch=None")

    def items(epoch: int, start_step: int) -> Iterator[Any]:
        if size is None:
            order: Any = itertools.count(start_step)
        elif shuffle:
            order = np.random.default_rng(seed + epoch).permutation(size)[start_step:].tolist()
        else:
            order = range(start_step, size)
        dataset.on_epoch_begin()
        try:
            yield from _load(dataset, iter(order))
        finally:  # also when the epoch stops at steps_per_epoch
            dataset.on_epoch_end()

    return IterableDataAdapter(dataset, steps_per_epoch=steps if size is None else min(
        size, steps or size), num_replicas=num_replicas, with_targets=with_targets,
        class_weight=class_weight, items=items, kind="PyDataset")
