"""OptunaPruningCallback with real Optuna studies (in-memory storage): what is reported, when a
trial is pruned and the state the model keeps, the missing-monitor warning, the missing-extra
error, the docs example, and the chief's decision followed by every process.

The single-process tests share one compiled 2-replica model (compiling is the slow part) and
reset its training state first.
"""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import numpy as np
import optuna
import pytest

import mirrorfit as mf
from tests.helpers import REPO_ROOT, compiled_classifier, reset_to_initial

ROWS, BATCH = 48, 16  # 3 steps per epoch
DOCS = REPO_ROOT / "docs" / "guides" / "experiment_tracking.md"
HEADING = "## Hyper-parameter search with Optuna"
WORKER = str(Path(__file__).with_name("optuna_worker.py"))


@pytest.fixture(autouse=True)
def _quiet_optuna():
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(verbosity)


def _data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(ROWS, 4)).astype(np.float32)
    return x, (x[:, 0] - x[:, 2] > 0).astype(np.int32)


TRAIN, VALIDATION = _data(0), _data(1)


@pytest.fixture(scope="module")
def compiled():
    return compiled_classifier([nn.Dense(8), nn.relu, nn.Dense(2), nn.softmax], seed=3)


@pytest.fixture
def model(compiled):
    """The shared compiled model, reset to its initial training state."""
    return reset_to_initial(compiled)


def _fit(model, epochs, callbacks=(), validation=True):
    return model.fit(*TRAIN, batch_size=BATCH, epochs=epochs, verbose=0,
                     validation_data=VALIDATION if validation else None,
                     callbacks=list(callbacks))


def _optimize(study, model, epochs, interval=1):
    """Runs one trial of ``study`` that fits ``model``; returns it (as stored) and ``model``'s
    History, kept even when the trial is pruned."""

    def objective(trial):
        _fit(model, epochs, [mf.callbacks.OptunaPruningCallback(trial, "val_loss", interval)])
        return model.history.history["val_loss"][-1]

    study.optimize(objective, n_trials=1)
    return study.trials[-1], model.history


@pytest.mark.parametrize("interval", [1, 2])
def test_pruned_trial_stops_fit_after_the_first_checked_epoch(model, compiled, interval):
    # val_loss > 0 = upper: the pruner prunes at the first report, after epoch interval - 1.
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=0.0))
    trial, history = _optimize(study, model, epochs=4, interval=interval)

    assert trial.state == optuna.trial.TrialState.PRUNED
    assert history.epoch == list(range(interval))  # History records the pruned epoch
    assert list(trial.intermediate_values) == [interval - 1]
    np.testing.assert_allclose(trial.intermediate_values[interval - 1],
                               history.history["val_loss"][-1], rtol=1e-6)
    # The model keeps the state after the pruned epoch: as a plain fit of `interval` epochs.
    pruned_weights = model.get_weights()
    model.state = model.strategy.replicate_arrays(compiled[1])
    _fit(model, epochs=interval)
    for got, expected in zip(pruned_weights, model.get_weights()):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_fit_raises_trial_pruned_naming_the_epoch(model):
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=0.0,
                                                                      n_warmup_steps=1))
    pruning = mf.callbacks.OptunaPruningCallback(study.ask())
    with pytest.raises(optuna.TrialPruned, match="pruned at epoch 1 "):
        _fit(model, epochs=3, callbacks=[pruning])
    assert model.history.epoch == [0, 1]
    assert pruning.pruned_epoch == 1


def test_unpruned_trial_reports_every_epoch(model):
    study = optuna.create_study(pruner=optuna.pruners.NopPruner())
    trial, history = _optimize(study, model, epochs=3)

    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert history.epoch == [0, 1, 2]
    assert list(trial.intermediate_values) == [0, 1, 2]
    np.testing.assert_allclose([trial.intermediate_values[e] for e in range(3)],
                               history.history["val_loss"], rtol=1e-6)


def test_interval_reports_every_interval_th_epoch(model):
    study = optuna.create_study(pruner=optuna.pruners.NopPruner())
    trial, history = _optimize(study, model, epochs=5, interval=2)

    assert list(trial.intermediate_values) == [1, 3]
    np.testing.assert_allclose([trial.intermediate_values[e] for e in (1, 3)],
                               [history.history["val_loss"][e] for e in (1, 3)], rtol=1e-6)


def test_missing_monitor_warns_with_the_available_logs_and_never_prunes(model):
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=0.0))
    trial = study.ask()
    pruning = mf.callbacks.OptunaPruningCallback(trial, monitor="val_loss")
    message = re.escape("'val_loss' is not in the logs (val_ logs need validation data in "
                        "fit); not reporting epoch ") + r"[01]\. " + re.escape(
                            "Available: ['accuracy', 'loss']")
    with pytest.warns(mf.MirrorfitWarning, match=message) as warned:
        _fit(model, epochs=2, callbacks=[pruning], validation=False)  # no TrialPruned
    assert len(warned) == 2  # one per epoch
    assert model.history.epoch == [0, 1]
    assert study.trials[0].intermediate_values == {}


def test_missing_optuna_raises_an_import_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` raises ImportError
    with pytest.raises(ImportError, match=re.escape("pip install mirrorfit[optuna]")):
        mf.callbacks.OptunaPruningCallback(trial=None)


def test_interval_must_be_a_positive_int():
    with pytest.raises(ValueError, match=re.escape("interval must be a positive int "
                                                   "(epochs between reports). Received: "
                                                   "interval=0")):
        mf.callbacks.OptunaPruningCallback(trial=None, interval=0)


def _docs_example() -> str:
    """The Python blocks of the docs' Optuna section, joined."""
    text = DOCS.read_text()
    assert HEADING in text
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert blocks
    return "\n".join(blocks)


def test_docs_example_runs_a_study(capsys):
    namespace = {}
    exec(compile(_docs_example(), str(DOCS), "exec"), namespace)  # noqa: S102 - our own docs

    study = namespace["study"]
    states = [trial.state for trial in study.trials]
    assert len(states) == 3
    assert set(states) <= {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    for trial in study.trials:  # every trial reported its epochs until it ended
        steps = list(trial.intermediate_values)
        assert steps == list(range(len(steps))) and steps
        assert all(math.isfinite(v) for v in trial.intermediate_values.values())
    assert "best: {'units'" in capsys.readouterr().out


@pytest.mark.slow  # starts 2 processes
def test_every_process_follows_the_chiefs_decision(tmp_path):
    # Process 0 has a trial pruned after epoch 1; process 1 a FixedTrial that never prunes, so
    # it stops only by following process 0.
    done = subprocess.run(
        [sys.executable, "-m", "mirrorfit.launch", "--nproc", "2", "--cpu-devices", "1",
         WORKER, str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MIRRORFIT_")},
             "PYTHONPATH": str(REPO_ROOT), "JAX_PLATFORMS": "cpu"},
        check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    results = [json.loads((tmp_path / f"result-{rank}.json").read_text()) for rank in range(2)]
    for result in results:
        assert result["pruned"] and result["epochs"] == [0, 1]
    reported = results[0]["intermediate_values"]  # JSON: the steps are strings
    assert list(reported) == ["0", "1"]
    np.testing.assert_allclose([reported["0"], reported["1"]], results[0]["val_loss"], rtol=1e-6)
