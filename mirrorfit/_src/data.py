"""Input adapters: user inputs -> fixed-shape, padded and masked global batches on the mesh.

One adapter per input kind, as in Keras:

* `ArrayData`: NumPy/JAX arrays, or dicts/tuples of them, indexed by a (shuffled) order;
* `IterableData`: any iterable or generator of global batches ``(x, y[, sample_weight])``.

Both yield `HostBatch` es of one static shape: a global batch that does not divide by the
replica count, and the last partial batch of an epoch, are padded up to
``padded_batch_size`` rows (padding repeats real rows, so the model only ever sees finite
data) and masked. `place_batches` moves them to the mesh, one batch ahead of the step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import jax
import numpy as np

from mirrorfit._src.strategy import MirroredStrategy


class HostBatch(NamedTuple):
    """A padded global batch on the host (or a stack of ``K`` of them)."""

    x: Any  # pytree, leaves [padded_batch, ...] ([K, padded_batch, ...] when stacked)
    y: Any  # pytree like x, or None for predict
    weight: np.ndarray | None  # float32 [padded_batch]: sample_weight, 0.0 on padding rows;
    #                            the mask object itself without sample weights (None on
    #                            the mesh, where the steps then use the mask)
    mask: np.ndarray  # float32 [padded_batch]: 1.0 for real rows, 0.0 for padding


def check_batch_size(batch_size: Any) -> int:
    """Validates a global batch size (``None`` means Keras' default of 32)."""
    if batch_size is None:
        return 32
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or (
        batch_size <= 0
    ):
        raise ValueError(
            "batch_size must be a positive int: the global batch, split across replicas "
            f"(e.g. 32 * strategy.num_replicas_in_sync). Received: batch_size={batch_size!r}"
        )
    return int(batch_size)


def padded_size(batch_size: int, num_replicas: int) -> int:
    """Smallest multiple of ``num_replicas`` that holds ``batch_size`` rows."""
    return math.ceil(batch_size / num_replicas) * num_replicas


def is_array_input(x: Any) -> bool:
    """Whether ``x`` is an array or a dict/tuple/list of arrays (one per model input).

    A list whose items are tuples is a list of ``(x, y)`` batches, not of inputs.
    """
    if isinstance(x, list) and x and all(isinstance(item, tuple) for item in x):
        return False
    if not isinstance(x, (np.ndarray, jax.Array, dict, tuple, list)):
        return False
    leaves = jax.tree.leaves(x)
    return bool(leaves) and all(isinstance(leaf, (np.ndarray, jax.Array)) for leaf in leaves)


def _num_rows(tree: Any, name: str) -> int:
    sizes = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in jax.tree.leaves(tree)}
    if None in sizes:
        raise ValueError(
            f"{name} must hold arrays with a leading batch dimension. "
            f"Received: {name} with a scalar leaf"
        )
    if len(sizes) != 1:
        raise ValueError(
            f"All arrays in {name} must have the same number of rows. "
            f"Received: {name} with leading sizes {sorted(sizes)}"
        )
    return sizes.pop()


