"""The Keras callback set: Keras semantics of each callback, learning-rate control through the
optimizer state, loggers read back from disk, and BackupAndRestore's in-process resume.

Most tests share one compiled 2-device model (compiling is the slow part) and reset its
training state first; monitored values are injected by a `LambdaCallback` that runs before
the callback under test, so each scenario is exact and fast.
"""

import csv
import math
import os
import re
import signal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from mirrorfit._src.saving import checkpoint as checkpoint_lib
from tests.helpers import (
    Interrupt,
    compiled_classifier,
    interrupt_after,
    reset_to_initial,
    tree_equal,
)

ROWS, BATCH = 72, 16  # 5 steps per epoch, the last one partial (8 rows)
STEPS = math.ceil(ROWS / BATCH)


def _data(rows: int = ROWS):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int32)


def _layers():
    return [nn.Dense(16), nn.relu, nn.Dropout(0.2), nn.Dense(2), nn.softmax]


@pytest.fixture(scope="module")
def compiled():
    return compiled_classifier(_layers(), seed=2)


@pytest.fixture
def model(compiled):
    """The shared compiled model, reset to its initial training state."""
    return reset_to_initial(compiled)


def _inject(name, values):
    """A callback that sets ``logs[name] = values[epoch]`` at each epoch end."""

    def set_value(epoch, logs):
        logs[name] = values[epoch]

    return mf.callbacks.LambdaCallback(on_epoch_end=set_value)


def _fit(model, callbacks, epochs, **kwargs):
    x, y = _data()
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=callbacks,
                     **kwargs)


# -- EarlyStopping ----------------------------------------------------------------------------


def test_early_stopping_restores_best_epoch_weights(model):
    weights = []
    record = mf.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: weights.append(model.get_weights()))
    stop = mf.callbacks.EarlyStopping(monitor="score", patience=2, restore_best_weights=True)
    history = _fit(model, [_inject("score", [3.0, 1.0, 2.0, 2.5, 0.1, 0.1]), stop, record], 6)
    assert history.epoch == [0, 1, 2, 3]  # epochs 2 and 3 did not improve on epoch 1
    assert stop.stopped_epoch == 3 and stop.best == 1.0 and stop.best_epoch == 1
    tree_equal(model.get_weights(), weights[1])
    assert not np.array_equal(weights[1][0], weights[3][0])


def test_early_stopping_with_baseline_and_max_mode(model):
    stop = mf.callbacks.EarlyStopping(monitor="val_acc_like", mode="max", patience=2,
                                      baseline=0.9, min_delta=0.05)
    # Improvements below the baseline do not reset the wait, so the first epoch without
    # improvement (epoch 2) is already the third one counted. Without a baseline: epoch 3.
    history = _fit(model, [_inject("val_acc_like", [0.5, 0.6, 0.6, 0.6, 0.6]), stop], 5)
    assert history.epoch == [0, 1, 2]


# -- TerminateOnNaN ---------------------------------------------------------------------------


def test_terminate_on_nan_stops_at_the_first_nan_step(model):
    x, y = _data()
    x[2 * BATCH + 3, 1] = np.nan  # a row of step 2 (no shuffling)
    seen = []
    history = model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0, shuffle=False, callbacks=[
        mf.callbacks.TerminateOnNaN(),
        mf.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(b))])
    assert seen == [0, 1, 2]
    assert int(model.state.step) == 3
    assert history.epoch == [0] and math.isnan(history.history["loss"][0])


@jax.custom_vjp
def _nan_grad_above_100(x):
    """Identity forward; the gradient is NaN on rows with a value above 100."""
    return x


def _nan_grad_fwd(x):
    return x, jnp.any(x > 100, axis=-1, keepdims=True)


def _nan_grad_bwd(marked, g):
    return (jnp.where(marked, jnp.nan, g),)


_nan_grad_above_100.defvjp(_nan_grad_fwd, _nan_grad_bwd)


class _NanGradNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.softmax(nn.Dense(2)(_nan_grad_above_100(nn.Dense(4)(x))))


@pytest.mark.parametrize("steps_per_execution", [1, 2])
def test_terminate_on_nan_stops_before_applying_nan_gradients_of_a_finite_loss(
        steps_per_execution, capsys):
    # Step 3's gradients are NaN (a custom op), its loss is finite: the step is not applied,
    # fit stops there (at the end of its group of 2), and the params are those after step 2.
    x, y = _data()
    x[3 * BATCH + 1] = 500.0
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Model(_NanGradNet(), input_shape=(4,), seed=2)
        model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy",
                      steps_per_execution=steps_per_execution)
    params, losses = [], []
    record = mf.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: (
        params.append(jax.device_get(model.params)), losses.append(logs["loss"])))
    history = model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0, shuffle=False,
                        callbacks=[mf.callbacks.TerminateOnNaN(), record])
    assert history.epoch == [0]
    assert all(math.isfinite(loss) for loss in losses)
    if steps_per_execution == 1:
        assert len(params) == 4  # batches 0..3
        assert "Epoch 1, batch 3: non-finite gradients" in capsys.readouterr().out
    else:
        assert len(params) == 2  # groups {0, 1} and {2, 3}
        assert "Epoch 1, batch in 2..3: non-finite gradients" in capsys.readouterr().out
    tree_equal(params[-1], _params_after_steps(x, y, 3))
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(model.params))


