"""`ArrayDataAdapter`: in-memory arrays split into padded, masked global batches.

NumPy or JAX arrays, or dicts/tuples/lists of them (one per model input), are indexed by a
(shuffled) row order. A global batch that does not divide by the replica count, and the last
partial batch of an epoch, are padded up to ``padded_batch_size`` rows by repeating real
rows (`mirrorfit._src.batch.pad_index`) and masked.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from mirrorfit._src import input_checks
from mirrorfit._src.batch import Batch, pad_index, padded_size, real_rows_mask


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


def num_rows(tree: Any, name: str) -> int:
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


class ArrayDataAdapter:
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
        ValueError: if x, y and sample_weight differ in length, x is empty, or
            sample_weight is not 1-D.
        TypeError: if x or y holds strings or objects.
    """

    def __init__(self, x, y=None, sample_weight=None, *, batch_size, num_replicas,
                 shuffle=False, seed=0):
        self.x = jax.tree.map(np.asarray, x)
        self.y = None if y is None else jax.tree.map(np.asarray, y)
        input_checks.check_numeric(self.x, "x")
        input_checks.check_numeric(self.y, "y")
        input_checks.check_sample_weight(sample_weight)
        self.sample_weight = None if sample_weight is None else np.asarray(
            sample_weight, np.float32
        )
        self.num_examples = num_rows(self.x, "x")
        if self.num_examples == 0:
            raise ValueError("x is empty: there is nothing to train on or predict. "
                             "Received: x with 0 rows")
        for name, value in (("y", self.y), ("sample_weight", self.sample_weight)):
            if value is not None and (rows := num_rows(value, name)) != self.num_examples:
                raise ValueError(
                    f"x and {name} must have the same number of rows (one {name} per example). "
                    f"Received: x with {self.num_examples} rows and {name} with {rows} rows"
                )
        self.batch_size = min(batch_size, self.num_examples)
        self.padded_batch_size = padded_size(self.batch_size, num_replicas)
        self.shuffle = shuffle
        self.seed = seed
        self.steps = math.ceil(self.num_examples / self.batch_size)
        # One shared mask object for every full batch: it is placed on the mesh once.
        self._full_mask = real_rows_mask(self.batch_size, self.padded_batch_size)

    def split(self, validation_split: float, num_replicas: int
              ) -> tuple[ArrayDataAdapter, ArrayDataAdapter]:
        """Keras' ``validation_split``: the last fraction of rows, taken before shuffling.

        Returns:
            ``(train, validation)`` adapters for ``num_replicas`` replicas; only ``train``
            shuffles.

        Raises:
            ValueError: if either part would be empty.
        """
        num_val = int(self.num_examples * validation_split)
        cut = self.num_examples - num_val
        if num_val == 0 or cut == 0:
            raise ValueError(
                f"validation_split={validation_split} leaves {cut} training and {num_val} "
                f"validation rows out of {self.num_examples}; both must be non-empty. "
                "Use a larger split, more data, or pass validation_data instead."
            )

        def part(rows: slice, shuffle: bool) -> ArrayDataAdapter:
            take = lambda tree: None if tree is None else jax.tree.map(lambda a: a[rows], tree)
            return ArrayDataAdapter(take(self.x), take(self.y), take(self.sample_weight),
                                    batch_size=self.batch_size, num_replicas=num_replicas,
                                    shuffle=shuffle, seed=self.seed)

        return part(slice(None, cut), self.shuffle), part(slice(cut, None), False)

    def epoch_order(self, epoch: int) -> np.ndarray | None:
        """Row order of an epoch (``None``: in order). Deterministic in (seed, epoch)."""
        if not self.shuffle:
            return None
        return np.random.default_rng(self.seed + epoch).permutation(self.num_examples)

    def batches(self, epoch: int = 0, *, start_step: int = 0, group: int = 1
                ) -> Iterator[Batch]:
        """Yields the epoch's padded batches, ``group`` consecutive steps stacked per item.

        A partial last group is filled with fully masked batches (``mask`` all ``False``),
        which the step treats as no-ops, so every item has the same shape.
        """
        order = self.epoch_order(epoch)
        for first in range(start_step, self.steps, group):
            indices, weights, masks = [], [], []
            for step in range(first, first + group):
                idx, num_real = self._step_indices(order, min(step, self.steps - 1))
                indices.append(idx)
                real = num_real if step < self.steps else 0
                mask = (self._full_mask if real == self.batch_size
                        else real_rows_mask(real, self.padded_batch_size))
                masks.append(mask)
                if self.sample_weight is not None:
                    weights.append(self.sample_weight[idx] * mask)
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
        return pad_index(idx, self.padded_batch_size), stop - start

    def _gather(self, idx, weights, masks, group):
        shape = (group, self.padded_batch_size) if group > 1 else (self.padded_batch_size,)

        def take(a):
            if isinstance(idx, slice):
                return a[idx]
            return np.take(a, idx, axis=0).reshape(shape + a.shape[1:])

        stacked = np.stack if group > 1 else (lambda values: values[0])
        return Batch(x=jax.tree.map(take, self.x),
                     y=None if self.y is None else jax.tree.map(take, self.y),
                     sample_weight=stacked(weights) if weights else None,
                     mask=stacked(masks))
