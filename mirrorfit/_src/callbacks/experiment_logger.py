"""`ExperimentLogger`: what the experiment-tracking callbacks log, and when.

`mirrorfit.callbacks.WandbLogger` (`wandb_logger`) and `mirrorfit.callbacks.MLflowLogger`
(`mlflow_logger`) subclass it and only talk to their library: start or join a run, record a
configuration, record metrics at a step, end the run. This module decides the rest, once
for both:

* who: the chief process only (process 0, `is_chief`); the other processes of a
  multi-process job start no run and log nothing.
* what: at train begin, `run_config` (the compile configuration and ``fit``'s arguments);
  at every epoch end, the epoch's scalar logs (``loss``, the metrics, ``val_*``, and
  ``loss_scale`` under ``"mixed_float16"``) as ``epoch/<name>``, with
  ``epoch/learning_rate`` read from the optimizer state and ``epoch/epoch`` (0-based); every
  ``log_freq`` train steps, when ``log_freq`` is an int, the step's logs (as in Keras, the
  epoch's running values up to that step) as ``batch/<name>`` with ``batch/learning_rate``.
  Per-class array metrics (e.g. ``F1Score(average=None)``) are not logged.
* at which step: the **global train step**, ``model.state.step``: train steps (one global
  batch over all replicas each) counted since the model was built, so they go on across
  ``fit`` calls and after a resume. Batch logs are read only at the steps they are logged,
  so the other steps add no host sync.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import jax
import numpy as np

from mirrorfit._src.callbacks.callback import Callback, StepCounter, is_chief
from mirrorfit._src.optimizers.learning_rate import get_learning_rate
from mirrorfit._src.saving.saved_config import serialize_compile
from mirrorfit._src.utils.checks import is_int

MISSING_EXTRA = (
    "{owner} needs the {package} package, an optional dependency of mirrorfit: install it "
    "with `pip install mirrorfit[{extra}]`. Received: import {package} failed ({error})"
)


def import_tracker(package: str, extra: str, owner: str) -> ModuleType:
    """Imports the tracking library ``package``.

    Raises:
        ImportError: naming ``owner`` and ``pip install mirrorfit[<extra>]``, when it is
            not installed.
    """
    try:
        return importlib.import_module(package)
    except ImportError as error:
        raise ImportError(MISSING_EXTRA.format(owner=owner, package=package, extra=extra,
                                               error=error)) from error


def check_log_freq(log_freq: Any, owner: str) -> str | int:
    """``"epoch"``, or a positive int number of train steps (``"batch"`` means 1).

    Raises:
        ValueError: naming ``log_freq``, for anything else.
    """
    if log_freq == "epoch":
        return "epoch"
    if log_freq == "batch":
        return 1
    if not is_int(log_freq) or log_freq < 1:
        raise ValueError(f'{owner} log_freq must be "epoch", "batch" or a positive int number '
                         f"of train steps. Received: log_freq={log_freq!r}")
    return int(log_freq)


def run_config(model: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration of a ``fit``, JSON: what it was compiled with and its arguments.

    Args:
        model: the compiled `mirrorfit.Model` being trained.
        params: the callbacks' ``params`` of the ``fit``.

    Returns:
        ``optimizer``, ``loss``, ``metrics``, ``loss_weights``, ``weighted_metrics`` and
        ``steps_per_execution`` as ``Model.save`` stores them (a name, or the object's
        ``{"module", "class_name", "config", ...}``; ``None`` with an ``unstored`` entry
        for an object without a config); ``optimizer_config``: the compiled optimizer's
        ``get_config()`` with every default (``None`` for a raw optax transformation);
        ``epochs``, ``steps_per_epoch``, ``batch_size`` (global: rows per step over all
        replicas), ``num_replicas`` (replicas in sync over all processes) and
        ``dtype_policy``.
    """
    config = dict(serialize_compile(model.compile_config) or {})
    if not config.get("unstored"):
        config.pop("unstored", None)
    try:
        config["optimizer_config"] = model.optimizer.get_config()
    except TypeError:  # a raw optax transformation has no config
        config["optimizer_config"] = None
    config.update(epochs=params.get("epochs"), steps_per_epoch=params.get("steps"),
                  batch_size=params.get("batch_size"),
                  num_replicas=model.strategy.num_replicas_in_sync,
                  dtype_policy=model.dtype_policy.name)
    return json.loads(json.dumps(config, default=str))


