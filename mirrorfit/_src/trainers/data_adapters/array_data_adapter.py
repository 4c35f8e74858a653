"""`ArrayDataAdapter`: in-memory arrays split into padded, masked global batches.

NumPy or JAX arrays, pandas ``DataFrame`` s/``Series`` (as NumPy, as Keras), or
dicts/tuples/lists of them (one per model input), are indexed by a
(shuffled) row order. A global batch that does not divide by the replica count, and the last
partial batch of an epoch, are padded up to ``padded_batch_size`` rows by repeating real
rows (`mirrorfit._src.distribute.batch.pad_index`) and masked. ``class_weight`` becomes sample weights
(`mirrorfit._src.trainers.data_adapters.class_weight`). `fingerprint` summarises the arrays
(`ArrayDataAdapter.arrays`) so that several processes can check they were given the same
global data.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from mirrorfit._src.distribute.batch import Batch, pad_index, padded_size, real_rows_mask, take_rows
from mirrorfit._src.trainers import input_checks
from mirrorfit._src.trainers.data_adapters.class_weight import class_weights_to_sample_weights
from mirrorfit._src.trainers.data_adapters.data_adapter import DataAdapter

FINGERPRINT_ROWS = 8
"""Rows (evenly spaced, first and last included) hashed per array by `fingerprint`."""


def is_pandas(x: Any) -> bool:
    """Whether ``x`` is a pandas ``DataFrame`` or ``Series`` (without importing pandas)."""
    return type(x).__module__.split(".")[0] == "pandas" and hasattr(x, "to_numpy")


def _is_array(x: Any) -> bool:
    return isinstance(x, (np.ndarray, jax.Array)) or is_pandas(x)


def is_array_input(x: Any) -> bool:
    """Whether ``x`` is an array or a dict/tuple/list of arrays (one per model input).

    A list whose items are tuples or lists is a list of ``(x, y)`` batches, not of inputs.
    """
    if isinstance(x, list) and x and all(isinstance(item, (tuple, list)) for item in x):
        return False
    if not (_is_array(x) or isinstance(x, (dict, tuple, list))):
        return False
    leaves = jax.tree.leaves(x, is_leaf=is_pandas)
    return bool(leaves) and all(_is_array(leaf) for leaf in leaves)


def as_numpy(tree: Any) -> Any:
    """A pytree of NumPy, JAX or pandas arrays as NumPy arrays (``None`` stays ``None``)."""
    return None if tree is None else jax.tree.map(np.asarray, tree, is_leaf=is_pandas)


def fingerprint(tree: Any, name: str) -> dict[str, tuple]:
    """A cheap summary of host arrays: per leaf its shape, dtype and a hash of a few rows.

    Several processes compare these (`DeviceMesh.check_same_across_processes`) to catch
    processes that were given different global data.

    Args:
        tree: pytree of NumPy arrays ``[num_examples, ...]``.
        name: the argument name the leaf paths are shown under (``"x"``).

    Returns:
        ``{"x['a']": (shape, dtype name, sha256 hex of rows 0, ..., num_examples - 1)}``,
        hashing `FINGERPRINT_ROWS` evenly spaced rows.
    """
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        rows = np.unique(np.linspace(0, len(leaf) - 1, min(len(leaf), FINGERPRINT_ROWS),
                                     dtype=np.int64))
        digest = hashlib.sha256(np.ascontiguousarray(leaf[rows]).tobytes()).hexdigest()[:16]
        out[name + jax.tree_util.keystr(path)] = (leaf.shape, leaf.dtype.name, digest)
    return out


def num_rows(tree: Any, name: str) -> int:
    leaves = jax.tree.leaves(tree)
    if any(not np.ndim(leaf) for leaf in leaves):
        raise ValueError(
            f"{name} must hold arrays with a leading batch dimension. "
            f"Received: {name} with a scalar leaf"
        )
    sizes = {np.shape(leaf)[0] for leaf in leaves}
    if len(sizes) != 1:
        raise ValueError(
            f"All arrays in {name} must have the same number of rows. "
            f"Received: {name} with leading sizes {sorted(sizes)}"
        )
    return sizes.pop()


class ArrayDataAdapter(DataAdapter):
    """In-memory arrays split into global batches of ``batch_size`` rows.

    Args:
        x: array ``[num_examples, ...]`` or a dict/tuple of them.
        y: targets ``[num_examples, ...]`` (or a pytree of them), or ``None`` for predict.
        sample_weight: float ``[num_examples]`` or ``None``.
        batch_size: the global batch size (rows per step, across all replicas).
        num_replicas: replica count; batches are padded to a multiple of it.
        shuffle: whether each epoch visits the rows in a new random order.
        seed: base seed of the shuffle order; epoch ``e`` uses ``seed + e``.
        class_weight: ``{class: weight}`` (validated), multiplied into the sample weights.

    Raises:
        ValueError: if x, y and sample_weight differ in length, x is empty, or
            sample_weight is not 1-D.
        TypeError: if x or y holds strings or objects.
    """

    local_rows = False  # every process passes whole global batches (see IterableDataAdapter)
    runs_user_code = False  # a batch is a NumPy gather: placed on the calling thread, one
    #                         step ahead (a prefetch thread only slows it; trainer.py)
    kind = "arrays"
    steps: int  # known for arrays: ceil(rows / batch_size), or fewer with steps_per_epoch
    batch_size: int
    padded_batch_size: int

    def __init__(self, x, y=None, sample_weight=None, *, batch_size, num_replicas,
                 shuffle=False, seed=0, class_weight=None):
        self.x = as_numpy(x)
        self.y = as_numpy(y)
        input_checks.check_numeric(self.x, "x")
        input_checks.check_numeric(self.y, "y")
        input_checks.check_sample_weight(sample_weight)
        self.user_sample_weight = None if sample_weight is None else np.asarray(
            sample_weight, np.float32)
        self.class_weight = class_weight
        self.sample_weight = self.user_sample_weight
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
        if class_weight is not None and self.y is not None:
            weights = class_weights_to_sample_weights(self.y, class_weight)
            self.sample_weight = weights if self.sample_weight is None else (
                weights * self.sample_weight)
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

        def part(rows: slice, training: bool) -> ArrayDataAdapter:
            take = lambda tree: None if tree is None else jax.tree.map(lambda a: a[rows], tree)
            return ArrayDataAdapter(take(self.x), take(self.y), take(self.user_sample_weight),
                                    batch_size=self.batch_size, num_replicas=num_replicas,
                                    shuffle=self.shuffle and training, seed=self.seed,
                                    class_weight=self.class_weight if training else None)

        return part(slice(None, cut), True), part(slice(cut, None), False)

    def first_inputs(self) -> Any:
        """The inputs ``x`` (NumPy pytree ``[num_examples, ...]``), to build or check the model."""
        return self.x

    def arrays(self) -> tuple[Any, Any, Any]:
        """``(x, y, sample_weight)`` as NumPy ``[num_examples, ...]`` (see `DataAdapter`)."""
        return self.x, self.y, self.sample_weight

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
        for indices, masks in self._groups(epoch, start_step, group):
            weights = [] if self.sample_weight is None else [
                self.sample_weight[idx] * mask for idx, mask in zip(indices, masks)]
            if group > 1:
                idx = np.concatenate([np.arange(self.num_examples)[i] if isinstance(i, slice)
                                      else i for i in indices])
            else:
                idx = indices[0]
            yield self._gather(idx, weights, masks, group)

    def index_batches(self, epoch: int = 0, *, start_step: int = 0, group: int = 1
                      ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The rows `batches` would gather, as indices: what a device-resident copy of the
        arrays is indexed by (`mirrorfit._src.trainers.resident`).

        Same order, padding and filler steps as `batches`.

        Yields:
            ``(index, mask)`` per item: int32 row indices and the bool mask, each
            ``[padded_batch_size]`` (``[group, padded_batch_size]`` when ``group > 1``). The
            mask of a full batch is always the same array object.
        """
        rows = np.arange(self.num_examples, dtype=np.int32)
        for indices, masks in self._groups(epoch, start_step, group):
            index = [rows[i] if isinstance(i, slice) else i.astype(np.int32) for i in indices]
            if group > 1:
                yield np.stack(index), np.stack(masks)
            else:
                yield index[0], masks[0]

    def _groups(self, epoch: int, start_step: int, group: int
                ) -> Iterator[tuple[list[Any], list[np.ndarray]]]:
        """Per yielded item, the row indices (`_step_indices`) and masks of its ``group``
        steps; sets `steps_seen`."""
        order = self.epoch_order(epoch)
        self.steps_seen = start_step
        for first in range(start_step, self.steps, group):
            indices, masks = [], []
            for step in range(first, first + group):
                idx, num_real = self._step_indices(order, min(step, self.steps - 1))
                indices.append(idx)
                real = num_real if step < self.steps else 0
                masks.append(self._full_mask if real == self.batch_size
                              else real_rows_mask(real, self.padded_batch_size))
            self.steps_seen = min(first + group, self.steps)
            yield indices, masks

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
            return a[idx] if isinstance(idx, slice) else take_rows(a, idx, shape)

        stacked = np.stack if group > 1 else (lambda values: values[0])
        return Batch(x=jax.tree.map(take, self.x),
                     y=None if self.y is None else jax.tree.map(take, self.y),
                     sample_weight=stacked(weights) if weights else None,
                     mask=stacked(masks))
