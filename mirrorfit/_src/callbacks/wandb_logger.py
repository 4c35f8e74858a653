"""`WandbLogger`: logs ``fit`` to a Weights & Biases (W&B) run.

What is logged and when (on the chief only, at global train steps) is decided in
`mirrorfit._src.callbacks.experiment_logger`; this module only talks to ``wandb``: which run
(given, active or new), ``run.config`` for the configuration, ``run.log`` for the metrics,
with ``global_step`` as their x-axis (``run.define_metric``), and ``run.finish``.
"""

from __future__ import annotations

from typing import Any

from mirrorfit._src.callbacks.experiment_logger import ExperimentLogger, import_tracker

STEP_METRIC = "global_step"
"""The key holding the global train step in every ``run.log``, the x-axis of the metrics."""


class WandbLogger(ExperimentLogger):
    """Logs the configuration and metrics of ``fit`` to a W&B run, from the chief process.

    The run is ``run`` when given; else, when no argument for a new run is given, the
    active ``wandb.run``; else a new run, ``wandb.init(project=project, name=name,
    config=config, **init_kwargs)``, started at train begin and finished at train end
    (``run.finish(exit_code=1)`` when ``fit`` raises). A run the callback did not start is
    left open. Processes other than the chief (process 0) start no run and log nothing.

    Logged: ``run.config`` gets the compile configuration and ``fit``'s arguments
    (`mirrorfit._src.callbacks.experiment_logger.run_config`: optimizer, loss, metrics,
    ``optimizer_config``, ``epochs``, ``steps_per_epoch``, ``batch_size`` (global),
    ``num_replicas``, ...). ``epoch/<name>`` for every scalar epoch log (``val_*`` and
    ``loss_scale`` included) with ``epoch/learning_rate`` and ``epoch/epoch`` (0-based) at
    each epoch end, and ``batch/<name>`` with ``batch/learning_rate`` every ``log_freq``
    train steps, each with ``global_step``: the global train step (train steps over all
    replicas, counted since the model was built), which W&B charts them against.

    Args:
        run: a ``wandb.Run`` to log into; the callback does not finish it.
        project: the W&B project of a new run.
        name: the display name of a new run.
        config: a dict for a new run's ``run.config``, besides what the callback records.
        log_freq: ``"epoch"`` (epoch metrics only), ``"batch"`` (also every train step) or
            an int ``N``: also at every global train step that is a multiple of ``N``.
        **init_kwargs: other ``wandb.init`` arguments of a new run (``entity``, ``tags``,
            ``dir``, ``mode="offline"``, ...). ``reinit`` defaults to ``"create_new"``,
            so another open run is neither returned nor finished.

    Raises:
        ImportError: if ``wandb`` is not installed (``pip install mirrorfit[wandb]``).
        ValueError: if ``run`` is given together with arguments for a new run, or for a
            ``log_freq`` that is not ``"epoch"``, ``"batch"`` or a positive int.

    Example:
        >>> logger = mf.callbacks.WandbLogger(project="digits", name="adam", log_freq=100)
        >>> model.fit(x, y, epochs=2, callbacks=[logger])  # doctest: +SKIP
    """

    def __init__(self, run: Any = None, *, project: str | None = None, name: str | None = None,
                 config: dict[str, Any] | None = None, log_freq: str | int = "epoch",
                 **init_kwargs: Any):
        super().__init__(log_freq)
        self._wandb = import_tracker("wandb", "wandb", "WandbLogger")
        self._init_kwargs = {"project": project, "name": name, "config": config, **init_kwargs}
        self._init_kwargs = {k: v for k, v in self._init_kwargs.items() if v is not None}
        if run is not None and self._init_kwargs:
            raise ValueError(
                "WandbLogger logs into the given run or starts a new one, not both: pass run= "
                "alone, or the wandb.init arguments alone. Received: run and "
                f"{', '.join(f'{k}=' for k in sorted(self._init_kwargs))}")
        self._given_run = run
        self.run: Any = run  # the run logged into, also after fit (None before a new one)
        self._started = False

    def _start_run(self) -> None:
        if self._given_run is not None:
            self.run, self._started = self._given_run, False
        elif not self._init_kwargs and self._wandb.run is not None:
            self.run, self._started = self._wandb.run, False
        else:
            self.run = self._wandb.init(**{"reinit": "create_new", **self._init_kwargs})
            self._started = True
        self.run.define_metric(STEP_METRIC)
        for group in ("epoch/*", "batch/*"):
            self.run.define_metric(group, step_metric=STEP_METRIC)

    def _log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({**metrics, STEP_METRIC: step})

    def _end_run(self, error: BaseException | None) -> None:
        if self._started:
            self.run.finish(exit_code=None if error is None else 1)
