"""The input layer: whatever ``fit``, ``evaluate`` and ``predict`` receive, as padded batches.

One adapter per input kind, chosen in one place (`get_data_adapter`), as Keras 3's
``trainers/data_adapters``. Each is a `DataAdapter` (``data_adapter``), the interface the
loops read:

* `ArrayDataAdapter`: NumPy/JAX arrays, pandas objects, or dicts/tuples/lists of them;
* `IterableDataAdapter`: every source of batches; its kinds live in their own modules:
  `PyDataset` (``py_dataset_adapter``), ``tf.data`` (``tf_dataset_adapter``), grain
  (``grain_dataset_adapter``), torch (``torch_data_loader_adapter``), and any other
  iterable or generator; and a ``DistributedDataset`` of the model's strategy
  (``distributed_dataset_adapter``), whose per-process pipelines pass only their own rows.

Every adapter has ``steps`` (steps per epoch, ``None`` when unknown), ``first_inputs()``
(to build or check the model), ``batches(epoch, start_step=0, group=1)``, which yields
`mirrorfit._src.distribute.batch.Batch` es of one static shape, and ``local_rows`` (whether they are
this process's rows of each global batch, to place with ``shard_local_batch``), and
``runs_user_code`` (whether producing a batch runs the user's generator, ``__getitem__`` or
loader: the trainer then runs it ahead on the prefetch thread); `DataAdapter` lists the rest.
An argument that does not apply to the chosen kind is a ``ValueError``
(`raise_unsupported_arg`), never silently ignored. `train_and_validation` applies ``fit``'s
validation arguments.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from mirrorfit._src.trainers import input_checks
from mirrorfit._src.trainers.data_adapters.array_data_adapter import (
    ArrayDataAdapter,
    fingerprint,
    is_array_input,
)
from mirrorfit._src.trainers.data_adapters.class_weight import check_class_weight
from mirrorfit._src.trainers.data_adapters.data_adapter import DataAdapter
from mirrorfit._src.trainers.data_adapters.distributed_dataset_adapter import (
    distributed_dataset_adapter,
    is_distributed_dataset,
    per_process_fingerprint,
)
from mirrorfit._src.trainers.data_adapters.grain_dataset_adapter import (
    grain_dataset_adapter,
    is_grain_dataset,
)
from mirrorfit._src.trainers.data_adapters.iterable_data_adapter import IterableDataAdapter
from mirrorfit._src.trainers.data_adapters.py_dataset_adapter import (
    PyDataset,
    py_dataset_adapter,
)
from mirrorfit._src.trainers.data_adapters.tf_dataset_adapter import (
    is_tf_dataset,
    tf_dataset_adapter,
)
from mirrorfit._src.trainers.data_adapters.torch_data_loader_adapter import (
    is_torch_dataloader,
    torch_data_loader_adapter,
)
from mirrorfit._src.utils.checks import MirrorfitWarning, positive_int

DEFAULT_BATCH_SIZE = 32
"""Keras' default global batch size."""

_WHY = {
    "y": "the source already yields the targets; yield (x, y) batches instead",
    "sample_weight": "the source yields whole batches; yield (x, y, sample_weight) instead",
    "batch_size": "the source yields whole batches, whose size is the global batch",
    "validation_batch_size": "the validation source yields whole batches",
    "shuffle": "the source yields batches in its own order; shuffle it at the source",
    "class_weight": "only arrays, PyDataset and tf.data map labels to class weights; yield "
                    "(x, y, sample_weight) instead",
}


def raise_unsupported_arg(name: str, value: Any, kind: str) -> None:
    """Raises the error for an argument that does not apply to input ``kind``, as Keras.

    Raises:
        ValueError: always, naming ``name``, why it does not apply and what to do.
    """
    shown = (f"an array of shape {np.shape(value)}" if hasattr(value, "shape")
             else repr(value)[:80])
    raise ValueError(f"{name} does not apply when x is a {kind}: {_WHY[name]}. Received: "
                     f"{name}={shown}")


def check_batch_size(batch_size: Any) -> int:
    """Validates a global batch size (``None`` means Keras' default of 32)."""
    if batch_size is None:
        return DEFAULT_BATCH_SIZE
    return positive_int(batch_size, "batch_size", "the global batch, split across replicas, "
                        "e.g. 32 * strategy.num_replicas_in_sync")


def kind_of(x: Any) -> str:
    """The input kind of a source of batches, as messages name it."""
    if isinstance(x, PyDataset):
        return "PyDataset"
    if is_distributed_dataset(x):
        return "DistributedDataset"
    if is_tf_dataset(x):
        return "tf.data.Dataset"
    if is_grain_dataset(x):
        return "grain dataset"
    if is_torch_dataloader(x):
        return "torch DataLoader"
    return "generator" if iter(x) is x else "iterable of batches"


