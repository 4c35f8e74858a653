"""Device-resident datasets: in-memory arrays placed on the devices once, batches gathered
by index inside the compiled step.

On the host path every step gathers its rows with NumPy and transfers them. A
device-resident `ArrayDataAdapter` is instead copied to every replica once (mirrored,
``P()``) when its first epoch starts, and each step receives only the batch's row indices
(int32 ``[padded_batch]``, split over replicas like a batch) and its mask; the step gathers
its replica's rows from its own copy (`gather`), inside the same compiled program
(`accepting_indices`). The indices are those the host path gathers
(`ArrayDataAdapter.index_batches`): same order, padding and filler steps, so each replica
computes on the same values and results are bitwise equal to the host path's.

The copy is mirrored rather than split by rows because a shuffled epoch may send any row to
any replica, and a replica must compute on exactly the rows the host path gives it (the
same rows in the same per-replica sums keep results bitwise equal); so each replica holds
the whole set. Its rows are padded with
zeros (never indexed) up to a power of two (`bucket_rows`): the step is compiled for the
data set's shape, and so fits on data sets of similar sizes share one compile, as batches
of one shape do on the host path. It costs those bytes on every device, which the budget
counts (`resident_bytes`); the padding is added on the devices after the transfer (for a
moment the unpadded copy is there too), as a host copy of the data set would cost more
than the transfer itself.

``fit(..., device_resident=None)`` decides per data set (`choose`), on accelerators only:
the training arrays, then the validation arrays, are resident while their bytes fit
`BUDGET_FRACTION` of the free memory of the fullest device (``device.memory_stats()``:
``bytes_limit - bytes_in_use``). On the CPU backend the automatic choice is the host path:
there "the device" is host memory, so a resident copy saves no transfer, and gathering the
rows inside the step cost up to 44% of ``fit`` 's throughput at one CPU device, where the
host path passes an aligned NumPy batch to the step without a copy (issue 45;
``docs/guides/data.md``). ``evaluate`` and ``predict`` make one pass, which moves the same
bytes either way, so they are resident only when asked (``device_resident=True``): a
resident program is compiled per (bucketed) data set size.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.distribute.batch import Batch, place_batches
from mirrorfit._src.distribute.mesh import DeviceMesh
from mirrorfit._src.trainers.data_adapters import ArrayDataAdapter, DataAdapter

BUDGET_FRACTION = 0.5
"""Fraction of an accelerator's free memory that automatically resident data sets may take,
all together."""

SETTING = ("device_resident must be None (automatic: resident on accelerators when the "
           "arrays fit the memory budget), True (always, for in-memory arrays) or False (never). "
           "Received: device_resident={!r}")

NOT_ARRAYS = ("device_resident=True needs in-memory arrays (NumPy, JAX or pandas) as x: "
              "a source of batches is read batch by batch. Pass arrays, or leave "
              "device_resident=None. Received: x of kind {}")


class ResidentBatch(NamedTuple):
    """What a step receives in place of a `Batch` when its data set is device-resident."""

    arrays: Batch  # the whole data set, mirrored: leaves [num_examples, ...], mask None
    index: Any  # int32 [padded_batch] ([K, padded_batch] stacked): rows, split over replicas
    mask: Any  # bool like index: True for real rows, as Batch.mask


def check_setting(device_resident: Any) -> bool | None:
    """Validates ``device_resident`` (``None``, ``True`` or ``False``).

    Raises:
        TypeError: for any other value.
    """
    if device_resident is None or isinstance(device_resident, bool):
        return device_resident
    raise TypeError(SETTING.format(device_resident))


def bucket_rows(num_examples: int) -> int:
    """The rows a resident copy of ``num_examples`` rows has: the next power of two."""
    return 1 << max(num_examples - 1, 0).bit_length()


def resident_bytes(data: ArrayDataAdapter) -> int:
    """Bytes one device holds for ``data`` resident: every leaf of ``x``, ``y`` and the
    sample weights with `bucket_rows` rows, in the dtype JAX places it in (float64 becomes
    float32 without x64)."""
    scale = bucket_rows(data.num_examples) / data.num_examples
    return int(scale * sum(leaf.size * np.dtype(jax.dtypes.canonicalize_dtype(
        leaf.dtype)).itemsize for leaf in jax.tree.leaves(data.arrays())))


@functools.partial(jax.jit, static_argnames="rows")
def _padded(a: jax.Array, rows: int) -> jax.Array:
    """``a`` ``[n, ...]`` followed by zero rows up to ``[rows, ...]``, on ``a`` 's devices (a
    host copy of the whole data set per ``fit`` cost more than its transfer)."""
    return jnp.pad(a, [(0, rows - a.shape[0])] + [(0, 0)] * (a.ndim - 1))


def free_bytes(strategy: DeviceMesh) -> int:
    """The memory automatically resident data may use on each of ``strategy`` 's devices.

    The least free memory over its accelerators (``bytes_limit - bytes_in_use`` from
    ``memory_stats()``); 0 on the CPU backend, and for devices without statistics, so that
    ``device_resident=None`` takes the host path there.
    """
    if any(device.platform == "cpu" for device in strategy.devices):
        return 0
    stats = [device.memory_stats() for device in strategy.devices]
    if all(stats):
        return min(s["bytes_limit"] - s["bytes_in_use"] for s in stats)  # type: ignore[index]
    return 0


def choose(setting: bool | None, adapters: Sequence[DataAdapter | None], strategy: DeviceMesh,
           *, automatic: bool = True, available: int | None = None) -> None:
    """Makes each array adapter of ``adapters`` device-resident or not (its ``resident``).

    Args:
        setting: ``True``/``False`` for every array adapter; ``None`` decides by the budget
            (when ``automatic``): in order, each while the total fits ``BUDGET_FRACTION``
            of ``available``.
        adapters: ``fit``'s training and validation adapters, or one adapter.
        strategy: where the arrays would be placed.
        automatic: whether ``setting=None`` may choose resident (``fit``) or always means
            the host path (``evaluate``, ``predict``).
        available: free bytes per device; default `free_bytes` (tests pass a figure).

    Raises:
        TypeError: for an invalid ``setting`` (`check_setting`).
        ValueError: for ``setting=True`` when the first adapter is not arrays.
    """
    setting = check_setting(setting)
    first = adapters[0]
    if setting and not isinstance(first, ArrayDataAdapter):
        raise ValueError(NOT_ARRAYS.format(getattr(first, "kind", type(first).__name__)))
    budget = 0
    if setting is None and automatic and jax.process_count() == 1:
        budget = int(BUDGET_FRACTION * (free_bytes(strategy) if available is None
                                        else available))
    for data in adapters:
        if not isinstance(data, ArrayDataAdapter):
            continue
        resident = setting
        if setting is None:
            needed = resident_bytes(data)
            resident, budget = needed <= budget, budget - needed
        data.resident = DeviceResident(data, strategy) if resident else None


class DeviceResident:
    """An `ArrayDataAdapter` 's arrays on the mesh (placed on first use, then kept) and its
    epochs' index batches.

    Args:
        data: the adapter whose arrays and batch order are used.
        strategy: the mesh the arrays are mirrored on.
    """

    def __init__(self, data: ArrayDataAdapter, strategy: DeviceMesh):
        self.data = data
        self.strategy = strategy
        self._arrays: Batch | None = None

    @property
    def arrays(self) -> Batch:
        """``Batch(x, y, sample_weight, None)`` mirrored on every replica (placed once),
        leaves ``[bucket_rows(num_examples), ...]``."""
        arrays = self._arrays
        if arrays is None:
            rows = bucket_rows(self.data.num_examples)
            placed = self.strategy.replicate_arrays(Batch(*self.data.arrays(), None))
            if rows != self.data.num_examples:
                placed = jax.tree.map(lambda a: _padded(a, rows=rows), placed)
            arrays = self._arrays = placed
        return arrays

    def batches(self, epoch: int = 0, start_step: int = 0, group: int = 1
                ) -> Iterator[ResidentBatch]:
        """The epoch's `ResidentBatch` es, in the order `ArrayDataAdapter.batches` yields
        its batches; only indices and masks are placed (or, on one device, passed as NumPy
        to the step's call: `mirrorfit._src.distribute.batch.takes_host_batch`)."""
        arrays = self.arrays
        host = (Batch(index, None, None, mask) for index, mask in
                self.data.index_batches(epoch, start_step=start_step, group=group))
        for placed in place_batches(host, self.strategy, stacked=group > 1):
            yield ResidentBatch(arrays, placed.x, placed.mask)


def gather(batch: ResidentBatch) -> Batch:
    """The `Batch` of a replica's rows, gathered from its copy of the data set.

    Sample weights are multiplied by the mask, as `ArrayDataAdapter.batches` does on the
    host (0 on padding rows).
    """

    def take(a):  # the indices are the adapter's own, always in range: no clamp
        return a.at[batch.index].get(mode="promise_in_bounds")

    arrays = batch.arrays
    weights = arrays.sample_weight
    return Batch(x=jax.tree.map(take, arrays.x),
                 y=None if arrays.y is None else jax.tree.map(take, arrays.y),
                 sample_weight=None if weights is None else take(weights) * batch.mask.astype(weights.dtype),
                 mask=batch.mask)


def accepting_indices(step: Callable) -> Callable:
    """``step`` (its batch last: ``(state, statistics, batch)`` or ``(state, batch)``)
    taking a `ResidentBatch` too, gathered at trace time inside the same program."""

    @functools.wraps(step)  # keeps the step's name (compile logs, profiles)
    def wrapped(*args):
        *rest, batch = args
        return step(*rest, gather(batch) if isinstance(batch, ResidentBatch) else batch)

    return wrapped


def batch_shapes(batch: Batch | ResidentBatch) -> Batch:
    """The `Batch` a step sees: ``batch`` itself, or a `ResidentBatch` 's gathered shapes
    (``jax.ShapeDtypeStruct`` leaves)."""
    return jax.eval_shape(gather, batch) if isinstance(batch, ResidentBatch) else batch
