"""`OptunaPruningCallback`: reports an epoch log to an Optuna trial and stops a pruned trial.

It does what optuna-integration's ``KerasPruningCallback`` does for Keras (same arguments,
the same report at each checked epoch end, ``optuna.TrialPruned`` for a pruned trial), with
two differences that follow from mirrorfit's training loop:

* ``fit`` ends the epoch as ``EarlyStopping`` ends it (the callbacks after this one still see
  the pruned epoch's ``on_epoch_end``, so `History` records it, and the progress bar closes),
  then ``TrialPruned`` is raised from ``on_train_end``; the model keeps the state ``fit``
  ends with after that epoch.
* Several processes: only the chief (process 0) reports to its trial and asks whether to
  prune; its decision reaches every process (`mirrorfit._src.distribute.mesh.from_chief`),
  so all stop after the same epoch.

Optuna is an optional dependency (``pip install mirrorfit[optuna]``), imported when the
callback is created.
"""

from __future__ import annotations

import types
import warnings
from typing import TYPE_CHECKING, Any

import jax

from mirrorfit._src.callbacks.callback import Callback
from mirrorfit._src.distribute.mesh import from_chief
from mirrorfit._src.utils.checks import MirrorfitWarning, positive_int

if TYPE_CHECKING:
    import optuna

MISSING_OPTUNA = (
    "OptunaPruningCallback needs the optuna package, which mirrorfit installs as an optional "
    "extra: pip install mirrorfit[optuna] (or pip install optuna). Received: {error}")


def _import_optuna() -> types.ModuleType:
    """The ``optuna`` module; an ImportError naming the extra to install when it is missing."""
    try:
        import optuna
    except ImportError as err:
        raise ImportError(MISSING_OPTUNA.format(error=f"ImportError: {err}")) from err
    return optuna


class OptunaPruningCallback(Callback):
    """Reports ``monitor`` to an Optuna trial after each epoch, and ends ``fit`` with
    ``optuna.TrialPruned`` when the study's pruner prunes the trial.

    As optuna-integration's ``KerasPruningCallback``: at the end of every ``interval``-th
    epoch it calls ``trial.report(logs[monitor], step=epoch)`` (``epoch`` 0-based, as in
    `History`) and then ``trial.should_prune()``. A pruned trial stops training as
    ``EarlyStopping`` would, after the epoch's ``on_epoch_end`` hooks (so ``model.history``
    and a `CSVLogger` have the pruned epoch), and ``fit`` raises ``optuna.TrialPruned``
    from ``on_train_end``, which ``study.optimize`` records as a pruned trial. The model
    keeps the state ``fit`` ends with after the pruned epoch. Callbacks listed after this one do not
    get ``on_train_end``: list it last.

    With several processes (``MultiWorkerMirroredStrategy``) every process creates the
    callback; only process 0 reports to its ``trial`` and asks it, and every process follows
    its decision. The other processes' ``trial`` is not used: pass e.g.
    ``optuna.trial.FixedTrial(params)`` with the chief's parameters.

    Args:
        trial: the ``optuna.trial.Trial`` being evaluated by the objective function.
        monitor: the epoch log to report, e.g. ``"val_loss"`` (needs validation data in
            ``fit``) or ``"val_accuracy"``; the study's ``direction`` says whether lower or
            higher is better.
        interval: report and check every ``interval`` epochs (epochs ``interval - 1``,
            ``2 * interval - 1``, ...); 1 checks every epoch.

    Raises:
        ImportError: if optuna is not installed (``pip install mirrorfit[optuna]``).
        ValueError: if ``interval`` is not a positive int.

    Example:
        >>> import optuna
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> study = optuna.create_study(pruner=optuna.pruners.NopPruner())
        >>> trial = study.ask()
        >>> pruning = mf.callbacks.OptunaPruningCallback(trial, monitor="loss")
        >>> history = model.fit(x, y, epochs=2, verbose=0, callbacks=[pruning])
        >>> sorted(study.trials[0].intermediate_values)
        [0, 1]
    """

    def __init__(self, trial: optuna.trial.BaseTrial, monitor: str = "val_loss",
                 interval: int = 1):
        super().__init__()
        self._optuna = _import_optuna()
        self.trial = trial
        self.monitor = monitor
        self.interval = positive_int(interval, "interval", "epochs between reports")
        self.pruned_epoch: int | None = None  # the epoch after which the trial was pruned

    def on_train_begin(self, logs=None):
        """Clears `pruned_epoch`."""
        self.pruned_epoch = None

    def on_epoch_end(self, epoch, logs=None):
        """Reports ``monitor`` to the trial every ``interval`` epochs (at the epoch's
        index as the step) and stops training if the trial should be pruned; warns and
        skips if ``monitor`` is not in the logs.
        """
        if (epoch + 1) % self.interval:
            return
        value = (logs or {}).get(self.monitor)
        if value is None:
            hint = " (val_ logs need validation data in fit)" if self.monitor.startswith(
                "val_") else ""
            warnings.warn(f"OptunaPruningCallback: monitor {self.monitor!r} is not in the logs"
                          f"{hint}; not reporting epoch {epoch}. Available: "
                          f"{sorted(logs or {})}", MirrorfitWarning, stacklevel=2)
            return
        if from_chief(int(jax.process_index() == 0 and self._report(epoch, value))):
            self.pruned_epoch = epoch
            self.model.stop_training = True

    def _report(self, epoch: int, value: Any) -> bool:
        """Reports ``value`` for ``epoch`` to the trial; whether the trial should be pruned."""
        self.trial.report(float(value), step=epoch)
        return self.trial.should_prune()

    def on_train_end(self, logs=None):
        """Raises ``optuna.TrialPruned`` if the trial was pruned, so that Optuna records
        it as pruned.
        """
        if self.pruned_epoch is not None:
            raise self._optuna.TrialPruned(
                f"Trial was pruned at epoch {self.pruned_epoch} (0-based; {self.monitor} "
                f"reported as step {self.pruned_epoch}).")