def _params_after_steps(x, y, steps):
    """The params of a fresh `_NanGradNet` model after ``steps`` finite steps."""
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Model(_NanGradNet(), input_shape=(4,), seed=2)
        model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    model.fit(x[:steps * BATCH], y[:steps * BATCH], batch_size=BATCH, epochs=1, verbose=0,
              shuffle=False)
    return jax.device_get(model.params)


def test_without_terminate_on_nan_nan_gradients_of_a_finite_loss_are_applied():
    # The check is off by default (no extra host read per step): the NaN reaches the params.
    x, y = _data()
    x[3 * BATCH + 1] = 500.0
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Model(_NanGradNet(), input_shape=(4,), seed=2)
        model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    assert not all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(model.params))


# -- ModelCheckpoint --------------------------------------------------------------------------


def test_model_checkpoint_save_best_only_keeps_improvements(model, tmp_path):
    weights = []
    record = mf.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: weights.append(model.get_weights()))
    checkpoint = mf.callbacks.ModelCheckpoint(tmp_path / "e{epoch}-{score:.1f}", monitor="score",
                                              save_best_only=True, save_weights_only=True)
    _fit(model, [_inject("score", [3.0, 1.0, 2.0, 0.5]), checkpoint, record], 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e1-3.0", "e2-1.0", "e4-0.5"]
    for name, epoch in (("e2-1.0", 1), ("e4-0.5", 3)):
        model.load_weights(tmp_path / name)
        tree_equal(model.get_weights(), weights[epoch])


def test_model_checkpoint_every_n_steps_saves_whole_model(model, tmp_path):
    checkpoint = mf.callbacks.ModelCheckpoint(tmp_path / "e{epoch}b{batch}", save_freq=3)
    _fit(model, [checkpoint], 2)  # 10 steps: saves after steps 3, 6 and 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e1b3", "e2b1", "e2b4"]
    found = checkpoint_lib.read_latest(tmp_path / "e2b1")
    assert int(found.arrays["step"]) == 6 and "opt_state/count" in found.arrays


def test_model_checkpoint_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="save_freq=0"):
        mf.callbacks.ModelCheckpoint(tmp_path, save_freq=0)
    with pytest.raises(ValueError, match="mode='best'"):
        mf.callbacks.ModelCheckpoint(tmp_path, mode="best")


# -- learning rate ----------------------------------------------------------------------------


def _lr(model) -> float:
    return float(model.opt_state.hyperparams["learning_rate"])


def test_learning_rate_scheduler_drives_optax_without_recompiling(model):
    cache_size = model.trainer.train_fn._cache_size()
    lrs, weights = [], []
    record = mf.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: (lrs.append(_lr(model)),
                                          weights.append(model.get_weights())))
    schedule = mf.callbacks.LearningRateScheduler(lambda epoch, lr: [0.05, 0.0, 0.2][epoch])
    history = _fit(model, [schedule, record], 3)
    np.testing.assert_allclose(lrs, [0.05, 0.0, 0.2], rtol=1e-7)
    np.testing.assert_allclose(history.history["learning_rate"], [0.05, 0.0, 0.2], rtol=1e-7)
    tree_equal(weights[1], weights[0])  # lr 0: optax applied no update
    assert not np.array_equal(weights[2][0], weights[1][0])
    assert model.trainer.train_fn._cache_size() == max(cache_size, 1)


def test_reduce_lr_on_plateau_lowers_the_optimizer_state_rate(model):
    lrs = []
    record = mf.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: lrs.append(_lr(model)))
    reduce = mf.callbacks.ReduceLROnPlateau(monitor="score", factor=0.5, patience=2,
                                            min_lr=0.02)
    history = _fit(model, [_inject("score", [1.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9]), reduce,
                           record], 7)
    # No improvement after epoch 1: reduce after epochs 3 and 5 (patience 2), floored.
    np.testing.assert_allclose(lrs, [0.1, 0.1, 0.1, 0.05, 0.05, 0.025, 0.025], rtol=1e-6)
    np.testing.assert_allclose(history.history["learning_rate"],
                               [0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.025], rtol=1e-6)
    _fit(model, [_inject("score", [1.0, 1.0, 1.0, 1.0]), mf.callbacks.ReduceLROnPlateau(
        monitor="score", factor=0.5, patience=1, min_lr=0.02)], 4)
    assert _lr(model) == pytest.approx(0.02)


