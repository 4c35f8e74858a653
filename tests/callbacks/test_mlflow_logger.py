"""`mf.callbacks.MLflowLogger` with the real MLflow and a local file store: what it logged is
read back with ``MlflowClient`` and compared with ``fit``'s History and the model's own
values."""

import socket
import sys

import mlflow
import pytest
from mlflow import MlflowClient

import mirrorfit as mf
from mirrorfit._src.callbacks import experiment_logger
from tests.callbacks import tracking_helpers as th
from tests.helpers import reset_to_initial


@pytest.fixture
def uri(tmp_path, monkeypatch):
    """A file store under ``tmp_path``, also MLflow's current tracking URI."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for a database
    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    yield uri
    while mlflow.active_run() is not None:  # a failed test leaves no run active
        mlflow.end_run()


@pytest.fixture(scope="module")
def compiled():
    return th.make_model()


@pytest.fixture
def model(compiled):
    return reset_to_initial(compiled)


def _history(uri, run_id, key):
    """``[(step, value)]`` of a metric, by step."""
    metrics = MlflowClient(uri).get_metric_history(run_id, key)
    return sorted((m.step, m.value) for m in metrics)


def test_epoch_and_batch_metrics_equal_history_at_global_steps(model, uri):
    expected = th.Expected()
    logger = mf.callbacks.MLflowLogger(experiment_name="tests", run_name="r", tracking_uri=uri,
                                       log_freq=2)
    history = th.fit(model, [expected, logger])
    run = MlflowClient(uri).get_run(logger.run_id)
    assert (run.info.status, run.info.run_name) == ("FINISHED", "r")
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        steps, values = zip(*_history(uri, logger.run_id, f"epoch/{key}"))
        assert steps == (th.STEPS, 2 * th.STEPS)  # global train steps at the epoch ends
        assert values == pytest.approx(history.history[key], rel=1e-6)
    assert _history(uri, logger.run_id, "epoch/epoch") == [(th.STEPS, 0), (2 * th.STEPS, 1)]
    for key in ("loss", "accuracy"):
        logged = _history(uri, logger.run_id, f"batch/{key}")
        assert [step for step, _ in logged] == [2, 4, 6, 8]  # every 2 global steps
        assert [value for _, value in logged] == pytest.approx(
            [expected.batches[step][key] for step, _ in logged], rel=1e-6)


def test_batch_metrics_follow_steps_per_execution_groups(uri):
    model = reset_to_initial(th.make_model())
    model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy",
                  steps_per_execution=3)
    logger = mf.callbacks.MLflowLogger(run_name="groups", log_freq=2)
    th.fit(model, [logger])
    # Groups of 3 steps end at steps 3 and 4 in each 4-step epoch (3, 4, 7, 8 globally): a
    # group is logged at its end when it reached a multiple of 2.
    assert [s for s, _ in _history(uri, logger.run_id, "batch/loss")] == [3, 4, 7, 8]


def test_params_hold_compile_configuration_and_fit_arguments(model, uri):
    logger = mf.callbacks.MLflowLogger(run_name="params")
    th.fit(model, [logger])
    params = MlflowClient(uri).get_run(logger.run_id).data.params
    assert params["optimizer.class_name"] == "SGD"
    assert float(params["optimizer_config.learning_rate"]) == pytest.approx(0.1)
    assert params["loss"] == "sparse_categorical_crossentropy"
    assert params["metrics"] == '["accuracy"]'
    assert {k: params[k] for k in ("epochs", "steps_per_epoch", "batch_size", "num_replicas",
                                   "steps_per_execution", "dtype_policy")} == {
        "epochs": str(th.EPOCHS), "steps_per_epoch": str(th.STEPS), "batch_size": str(th.BATCH),
        "num_replicas": str(th.NUM_REPLICAS), "steps_per_execution": "1",
        "dtype_policy": "float32"}


def test_learning_rate_equals_the_optimizers_after_a_scheduler_changes_it(model, uri):
    expected = th.Expected()
    logger = mf.callbacks.MLflowLogger(run_name="lr", log_freq="batch")
    th.fit(model, [mf.callbacks.LearningRateScheduler(th.halving), expected, logger])
    logged = _history(uri, logger.run_id, "epoch/learning_rate")
    assert [value for _, value in logged] == pytest.approx(expected.learning_rates, rel=1e-6)
    assert expected.learning_rates == pytest.approx([0.2, 0.1], rel=1e-6)
    by_step = dict(_history(uri, logger.run_id, "batch/learning_rate"))
    assert [by_step[s] for s in (1, 4, 5, 8)] == pytest.approx([0.2, 0.2, 0.1, 0.1], rel=1e-6)


def test_loss_scale_is_logged_under_mixed_float16(uri):
    model = reset_to_initial(th.make_model("mixed_float16"))
    logger = mf.callbacks.MLflowLogger(run_name="mixed")
    history = th.fit(model, [logger])
    values = [value for _, value in _history(uri, logger.run_id, "epoch/loss_scale")]
    assert values == history.history["loss_scale"] == [2.0**15, 2.0**15]


def test_active_run_is_logged_into_and_left_running(model, uri):
    with mlflow.start_run(run_name="outer") as run:
        logger = mf.callbacks.MLflowLogger()
        th.fit(model, [logger])
        assert logger.run_id == run.info.run_id
        assert MlflowClient(uri).get_run(run.info.run_id).info.status == "RUNNING"
    assert len(_history(uri, run.info.run_id, "epoch/loss")) == th.EPOCHS


def test_second_fit_in_one_run_keeps_params_warns_and_continues_steps(model, uri):
    with mlflow.start_run() as run:
        th.fit(model, [mf.callbacks.MLflowLogger()])
        with pytest.warns(mf.MirrorfitWarning, match=r"\['epochs'\]"):
            th.fit(model, [mf.callbacks.MLflowLogger()], epochs=1)
    assert MlflowClient(uri).get_run(run.info.run_id).data.params["epochs"] == str(th.EPOCHS)
    assert [s for s, _ in _history(uri, run.info.run_id, "epoch/loss")] == [4, 8, 12]


@pytest.mark.parametrize("error, status", [(RuntimeError("boom"), "FAILED"),
                                           (KeyboardInterrupt(), "KILLED")])
def test_a_run_it_created_ends_failed_when_fit_raises(model, uri, error, status):
    def crash(epoch, logs):
        raise error

    logger = mf.callbacks.MLflowLogger(run_name="crash")
    with pytest.raises(type(error)):
        th.fit(model, [logger, mf.callbacks.LambdaCallback(on_epoch_end=crash)])
    assert MlflowClient(uri).get_run(logger.run_id).info.status == status
    assert len(_history(uri, logger.run_id, "epoch/loss")) == 1  # logged before the crash


def test_non_chief_process_logs_nothing(model, uri, monkeypatch):
    monkeypatch.setattr(experiment_logger, "is_chief", lambda: False)
    logger = mf.callbacks.MLflowLogger(experiment_name="tests", log_freq="batch")
    th.fit(model, [logger])
    assert logger.run_id is None
    assert MlflowClient(uri).search_runs(["0"]) == []
    assert MlflowClient(uri).get_experiment_by_name("tests") is None


def test_without_mlflow_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow raises ImportError
    with pytest.raises(ImportError, match=r"pip install mirrorfit\[mlflow\]"):
        mf.callbacks.MLflowLogger()


def test_a_dead_tracking_server_is_an_error_at_once_naming_the_uri(model):
    # Before: MLflow's client retried with backoff for 253 s, then raised its own exception.
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    logger = mf.callbacks.MLflowLogger(run_name="dead", tracking_uri=uri)
    with pytest.raises(ConnectionError, match=rf"cannot reach the MLflow tracking server at "
                                              rf"{uri}.*mlflow server.*file:\./mlruns"):
        th.fit(model, [logger])
    assert logger.run_id is None
