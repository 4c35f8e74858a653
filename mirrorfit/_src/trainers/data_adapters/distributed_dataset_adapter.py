"""`DistributedDataset` input: ``model.fit(strategy.experimental_distribute_dataset(ds))``
and ``model.fit(strategy.distribute_datasets_from_function(dataset_fn))``, as tf.keras.

The dataset's host batches (`DistributedDataset.host_batches`) go through
`IterableDataAdapter` like those of any other source: padded to one static shape and
masked, placed on the prefetch thread, one compiled step. An
``experimental_distribute_dataset`` yields global batches. A
``distribute_datasets_from_function`` pipeline yields per-replica batches (of
``input_context.get_per_replica_batch_size(global_batch)`` rows); each step takes one per
local replica, and each process passes only its own rows (``local_rows``: padded to a
multiple of its local replica count, placed with `DeviceMesh.shard_local_batch`). The global
batch is then every process's rows in process order, each process's padding masked.

Several processes step together, so with a per-process source they must agree on the
steps per epoch:

* a pipeline with ``len()`` gives ``ceil(len / local replicas)`` steps per epoch; without
  one, ``steps_per_epoch`` (``steps``, ``validation_steps``) is required (`STEPS_REQUIRED`);
* the steps and padded per-process batch sizes are compared across processes at the start
  (`per_process_fingerprint`), never the data: each process reads its own shard;
* a pipeline that runs dry before the epoch's steps raises a ``ValueError`` in its process
  (`RAN_DRY`), which ends the whole job (``mirrorfit._src.distribute.multi_worker.failfast``) rather than leaving
  the other processes waiting in their next all-reduce. In one process, a source that runs
  dry ends training with Keras' warning, as any iterable does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax

from mirrorfit._src.distribute.batch import padded_size
from mirrorfit._src.distribute.distributed_input import DistributedDataset
from mirrorfit._src.trainers.data_adapters.iterable_data_adapter import IterableDataAdapter

STEPS_REQUIRED = (
    "{name} is required when a distribute_datasets_from_function pipeline has no len() and "
    "there are several processes ({count}): the processes step together, so each must know "
    "the steps per epoch. Pass {name}=<steps per epoch>, or return a source with len() (e.g. "
    "a grain MapDataset) from dataset_fn. Received: {name}=None")
"""Error for a per-process source of unknown length in a job of several processes."""

RAN_DRY = (
    "With several processes, every process's input pipeline must give {name}={steps} "
    "batches per epoch: the processes step together, and one that stopped early would leave "
    "the others waiting. The pipeline of process {index} ran dry after {done}. Repeat it "
    "(e.g. .repeat()) or lower {name}. Received: {name}={steps}")
"""Error raised by a process whose per-process pipeline runs dry before the epoch ends."""


def is_distributed_dataset(x: Any) -> bool:
    """Whether ``x`` comes from ``experimental_distribute_dataset`` or
    ``distribute_datasets_from_function``."""
    return isinstance(x, DistributedDataset)


def distributed_dataset_adapter(dataset: DistributedDataset, *, strategy: Any,
                                steps: int | None, with_targets: bool,
                                steps_name: str = "steps_per_epoch") -> IterableDataAdapter:
    """The adapter of a `DistributedDataset`.

    Args:
        dataset: the distributed dataset.
        strategy: the model's strategy; the dataset must be distributed by it.
        steps: steps per epoch, or ``None`` for the dataset's length (or, without one,
            until it is exhausted).
        with_targets: whether batches carry targets (fit, evaluate) or only inputs.
        steps_name: how the caller calls ``steps`` (``"steps_per_epoch"``).

    Raises:
        ValueError: if ``dataset`` belongs to another strategy, or, with several processes,
            a per-process pipeline has no length and ``steps`` is ``None``.
    """
    if dataset.strategy is not strategy:
        raise ValueError(
            "A DistributedDataset given to fit, evaluate or predict must be distributed by "
            "the model's strategy, which places its batches. Build it with that strategy, "
            "e.g. model.strategy.distribute_datasets_from_function(dataset_fn). Received: a "
            f"dataset of {type(dataset.strategy).__name__} at {id(dataset.strategy):#x}, and "
            f"a model of {type(strategy).__name__} at {id(strategy):#x}")
    if steps is None:
        steps = dataset.num_batches()
    processes = jax.process_count()
    strict = dataset.per_process and processes > 1
    if strict and steps is None:
        raise ValueError(STEPS_REQUIRED.format(name=steps_name, count=processes))

    def items(epoch: int, start_step: int) -> Iterator:
        del epoch
        source = dataset.host_batches()
        for _ in range(start_step):
            next(source, None)
        if not strict:
            return source
        assert steps is not None  # checked above
        return _exactly(source, steps - start_step, steps, steps_name)

    num_replicas = (dataset.num_local_replicas if dataset.per_process
                    else strategy.num_replicas_in_sync)
    return IterableDataAdapter(dataset, steps_per_epoch=steps, num_replicas=num_replicas,
                               with_targets=with_targets, items=items,
                               kind="DistributedDataset", local_rows=dataset.per_process)


def _exactly(source: Iterator, count: int, steps: int, steps_name: str) -> Iterator:
    """``source``'s items; raises `RAN_DRY` if it ends before ``count`` of them."""
    done = 0
    try:
        for item in source:
            yield item
            done += 1
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            close()
    if done < count:
        raise ValueError(RAN_DRY.format(name=steps_name, steps=steps,
                                        index=jax.process_index(), done=done))


def per_process_fingerprint(data: IterableDataAdapter) -> dict[str, Any]:
    """Fields every process must share for a per-process source (``data.local_rows``).

    Not the data, which differs by design: the steps per epoch and the padded rows each
    process passes per step (fixed by its first batch), which `DeviceMesh.shard_local_batch`
    needs equal.
    """
    rows = jax.tree.leaves(data.first_inputs())[0].shape[0]
    return {"steps per epoch of the per-process input": data.steps,
            "padded rows per process of the per-process input":
                padded_size(rows, data.num_replicas)}
