"""`BackupAndRestore`, which resumes an interrupted ``fit`` at the exact step (Keras'
`ModelCheckpoint` is in `mirrorfit._src.callbacks.model_checkpoint`).

`BackupAndRestore` writes with `mirrorfit._src.saving.checkpoint` (orbax, atomic,
checksummed): a backup is the training state plus the trainer's position (`Progress`: epoch,
step in the epoch, metric statistics), the epoch's shuffle order, the history and the run's
fingerprints. Restoring it assigns the model's state (``Model.assign_state``) and calls
``resume_from`` on the trainer in ``on_train_begin``, from which ``fit`` continues mid-epoch.
It uses only the documented interfaces of the model and of the trainer
(`mirrorfit._src.callbacks.contract.TrainingLoop`).
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

from mirrorfit._src.callbacks import fingerprint_check
from mirrorfit._src.callbacks.callback import (
    Callback,
    check_save_freq,
    chief_print,
)
from mirrorfit._src.callbacks.contract import ResumePoint
from mirrorfit._src.distribute import zero
from mirrorfit._src.distribute.multi_worker.preemption import (
    PREEMPTED_EXIT_CODE,
    PreemptionNotice,
)
from mirrorfit._src.saving import background, checkpoint_files, checkpoint_format
from mirrorfit._src.saving import checkpoint as checkpoint_lib
from mirrorfit._src.saving.directory_lock import DirectoryLock
from mirrorfit._src.utils.checks import MirrorfitWarning


class Preempted(SystemExit):
    """``fit`` stopped after a preemption notice, its backup written; exits with
    `PREEMPTED_EXIT_CODE` unless caught.

    Attributes:
        epoch: the epoch (0-based) the backup resumes in.
        step: the step in that epoch (train steps done) the backup resumes at.
    """

    def __init__(self, epoch: int, step: int):
        super().__init__(PREEMPTED_EXIT_CODE)
        self.epoch, self.step = epoch, step


class BackupAndRestore(Callback):
    """Backs up training to ``backup_dir`` and resumes an interrupted ``fit`` exactly.

    A backup holds the params, optimizer state, non-param collections, step and RNG key, the
    epoch and the position inside it, the epoch's shuffle order, the metric accumulators and
    the history so far. When ``fit`` starts with a backup present, it continues from that
    step, not from the start of the epoch, and finishes with the same params, bit for bit,
    as a run that was never interrupted (array inputs, or a re-iterable input that yields
    the same batches every epoch).

    Writes are atomic (see `mirrorfit._src.saving.checkpoint`) and the two newest backups are
    kept: a damaged newest backup (a file or its metadata fails its checksum) is skipped with
    a warning and the previous one is used.

    Nothing is lost or mixed:

    * only what mirrorfit wrote is ever deleted: the ``ckpt-<n>`` backups of ``backup_dir``
      (at the end of training, or a damaged one), never other files there;
    * a non-empty ``backup_dir`` that holds no mirrorfit backup is refused;
    * a backup written by a newer mirrorfit is refused, and kept;
    * ``backup_dir`` is locked from the start of ``fit`` to its end
      (`mirrorfit._src.saving.directory_lock`): a second run on it (the same script started
      twice) fails at once, naming the holder's process id and host, and the first run goes
      on unharmed. A lock left by a killed run is taken over with a warning;
    * every backup records a fingerprint of the training data (shapes, dtypes and a hash of
      a fixed sample of rows) and of the compile configuration (optimizer, loss, metrics),
      and resuming with other data or another configuration is an error (a warning with
      ``strict=False``).

    Args:
        backup_dir: directory of the backups (for this run only).
        save_freq: ``"epoch"`` (after each epoch) or an int number of train steps between
            backups. A step backup that would fall on the last step of an epoch is skipped
            (that epoch's validation has not run yet); the next one is taken as usual.
        delete_checkpoint: delete the backups when training ends normally (and
            ``backup_dir`` itself if nothing else is left in it).
        strict: whether resuming with other training data or another compile configuration
            than the backup's is an error (``True``) or a warning (``False``).
        save_before_preemption: on a preemption notice (SIGTERM to any process of the job),
            every process saves a backup at the same step and the process exits with
            `PREEMPTED_EXIT_CODE` (76); running ``fit`` again resumes from that backup. One
            process: a SIGTERM handler is installed for the duration of ``fit`` and the backup
            is taken at the end of the step running when the signal came. Several processes:
            JAX's preemption sync manager agrees on the step (the step after the furthest
            process's). A notice in an epoch's last step saves after that epoch's validation.
            No per-step synchronization is added. See the multi-worker guide for the SLURM
            and Kubernetes settings.
        save_on_background: copy the backup to the host at the save and write it on a
            background thread while training goes on, at most one write in flight (as
            `ModelCheckpoint`'s argument: errors come at the next backup or the end of
            ``fit``, and ``fit`` returns once the last write is complete). A preemption
            backup is always written before ``fit`` stops, as is every backup of a
            multi-process job. ``False`` writes every backup in the training thread.

    Raises:
        ValueError: in ``fit``, for a ``backup_dir`` holding files but no backup, or a backup
            whose fingerprints differ from the run's (``strict=True``).
        mirrorfit._src.saving.directory_lock.DirectoryLockedError: in ``fit``, when another
            live run writes ``backup_dir``.
        RuntimeError: in ``fit``, with ``save_before_preemption=True`` in a multi-process job
            whose JAX preemption service is disabled.
        Preempted: (a ``SystemExit`` with code `PREEMPTED_EXIT_CODE`) from ``fit``, after the
            backup of a preemption notice is written.
        mirrorfit._src.saving.checkpoint_format.NewerFormatError: in ``fit``, for a backup
            written by a newer mirrorfit.

    Example:
        >>> backup = mf.callbacks.BackupAndRestore("backup", save_freq=100)
        >>> history = model.fit(x, y, epochs=10, callbacks=[backup], verbose=0)
        >>> # Killed at step 437? Run the same line again: it resumes at step 400.
    """

    def __init__(self, backup_dir: str | os.PathLike, save_freq: str | int = "epoch",
                 delete_checkpoint: bool = True, strict: bool = True,
                 save_before_preemption: bool = False, save_on_background: bool = True):
        super().__init__()
        if not backup_dir:
            raise ValueError("BackupAndRestore needs a backup_dir (a directory for this run's "
                             f"backups). Received: backup_dir={backup_dir!r}")
        self.backup_dir = Path(backup_dir)
        self.save_freq = check_save_freq(save_freq, "BackupAndRestore")
        self.delete_checkpoint = delete_checkpoint
        self.strict = strict
        self.save_before_preemption = save_before_preemption
        self._notice = PreemptionNotice() if save_before_preemption else None
        self._boundaries = 0  # step boundaries seen by the notice (same on every process)
        self._preempted = False
        self._fingerprints: dict[str, Any] = {}
        self._last_step = 0
        self._steps_since_save = 0
        self._restored_history: tuple[dict[str, list[float]], list[int]] | None = None
        self._lock = DirectoryLock(self.backup_dir, "BackupAndRestore backup_dir")
        self.save_on_background = save_on_background
        self._writer = background.BackgroundWriter() if save_on_background else None

    def on_train_begin(self, logs=None):
        """Locks ``backup_dir`` and, if it holds a backup, restores the model's state, the
        epoch and step to resume at and the history. Refuses a directory of other
        files, and (``strict``) a backup taken with other data or compile arguments.
        """
        self._last_step = self._steps_since_save = 0
        self._restored_history = None
        checkpoint_files.check_directory(self.backup_dir, os.fspath(self.backup_dir),
                                         "BackupAndRestore backup_dir")
        self._lock.acquire()  # released in on_train_end or on_train_error
        self._preempted = False
        self._refuse_foreign_directory()
        if self._notice is not None:
            self._notice.install()
        self._fingerprints = self.model.trainer.fingerprints()
        backup = self._latest_valid()
        if backup is None:
            return
        info, arrays = backup.info, backup.arrays
        epoch, step = int(info["epoch"]), int(info["step"])
        saved_order = arrays.get("order")
        order = None if saved_order is None else self.model.trainer.epoch_order(epoch)
        if saved_order is not None and (order is None or not np.array_equal(order, saved_order)):
            raise ValueError(
                f"The backup in {os.fspath(self.backup_dir)!r} was taken in the middle of epoch "
                f"{epoch} with a different shuffle order: the training data, validation_split or "
                "seed changed, so resuming would not be exact. Train on the same data, or delete "
                f"the backup directory to start over. Received: backup {os.fspath(backup.path)!r}")
        self._check_fingerprints(backup)
        model = self.model
        state = checkpoint_format.unflatten_like({"state": model.state},
                                                 checkpoint_format.select(arrays, "state"),
                                                 source=str(backup.path))["state"]
        statistics = checkpoint_format.select(arrays, "statistics")
        source = str(backup.path)

        def restore_statistics(zeros):
            return checkpoint_format.unflatten_like({"statistics": zeros}, statistics,
                                                    source=source)["statistics"]

        model.assign_state(**state._asdict())
        model.trainer.resume_from(
            ResumePoint(epoch, step, restore_statistics if statistics else None))
        self._last_step = step
        self._restored_history = info["history"], info["history_epochs"]

    def _refuse_foreign_directory(self) -> None:
        directory = self.backup_dir
        checkpoint_files.check_directory(directory, os.fspath(directory),
                                         "BackupAndRestore backup_dir")
        if (directory.is_dir() and any(directory.iterdir())
                and not checkpoint_files.holds_checkpoints(directory)):
            raise ValueError(
                f"BackupAndRestore backup_dir {os.fspath(directory)!r} is not empty and holds "
                "no mirrorfit backup: its files are not this run's, and backups (deleted at "
                "the end of training) must not mix with them. Pass a new or empty directory "
                f"for this run's backups. Received: backup_dir={os.fspath(directory)!r}")

    def _check_fingerprints(self, backup: checkpoint_format.LoadedVersion) -> None:
        found = fingerprint_check.differences(backup.info.get("fingerprints", {}),
                                              self._fingerprints)
        if not found:
            return
        message = (f"The backup {os.fspath(backup.path)!r} was taken by a run with other "
                   "training data or another compile configuration; resuming from it would "
                   "mix two runs:\n  " + "\n  ".join(found) + "\n")
        if self.strict:
            raise ValueError(message + "Train with the same data and compile arguments, or "
                             "move the backup directory away to start over, or pass "
                             "BackupAndRestore(strict=False) to resume anyway. Received: "
                             f"backup_dir={os.fspath(self.backup_dir)!r}")
        warnings.warn(message + "Resuming anyway (strict=False).", MirrorfitWarning,
                      stacklevel=3)

    def on_epoch_begin(self, epoch, logs=None):
        """Puts the restored history back into ``model.history``, which `History` emptied
        when training began.
        """
        self._apply_restored_history()

    def _apply_restored_history(self) -> None:
        # After every on_train_begin: History, which runs later, clears itself there.
        if self._restored_history is not None and self.model.history is not None:
            values, epochs = self._restored_history
            self.model.history.history = {k: list(v) for k, v in values.items()}
            self.model.history.epoch = list(epochs)
        self._restored_history = None

    def _latest_valid(self) -> checkpoint_format.LoadedVersion | None:
        """The newest backup that loads; damaged ones mirrorfit wrote are deleted.

        Raises:
            NewerFormatError: for a backup of a newer mirrorfit (kept: it is not damaged).
        """
        for version in checkpoint_lib.versions(self.backup_dir):
            try:
                return checkpoint_lib.load(version)
            except checkpoint_format.NewerFormatError:
                raise
            except checkpoint_format.CheckpointError as err:
                mine = checkpoint_files.written_by_mirrorfit(version)
                action = "deleting" if mine else "skipping (not deleting: not laid out as a " \
                                                 "mirrorfit backup)"
                warnings.warn(f"BackupAndRestore: {action} a damaged backup and falling back "
                              f"to the previous one. {err}", MirrorfitWarning, stacklevel=3)
                if mine:
                    shutil.rmtree(version, ignore_errors=True)
        return None

    def on_train_batch_end(self, batch, logs=None):
        """Saves a backup every ``save_freq`` train steps (an int ``save_freq``). With
        ``save_before_preemption``, saves once every process has seen the preemption
        notice and raises `Preempted`.
        """
        if self._notice is not None:
            self._boundaries += 1
            if self._notice.reached(self._boundaries):
                progress = self.model.trainer.progress
                if progress.end_of_epoch:  # validation has not run: save after it
                    self._preempted = True
                else:
                    self._save(progress.epoch, progress.step, progress.statistics,
                               synchronous=True)
                    self._exit_preempted(progress.epoch, progress.step)
        if self.save_freq == "epoch":
            return
        progress = self.model.trainer.progress
        self._steps_since_save += progress.step - self._last_step
        self._last_step = progress.step
        if self._steps_since_save >= self.save_freq and not progress.end_of_epoch:
            self._steps_since_save = 0
            self._save(progress.epoch, progress.step, progress.statistics)

    def on_epoch_end(self, epoch, logs=None):
        """Saves a backup at the end of the epoch (``save_freq="epoch"``, or after the
        validation of an epoch in which a preemption notice came, then raising
        `Preempted`).
        """
        self._last_step = 0
        if self._notice is not None and not self._preempted:
            self._boundaries += 1  # a notice during validation
            self._preempted = self._notice.reached(self._boundaries)
        if self.save_freq == "epoch" or self._preempted:
            self._save(epoch + 1, 0, None, (epoch, logs or {}), synchronous=self._preempted)
        if self._preempted:
            self._exit_preempted(epoch + 1, 0)

    def _exit_preempted(self, epoch: int, step: int) -> None:
        if self._notice is not None:
            self._notice.uninstall()
        chief_print(f"BackupAndRestore: preemption notice; saved a backup in "
                    f"{os.fspath(self.backup_dir)!r} (it resumes at epoch {epoch + 1}, after "
                    f"{step} steps of it) and stopping with exit code {PREEMPTED_EXIT_CODE}. "
                    "Run the same fit again to resume there.")
        raise Preempted(epoch, step)

    def _history(self, ended: tuple[int, dict[str, float]] | None) -> dict[str, Any]:
        """The history so far, with the epoch that just ``ended`` (History may run later)."""
        history = self.model.history
        values = {k: [np.asarray(x).tolist() for x in v]
                  for k, v in (history.history if history else {}).items()}
        epochs = list(history.epoch if history else [])
        if ended is not None and ended[0] not in epochs:
            epochs.append(ended[0])
            for key, value in ended[1].items():
                values.setdefault(key, []).append(np.asarray(value).tolist())  # JSON
        return {"history": values, "history_epochs": epochs}

    def _save(self, epoch: int, step: int, statistics: Any,
              ended: tuple[int, dict[str, float]] | None = None, *,
              synchronous: bool = False) -> None:
        tree = {"state": self.model.state}
        if statistics is not None:
            tree["statistics"] = statistics
            order = self.model.trainer.epoch_order(epoch)
            if order is not None:
                tree["order"] = order
        host = zero.host_copy(self.model.strategy, tree)  # now: the next step donates them
        info = {"kind": "backup", "epoch": epoch, "step": step,
                "fingerprints": self._fingerprints, **self._history(ended)}
        where = {"keep": 2, "argument": "BackupAndRestore backup_dir", "lock": self._lock}
        if self._writer is None or synchronous:
            if self._writer is not None:
                self._writer.wait()
            checkpoint_lib.save(self.backup_dir, host, info, **where)
        else:
            background.save(self._writer, self.backup_dir, host, info, **where)

    def on_train_error(self, error):
        """Waits for a backup being written and releases ``backup_dir``: the backups stay,
        for the next run to resume from.
        """
        if self._notice is not None:
            self._notice.uninstall()
        background.wait_quietly(self._writer, error)  # a Preempted's backup is complete
        self._lock.release()

    def on_train_end(self, logs=None):
        """Waits for the last backup, deletes the backups (``delete_checkpoint=True``) and
        releases ``backup_dir``.
        """
        if self._notice is not None:
            self._notice.uninstall()
        try:
            if self._writer is not None:
                self._writer.wait()  # before the backups are deleted
            self._apply_restored_history()  # a backup after the last epoch resumes no epoch
            if self.delete_checkpoint and jax.process_index() == 0:
                checkpoint_files.remove_checkpoints(self.backup_dir)
        finally:
            self._lock.release()
