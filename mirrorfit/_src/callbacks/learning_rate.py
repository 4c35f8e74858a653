"""Learning-rate callbacks: `LearningRateScheduler` and `ReduceLROnPlateau`, as in Keras.

They work on ``optax.inject_hyperparams`` optimizers (every named mirrorfit optimizer): the
rate is a leaf of the optimizer state (`mirrorfit._src.optimizers.learning_rate`), replaced
between steps through ``Model.assign_state`` without recompiling.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable

import numpy as np

from mirrorfit._src.callbacks.callback import Callback, chief_print, monitor_op
from mirrorfit._src.optimizers.learning_rate import get_learning_rate, set_learning_rate
from mirrorfit._src.utils.checks import MirrorfitWarning


def _set(model, value: float, owner: str) -> None:
    """Writes ``value`` into the model's optimizer state (mirrored by ``assign_state``)."""
    model.assign_state(opt_state=set_learning_rate(model.opt_state, value, owner))


def _takes_two_arguments(schedule: Callable[..., float]) -> bool:
    """Whether ``schedule`` is called as ``schedule(epoch, lr)`` rather than ``(epoch)``.

    Raises:
        TypeError: if it can be called neither way.
    """
    try:
        signature = inspect.signature(schedule)
    except (TypeError, ValueError):  # a builtin without a signature: Keras' form
        return True
    for count in (2, 1):
        try:
            signature.bind(*range(count))
            return count == 2
        except TypeError:
            continue
    raise TypeError("LearningRateScheduler's schedule must take (epoch, lr) or (epoch), "
                    f"epoch 0-based. Received: schedule with signature {signature}")


class LearningRateScheduler(Callback):
    """Sets the learning rate at the start of each epoch from ``schedule(epoch, lr)``.

    Args:
        schedule: ``(epoch, current_lr) -> new_lr`` (or ``epoch -> new_lr``); ``epoch`` is
            0-based. A function of the epoch alone keeps resumed runs exact.
        verbose: 1 prints the new rate each epoch.

    The rate is written into ``opt_state.hyperparams["learning_rate"]`` (no recompilation)
    and logged as ``learning_rate`` at each epoch end.

    Raises:
        TypeError: if ``schedule`` is not callable, or takes neither ``(epoch, lr)`` nor
            ``(epoch)``. The calling form is read from its signature, so a ``TypeError``
            raised inside the schedule reaches the caller unchanged.
        ValueError: at the first epoch, if the optimizer has no injectable learning rate.
    """

    def __init__(self, schedule: Callable[..., float], verbose: int = 0):
        super().__init__()
        if not callable(schedule):
            raise TypeError("LearningRateScheduler needs a callable schedule(epoch, lr) -> lr. "
                            f"Received: schedule={schedule!r}")
        self.schedule = schedule
        self.verbose = verbose
        self._takes_lr = _takes_two_arguments(schedule)

    def on_epoch_begin(self, epoch, logs=None):
        """Sets the optimizer's learning rate to ``schedule(epoch, lr)`` (or
        ``schedule(epoch)``).

        Raises:
            ValueError: if the schedule returns no float, or the optimizer has no injectable
                learning rate.
        """
        lr = get_learning_rate(self.model.opt_state, "LearningRateScheduler")
        # The form comes from the signature, so a TypeError raised inside the schedule
        # reaches the user as it is.
        new = self.schedule(epoch, lr) if self._takes_lr else self.schedule(epoch)
        if isinstance(new, bool) or not isinstance(new, (float, int, np.floating, np.integer)):
            raise ValueError("LearningRateScheduler's schedule must return a float. Received: "
                             f"{new!r} for epoch {epoch}")
        _set(self.model, float(new), "LearningRateScheduler")
        if self.verbose > 0:
            chief_print(f"Epoch {epoch + 1}: LearningRateScheduler setting learning rate to "
                        f"{new}.")

    def on_epoch_end(self, epoch, logs=None):
        """Adds the current rate to the epoch's logs as ``learning_rate``."""
        if logs is not None:
            logs["learning_rate"] = get_learning_rate(self.model.opt_state, "LearningRateScheduler")


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
        """Resets the best value, the wait and the cooldown."""
        self.best: float | None = None
        self.wait = 0
        self.cooldown_counter = 0

    def on_epoch_end(self, epoch, logs=None):
        """Adds the rate to the logs as ``learning_rate`` and multiplies it by ``factor``
        (not below ``min_lr``) after ``patience`` epochs without improvement of
        ``monitor``; warns and skips if ``monitor`` is not in the logs.
        """
        logs = logs if logs is not None else {}
        lr = get_learning_rate(self.model.opt_state, "ReduceLROnPlateau")
        logs["learning_rate"] = lr
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"ReduceLROnPlateau: monitor {self.monitor!r} is not in the logs "
                          f"(available: {sorted(logs)}); skipping.", MirrorfitWarning, stacklevel=2)
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
                _set(self.model, new, "ReduceLROnPlateau")
                if self.verbose > 0:
                    chief_print(f"Epoch {epoch + 1}: ReduceLROnPlateau reducing learning rate "
                                f"to {new}.")
                self.cooldown_counter = self.cooldown
                self.wait = 0
