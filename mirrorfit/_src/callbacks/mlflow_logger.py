"""`MLflowLogger`: logs ``fit`` to an MLflow run.

What is logged and when (on the chief only, at global train steps) is decided in
`mirrorfit._src.callbacks.experiment_logger`; this module only talks to MLflow, through an
``MlflowClient`` (so it sets no global MLflow state): which run (active or new), the
configuration as params, the metrics with ``log_batch``, and ``set_terminated``.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.parse
import warnings
from typing import Any

from mirrorfit._src.callbacks.experiment_logger import ExperimentLogger, import_tracker
from mirrorfit._src.utils.checks import MirrorfitWarning


def flatten_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """MLflow params from a nested config: keys joined with ``.``
    (``optimizer_config.learning_rate``), strings as they are, other values as JSON text."""
    params = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            params.update(flatten_params(value, f"{prefix}{key}."))
        else:
            params[f"{prefix}{key}"] = value if isinstance(value, str) else json.dumps(value)
    return params


UNREACHABLE = (
    "MLflowLogger cannot reach the MLflow tracking server at {uri} ({error}). Start it "
    "(`mlflow server --host {host} --port {port}`), or point tracking_uri= (or "
    "MLFLOW_TRACKING_URI) at a running server or a local store (\"file:./mlruns\", "
    "\"sqlite:///mlflow.db\"). Received: tracking_uri={uri!r}")
"""Error for an HTTP tracking server nothing listens at (MLflow would retry for minutes)."""
CONNECT_TIMEOUT = 5.0  # seconds to open a connection to an HTTP tracking server


def check_reachable(uri: str) -> None:
    """Raises at once when ``uri`` is an ``http(s)`` tracking server that accepts no
    connection, which MLflow's client would retry with backoff for about four minutes before
    raising its own exception; other stores (files, databases) are not checked.

    Raises:
        ConnectionError: naming the URI and how to start a server or use a local store.
    """
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as err:
        raise ConnectionError(UNREACHABLE.format(uri=uri, error=err, host=parsed.hostname,
                                                 port=port)) from err


def _status(error: BaseException | None) -> str:
    """The MLflow run status a ``fit`` that ended with ``error`` leaves."""
    if error is None:
        return "FINISHED"
    return "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED"


class MLflowLogger(ExperimentLogger):
    """Logs the configuration and metrics of ``fit`` to an MLflow run, from the chief process.

    The run is the active one (``with mlflow.start_run(): model.fit(...)``) when no argument
    for a new run is given, and is left running; otherwise a new run, created at train
    begin in ``experiment_name`` at ``tracking_uri`` and ended at train end with status
    ``FINISHED`` (``FAILED`` when ``fit`` raises, ``KILLED`` on ``KeyboardInterrupt``).
    Processes other than the chief (process 0) create no run and log nothing.

    Logged: as params, the compile configuration and ``fit``'s arguments
    (`mirrorfit._src.callbacks.experiment_logger.run_config`), flattened with ``.``
    (``optimizer_config.learning_rate``, ``loss``, ``metrics`` as JSON, ``epochs``,
    ``steps_per_epoch``, ``batch_size`` (global), ``num_replicas``, ...); MLflow params do
    not change within a run, so in a run that already has a param with another value (a
    second ``fit``) the old value stays, with a warning. As metrics, at ``step`` = the
    global train step (train steps over all replicas, counted since the model was built):
    ``epoch/<name>`` for every scalar epoch log (``val_*`` and ``loss_scale`` included) with
    ``epoch/learning_rate`` and ``epoch/epoch`` (0-based) at each epoch end, and
    ``batch/<name>`` with ``batch/learning_rate`` every ``log_freq`` train steps.

    Args:
        experiment_name: the experiment of a new run, created if missing; ``None``:
            MLflow's default experiment (id ``"0"``).
        run_name: the name of a new run (``None``: MLflow picks one).
        tracking_uri: the tracking store of a new run (``"file:./mlruns"``,
            ``"sqlite:///mlflow.db"``, ``"http://host:5000"``); ``None``: MLflow's current
            one (``mlflow.get_tracking_uri()``, e.g. from ``MLFLOW_TRACKING_URI``).
        log_freq: ``"epoch"`` (epoch metrics only), ``"batch"`` (also every train step) or
            an int ``N``: also at every global train step that is a multiple of ``N``.

    Attributes:
        run_id: the id of the run logged into (``None`` before the first ``fit``).

    Raises:
        ImportError: if MLflow is not installed (``pip install mirrorfit[mlflow]``).
        ValueError: for a ``log_freq`` that is not ``"epoch"``, ``"batch"`` or a positive
            int.
        ConnectionError: (from ``fit``) an ``http(s)`` tracking server that accepts no
            connection within 5 s, instead of MLflow's minutes of retries.

    Example:
        >>> logger = mf.callbacks.MLflowLogger(experiment_name="digits", run_name="adam")
        >>> model.fit(x, y, epochs=2, callbacks=[logger])  # doctest: +SKIP
    """

    def __init__(self, experiment_name: str | None = None, run_name: str | None = None,
                 tracking_uri: str | None = None, log_freq: str | int = "epoch"):
        super().__init__(log_freq)
        self._mlflow = import_tracker("mlflow", "mlflow", "MLflowLogger")
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tracking_uri = tracking_uri
        self.run_id: str | None = None
        self._client: Any = None
        self._started = False

    def _start_run(self) -> None:
        active = self._mlflow.active_run()
        new_run = (self.experiment_name, self.run_name, self.tracking_uri) != (None,) * 3
        if active is not None and not new_run:
            self._client = self._mlflow.MlflowClient()
            self.run_id, self._started = active.info.run_id, False
            return
        check_reachable(self.tracking_uri or self._mlflow.get_tracking_uri())
        self._client = self._mlflow.MlflowClient(self.tracking_uri)
        experiment_id = "0"
        if self.experiment_name is not None:
            found = self._client.get_experiment_by_name(self.experiment_name)
            experiment_id = (found.experiment_id if found is not None
                             else self._client.create_experiment(self.experiment_name))
        run = self._client.create_run(experiment_id, run_name=self.run_name)
        self.run_id, self._started = run.info.run_id, True

    def _log_config(self, config: dict[str, Any]) -> None:
        params = flatten_params(config)
        existing = self._client.get_run(self.run_id).data.params
        changed = sorted(k for k, v in params.items() if k in existing and existing[k] != v)
        if changed:
            warnings.warn(
                f"MLflowLogger: run {self.run_id} already has the params {changed} with other "
                "values, and MLflow params cannot change within a run: the old values stay. "
                "Log each fit to its own run (give MLflowLogger a run_name) to keep them.",
                MirrorfitWarning, stacklevel=2)
        Param = self._mlflow.entities.Param
        self._client.log_batch(self.run_id, params=[
            Param(key, value) for key, value in params.items() if key not in existing])

    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        Metric = self._mlflow.entities.Metric
        now = int(time.time() * 1000)  # MLflow's timestamps: milliseconds since the epoch
        self._client.log_batch(self.run_id, metrics=[
            Metric(key, value, now, step) for key, value in metrics.items()])

    def _end_run(self, error: BaseException | None) -> None:
        if self._started:
            self._client.set_terminated(self.run_id, status=_status(error))