def test_learning_rate_callbacks_need_an_injected_learning_rate():
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        model = mf.Sequential(_layers(), input_shape=(4,))
        model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="inject_hyperparams.*Received: an optimizer state"):
        _fit(model, [mf.callbacks.LearningRateScheduler(lambda epoch: 0.1)], 1)


@pytest.mark.parametrize("callback", [
    mf.callbacks.LearningRateScheduler(lambda epoch: 0.1),
    # patience 0 and an unreachable min_delta: reduces at the end of epoch 2
    mf.callbacks.ReduceLROnPlateau(monitor="loss", patience=0, min_delta=1e9),
], ids=["LearningRateScheduler", "ReduceLROnPlateau"])
def test_learning_rate_callbacks_refuse_an_optax_schedule(callback):
    # The schedule would overwrite the callback's rate at the next step: a clear error instead.
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        model = mf.Sequential(_layers(), input_shape=(4,))
        model.compile(mf.optimizers.SGD(optax.linear_schedule(0.1, 0.0, 100)),
                      "sparse_categorical_crossentropy")
    before = model.get_weights()
    with pytest.raises(ValueError, match=r"optax schedule.*Received: an optimizer with a sched"):
        _fit(model, [callback], 2)
    assert len(model.get_weights()) == len(before)  # the model is still usable
    model.evaluate(*_data(), verbose=0)


# -- loggers ----------------------------------------------------------------------------------


def test_csv_logger_writes_every_epoch_and_appends(model, tmp_path):
    path = tmp_path / "log.csv"
    history = _fit(model, [mf.callbacks.CSVLogger(path)], 2, validation_data=_data(24))
    _fit(model, [mf.callbacks.CSVLogger(path, append=True)], 1, validation_data=_data(24))
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [r[0] for r in rows[1:]] == ["0", "1", "0"]  # one header, appended row
    for row, epoch in zip(rows[1:3], range(2)):
        assert float(row[2]) == history.history["loss"][epoch]
        assert float(row[4]) == history.history["val_loss"][epoch]


def test_lambda_callback_calls_each_given_hook(model):
    calls = []
    callback = mf.callbacks.LambdaCallback(
        on_train_begin=lambda logs: calls.append("train_begin"),
        on_epoch_begin=lambda epoch, logs: calls.append(f"epoch_begin {epoch}"),
        on_train_batch_end=lambda batch, logs: calls.append(f"batch {batch}"),
        on_test_end=lambda logs: calls.append(f"test_end {sorted(logs)}"),
        on_train_end=lambda logs: calls.append("train_end"))
    _fit(model, [callback], 1, validation_data=_data(24))
    assert calls == (["train_begin", "epoch_begin 0"] + [f"batch {i}" for i in range(STEPS)]
                     + ["test_end ['accuracy', 'loss']", "train_end"])
    with pytest.raises(TypeError, match="Received: on_batch_end"):
        mf.callbacks.LambdaCallback(on_batch_end=print)


def test_on_train_error_gets_the_exception_instead_of_on_train_end(model):
    calls, params = [], []

    def crash(batch, logs):
        raise Interrupt

    callback = mf.callbacks.LambdaCallback(
        on_train_begin=lambda logs: params.append(dict(callback.params)),
        on_train_error=lambda error: calls.append(type(error).__name__),
        on_train_end=lambda logs: calls.append("train_end"))
    with pytest.raises(Interrupt):
        _fit(model, [callback, mf.callbacks.LambdaCallback(on_train_batch_end=crash)], 1)
    assert calls == ["Interrupt"]
    _fit(model, [callback], 1)
    assert calls == ["Interrupt", "train_end"]  # no error: on_train_error is not called
    assert params[0] == {"epochs": 1, "steps": STEPS, "verbose": 0, "batch_size": BATCH}


# -- BackupAndRestore -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def grouped():
    """A model fusing 2 steps per call, with its initial state."""
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Sequential(_layers(), input_shape=(4,), seed=4)
        model.compile("adam", "sparse_categorical_crossentropy", ["accuracy"],
                      steps_per_execution=2)
    return model, jax.device_get(model.state)


