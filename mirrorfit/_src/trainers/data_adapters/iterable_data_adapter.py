"""`IterableDataAdapter`: any source of global batches, padded and masked.

Every batch-yielding kind ends here: a Python iterable or generator, a `PyDataset`, a
``tf.data.Dataset``, a grain dataset or ``DataLoader``, a torch ``DataLoader``. Their modules
only say how to open an epoch (`IterableDataAdapter` ``items``) and how many steps an epoch
has, when that is known.

Items are ``x``, ``(x, y)`` or ``(x, y, sample_weight)``, as tuples or lists (torch's default
collate yields lists). Leaves become NumPy (`to_numpy`: torch and TF tensors, JAX arrays). The
first batch fixes the global batch size; later, smaller batches are padded
(`mirrorfit._src.distribute.batch.pad_rows`) and masked. A source of unknown length ends an epoch when
it is exhausted.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any

import jax
import numpy as np

from mirrorfit._src.distribute.batch import Batch, pad_rows, padded_size, real_rows_mask, stack
from mirrorfit._src.trainers import input_checks
from mirrorfit._src.trainers.data_adapters.array_data_adapter import num_rows
from mirrorfit._src.trainers.data_adapters.class_weight import class_weights_to_sample_weights
from mirrorfit._src.trainers.data_adapters.data_adapter import DataAdapter

MAP_HINT = ("Map it to (x, y) first, e.g. dataset.map(lambda d: (d['image'], d['label'])) "
            "(grain, tf.data), or return a tuple from the loader.")
"""One-line fix shown when a source yields dict elements where ``(x, y)`` is needed."""

BATCH_SAMPLE_WEIGHT_ROWS = (
    "Each batch's sample_weight must have one weight per row of the batch's x and y ({rows} "
    "rows): yield (x, y, sample_weight) with sample_weight of shape [{rows}]. Received: a "
    "batch of a {kind} with {rows} rows and sample_weight of shape {shape}")


def to_numpy(leaf: Any) -> np.ndarray:
    """A batch leaf as NumPy: NumPy, JAX, TF and (CPU or accelerator) torch tensors."""
    if isinstance(leaf, np.ndarray):
        return leaf
    if hasattr(leaf, "detach") and hasattr(leaf, "cpu"):  # a torch tensor
        return leaf.detach().cpu().numpy()
    return np.asarray(leaf)


class IterableDataAdapter(DataAdapter):
    """A source of global batches ``x``, ``(x, y)`` or ``(x, y, sample_weight)``.

    The first batch fixes the global batch size; later, smaller batches are padded and
    masked. A re-iterable (a list, a dataset object) restarts every epoch; a one-shot
    iterator (a generator) continues where the last epoch stopped.

    Args:
        data: the iterable (any source when ``items`` reads it, e.g. a `PyDataset`).
        steps_per_epoch: steps per epoch; ``None`` runs until the source is exhausted (for a
            sized re-iterable, ``len(data)``).
        num_replicas: replica count; batches are padded to a multiple of it.
        with_targets: whether items carry targets (fit, evaluate) or only inputs (predict).
        class_weight: ``{class: weight}`` applied to each batch's targets (`PyDataset`,
            tf.data), or ``None``.
        items: ``(epoch, start_step) -> iterator`` of the epoch's items from ``start_step``
            on, for sources that open epochs their own way; default: ``iter(data)``.
        kind: how the source is named in messages (``"generator"``, ``"grain dataset"``).
        local_rows: whether each item is this process's rows of the global batch (one input
            pipeline per process), padded to a multiple of ``num_replicas`` (then the local
            replica count) and placed with `DeviceMesh.shard_local_batch`.
    """

    runs_user_code = True  # next() runs the user's generator or loader: run it ahead on the
    #                        prefetch thread (trainer.py)
    batch_size = None  # the batches fix their own size (`padded_batch_size` once read)

    def __init__(self, data: Iterable | Any, *, steps_per_epoch: int | None, num_replicas: int,
                 with_targets: bool = True, class_weight: Mapping[int, float] | None = None,
                 items: Callable[[int, int], Iterator] | None = None, kind: str = "iterable",
                 local_rows: bool = False):
        self._data = data
        self._items = items
        self._iterator = None
        if items is None and iter(data) is data:
            self._iterator = data  # one-shot: epochs continue where the last one stopped
        self.steps = steps_per_epoch
        if self.steps is None and self._iterator is None and isinstance(data, Sized):
            self.steps = len(data)  # a sized re-iterable: one pass per epoch
        self.num_replicas = num_replicas
        self.with_targets = with_targets
        self.class_weight = class_weight
        self.kind = kind
        self.local_rows = local_rows
        self.padded_batch_size: int | None = None  # fixed by the first batch
        self._full_rows: int | None = None  # rows of the first batch, and its mask, which
        self._full_mask: np.ndarray | None = None  # every batch of that size shares
        self._peeked: tuple[Any, Iterator] | None = None  # (first item, rest of epoch 0)
        self._example_shapes: Any = None  # per-example (x, y) shapes of the first batch

    @property
    def one_shot(self) -> bool:
        """Whether the source is its own iterator (a generator): read once, never restarted."""
        return self._iterator is not None

    def first_inputs(self) -> Any:
        """``x`` of the first batch (NumPy), read once ahead; epoch 0 then starts with it.

        Raises:
            ValueError: if the source yields no batch, or its first element is malformed.
        """
        if self._peeked is None:
            iterator = self._epoch_items(0, 0)
            for item in iterator:
                self._peeked = item, iterator
                break
            else:
                raise ValueError(f"x is empty: the {self.kind} yielded no batch. Received: "
                                 f"x={self._data!r}")
        return jax.tree.map(to_numpy, self._unpack(self._peeked[0])[0])

    def _epoch_items(self, epoch: int, start_step: int) -> Iterator:
        if self._peeked is not None:
            (item, rest), self._peeked = self._peeked, None
            if self._iterator is not None or (epoch, start_step) == (0, 0):
                return itertools.islice(_prepend(item, rest), start_step, None)
            _close(rest)
        if self._items is not None:
            return self._items(epoch, start_step)
        iterator = self._iterator if self._iterator is not None else iter(self._data)
        return itertools.islice(iterator, start_step, None)

    def _unpack(self, item):
        if isinstance(item, Mapping) and self.with_targets:
            raise ValueError(
                f"Each element of a {self.kind} must be (x, y) or (x, y, sample_weight) for "
                f"fit and evaluate, not a dict. {MAP_HINT} Received: an element with keys "
                f"{sorted(item)}")
        parts = tuple(item) if isinstance(item, (tuple, list)) else None
        if not self.with_targets:
            return (parts[0] if parts else item), None, None
        if parts is None or len(parts) not in (2, 3):
            raise ValueError(
                f"Each batch of a {self.kind} must be a tuple or list (x, y) or "
                f"(x, y, sample_weight). Received: a batch of type {type(item).__name__}"
                + (f" with {len(parts)} items" if parts is not None else ""))
        x, y, sample_weight = parts if len(parts) == 3 else (*parts, None)
        if self.class_weight is not None:
            weights = class_weights_to_sample_weights(to_numpy(y), self.class_weight)
            if sample_weight is not None:
                self._check_weight_rows(sample_weight, len(weights))
            sample_weight = weights if sample_weight is None else (
                weights * to_numpy(sample_weight).astype(np.float32))
        return x, y, sample_weight

    def batches(self, epoch: int = 0, *, start_step: int = 0, group: int = 1
                ) -> Iterator[Batch]:
        """Yields the epoch's padded batches (``group`` stacked per item; see
        `DataAdapter.batches`). Yields nothing if the source has run dry."""
        pending, step = [], start_step
        self.steps_seen = step
        items = self._epoch_items(epoch, start_step)
        try:
            for item in items:
                pending.append(self._pad(*self._unpack(item)))
                step = self.steps_seen = step + 1
                if len(pending) == group:
                    yield stack(pending)
                    pending = []
                if self.steps is not None and step >= self.steps:
                    break
        finally:
            if self._iterator is None:  # never close the user's one-shot iterator
                _close(items)
        if pending:
            last = pending[-1]
            filler = last._replace(
                mask=np.zeros_like(last.mask),
                sample_weight=None if last.sample_weight is None else np.zeros_like(
                    last.sample_weight))
            yield stack(pending + [filler] * (group - len(pending)))

    def _check_weight_rows(self, sample_weight: Any, rows: int) -> None:
        got = np.shape(sample_weight)
        if got[:1] != (rows,):
            raise ValueError(BATCH_SAMPLE_WEIGHT_ROWS.format(kind=self.kind, rows=rows,
                                                             shape=got))

    def _model_accepts(self, x: Any) -> bool:
        """Whether the model takes ``x``, whose per-example shapes differ from the first
        batch's: sequences of another length for a model of variable-length inputs (each
        distinct shape compiles its own step)."""
        if self.check_input is None:
            return False
        try:
            self.check_input(x)
        except ValueError:
            return False
        return True

    def _pad(self, x, y, sample_weight) -> Batch:
        x, y = jax.tree.map(to_numpy, (x, y))
        input_checks.check_numeric(x, "x")
        input_checks.check_numeric(y, "y")
        input_checks.check_sample_weight(sample_weight, "a batch's sample_weight")
        rows = num_rows((x, y), f"each batch (x, y) of a {self.kind}")
        if sample_weight is not None:
            self._check_weight_rows(sample_weight, rows)
        shapes = jax.tree.map(lambda a: a.shape[1:], (x, y))
        if self.padded_batch_size is None:
            if self.check_input is not None:
                self.check_input(x)
            self.padded_batch_size = padded_size(rows, self.num_replicas)
            self._full_rows = rows
            self._full_mask = real_rows_mask(rows, self.padded_batch_size)
            self._example_shapes = shapes
        elif shapes != self._example_shapes and not self._model_accepts(x):
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
            sample_weight = pad_rows(to_numpy(sample_weight).astype(np.float32), rows,
                                     target) * mask
        return Batch(pad_rows(x, rows, target), None if y is None else pad_rows(y, rows, target),
                     sample_weight, mask)


def _prepend(item: Any, rest: Iterator) -> Iterator:
    """``item`` then ``rest``; closing it closes ``rest`` (runs an epoch's end hooks)."""
    try:
        yield item
        yield from rest
    finally:
        _close(rest)


def _close(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if callable(close):
        close()
