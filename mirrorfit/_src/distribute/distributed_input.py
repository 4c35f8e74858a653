"""Distributed input for custom loops: ``experimental_distribute_dataset`` and
``distribute_datasets_from_function``, with `InputContext`.

A distributed batch is the user's pytree with every leaf a global ``jax.Array`` sharded
``P("batch")``. A global batch that does not divide by the replica count is padded (by
repeating real rows) and its padding recorded as its mask (bool ``[global_batch]``, `mirrorfit.batch_mask`); replicas
never get ragged or empty shards. The next batch is placed on the devices before the
current one is handed out, so its transfer overlaps the caller's step.

``model.fit``, ``evaluate`` and ``predict`` take a `DistributedDataset` as well
(``mirrorfit._src.trainers.data_adapters.distributed_dataset_adapter``): they read its host batches
and pad, mask and place them through the input layer, like any other source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np

from mirrorfit._src.distribute.batch import pad_rows, padded_size, real_rows_mask
from mirrorfit._src.distribute.mesh import DeviceMesh
from mirrorfit._src.distribute.values import register_mask


class InputContext:
    """What an input pipeline needs to know (``tf.distribute.InputContext``).

    Attributes:
        num_input_pipelines: input pipelines in the job (one per process).
        input_pipeline_id: this pipeline's index in ``[0, num_input_pipelines)``.
        num_replicas_in_sync: replicas over all processes.
    """

    def __init__(self, num_input_pipelines: int = 1, input_pipeline_id: int = 0,
                 num_replicas_in_sync: int = 1):
        self.num_input_pipelines = num_input_pipelines
        self.input_pipeline_id = input_pipeline_id
        self.num_replicas_in_sync = num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """``global_batch_size // num_replicas_in_sync``.

        Raises:
            ValueError: if ``global_batch_size`` does not divide by ``num_replicas_in_sync``.
        """
        if global_batch_size % self.num_replicas_in_sync:
            raise ValueError(
                f"global_batch_size must divide by num_replicas_in_sync="
                f"{self.num_replicas_in_sync} to give every replica the same batch; use a "
                f"multiple of it. Received: global_batch_size={global_batch_size}")
        return global_batch_size // self.num_replicas_in_sync

    def __repr__(self) -> str:
        return (f"InputContext(num_input_pipelines={self.num_input_pipelines}, "
                f"input_pipeline_id={self.input_pipeline_id}, "
                f"num_replicas_in_sync={self.num_replicas_in_sync})")


def _to_numpy(batch: Any) -> Any:
    return jax.tree.map(np.asarray, batch)


def distribute_batch(mesh: DeviceMesh, batch: Any, *,
                     local_rows: int | None = None) -> Any:
    """Pads a host batch, marks the padding, and shards it over the replicas.

    Args:
        mesh: where to place it.
        batch: pytree of arrays ``[rows, ...]``: the global batch, or with ``local_rows``
            this process's part of it.
        local_rows: ``None`` for a global batch (padded to a multiple of the replica count);
            else the static row count every process passes (its input pipeline's first
            batch), which this batch is padded to.

    Raises:
        ValueError: if the leaves have different leading sizes, the batch is empty, or it
            has more than ``local_rows`` rows.
    """
    batch = _to_numpy(batch)
    leaves = jax.tree.leaves(batch)
    sizes = sorted({leaf.shape[0] if leaf.ndim else -1 for leaf in leaves})
    if not leaves or len(sizes) != 1 or sizes[0] <= 0:
        raise ValueError("Every leaf of a batch must have the same, non-zero leading (batch) "
                         f"size. Received: a batch with leading sizes {sizes}")
    rows = sizes[0]
    target = padded_size(rows, mesh.num_replicas_in_sync) if local_rows is None else local_rows
    if rows > target:
        raise ValueError(f"Every batch of an input pipeline must have at most as many rows as "
                         f"its first one ({target}). Received: a batch with {rows} rows")
    place = mesh.shard_batch if local_rows is None else mesh.shard_local_batch
    distributed = place(pad_rows(batch, rows, target))
    register_mask(distributed, place(real_rows_mask(rows, target)))
    return distributed


class DistributedDataset:
    """Iterable of distributed batches over an iterable of host batches.

    Each pass over it iterates the source again, one batch placed ahead. ``model.fit``,
    ``evaluate`` and ``predict`` take it too (as tf.keras takes a tf.distribute dataset):
    they read its host batches (`host_batches`) through their own input layer.

    Args:
        batches: returns a fresh iterator of host batches (pytrees of arrays).
        place: host batch -> distributed batch.
        strategy: the strategy (a `DeviceMesh`) that places the batches.
        per_process: whether each host batch is this process's rows of the global batch
            (``distribute_datasets_from_function``) rather than the whole global batch.
        length: returns the batches per pass, or ``None`` when the source has no length.

    Attributes:
        strategy: as given.
        per_process: as given.
        num_local_replicas: the replicas of this process; a per-process host batch is
            padded to a multiple of it.
    """

    def __init__(self, batches: Callable[[], Iterator[Any]], place: Callable[[Any], Any], *,
                 strategy: DeviceMesh, per_process: bool = False,
                 length: Callable[[], int | None] = lambda: None):
        self._batches = batches
        self._place = place
        self._length = length
        self.strategy = strategy
        self.per_process = per_process
        self.num_local_replicas = strategy.num_replicas_in_sync // jax.process_count()

    def host_batches(self) -> Iterator[Any]:
        """A fresh pass over the host batches, as the source yields them (not yet padded)."""
        return self._batches()

    def num_batches(self) -> int | None:
        """Batches (steps) per pass; ``None`` when the source has no ``len()``."""
        return self._length()

    def __iter__(self) -> Iterator[Any]:
        upcoming = None
        for batch in self._batches():
            current, upcoming = upcoming, self._place(batch)
            if current is not None:
                yield current
        if upcoming is not None:
            yield upcoming


def _length(source: Any) -> int | None:
    """``len(source)`` for a sized re-iterable; ``None`` for an iterator or unsized source."""
    if isinstance(source, Iterator) or not hasattr(source, "__len__"):
        return None
    return len(source)


def experimental_distribute_dataset(mesh: DeviceMesh, dataset: Iterable
                                    ) -> DistributedDataset:
    """See `MirroredStrategy.experimental_distribute_dataset`."""
    try:
        iter(dataset)
    except TypeError:
        raise TypeError("dataset must be an iterable of global batches (a list, a generator, a "
                        f"tf.data.Dataset, ...). Received: dataset={dataset!r}") from None
    return DistributedDataset(lambda: iter(dataset),
                              lambda b: distribute_batch(mesh, b), strategy=mesh,
                              length=lambda: _length(dataset))


def input_context(mesh: DeviceMesh) -> InputContext:
    """This process's `InputContext` (one input pipeline per process)."""
    return InputContext(jax.process_count(), jax.process_index(), mesh.num_replicas_in_sync)


