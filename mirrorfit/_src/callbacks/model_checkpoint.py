"""`ModelCheckpoint`: Keras' callback that saves the model every epoch or every ``save_freq``
steps, through ``Model.save_checkpoint`` (as ``save_weights``/``save``), by default in the
background (`mirrorfit._src.saving.background`)."""

from __future__ import annotations

import os
import string
import warnings

from mirrorfit._src.callbacks.callback import (
    Callback,
    StepCounter,
    check_save_freq,
    chief_print,
    monitor_op,
)
from mirrorfit._src.saving import background, keras_archive
from mirrorfit._src.saving.directory_lock import DirectoryLock
from mirrorfit._src.utils.checks import MirrorfitWarning


class ModelCheckpoint(Callback):
    """Saves the model (orbax) every epoch or every ``save_freq`` steps, as in Keras.

    Args:
        filepath: checkpoint directory, templated with ``{epoch}`` (1-based), ``{batch}``
            (1-based, step-level saves) and any log key, e.g. ``"ckpt/{epoch:02d}-{val_loss:.2f}"``.
        monitor: the log compared for ``save_best_only``.
        verbose: 1 prints a line per save.
        save_best_only: save only when ``monitor`` improves on the best value so far.
        save_weights_only: `Model.save_weights` instead of `Model.save`.
        mode: ``"min"``, ``"max"`` or ``"auto"``.
        save_freq: ``"epoch"``, or an int number of train steps between saves.
        initial_value_threshold: the best value to beat at the start (``save_best_only``).
        save_on_background: copy the state to the host at the save and write it on a
            background thread while training goes on (as Keras' ``OrbaxCheckpoint``), at
            most one write in flight: a save first waits for the previous write. An error
            of a write is raised by the next save or at the end of ``fit`` (added to the
            error that ended ``fit`` as a note), and ``fit`` returns once the last write is
            complete. ``False`` writes in the training thread, as Keras' ``ModelCheckpoint``.
            A ``.keras`` file, and every save of a multi-process job, are written in the
            training thread either way.

    The checkpoint directory is locked (`mirrorfit._src.saving.directory_lock`) while the
    callback writes it: a fixed ``filepath`` from the start of ``fit`` to its end, a
    templated one from each save to the next. Another writer there gets an error naming
    the holder. A ``.keras`` file is not locked: it is replaced whole, atomically.
    """

    def __init__(self, filepath: str | os.PathLike, monitor: str = "val_loss", verbose: int = 0,
                 save_best_only: bool = False, save_weights_only: bool = False,
                 mode: str = "auto", save_freq: str | int = "epoch",
                 initial_value_threshold: float | None = None, save_on_background: bool = True):
        super().__init__()
        self.filepath = os.fspath(filepath)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.monitor_op = monitor_op(mode, monitor, "ModelCheckpoint")
        self.save_freq = check_save_freq(save_freq, "ModelCheckpoint")
        self.best = initial_value_threshold
        self._epoch = 0
        self._steps = StepCounter()
        self._steps_since_save = 0
        self._lock: DirectoryLock | None = None
        self.save_on_background = save_on_background
        self._writer = background.BackgroundWriter() if save_on_background else None

    def on_train_begin(self, logs=None):
        """Locks ``filepath`` when it names one directory (no ``{epoch}``-style fields),
        so that another writer there fails now rather than at the first save.
        """
        templated = any(field is not None for _, field, _, _ in
                        string.Formatter().parse(self.filepath))
        if not templated:  # fail now, not at the first save, if another writer is there
            self._lock_for(self.filepath)

    def _lock_for(self, path: str) -> DirectoryLock | None:
        """Holds the lock of ``path`` (and gives up the previous path's), or ``None``."""
        if keras_archive.is_archive_path(path):
            self._release()
            return None
        lock = DirectoryLock(path, "ModelCheckpoint filepath")
        if self._lock is not None and self._lock.held and self._lock.directory == lock.directory:
            return self._lock
        self._release()
        self._lock = lock.acquire()
        return lock

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
        self._lock = None

    def on_train_end(self, logs=None):
        """Waits for a save being written and releases the directory lock."""
        try:
            if self._writer is not None:
                self._writer.wait()
        finally:
            self._release()

    def on_train_error(self, error):
        """Waits for a save being written and releases the directory lock."""
        background.wait_quietly(self._writer, error)
        self._release()

    def on_epoch_begin(self, epoch, logs=None):
        """Records the epoch, for the ``{epoch}`` field of a save within it."""
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        """Saves every ``save_freq`` train steps (an int ``save_freq``), as `on_epoch_end`
        describes.
        """
        if self.save_freq == "epoch":
            return
        self._steps_since_save += self._steps.advance(batch)
        if self._steps_since_save >= self.save_freq:
            self._steps_since_save = 0
            self._save(self._epoch, batch, dict(logs or {}))

    def on_epoch_end(self, epoch, logs=None):
        """Saves at the end of the epoch (``save_freq="epoch"``): always, or with
        ``save_best_only`` when ``monitor`` improved on the best so far (warning and
        skipping if it is not in the logs).
        """
        if self.save_freq == "epoch":
            self._save(epoch, None, dict(logs or {}))

    def _save(self, epoch: int, batch: int | None, logs: dict[str, float]) -> None:
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None:
                warnings.warn(f"ModelCheckpoint: can save best model only with {self.monitor!r} "
                              f"in the logs (available: {sorted(logs)}); skipping.", MirrorfitWarning,
                              stacklevel=3)
                return
            if self.best is not None and not self.monitor_op(current, self.best):
                return
            self.best = float(current)
        fields = dict(logs, epoch=epoch + 1)
        if batch is not None:
            fields["batch"] = batch + 1
        try:
            path = self.filepath.format(**fields)
        except (KeyError, IndexError) as err:
            raise ValueError(f"ModelCheckpoint filepath names {err} which is not in the logs; "
                             f"available: epoch, batch, {', '.join(sorted(logs))}. Received: "
                             f"filepath={self.filepath!r}") from None
        if self._writer is not None:
            self._writer.wait()  # the previous path's lock is held until its write is done
        lock = self._lock_for(path)
        self.model.save_checkpoint(path, weights_only=self.save_weights_only,
                                   argument="ModelCheckpoint filepath", lock=lock,
                                   writer=self._writer)
        if self.verbose > 0:
            chief_print(f"Epoch {epoch + 1}: saving model to {path}")
