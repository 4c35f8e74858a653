"""Callbacks that record training: `CSVLogger`, `TensorBoard` and `LambdaCallback`.

Only the chief (process 0) writes files. Batch hooks read their `LazyLogs` only when they
need a value, so a logger that writes per epoch adds no host sync to the steps.
"""

from __future__ import annotations

import contextlib
import csv
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from mirrorfit._src.callbacks.callback import _HOOKS, Callback, StepCounter, check_save_freq
from mirrorfit._src.optimizers.learning_rate import get_learning_rate
from mirrorfit._src.utils.checks import is_int


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
        """Opens ``filename`` (on process 0), to append to it with ``append=True``."""
        if jax.process_index() != 0:  # several processes: only the chief writes
            return
        has_rows = self.append and os.path.exists(self.filename) and os.path.getsize(
            self.filename) > 0
        self._header = not has_rows
        self._file = open(self.filename, "a" if self.append else "w", newline="")  # noqa: SIM115
        self._writer, self._keys = None, []

    def on_epoch_end(self, epoch, logs=None):
        """Writes the epoch's row (the header with the first row of a new file); a key
        missing from a later epoch's logs is written ``NA``.
        """
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
        """Closes the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoard(Callback):
    """Writes logs as TensorBoard scalars with tensorboardX (TensorFlow is not needed), and
    profiles train steps with the JAX profiler, as ``keras.callbacks.TensorBoard``.

    Epoch logs go to ``<log_dir>/train`` as ``epoch_<name>``, with the optimizer's learning
    rate as ``epoch_learning_rate``, and ``val_*`` logs to ``<log_dir>/validation`` as
    ``epoch_<name>``, at step ``epoch``, as Keras does. With an int ``update_freq`` (or
    ``"batch"``, meaning 1), ``batch_<name>`` scalars are also written every that many train
    steps, at the global step number; only then are batch logs read. A writer's events file
    is created with its first value, so a run without validation data has no
    ``validation`` folder.

    ``profile_batch`` traces train steps with ``jax.profiler`` into
    ``<log_dir>/train/plugins/profile/<run>/``, where TensorBoard's profile plugin
    (``pip install tensorboard-plugin-profile``) opens them. Steps are counted from 1 over
    the whole ``fit``, not per epoch, as in Keras. The trace starts before the first
    profiled step is dispatched and stops once the last one has finished on the devices.
    Each step is marked as a ``jax.profiler.StepTraceAnnotation`` named ``train``.

    Only the chief (process 0) writes and profiles.

    Args:
        log_dir: the run's directory; view it with ``tensorboard --logdir <log_dir>``.
        update_freq: ``"epoch"``, ``"batch"`` or an int number of train steps.
        profile_batch: ``0`` (no profiling), the 1-based number of the train step to
            profile, or a pair ``(start, stop)`` of them, both profiled.

    Raises:
        ValueError: for a ``profile_batch`` that is neither a non-negative int nor a pair
            ``(start, stop)`` of positive ints with ``start <= stop``.

    Example:
        >>> board = TensorBoard("logs", profile_batch=(10, 15))  # steps 10 to 15 of fit
    """

    def __init__(self, log_dir: str | os.PathLike = "logs", update_freq: str | int = "epoch",
                 profile_batch: int | tuple[int, int] = 0):
        super().__init__()
        self.log_dir = os.fspath(log_dir)
        self.update_freq = 1 if update_freq == "batch" else check_save_freq(
            update_freq, "TensorBoard")
        self._start_batch, self._stop_batch = _profile_range(profile_batch)
        self._writers: dict[str, Any] = {}
        self._summary_writer: Any = None
        self._chief = False
        self._steps = StepCounter()
        self._steps_done = 0  # global train steps of this fit, as Keras counts for profiling
        self._steps_since_write = 0
        self._tracing = False
        self._step_annotation: Any = None

    def _writer(self, name: str) -> Any:
        """The ``<log_dir>/<name>`` writer, created (with its events file) on first use."""
        if name not in self._writers:
            self._writers[name] = self._summary_writer(os.path.join(self.log_dir, name))
        return self._writers[name]

    def on_train_begin(self, logs=None):
        """Prepares the event writers (created under ``log_dir`` on first use, on process
        0).

        Raises:
            ImportError: if tensorboardX is not installed.
        """
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("mirrorfit.callbacks.TensorBoard writes with tensorboardX: "
                              "pip install tensorboardX") from None
        self._summary_writer = SummaryWriter
        self._chief = jax.process_index() == 0  # several processes: the chief writes
        self._writers = {}
        self._steps, self._steps_done, self._steps_since_write = StepCounter(), 0, 0

    def on_train_batch_begin(self, batch, logs=None):
        """Starts the ``jax.profiler`` trace at the first step of ``profile_batch``, and
        marks each traced step.
        """
        if not self._chief or self._stop_batch == 0:
            return
        first = self._steps_done + 1  # the call runs steps first .. last of the fit
        last = self._steps_done + self.model.trainer.steps_per_execution
        if not self._tracing and first <= self._stop_batch and last >= self._start_batch:
            jax.profiler.start_trace(os.path.join(self.log_dir, "train"))
            self._tracing = True
        if self._tracing:
            self._step_annotation = jax.profiler.StepTraceAnnotation("train", step_num=first)
            self._step_annotation.__enter__()

    def on_train_batch_end(self, batch, logs=None):
        """Stops the trace after the last step of ``profile_batch``; writes the train logs
        (``batch_<name>``) every ``update_freq`` steps at the global step.
        """
        if not self._chief:
            return
        self._steps_done += (added := self._steps.advance(batch))
        if self._tracing:
            self._step_annotation.__exit__(None, None, None)
            if self._steps_done >= self._stop_batch:
                self._stop_trace()
        if self.update_freq == "epoch":
            return
        self._steps_since_write += added
        if self._steps_since_write >= self.update_freq:
            self._steps_since_write = 0
            step = int(jax.device_get(self.model.state.step))  # global, also after a resume
            logs = logs or {}
            for key in logs:
                if not key.startswith("_") and np.ndim(logs[key]) == 0:
                    self._writer("train").add_scalar(f"batch_{key}", logs[key], step)

    def _stop_trace(self) -> None:
        """Stops the profiler once the traced steps have finished on the devices."""
        jax.block_until_ready(self.model.state)
        jax.profiler.stop_trace()
        self._tracing = False

    def on_epoch_end(self, epoch, logs=None):
        """Writes the epoch's scalar logs and learning rate (``epoch_<name>``): the train
        ones under ``train/``, the ``val_`` ones under ``validation/``.
        """
        if not self._chief:
            return
        logs = dict(logs or {})
        with contextlib.suppress(ValueError):  # an optimizer without an injected rate
            logs["learning_rate"] = get_learning_rate(self.model.opt_state, "TensorBoard")
        for key, value in logs.items():
            if key.startswith("_") or np.ndim(value):  # scalars only; per-class arrays skip
                continue
            if key.startswith("val_"):
                self._writer("validation").add_scalar(f"epoch_{key[4:]}", value, epoch)
            else:
                self._writer("train").add_scalar(f"epoch_{key}", value, epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        """Stops an unfinished trace and closes the writers."""
        if self._tracing:  # fit ended before the last profiled step
            self._stop_trace()
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


def _profile_range(profile_batch: Any) -> tuple[int, int]:
    """``(start, stop)`` train steps (1-based) from `TensorBoard`'s ``profile_batch``;
    ``(0, 0)`` for no profiling."""
    pair = profile_batch if isinstance(profile_batch, (tuple, list)) else (profile_batch,) * 2
    if (len(pair) != 2 or not all(is_int(b) for b in pair)
            or (pair[0] < 1 and tuple(pair) != (0, 0)) or pair[1] < pair[0]):
        raise ValueError("TensorBoard profile_batch must be a non-negative int (0: no "
                         "profiling) or a pair (start, stop) of positive ints with start <= "
                         "stop: the 1-based train steps of fit to profile. Received: "
                         f"profile_batch={profile_batch!r}")
    return int(pair[0]), int(pair[1])


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