class ArrayData:
    """In-memory arrays split into global batches of ``batch_size`` rows.

    Args:
        x: array ``[num_examples, ...]`` or a dict/tuple of them.
        y: targets ``[num_examples, ...]`` (or a pytree of them), or ``None`` for predict.
        sample_weight: float ``[num_examples]`` or ``None``.
        batch_size: the global batch size (rows per step, across all replicas).
        num_replicas: replica count; batches are padded to a multiple of it.
        shuffle: whether each epoch visits the rows in a new random order.
        seed: base seed of the shuffle order; epoch ``e`` uses ``seed + e``.

    Raises:
        ValueError: if x, y and sample_weight differ in length, or x is empty.
    """

    def __init__(self, x, y=None, sample_weight=None, *, batch_size, num_replicas,
                 shuffle=False, seed=0):
        self.x = jax.tree.map(np.asarray, x)
        self.y = None if y is None else jax.tree.map(np.asarray, y)
        self.sample_weight = None if sample_weight is None else np.asarray(
            sample_weight, np.float32
        )
        self.num_examples = _num_rows(self.x, "x")
        if self.num_examples == 0:
            raise ValueError("x is empty: there is nothing to train on or predict. "
                             "Received: x with 0 rows")
        for name, value in (("y", self.y), ("sample_weight", self.sample_weight)):
            if value is not None and (rows := _num_rows(value, name)) != self.num_examples:
                raise ValueError(
                    f"x and {name} must have the same number of rows (one {name} per example). "
                    f"Received: x with {self.num_examples} rows and {name} with {rows} rows"
                )
        self.batch_size = min(batch_size, self.num_examples)
        self.padded_batch_size = padded_size(self.batch_size, num_replicas)
        self.shuffle = shuffle
        self.seed = seed
        self.steps = math.ceil(self.num_examples / self.batch_size)
        self._ones = np.ones(self.padded_batch_size, np.float32)
        if self.padded_batch_size > self.batch_size:
            self._ones = self._mask(self.batch_size)

    def split(self, validation_split: float) -> tuple[ArrayData, ArrayData]:
        """Keras' ``validation_split``: the last fraction of rows, taken before shuffling."""
        num_val = int(self.num_examples * validation_split)
        cut = self.num_examples - num_val
        if num_val == 0 or cut == 0:
            raise ValueError(
                f"validation_split={validation_split} leaves {cut} training and {num_val} "
                f"validation rows out of {self.num_examples}; both must be non-empty. "
                "Use a larger split, more data, or pass validation_data instead."
            )
        take = lambda tree, sl: None if tree is None else jax.tree.map(lambda a: a[sl], tree)
        parts = []
        for sl, shuffle in ((slice(None, cut), self.shuffle), (slice(cut, None), False)):
            part = ArrayData(take(self.x, sl), take(self.y, sl), take(self.sample_weight, sl),
                             batch_size=self.batch_size, num_replicas=1, shuffle=shuffle,
                             seed=self.seed)
            parts.append(part)
        return tuple(parts)

    def with_replicas(self, num_replicas: int) -> ArrayData:
        """This data batched for ``num_replicas`` replicas (padding recomputed)."""
        return ArrayData(self.x, self.y, self.sample_weight, batch_size=self.batch_size,
                         num_replicas=num_replicas, shuffle=self.shuffle, seed=self.seed)

    def _mask(self, num_real: int) -> np.ndarray:
        mask = np.zeros(self.padded_batch_size, np.float32)
        mask[:num_real] = 1.0
        return mask

    def epoch_order(self, epoch: int) -> np.ndarray | None:
        """Row order of an epoch (``None``: in order). Deterministic in (seed, epoch)."""
        if not self.shuffle:
            return None
        return np.random.default_rng(self.seed + epoch).permutation(self.num_examples)

    def batches(self, epoch: int = 0, *, start_step: int = 0, group: int = 1
                ) -> Iterator[HostBatch]:
        """Yields the epoch's padded batches, ``group`` consecutive steps stacked per item.

        A partial last group is filled with fully masked batches (``mask`` all zero), which
        the step treats as no-ops, so every item has the same shape.
        """
        order = self.epoch_order(epoch)
        for first in range(start_step, self.steps, group):
            indices, weights, masks = [], [], []
            for step in range(first, first + group):
                idx, num_real = self._step_indices(order, min(step, self.steps - 1))
                indices.append(idx)
                real = num_real if step < self.steps else 0
                mask = self._ones if real == self.batch_size else self._mask(real)
                masks.append(mask)
                weights.append(mask if self.sample_weight is None
                               else self.sample_weight[idx] * mask)
            if group > 1:
                idx = np.concatenate([np.arange(self.num_examples)[i] if isinstance(i, slice)
                                      else i for i in indices])
            else:
                idx = indices[0]
            yield self._gather(idx, weights, masks, group)

    def _step_indices(self, order, step):
        """Rows of a step: a slice when they are in order and need no padding (no copy)."""
        start = step * self.batch_size
        stop = min(start + self.batch_size, self.num_examples)
        if order is None and stop - start == self.padded_batch_size:
            return slice(start, stop), stop - start
        idx = np.arange(start, stop) if order is None else order[start:stop]
        if len(idx) < self.padded_batch_size:  # pad by repeating real rows
            idx = np.concatenate([idx, np.resize(idx, self.padded_batch_size - len(idx))])
        return idx, stop - start

    def _gather(self, idx, weights, masks, group):
        shape = (group, self.padded_batch_size) if group > 1 else (self.padded_batch_size,)

        def take(a):
            if isinstance(idx, slice):
                return a[idx]
            return np.take(a, idx, axis=0).reshape(shape + a.shape[1:])

        stack = (lambda vs: np.stack(vs)) if group > 1 else (lambda vs: vs[0])
        mask = stack(masks)
        return HostBatch(
            x=jax.tree.map(take, self.x),
            y=None if self.y is None else jax.tree.map(take, self.y),
            weight=mask if self.sample_weight is None else stack(weights),
            mask=mask,
        )