def distribute_datasets_from_function(mesh: DeviceMesh,
                                      dataset_fn: Callable[[InputContext], Iterable]
                                      ) -> DistributedDataset:
    """See `MirroredStrategy.distribute_datasets_from_function`."""
    if not callable(dataset_fn):
        raise TypeError("dataset_fn must be a callable taking an mf.InputContext and returning "
                        f"an iterable of per-replica batches. Received: dataset_fn={dataset_fn!r}")
    context = input_context(mesh)
    local_replicas = mesh.num_replicas_in_sync // context.num_input_pipelines

    def batches():
        # As in TF: the pipeline yields per-replica batches; each step takes one per local
        # replica, and the processes' parts together make the global batch.
        iterator = iter(dataset_fn(context))
        while True:
            parts = [part for _, part in zip(range(local_replicas), iterator)]
            if not parts:
                return
            yield jax.tree.map(lambda *leaves: np.concatenate(leaves), *map(_to_numpy, parts))

    def length():  # a sized pipeline: one step per local_replicas per-replica batches
        size = _length(dataset_fn(context))
        return None if size is None else -(-size // local_replicas)

    static_rows: list[int] = []

    def place(local_batch):
        if not static_rows:  # the first batch fixes the shape every process passes
            rows = jax.tree.leaves(_to_numpy(local_batch))[0].shape[0]
            static_rows.append(padded_size(rows, local_replicas))
        return distribute_batch(mesh, local_batch, local_rows=static_rows[0])

    return DistributedDataset(batches, place, strategy=mesh, per_process=True, length=length)