def scalar_logs(prefix: str, logs: Mapping[str, Any]) -> dict[str, float]:
    """``{f"{prefix}/{name}": float}`` for the scalar, public (no leading ``_``) logs."""
    return {f"{prefix}/{key}": float(value) for key, value in logs.items()
            if not key.startswith("_") and np.ndim(value) == 0}


class ExperimentLogger(Callback):
    """Base of the callbacks that log a ``fit`` to an experiment tracker (module docstring).

    A subclass implements `_start_run`, `_log_config`, `_log_metrics` and `_end_run`,
    which run on the chief only, between one ``on_train_begin`` and the end of that
    ``fit`` (``on_train_end``, or ``on_train_error`` after an exception).

    Args:
        log_freq: ``"epoch"`` (epoch logs only), ``"batch"`` (also the logs of every train
            step) or an int ``N``: also the logs at every global train step that is a
            multiple of ``N`` (with ``steps_per_execution=K``, at the end of each group of
            ``K`` steps that reaches one).
    """

    def __init__(self, log_freq: str | int = "epoch"):
        super().__init__()
        self.log_freq = check_log_freq(log_freq, type(self).__name__)
        self._running = False
        self._steps = StepCounter()
        self._global_step: int | None = None

    # -- the tracker's side, implemented by each subclass --------------------------------

    def _start_run(self) -> None:
        """Starts a run, or joins the one the user gave or has active."""
        raise NotImplementedError

    def _log_config(self, config: dict[str, Any]) -> None:
        """Records `run_config`'s output with the run."""
        raise NotImplementedError

    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Records ``metrics`` at the global train step ``step``."""
        raise NotImplementedError

    def _end_run(self, error: BaseException | None) -> None:
        """Ends a run it started: finished, or failed with ``error``; leaves a joined run."""
        raise NotImplementedError

    # -- when ----------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        """Starts (or joins) the run on the chief process and records the run's
        configuration.
        """
        self._steps, self._global_step = StepCounter(), None
        if not is_chief():  # several processes: only the chief logs
            return
        self._start_run()
        self._running = True
        self._log_config(run_config(self.model, self.params))

    def on_train_batch_end(self, batch, logs=None):
        """Records the train logs (prefixed ``batch/``) and the learning rate at the
        global steps ``log_freq`` asks for.
        """
        if not self._running or self.log_freq == "epoch":
            return
        added = self._steps.advance(batch)
        if self._global_step is None:  # the fit's first step: read the count once
            self._global_step = int(jax.device_get(self.model.state.step))
        else:  # then count on the host, adding no sync
            self._global_step += added
        step, freq = self._global_step, int(self.log_freq)
        if step // freq > (step - added) // freq:  # reached a multiple of log_freq
            metrics = scalar_logs("batch", logs or {})
            self._add_learning_rate(metrics, "batch")
            self._log_metrics(metrics, step)

    def on_epoch_end(self, epoch, logs=None):
        """Records the epoch's scalar logs (prefixed ``epoch/``), the learning rate and
        the epoch at the global train step.
        """
        if not self._running:
            return
        metrics = scalar_logs("epoch", logs or {})
        self._add_learning_rate(metrics, "epoch")
        metrics["epoch/epoch"] = float(epoch)
        self._log_metrics(metrics, int(jax.device_get(self.model.state.step)))

    def on_train_end(self, logs=None):
        """Ends a run this callback started, as finished (a joined run stays open)."""
        self._finish(None)

    def on_train_error(self, error: BaseException):
        """Ends a run this callback started, as failed with ``error`` (a joined run stays
        open).
        """
        self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        if self._running:
            self._running = False
            self._end_run(error)

    def _add_learning_rate(self, metrics: dict[str, float], prefix: str) -> None:
        """Adds ``<prefix>/learning_rate`` from the optimizer state, when it holds one."""
        try:
            rate = get_learning_rate(self.model.opt_state, type(self).__name__)
        except ValueError:  # a raw optax transformation keeps no rate to read
            return
        metrics[f"{prefix}/learning_rate"] = rate
