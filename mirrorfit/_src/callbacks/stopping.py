"""Callbacks that stop training: `EarlyStopping` and `TerminateOnNaN`, as in Keras."""

from __future__ import annotations

import math
import warnings

import numpy as np

from mirrorfit._src.callbacks.callback import Callback, chief_print, monitor_op
from mirrorfit._src.utils.checks import MirrorfitWarning


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
        """Resets the wait, the best value and epoch, and the best weights."""
        self.wait = 0
        self.stopped_epoch = 0
        self.best: float | None = None
        self.best_epoch = 0
        self.best_weights: list[np.ndarray] | None = None

    def on_epoch_end(self, epoch, logs=None):
        """Compares ``monitor`` with the best so far (from ``start_from_epoch``) and stops
        training after ``patience`` epochs without an improvement of at least
        ``min_delta`` (or without reaching ``baseline``); warns and skips if
        ``monitor`` is not in the logs.
        """
        current = (logs or {}).get(self.monitor)
        if current is None:
            warnings.warn(f"EarlyStopping: monitor {self.monitor!r} is not in the logs (available:"
                          f" {sorted(logs or {})}); skipping this epoch.", MirrorfitWarning,
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
        """Prints the epoch training stopped at (``verbose``) and sets the best epoch's
        weights back with ``restore_best_weights``.
        """
        if self.stopped_epoch > 0 and self.verbose > 0:
            chief_print(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                chief_print(f"Restoring model weights from the end of the best epoch: "
                      f"{self.best_epoch + 1}.")
            self.model.set_weights(self.best_weights)


class TerminateOnNaN(Callback):
    """Stops training at the first step whose loss is NaN or infinite.

    It reads the loss after every step, so it syncs with the device once per step. Its
    presence also makes ``fit`` check the gradients inside the compiled step (without loss
    scaling): a step whose gradients are not all finite, even with a finite loss, is not
    applied, and training stops there with a line naming the batch.
    """

    def on_train_batch_end(self, batch, logs=None):
        """Stops training if the step's loss is NaN or infinite."""
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            chief_print(f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True
