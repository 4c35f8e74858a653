"""`IterableDataAdapter`: an iterable or generator of global batches, padded and masked.

Items are ``x``, ``(x, y)`` or ``(x, y, sample_weight)``. The first batch fixes the global
batch size; later, smaller batches are padded (`mirrorfit._src.batch.pad_rows`) and masked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np

from mirrorfit._src import input_checks
from mirrorfit._src.batch import Batch, pad_rows, padded_size, real_rows_mask, stack
from mirrorfit._src.data_adapters.array_data_adapter import num_rows


class IterableDataAdapter:
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
        self.padded_batch_size: int | None = None  # fixed by the first batch
        self._full_rows: int | None = None  # rows of the first batch, and its mask, which
        self._full_mask: np.ndarray | None = None  # every batch of that size shares
        self._example_shapes: Any = None  # per-example (x, y) shapes of the first batch
        self.check_input: Callable[[Any], None] | None = None  # set by a built model: raises
        #                  a ValueError for inputs its params do not fit

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
                ) -> Iterator[Batch]:
        """Yields padded batches (``group`` stacked per item; see
        `ArrayDataAdapter.batches`)."""
        del epoch
        iterator = self._iterator if self._iterator is not None else iter(self._data)
        pending, step = [], 0
        for item in iterator:
            if step >= start_step:
                pending.append(self._pad(*self._unpack(item)))
            step += 1
            if len(pending) == group:
                yield stack(pending)
                pending = []
            if self.steps is not None and step >= self.steps:
                break
        if step == 0:
            raise ValueError("The input iterable is empty: it yielded no batch. Received: x="
                             f"{self._data!r}")
        if pending:
            last = pending[-1]
            filler = last._replace(
                mask=np.zeros_like(last.mask),
                sample_weight=None if last.sample_weight is None else np.zeros_like(
                    last.sample_weight))
            yield stack(pending + [filler] * (group - len(pending)))

    def _pad(self, x, y, sample_weight) -> Batch:
        x, y = jax.tree.map(np.asarray, (x, y))
        input_checks.check_numeric(x, "x")
        input_checks.check_numeric(y, "y")
        input_checks.check_sample_weight(sample_weight, "a batch's sample_weight")
        rows = num_rows((x, y), "each batch (x, y)")
        shapes = jax.tree.map(lambda a: a.shape[1:], (x, y))
        if self.padded_batch_size is None:
            if self.check_input is not None:
                self.check_input(x)
            self.padded_batch_size = padded_size(rows, self.num_replicas)
            self._full_rows = rows
            self._full_mask = real_rows_mask(rows, self.padded_batch_size)
            self._example_shapes = shapes
        elif shapes != self._example_shapes:
            raise ValueError(
                "Every batch of an iterable input must have the per-example shapes of the "
                f"first one, (x, y) = {self._example_shapes} (without the batch dimension): "
                "one compiled step serves them all. Pad or crop the examples to one shape. "
                f"Received: a batch with per-example shapes {shapes}")
        target = self.padded_batch_size
        if rows > target:
            raise ValueError(
                f"Every batch must have at most as many rows as the first one "
                f"({target}). Received: a batch with {rows} rows"
            )
        mask = self._full_mask if rows == self._full_rows else real_rows_mask(rows, target)
        if sample_weight is not None:
            sample_weight = pad_rows(np.asarray(sample_weight, np.float32), rows, target) * mask
        return Batch(pad_rows(x, rows, target), None if y is None else pad_rows(y, rows, target),
                     sample_weight, mask)
