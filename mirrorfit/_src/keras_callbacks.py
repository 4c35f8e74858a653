"""The Keras callback set on mirrorfit's trainer: early stopping, learning-rate control and
loggers (the checkpointing callbacks are in `mirrorfit._src.checkpoint_callbacks`).

Callbacks run on the host between steps and see ``model._state``, always the newest state.
Batch hooks read their `LazyLogs` only when they need a value (a callback that does not read
them adds no host sync). The state and the metric accumulators are donated to the next step,
so whatever a hook keeps it copies (``jax.device_get``) before returning.

Learning-rate callbacks work on ``optax.inject_hyperparams`` optimizers (every named
mirrorfit optimizer): the rate is a leaf of the optimizer state, replaced between steps
without recompiling.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from mirrorfit._src.callbacks import _HOOKS, Callback, chief_print

NO_LEARNING_RATE = (
    "{name} needs an optimizer whose learning rate lives in its state: a mirrorfit optimizer "
    "(e.g. compile(optimizer=\"adam\") or mf.optimizers.SGD(0.1)) or one built with "
    "optax.inject_hyperparams(optax.adam)(learning_rate=1e-3). Received: an optimizer state "
    "without hyperparams[\"learning_rate\"] ({state})"
)


# -- shared helpers ---------------------------------------------------------------------------


def monitor_op(mode: str, monitor: str, owner: str) -> Callable[[float, float], bool]:
    """``better(a, b)``: ``a < b`` (``"min"``) or ``a > b`` (``"max"``); ``"auto"`` as Keras."""
    if mode not in ("auto", "min", "max"):
        raise ValueError(f'{owner} mode must be "auto", "min" or "max". Received: mode={mode!r}')
    if mode == "auto":
        maximize = any(word in monitor for word in ("acc", "auc", "precision", "recall"))
        mode = "max" if maximize else "min"
    return np.greater if mode == "max" else np.less


def check_save_freq(save_freq: Any, owner: str) -> Any:
    if save_freq == "epoch":
        return save_freq
    if isinstance(save_freq, bool) or not isinstance(save_freq, (int, np.integer)) or (
            save_freq < 1):
        raise ValueError(f'{owner} save_freq must be "epoch" or a positive int number of train '
                         f"steps. Received: save_freq={save_freq!r}")
    return int(save_freq)


def _is_lr_state(node: Any) -> bool:
    hyperparams = getattr(node, "hyperparams", None)
    return isinstance(hyperparams, dict) and "learning_rate" in hyperparams


def get_learning_rate(model, owner: str = "This callback") -> float:
    """The learning rate in ``model`` 's optimizer state (the first one, in a chain).

    Raises:
        ValueError: if the optimizer state has no ``hyperparams["learning_rate"]``.
    """
    opt_state = None if model.state is None else model.state.opt_state
    found = [n for n in jax.tree.leaves(opt_state, is_leaf=_is_lr_state) if _is_lr_state(n)]
    if not found:
        raise ValueError(NO_LEARNING_RATE.format(name=owner, state=type(opt_state).__name__))
    return float(np.asarray(found[0].hyperparams["learning_rate"]))


def set_learning_rate(model, value: float, owner: str = "This callback") -> None:
    """Sets every ``hyperparams["learning_rate"]`` in ``model`` 's optimizer state.

    The new value keeps the old leaf's dtype and mirrored sharding, so the compiled train
    step is reused as is.
    """
    get_learning_rate(model, owner)  # raises a clear error without an injectable rate

    def replace(node):
        if not _is_lr_state(node):
            return node
        old = node.hyperparams["learning_rate"]
        new = model.strategy.replicate_arrays(np.asarray(value, dtype=old.dtype))
        return node._replace(hyperparams={**node.hyperparams, "learning_rate": new})

    state = model.state
    opt_state = jax.tree.map(replace, state.opt_state, is_leaf=_is_lr_state)
    model._state = state._replace(opt_state=opt_state)


class StepCounter:
    """Train steps done, from the batch indices of ``on_train_batch_end`` (as Keras counts).

    With ``steps_per_execution = K`` a hook sees every K-th index, so one call may add K steps.
    """

    def __init__(self):
        self._last = -1

    def advance(self, batch: int) -> int:
        added = batch + 1 if batch <= self._last else batch - self._last
        self._last = batch
        return added


# -- stopping ---------------------------------------------------------------------------------


class EarlyStopping(Callback):
    """Stops training when ``monitor`` has stopped improving, as ``keras.callbacks.EarlyStopping``.

    Args:
        monitor: the epoch log to watch, e.g. ``"val_loss"`` or ``"val_accuracy"``.
        min_delta: smallest change that counts as an improvement.
        patience: epochs without improvement after which training stops.
        verbose: 1 prints a line when stopping or restoring.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (``"max"`` for accuracy-like names).
        baseline: training stops unless ``monitor`` beats this within ``patience`` epochs.
        restore_best_weights: at the end of training, set the weights of the best epoch.
        start_from_epoch: epochs to wait before watching ``monitor`` at all.
    """

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0.0, patience: int = 0,
                 verbose: int = 0, mode: str = "auto", baseline: float | None = None,
                 restore_best_weights: bool = False, start_from_epoch: int = 0):
        super().__init__()
        self.monitor = monitor
        self.monitor_op = monitor_op(mode, monitor, "EarlyStopping")
        self.min_delta = abs(min_delta) if self.monitor_op is np.greater else -abs(min_delta)
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.start_from_epoch = start_from_epoch

    def _improved(self, value: float, reference: float | None) -> bool:
        return reference is None or bool(self.monitor_op(value - self.min_delta, reference))

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best: float | None = None
        self.best_epoch = 0
        self.best_weights: list[np.ndarray] | None = None

    def on_epoch_end(self, epoch, logs=None):
        current = (logs or {}).get(self.monitor)
        if current is None:
            warnings.warn(f"EarlyStopping: monitor {self.monitor!r} is not in the logs (available:"
                          f" {sorted(logs or {})}); skipping this epoch.", UserWarning,
                          stacklevel=2)
            return
        if epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
        self.wait += 1
        if self._improved(current, self.best):
            self.best, self.best_epoch = float(current), epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self._improved(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            chief_print(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                chief_print(f"Restoring model weights from the end of the best epoch: "
                      f"{self.best_epoch + 1}.")
            self.model.set_weights(self.best_weights)


class TerminateOnNaN(Callback):
    """Stops training at the first step whose loss is NaN or infinite.

    It reads the loss after every step, so it syncs with the device once per step.
    """

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            chief_print(f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True


# -- learning rate ----------------------------------------------------------------------------


class LearningRateScheduler(Callback):
    """Sets the learning rate at the start of each epoch from ``schedule(epoch, lr)``.

    Args:
        schedule: ``(epoch, current_lr) -> new_lr`` (or ``epoch -> new_lr``); ``epoch`` is
            0-based. A function of the epoch alone keeps resumed runs exact.
        verbose: 1 prints the new rate each epoch.

    The rate is written into ``opt_state.hyperparams["learning_rate"]`` (no recompilation)
    and logged as ``learning_rate`` at each epoch end.

    Raises:
        ValueError: at the first epoch, if the optimizer has no injectable learning rate.
    """

    def __init__(self, schedule: Callable[..., float], verbose: int = 0):
        super().__init__()
        if not callable(schedule):
            raise TypeError("LearningRateScheduler needs a callable schedule(epoch, lr) -> lr. "
                            f"Received: schedule={schedule!r}")
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch, logs=None):
        lr = get_learning_rate(self.model, "LearningRateScheduler")
        try:
            new = self.schedule(epoch, lr)
        except TypeError:  # a schedule of the epoch only, as Keras allows
            new = self.schedule(epoch)
        if isinstance(new, bool) or not isinstance(new, (float, int, np.floating, np.integer)):
            raise ValueError("LearningRateScheduler's schedule must return a float. Received: "
                             f"{new!r} for epoch {epoch}")
        set_learning_rate(self.model, float(new), "LearningRateScheduler")
        if self.verbose > 0:
            chief_print(f"Epoch {epoch + 1}: LearningRateScheduler setting learning rate to "
                        f"{new}.")

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = get_learning_rate(self.model, "LearningRateScheduler")


class ReduceLROnPlateau(Callback):
    """Multiplies the learning rate by ``factor`` when ``monitor`` stops improving (Keras').

    Args:
        monitor: the epoch log to watch.
        factor: multiplier in (0, 1) applied to the rate.
        patience: epochs without improvement before reducing.
        verbose: 1 prints a line per reduction.
        mode: ``"min"``, ``"max"`` or ``"auto"``.
        min_delta: smallest change that counts as an improvement.
        cooldown: epochs to wait after a reduction before counting again.
        min_lr: lower bound on the rate.

    Raises:
        ValueError: if ``factor`` is not in (0, 1), or (at the first epoch end) the optimizer
            has no injectable learning rate.
    """

    def __init__(self, monitor: str = "val_loss", factor: float = 0.1, patience: int = 10,
                 verbose: int = 0, mode: str = "auto", min_delta: float = 1e-4,
                 cooldown: int = 0, min_lr: float = 0.0):
        super().__init__()
        if not 0.0 < factor < 1.0:
            raise ValueError("ReduceLROnPlateau factor must be in (0, 1): the rate is multiplied "
                             f"by it. Received: factor={factor!r}")
        self.monitor = monitor
        self.factor = factor
        self.patience = patience
        self.verbose = verbose
        self.monitor_op = monitor_op(mode, monitor, "ReduceLROnPlateau")
        self.min_delta = min_delta if self.monitor_op is np.greater else -min_delta
        self.cooldown = cooldown
        self.min_lr = min_lr

    def on_train_begin(self, logs=None):
        self.best: float | None = None
        self.wait = 0
        self.cooldown_counter = 0

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        lr = get_learning_rate(self.model, "ReduceLROnPlateau")
        logs["learning_rate"] = lr
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"ReduceLROnPlateau: monitor {self.monitor!r} is not in the logs "
                          f"(available: {sorted(logs)}); skipping.", UserWarning, stacklevel=2)
            return
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait = 0
        if self.best is None or self.monitor_op(current - self.min_delta, self.best):
            self.best = float(current)
            self.wait = 0
        elif self.cooldown_counter == 0:
            self.wait += 1
            if self.wait >= self.patience and lr > self.min_lr:
                new = max(lr * self.factor, self.min_lr)
                set_learning_rate(self.model, new, "ReduceLROnPlateau")
                if self.verbose > 0:
                    chief_print(f"Epoch {epoch + 1}: ReduceLROnPlateau reducing learning rate "
                                f"to {new}.")
                self.cooldown_counter = self.cooldown
                self.wait = 0


# -- loggers ----------------------------------------------------------------------------------


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
        self._keys: list[str] | None = None
        self._header = True

    def on_train_begin(self, logs=None):
        if jax.process_index() != 0:  # several processes: only the chief writes
            return
        has_rows = self.append and os.path.exists(self.filename) and os.path.getsize(
            self.filename) > 0
        self._header = not has_rows
        self._file = open(self.filename, "a" if self.append else "w", newline="")  # noqa: SIM115
        self._writer, self._keys = None, None

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
            for key in logs or {}:
                if not key.startswith("_"):
                    self._writers["train"].add_scalar(f"batch_{key}", logs[key], step)

    def on_epoch_end(self, epoch, logs=None):
        if not self._writers:
            return
        for key, value in (logs or {}).items():
            if key.startswith("_"):
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
    hooks get ``(index, logs)``; the others (``on_train_begin``, ...) get ``(logs)``.

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
    if indexed:
        def method(self, index, logs=None):
            fn = self._hooks.get(hook)
            if fn is not None:
                fn(index, logs)
    else:
        def method(self, logs=None):
            fn = self._hooks.get(hook)
            if fn is not None:
                fn(logs)
    method.__name__ = hook
    return method


for _hook in _HOOKS:
    setattr(LambdaCallback, _hook, _forward(_hook, "epoch_" in _hook or "batch_" in _hook))
