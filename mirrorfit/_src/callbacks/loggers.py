"""Callbacks that record training: `CSVLogger`, `TensorBoard` and `LambdaCallback`.

Only the chief (process 0) writes files. Batch hooks read their `LazyLogs` only when they
need a value, so a logger that writes per epoch adds no host sync to the steps.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from mirrorfit._src.callbacks.callback import _HOOKS, Callback, StepCounter, check_save_freq


class CSVLogger(Callback):
    """Streams epoch logs to a CSV file: a header ``epoch,<sorted log keys>``, one row per epoch.

    Args:
        filename: the CSV file.
        separator: the field separator.
        append: append to an existing file (no second header) instead of overwriting it.
    """

    def __init__(self, filename: str | os.PathLike, separator: str = ",", append: bool = False):
        super().__init__()
        self.filename = os.fspath(filename)
        self.separator = separator
        self.append = append
        self._file = None
        self._writer: csv.DictWriter | None = None
        self._keys: list[str] = []
        self._header = True

    def on_train_begin(self, logs=None):
        if jax.process_index() != 0:  # several processes: only the chief writes
            return
        has_rows = self.append and os.path.exists(self.filename) and os.path.getsize(
            self.filename) > 0
        self._header = not has_rows
        self._file = open(self.filename, "a" if self.append else "w", newline="")  # noqa: SIM115
        self._writer, self._keys = None, []

    def on_epoch_end(self, epoch, logs=None):
        if self._file is None:
            return
        logs = {k: v for k, v in (logs or {}).items() if not k.startswith("_")}
        if self._writer is None:
            self._keys = sorted(logs)
            self._writer = csv.DictWriter(self._file, fieldnames=["epoch", *self._keys],
                                          delimiter=self.separator, lineterminator="\n")
            if self._header:
                self._writer.writeheader()
        self._writer.writerow({"epoch": epoch, **{k: logs.get(k, "NA") for k in self._keys}})
        self._file.flush()

    def on_train_end(self, logs=None):
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoard(Callback):
    """Writes logs as TensorBoard scalars with tensorboardX (TensorFlow is not needed).

    Epoch logs go to ``<log_dir>/train`` as ``epoch_<name>`` and ``val_*`` logs to
    ``<log_dir>/validation`` as ``epoch_<name>``, at step ``epoch``, as Keras does. With an
    int ``update_freq`` (or ``"batch"``, meaning 1), ``batch_<name>`` scalars are also written
    every that many train steps, at the global step number; only then are batch logs read.

    Args:
        log_dir: the run's directory; view it with ``tensorboard --logdir <log_dir>``.
        update_freq: ``"epoch"``, ``"batch"`` or an int number of train steps.
    """

    def __init__(self, log_dir: str | os.PathLike = "logs", update_freq: str | int = "epoch"):
        super().__init__()
        self.log_dir = os.fspath(log_dir)
        self.update_freq = 1 if update_freq == "batch" else check_save_freq(
            update_freq, "TensorBoard")
        self._writers: dict[str, Any] = {}
        self._steps = StepCounter()
        self._steps_since_write = 0

    def on_train_begin(self, logs=None):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("mirrorfit.callbacks.TensorBoard writes with tensorboardX: "
                              "pip install tensorboardX") from None
        self._writers = {name: SummaryWriter(os.path.join(self.log_dir, name))
                         for name in ("train", "validation")
                         if jax.process_index() == 0}  # several processes: the chief writes
        self._steps, self._steps_since_write = StepCounter(), 0

    def on_train_batch_end(self, batch, logs=None):
        if self.update_freq == "epoch" or not self._writers:
            return
        self._steps_since_write += self._steps.advance(batch)
        if self._steps_since_write >= self.update_freq:
            self._steps_since_write = 0
            step = int(jax.device_get(self.model.state.step))  # global, also after a resume
            logs = logs or {}
            for key in logs:
                if not key.startswith("_") and np.ndim(logs[key]) == 0:
                    self._writers["train"].add_scalar(f"batch_{key}", logs[key], step)

    def on_epoch_end(self, epoch, logs=None):
        if not self._writers:
            return
        for key, value in (logs or {}).items():
            if key.startswith("_") or np.ndim(value):  # scalars only; per-class arrays skip
                continue
            if key.startswith("val_"):
                self._writers["validation"].add_scalar(f"epoch_{key[4:]}", value, epoch)
            else:
                self._writers["train"].add_scalar(f"epoch_{key}", value, epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


class LambdaCallback(Callback):
    """A callback from plain functions, as ``keras.callbacks.LambdaCallback``.

    Each keyword names a hook: ``on_epoch_begin``/``on_epoch_end`` and the ``*_batch_*``
    hooks get ``(index, logs)``; ``on_train_error`` gets ``(error)``; the others
    (``on_train_begin``, ...) get ``(logs)``.

    Example:
        >>> losses = []
        >>> cb = LambdaCallback(on_epoch_end=lambda epoch, logs: losses.append(logs["loss"]))

    Raises:
        TypeError: for a keyword that is not a Keras hook, or a value that is not callable.
    """

    def __init__(self, **hooks: Callable[..., Any]):
        super().__init__()
        unknown = sorted(set(hooks) - set(_HOOKS))
        if unknown:
            raise TypeError(f"LambdaCallback takes Keras hook names ({', '.join(_HOOKS)}). "
                            f"Received: {', '.join(unknown)}")
        for name, fn in hooks.items():
            if not callable(fn):
                raise TypeError(f"LambdaCallback {name} must be callable. Received: "
                                f"{name}={fn!r}")
        self._hooks = hooks


def _forward(hook: str, indexed: bool):
    def with_index(self, index, logs=None):
        fn = self._hooks.get(hook)
        if fn is not None:
            fn(index, logs)

    def without_index(self, logs=None):
        fn = self._hooks.get(hook)
        if fn is not None:
            fn(logs)

    method = with_index if indexed else without_index
    method.__name__ = hook
    return method


for _hook in _HOOKS:
    setattr(LambdaCallback, _hook, _forward(_hook, "epoch_" in _hook or "batch_" in _hook))
