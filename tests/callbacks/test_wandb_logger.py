"""`mf.callbacks.WandbLogger` with the real wandb, offline: what it logged is read back from the
run's ``run-<id>.wandb`` file (`tests.callbacks.wandb_records`) and compared with ``fit``'s
History and the model's own values."""

import json
import sys
from pathlib import Path

import pytest
import wandb

import mirrorfit as mf
from mirrorfit._src.callbacks import experiment_logger
from tests.callbacks import tracking_helpers as th
from tests.callbacks.wandb_records import read_finished_run
from tests.helpers import reset_to_initial


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """W&B offline and silent, its files under ``tmp_path``."""
    for name, value in (("WANDB_MODE", "offline"), ("WANDB_SILENT", "true"),
                        ("WANDB_DIR", str(tmp_path))):
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def compiled():
    return th.make_model()


@pytest.fixture
def model(compiled):
    return reset_to_initial(compiled)


def _logger(tmp_path, **kwargs):
    return mf.callbacks.WandbLogger(project="tests", mode="offline", dir=str(tmp_path),
                                    **kwargs)


def _values(items):
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


def _read(run):
    """The finished run's history rows, config and exit code, from its offline run file."""
    records = read_finished_run(Path(run.dir).parent / f"run-{run.id}.wandb")
    history = [_values(r.history.item) for r in records if r.HasField("history")]
    config = {}
    for record in records:  # wandb.init's config is in the run record, later ones in config
        if record.HasField("run"):
            config.update(_values(record.run.config.update))
        if record.HasField("config"):
            config.update(_values(record.config.update))
    exits = [r.exit.exit_code for r in records if r.HasField("exit")]
    return history, config, exits


def _rows(history, prefix):
    return [row for row in history if any(key.startswith(prefix) for key in row)]


def test_epoch_and_batch_metrics_equal_history_at_global_steps(model, tmp_path):
    expected = th.Expected()
    logger = _logger(tmp_path, log_freq=2)
    history = th.fit(model, [expected, logger])
    rows, _, exits = _read(logger.run)
    assert exits == [0]
    epochs = _rows(rows, "epoch/")
    assert [row["global_step"] for row in epochs] == [th.STEPS, 2 * th.STEPS]
    assert [row["epoch/epoch"] for row in epochs] == [0, 1]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [row[f"epoch/{key}"] for row in epochs] == pytest.approx(
            history.history[key], rel=1e-6)
    batches = _rows(rows, "batch/")
    assert [row["global_step"] for row in batches] == [2, 4, 6, 8]  # every 2 global steps
    for row in batches:
        logged = expected.batches[row["global_step"]]
        assert row["batch/loss"] == pytest.approx(logged["loss"], rel=1e-6)
        assert row["batch/accuracy"] == pytest.approx(logged["accuracy"], rel=1e-6)
        assert row["batch/learning_rate"] == pytest.approx(0.1, rel=1e-6)


def test_config_holds_compile_configuration_and_fit_arguments(model, tmp_path):
    logger = _logger(tmp_path, config={"note": "given"})
    th.fit(model, [logger])
    _, config, _ = _read(logger.run)
    assert config["optimizer"]["class_name"] == "SGD"
    assert config["optimizer_config"]["learning_rate"] == pytest.approx(0.1)
    assert config["loss"] == "sparse_categorical_crossentropy"
    assert config["metrics"] == ["accuracy"]
    assert {k: config[k] for k in ("epochs", "steps_per_epoch", "batch_size", "num_replicas",
                                   "steps_per_execution", "dtype_policy")} == {
        "epochs": th.EPOCHS, "steps_per_epoch": th.STEPS, "batch_size": th.BATCH,
        "num_replicas": th.NUM_REPLICAS, "steps_per_execution": 1, "dtype_policy": "float32"}
    assert config["note"] == "given"


def test_learning_rate_equals_the_optimizers_after_a_scheduler_changes_it(model, tmp_path):
    expected = th.Expected()
    logger = _logger(tmp_path)
    scheduler = mf.callbacks.LearningRateScheduler(th.halving)
    th.fit(model, [scheduler, expected, logger])
    epochs = _rows(_read(logger.run)[0], "epoch/")
    assert [row["epoch/learning_rate"] for row in epochs] == pytest.approx(
        expected.learning_rates, rel=1e-6)
    assert expected.learning_rates == pytest.approx([0.2, 0.1], rel=1e-6)


def test_given_run_is_logged_into_and_left_open(model, tmp_path):
    run = wandb.init(project="tests", mode="offline", dir=str(tmp_path), reinit="create_new")
    logger = mf.callbacks.WandbLogger(run)
    th.fit(model, [logger])
    run.log({"after_fit": 1.0})  # still open: the caller finishes it
    run.finish()
    rows, _, exits = _read(run)
    assert len(_rows(rows, "epoch/")) == th.EPOCHS
    assert rows[-1]["after_fit"] == 1.0 and exits == [0]


def test_a_run_it_started_ends_failed_when_fit_raises(model, tmp_path):
    def crash(epoch, logs):
        raise RuntimeError("boom")

    logger = _logger(tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        th.fit(model, [logger, mf.callbacks.LambdaCallback(on_epoch_end=crash)])
    rows, _, exits = _read(logger.run)
    assert exits == [1]
    assert len(_rows(rows, "epoch/")) == 1  # logged before the crash


def test_non_chief_process_logs_nothing(model, tmp_path, monkeypatch):
    monkeypatch.setattr(experiment_logger, "is_chief", lambda: False)
    logger = _logger(tmp_path, log_freq="batch")
    th.fit(model, [logger])
    assert logger.run is None
    assert not (tmp_path / "wandb").exists()


def test_run_and_init_arguments_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="Received: run and name=, project="):
        mf.callbacks.WandbLogger(object(), project="p", name="n")


@pytest.mark.parametrize("log_freq", [0, "step", 1.5])
def test_invalid_log_freq_is_refused(log_freq):
    with pytest.raises(ValueError, match=f"Received: log_freq={log_freq!r}"):
        mf.callbacks.WandbLogger(log_freq=log_freq)


def test_without_wandb_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(ImportError, match=r"pip install mirrorfit\[wandb\]"):
        mf.callbacks.WandbLogger()