def get_data_adapter(x: Any, y: Any = None, sample_weight: Any = None, *, batch_size: Any,
                     num_replicas: int, shuffle: bool | None = False, steps: Any = None,
                     seed: int = 0, with_targets: bool = True, class_weight: Any = None,
                     steps_name: str = "steps_per_epoch", batch_size_name: str = "batch_size",
                     strategy: Any = None) -> DataAdapter:
    """The adapter for ``x`` (and ``y``, ``sample_weight``), chosen by its kind.

    Args:
        x: arrays ``[num_examples, ...]`` (or a dict/tuple/list of them, or pandas), a
            `PyDataset`, a ``tf.data.Dataset``, a grain dataset or ``DataLoader``, a torch
            ``DataLoader``, a ``DistributedDataset`` of ``strategy``, or any iterable or
            generator of global batches.
        y: targets for array ``x``; ``None`` for a source of batches or for predict.
        sample_weight: float ``[num_examples]`` for array ``x``, or ``None``.
        batch_size: global batch size for array ``x`` (``None``: 32).
        num_replicas: replica count; batches are padded to a multiple of it.
        shuffle: reshuffle rows (arrays) or batch order (`PyDataset`) every epoch; ``None``
            means "the default": ``True`` where shuffling applies.
        steps: steps per epoch (``steps_per_epoch``, ``validation_steps``, ``steps``);
            ``None`` for a whole pass.
        seed: base seed of the shuffle order.
        with_targets: ``False`` for predict (inputs only).
        class_weight: ``{class: weight}``, for arrays, `PyDataset` and tf.data.
        steps_name, batch_size_name: how the caller calls ``steps`` and ``batch_size``.
        strategy: the model's strategy (a ``DistributedDataset`` must be distributed by it).

    Raises:
        ValueError: for a missing ``x``/``y``, an argument that does not apply to the kind
            of ``x``, a non-positive ``batch_size``/``steps``, a ``DistributedDataset`` of
            another strategy, or (several processes) a per-process pipeline without a
            length and without ``steps``.
        TypeError: if ``x`` is neither arrays nor an iterable, is a Python list of numbers,
            or holds strings or objects.
    """
    if x is None:
        raise ValueError("x is required: arrays, a dict/tuple of arrays, or a source of "
                         "batches (generator, PyDataset, tf.data, grain, torch). Received: "
                         "x=None")
    steps = None if steps is None else positive_int(steps, steps_name)
    class_weight = check_class_weight(class_weight)
    input_checks.check_not_nested_lists(x, "x")
    input_checks.check_not_nested_lists(y, "y")
    if is_array_input(x):
        if with_targets and y is None:
            raise ValueError("y is required when x is an array (targets for the loss). "
                             "Received: y=None")
        data = ArrayDataAdapter(
            x, y if with_targets else None, sample_weight,
            batch_size=positive_int(batch_size, batch_size_name) if batch_size is not None
            else DEFAULT_BATCH_SIZE, num_replicas=num_replicas,
            shuffle=shuffle is None or bool(shuffle), seed=seed, class_weight=class_weight)
        if steps is not None:
            data.steps = min(data.steps, steps)
        return data
    try:
        iter(x)
    except TypeError:
        raise TypeError("x must be arrays (or a dict/tuple of them), a PyDataset, or an "
                        "iterable of batches (generator, tf.data, grain, torch DataLoader). "
                        f"Received: x of type {type(x).__name__}") from None
    kind = kind_of(x)
    given = {"y": y, "sample_weight": sample_weight, batch_size_name: batch_size,
             "shuffle": shuffle or None, "class_weight": class_weight}
    if kind in ("PyDataset", "tf.data.Dataset"):
        given["class_weight"] = None
    if kind == "PyDataset":
        given["shuffle"] = None
    for name, value in given.items():
        if value is not None:
            raise_unsupported_arg(name, value, kind)
    common = {"steps": steps, "num_replicas": num_replicas, "with_targets": with_targets}
    if kind == "PyDataset":
        return py_dataset_adapter(x, shuffle=shuffle is None or bool(shuffle), seed=seed,
                                  class_weight=class_weight, **common)
    if kind == "tf.data.Dataset":
        return tf_dataset_adapter(x, class_weight=class_weight, **common)
    if kind == "grain dataset":
        return grain_dataset_adapter(x, **common)
    if kind == "torch DataLoader":
        return torch_data_loader_adapter(x, **common)
    if kind == "DistributedDataset":
        return distributed_dataset_adapter(x, strategy=strategy, steps=steps,
                                           with_targets=with_targets, steps_name=steps_name)
    return IterableDataAdapter(x, steps_per_epoch=steps, num_replicas=num_replicas,
                               with_targets=with_targets, kind=kind)


