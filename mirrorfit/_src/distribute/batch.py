"""The one batch type of every loop, its padding mask and the one padding function.

A `Batch` is a global batch padded to a multiple of the replica count, on the host (NumPy)
or on the mesh (global ``jax.Array`` s sharded ``P("batch")``). ``fit``, ``evaluate`` and
``predict`` pass `Batch` es to their steps; custom loops get the user's own pytree, whose
mask `mirrorfit.batch_mask` returns. Either way the mask has one form: bool
``[global_batch]``, ``True`` for real rows.

Padding repeats real rows (`pad_index`), so the model only ever sees finite data, and the
mask keeps the padding rows out of every sum. Rows gathered or stacked into a large new
batch go into 64-byte-aligned buffers (`host_buffer`), which a CPU device uses without a
copy.
This module imports nothing else from mirrorfit.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable
from typing import Any, NamedTuple

import jax
import numpy as np


class Batch(NamedTuple):
    """A padded global batch (or a stack of ``K`` of them for ``steps_per_execution``)."""

    x: Any  # pytree, leaves [padded_batch, ...] ([K, padded_batch, ...] when stacked)
    y: Any  # pytree like x, or None for predict
    sample_weight: Any  # float32 [padded_batch], 0 on padding rows; None without weights
    mask: Any  # bool [padded_batch]: True for real rows, False for padding


def padded_size(batch_size: int, num_replicas: int) -> int:
    """Smallest multiple of ``num_replicas`` that holds ``batch_size`` rows."""
    return math.ceil(batch_size / num_replicas) * num_replicas


def pad_index(index: np.ndarray, target: int) -> np.ndarray:
    """Row indices ``index`` extended to ``target`` rows by repeating them cyclically."""
    return index if len(index) == target else np.resize(index, target)


def pad_rows(tree: Any, rows: int, target: int) -> Any:
    """A pytree of arrays ``[rows, ...]`` padded to ``[target, ...]`` by repeating rows."""
    if rows == target:
        return tree
    index = pad_index(np.arange(rows), target)
    return jax.tree.map(lambda a: np.take(np.asarray(a), index, axis=0), tree)


def real_rows_mask(num_real: int, target: int) -> np.ndarray:
    """The mask of a batch whose first ``num_real`` of ``target`` rows are real."""
    return np.arange(target) < num_real


HOST_ALIGNMENT = 64
"""Bytes: XLA's CPU client uses a host buffer in place, without a copy, when its data start
on a 64-byte boundary (``cpu_function_runtime::MinAlign``); NumPy only promises 16."""


ALIGNED_MIN_BYTES = 384 << 10
"""Below this size `host_buffer` leaves the buffer to NumPy: a step's call copied a small
unaligned leaf faster than it adopted an aligned one (98 KiB: 42 against 78 us; they broke
even between 300 and 400 KiB; 784 KiB: 90 against 230 us; 3 MiB: 0.2 against 1.9 ms)."""


def host_buffer(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialized NumPy array, aligned to `HOST_ALIGNMENT` from `ALIGNED_MIN_BYTES`.

    Batches gathered into one are placed on a CPU device without a copy (measured at one
    device: a 25 MiB ``steps_per_execution=32`` group placed in 0.3 ms instead of 3.8 ms).
    The placed array then shares the buffer, so nothing may write to it afterwards.
    """
    dtype = np.dtype(dtype)
    size = math.prod(shape) * dtype.itemsize
    if size < ALIGNED_MIN_BYTES:
        return np.empty(shape, dtype)
    raw = np.empty(size + HOST_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % HOST_ALIGNMENT
    return raw[start:start + size].view(dtype).reshape(shape)


def take_rows(a: np.ndarray, index: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a[index]`` reshaped to ``shape + a.shape[1:]``, in a fresh `host_buffer`."""
    out = host_buffer(shape + a.shape[1:], a.dtype)
    # mode="clip": with `out`, the default "raise" gathers into a temporary and copies it.
    # The indices are the adapter's own, always in range. The method, not np.take, whose
    # Python wrapper cost ~10 us per step at batch 32.
    a.take(index, axis=0, out=out.reshape((len(index),) + a.shape[1:]), mode="clip")
    return out


HOST_BATCH_BYTES = 1 << 20
"""The most bytes of a batch a one-device step's call may copy; `takes_host_batch`."""


def takes_host_batch(mesh: Any, tree: Any) -> bool:
    """Whether the loops pass ``tree`` to a step on ``mesh`` as NumPy, unplaced.

    True on a one-replica `DeviceMesh` (one device, one process) when every leaf is NumPy
    and the call would copy at most `HOST_BATCH_BYTES`: on a CPU device, leaves in
    `HOST_ALIGNMENT` -aligned C-contiguous buffers (`host_buffer`) are used in place and
    cost no copy. The step's ``jax.jit`` call takes such a batch in C++, in tens of
    microseconds, where ``jax.device_put`` costs 150-250 us of mostly Python per batch:
    ``fit`` at batch 32 ran about 1.4x faster (``benchmarks/README.md``). Other batches
    are placed ahead with ``jax.device_put``, which copies asynchronously while the
    previous step runs, where the call's copy would not overlap it; several devices need
    the batch split, which ``jit`` did more slowly.
    """
    if not mesh.single_replica:
        return False
    leaves = jax.tree.leaves(tree)
    if not all(isinstance(leaf, np.ndarray) for leaf in leaves):
        return False
    if sum(leaf.nbytes for leaf in leaves) <= HOST_BATCH_BYTES:
        return True  # (reading each leaf's address costs microseconds per step)
    in_place = mesh.devices[0].platform == "cpu"
    copied = sum(leaf.nbytes for leaf in leaves if not (
        in_place and leaf.flags.c_contiguous and leaf.ctypes.data % HOST_ALIGNMENT == 0))
    return copied <= HOST_BATCH_BYTES


def stack(batches: list[Batch]) -> Batch:
    """``K`` batches of one shape as one `Batch` with a leading ``[K]`` axis on every leaf.

    The leaves are stacked into `host_buffer` s, which a CPU device uses without a copy.
    """
    if len(batches) == 1:
        return batches[0]

    def stack_leaves(*leaves):
        leaves = [np.asarray(leaf) for leaf in leaves]
        out = host_buffer((len(leaves),) + leaves[0].shape, np.result_type(*leaves))
        return np.stack(leaves, out=out)

    return jax.tree.map(stack_leaves, *batches)


def place_batches(batches: Iterable[Batch], mesh: Any, *, stacked: bool = False,
                  local: bool = False) -> Generator[Batch, None, None]:
    """Moves host batches onto ``mesh`` (a `DeviceMesh`), split over replicas, for a step.

    A mask that repeats (the all-``True`` mask of full batches is one shared array) is
    transferred once and reused, so a full batch without sample weights costs only the
    transfer of x and y. On one device, a small or aligned batch stays on the host: the
    step's own call transfers it, which is cheaper (`takes_host_batch`).

    Args:
        batches: host `Batch` es: global batches, or with ``local`` this process's rows of
            each global batch.
        mesh: the `mirrorfit._src.distribute.mesh.DeviceMesh` to place them on.
        stacked: whether the batches carry a leading ``[K]`` axis (``steps_per_execution``).
        local: whether each process passes only its own rows (one input pipeline per
            process; `DeviceMesh.shard_local_batch`) rather than the whole global batch
            (`DeviceMesh.shard_batch`).
    """
    leading = 1 if stacked else 0
    place = mesh.shard_local_batch if local else mesh.shard_batch
    last_mask: list[Any] = [None, None]  # (host mask, its device copy)
    for batch in batches:
        if takes_host_batch(mesh, batch):
            yield batch
            continue
        x, y, weight = place((batch.x, batch.y, batch.sample_weight), leading_axes=leading)
        if batch.mask is not last_mask[0]:
            last_mask[:] = batch.mask, place(batch.mask, leading_axes=leading)
        yield Batch(x, y, weight, last_mask[1])