@pytest.mark.parametrize("save_freq, stop_at, resume_at", [(3, 9, 7), ("epoch", 12, 10)])
def test_backup_and_restore_resumes_bitwise(grouped, tmp_path, save_freq, stop_at, resume_at):
    model, initial = grouped
    kwargs = dict(validation_data=_data(24), epochs=3)
    model.state = model.strategy.replicate_arrays(initial)
    expected = _fit(model, [], **kwargs)
    expected_weights = model.get_weights()

    model.state = model.strategy.replicate_arrays(initial)
    backup = mf.callbacks.BackupAndRestore(tmp_path / "backup", save_freq=save_freq)
    with pytest.raises(Interrupt):
        _fit(model, [backup, interrupt_after(model, stop_at)], **kwargs)
    assert checkpoint_lib.versions(tmp_path / "backup")
    started = []
    probe = mf.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs: started.append(
        int(jax.device_get(model.state.step))) if not started else None)
    resumed = _fit(model, [backup, probe], **kwargs)  # the state after the interrupt is ignored
    # 5 steps per epoch in groups of 2 (2, 4, 5 | 7, 9, 10 | ...). save_freq=3: backups after
    # steps 4, 7 (mid-epoch), 12; interrupted after 9. Epoch backups: after 5 and 10.
    assert started == [resume_at]
    assert resumed.history == expected.history and resumed.epoch == [0, 1, 2]
    tree_equal(model.get_weights(), expected_weights)
    assert not (tmp_path / "backup").exists()  # delete_checkpoint=True


def _sigterm_once(model, hook):
    """A callback that sends SIGTERM to this process once: in ``on_train_batch_begin`` when 2
    steps are done (``"mid_epoch"``), or in the first ``on_test_begin`` (``"validation"``)."""
    sent = []

    def send(*_):
        if not sent and (hook == "validation" or int(jax.device_get(model.state.step)) == 2):
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)

    if hook == "validation":
        return mf.callbacks.LambdaCallback(on_test_begin=send)
    return mf.callbacks.LambdaCallback(on_train_batch_begin=send)


@pytest.mark.parametrize("hook, epoch, step", [("mid_epoch", 0, 4), ("validation", 1, 0)])
def test_backup_and_restore_saves_on_sigterm_and_resumes_bitwise(grouped, tmp_path, hook,
                                                                 epoch, step):
    model, initial = grouped
    kwargs = {"validation_data": _data(24), "epochs": 3}
    model.state = model.strategy.replicate_arrays(initial)
    expected = _fit(model, [], **kwargs)
    expected_weights = model.get_weights()

    model.state = model.strategy.replicate_arrays(initial)
    backup = mf.callbacks.BackupAndRestore(tmp_path / "backup", save_freq=100,
                                           save_before_preemption=True)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(mf.callbacks.Preempted) as raised:
        _fit(model, [backup, _sigterm_once(model, hook)], **kwargs)
    assert raised.value.code == mf.callbacks.PREEMPTED_EXIT_CODE == 76
    assert signal.getsignal(signal.SIGTERM) is before  # fit's handler is gone
    # 5 steps per epoch in groups of 2 (2, 4, 5 | ...): a SIGTERM while steps 3-4 run saves
    # after step 4; one during epoch 0's validation saves after it, at the start of epoch 1.
    (newest, *_) = checkpoint_lib.versions(tmp_path / "backup")
    info = checkpoint_lib.load(newest).info
    assert (int(info["epoch"]), int(info["step"])) == (raised.value.epoch, raised.value.step)
    assert (raised.value.epoch, raised.value.step) == (epoch, step)
    started = []
    probe = mf.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs: started.append(
        int(jax.device_get(model.state.step))) if not started else None)
    resumed = _fit(model, [backup, probe], **kwargs)
    assert started == [epoch * 5 + step]
    assert resumed.history == expected.history
    tree_equal(model.get_weights(), expected_weights)
    assert signal.getsignal(signal.SIGTERM) is before


def test_backup_and_restore_falls_back_from_a_damaged_backup(model, tmp_path):
    backup = mf.callbacks.BackupAndRestore(tmp_path / "b", save_freq=2, delete_checkpoint=False)
    with pytest.raises(Interrupt):
        _fit(model, [backup, interrupt_after(model, 4)], 2)
    newest, previous = checkpoint_lib.versions(tmp_path / "b")
    (newest / "meta" / "metadata").write_text("{")  # a truncated file
    started = []
    probe = mf.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs: started.append(
        int(jax.device_get(model.state.step))))
    with pytest.warns(UserWarning, match=f"damaged backup.*{re.escape(str(newest))}"):
        _fit(model, [backup, probe], 1)
    assert started[0] == 2  # from the backup after step 2, not the damaged one after step 4
    assert (tmp_path / "b").exists()  # delete_checkpoint=False


def test_backup_and_restore_refuses_a_changed_shuffle_order(model, tmp_path):
    backup = mf.callbacks.BackupAndRestore(tmp_path / "b", save_freq=2)
    with pytest.raises(Interrupt):
        _fit(model, [backup, interrupt_after(model, 3)], 2)
    x, y = _data(ROWS + 1)
    with pytest.raises(ValueError, match="different shuffle order"):
        model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[backup])