class IterableData:
    """An iterable (or generator) of global batches ``x``, ``(x, y)`` or ``(x, y, sample_weight)``.

    The first batch fixes the global batch size; later, smaller batches are padded and
    masked. A re-iterable (a list, a dataset object) restarts every epoch; a one-shot
    iterator (a generator) continues where the last epoch stopped.

    Args:
        data: the iterable.
        steps_per_epoch: steps per epoch; ``None`` runs until the iterable is exhausted.
        num_replicas: replica count; batches are padded to a multiple of it.
        with_targets: whether items carry targets (fit, evaluate) or only inputs (predict).
    """

    def __init__(self, data: Iterable, *, steps_per_epoch: int | None, num_replicas: int,
                 with_targets: bool = True):
        self._data = data
        self._iterator = iter(data) if iter(data) is data else None
        self.steps = steps_per_epoch
        if self.steps is None and self._iterator is None and hasattr(data, "__len__"):
            self.steps = len(data)  # a sized re-iterable: one pass per epoch
        self.num_replicas = num_replicas
        self.with_targets = with_targets
        self.padded_batch_size: int | None = None
        self._ones: np.ndarray | None = None

    def _unpack(self, item):
        if not self.with_targets:
            return (item[0] if isinstance(item, tuple) else item), None, None
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise ValueError(
                "Each batch of an iterable input must be a tuple (x, y) or (x, y, sample_weight). "
                f"Received: a batch of type {type(item).__name__}"
            )
        return item if len(item) == 3 else (*item, None)

    def batches(self, epoch: int = 0, *, start_step: int = 0, group: int = 1
                ) -> Iterator[HostBatch]:
        """Yields padded batches (``group`` stacked per item; see `ArrayData.batches`)."""
        del epoch
        iterator = self._iterator if self._iterator is not None else iter(self._data)
        pending, step = [], 0
        for item in iterator:
            if step >= start_step:
                pending.append(self._pad(*self._unpack(item)))
            step += 1
            if len(pending) == group:
                yield _stack(pending, group)
                pending = []
            if self.steps is not None and step >= self.steps:
                break
        if step == 0:
            raise ValueError("The input iterable is empty: it yielded no batch. Received: x="
                             f"{self._data!r}")
        if pending:
            last = pending[-1]
            zeros = np.zeros_like(last.mask)
            filler = last._replace(mask=zeros, weight=zeros if last.weight is last.mask
                                   else np.zeros_like(last.weight))
            yield _stack(pending + [filler] * (group - len(pending)), group)

    def _pad(self, x, y, sample_weight) -> HostBatch:
        x, y = jax.tree.map(np.asarray, (x, y))
        rows = _num_rows((x, y), "each batch (x, y)")
        if self.padded_batch_size is None:
            self.padded_batch_size = padded_size(rows, self.num_replicas)
        if rows > self.padded_batch_size:
            raise ValueError(
                f"Every batch must have at most as many rows as the first one "
                f"({self.padded_batch_size}). Received: a batch with {rows} rows"
            )
        idx = np.resize(np.arange(rows), self.padded_batch_size)
        if rows == self.padded_batch_size:
            if self._ones is None:
                self._ones = np.ones(rows, np.float32)
            mask = self._ones
        else:
            mask = (np.arange(self.padded_batch_size) < rows).astype(np.float32)
        weight = mask if sample_weight is None else np.asarray(sample_weight, np.float32)[idx] * mask
        take = lambda a: np.take(a, idx, axis=0)
        return HostBatch(jax.tree.map(take, x), None if y is None else jax.tree.map(take, y),
                         weight, mask)


def _stack(batches: list[HostBatch], group: int) -> HostBatch:
    if group == 1:
        return batches[0]
    stacked = jax.tree.map(lambda *leaves: np.stack(leaves), *batches)
    if all(batch.weight is batch.mask for batch in batches):
        stacked = stacked._replace(weight=stacked.mask)
    return stacked


def place_batches(batches: Iterable[HostBatch], strategy: MirroredStrategy, *, group: int = 1
                  ) -> Iterator[HostBatch]:
    """Moves host batches onto the mesh, split over replicas (``P("batch")``).

    A mask that repeats (the all-ones mask of full batches is one shared array) is
    transferred once and reused, and without sample weights no weight array is sent (the
    steps weight by the mask), so a full batch costs only the transfer of x and y.
    """
    leading = 1 if group > 1 else 0
    last_mask: list[Any] = [None, None]  # (host mask, its device copy)
    for batch in batches:
        x, y = strategy.shard_batch((batch.x, batch.y), leading_axes=leading)
        if batch.mask is not last_mask[0]:
            last_mask[:] = batch.mask, strategy.shard_batch(batch.mask, leading_axes=leading)
        weight = None if batch.weight is batch.mask else strategy.shard_batch(
            batch.weight, leading_axes=leading)
        yield HostBatch(x, y, weight, last_mask[1])