def input_fingerprint(data: DataAdapter) -> dict[str, Any]:
    """Fields for `DeviceMesh.check_same_across_processes`: array inputs' fingerprints.

    Several processes must pass the same global arrays; each field is one input leaf
    (``"x['a']"``, ``"y"``) with its shape, dtype and a hash of a fixed sample of rows.
    Sources of batches give no fields (each process may read its own shard), except that
    per-process pipelines (``local_rows``) must agree on their steps and batch rows
    (`per_process_fingerprint`).
    """
    if isinstance(data, IterableDataAdapter) and data.local_rows:  # never an array adapter
        return per_process_fingerprint(data)
    arrays = data.arrays()
    if arrays is None:
        return {}
    fields = {}
    for name, tree in zip(("x", "y", "sample_weight"), arrays):
        if tree is not None:
            fields.update(fingerprint(tree, f"input {name}"))
    return fields


def _is_xy_tuple(data: Any) -> bool:
    """Whether ``validation_data`` is ``(x, y[, sample_weight])`` rather than batches.

    A tuple is always ``(x, y[, sample_weight])``, as Keras; a list of tuples or lists is a
    list of batches.
    """
    if not isinstance(data, (tuple, list)) or len(data) not in (2, 3):
        return False
    return isinstance(data, tuple) or not all(isinstance(item, (tuple, list)) for item in data)


IN_VALIDATION_DATA = "In validation_data (x_val, y_val[, sample_weight]): "
"""Prefix of an error in ``validation_data``, whose parts the adapters call x, y, sample_weight."""


def train_and_validation(train: DataAdapter, *, validation_split: Any, validation_data: Any,
                         batch_size: Any, num_replicas: int, steps: Any = None,
                         validation_steps: Any = None, validation_batch_size: Any = None,
                         strategy: Any = None) -> tuple[DataAdapter, DataAdapter | None]:
    """``fit``'s training adapter and its validation adapter (or ``None``).

    ``validation_split`` takes the last fraction of array rows, before shuffling, as Keras.
    Otherwise ``validation_data`` is ``(x_val, y_val)``, ``(x_val, y_val, sample_weight)``
    or any source of batches `get_data_adapter` takes (a list whose items are all tuples
    or lists is a list of batches). ``validation_batch_size`` (default ``batch_size``)
    batches array validation data; ``validation_steps`` bounds each validation. Given both,
    ``validation_data`` wins, with a warning, as in Keras. ``strategy`` is the model's
    (for a ``DistributedDataset``).

    Raises:
        ValueError: for a split outside ``[0, 1)``, a split of an iterable, or an argument
            that does not apply to the validation data.
    """
    if not 0.0 <= float(validation_split) < 1.0:
        raise ValueError("validation_split must be in [0, 1), the fraction of rows held out "
                         f"for validation. Received: validation_split={validation_split!r}")
    if validation_split and validation_data is not None:
        warnings.warn("fit got both validation_split and validation_data: validation_data is "
                      "used and validation_split ignored, as in Keras. Pass only one. Received: "
                      f"validation_split={validation_split!r}", MirrorfitWarning, stacklevel=4)
        validation_split = 0.0
    val_batch = batch_size if validation_batch_size is None else validation_batch_size
    if validation_split:
        if not isinstance(train, ArrayDataAdapter):
            raise ValueError("validation_split needs array inputs; for an iterable pass "
                             "validation_data. Received: x of type "
                             f"{type(train).__name__}")
        train, validation = train.split(validation_split, num_replicas)
        if steps is not None:
            train.steps = min(train.steps, positive_int(steps, "steps_per_epoch"))
        if validation_steps is not None:
            validation.steps = min(validation.steps,
                                   positive_int(validation_steps, "validation_steps"))
        return train, validation
    if validation_data is None:
        return train, None
    x_val, y_val, weight = validation_data, None, None
    if _is_xy_tuple(validation_data):
        x_val, y_val, *rest = validation_data
        weight = rest[0] if rest else None
    if is_array_input(x_val) and y_val is None:
        raise ValueError("validation_data must be a tuple (x_val, y_val) or (x_val, y_val, "
                         "sample_weight), or a source of (x, y) batches. Received: "
                         "validation_data with inputs and no targets")
    if not is_array_input(x_val):
        val_batch = validation_batch_size  # only an explicit one is an error
    try:
        validation = get_data_adapter(x_val, y_val, weight, batch_size=val_batch,
                                      num_replicas=num_replicas, steps=validation_steps,
                                      steps_name="validation_steps",
                                      batch_size_name="validation_batch_size",
                                      strategy=strategy)
    except ValueError as error:  # x, y and sample_weight here are validation_data's
        raise ValueError(f"{IN_VALIDATION_DATA}{error}") from error
    return train, validation


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "ArrayDataAdapter",
    "DataAdapter",
    "IterableDataAdapter",
    "PyDataset",
    "check_batch_size",
    "get_data_adapter",
    "input_fingerprint",
    "is_array_input",
    "kind_of",
    "raise_unsupported_arg",
    "train_and_validation",
]
