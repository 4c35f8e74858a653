"""`ThroughputMonitor`: its rates against the steps, global batch, FLOPs and times counted
independently, with the callback's clock replaced so each value is exact (no assertion on
real wall time); the peak FLOP/s table and the argument checks.
"""

import itertools
import math

import flax.linen as nn
import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.callbacks import throughput
from mirrorfit._src.utils.checks import MirrorfitWarning
from tests.helpers import compiled_classifier, reset_to_initial

ROWS, BATCH = 72, 16  # 5 steps per epoch, the last one partial (8 rows, padded to 16)
STEPS = math.ceil(ROWS / BATCH)


def _data(rows: int = ROWS):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int32)


@pytest.fixture(scope="module")
def compiled():
    return compiled_classifier([nn.Dense(16), nn.relu, nn.Dense(2), nn.softmax], seed=2)


@pytest.fixture
def model(compiled):
    """The shared compiled model, reset to its initial training state."""
    return reset_to_initial(compiled)


@pytest.fixture
def clock(monkeypatch):
    """Replaces the callback's clock: reads return 0, 10, 30, 60, ... (the span between
    reads k and k + 1 is 10 * (k + 1) seconds); yields the list of values read."""
    read, times = [], itertools.accumulate(itertools.count(0, 10))

    def fake():
        read.append(next(times))
        return read[-1]

    monkeypatch.setattr(throughput, "perf_counter", fake)
    return read


def _fit(model, callbacks, epochs, **kwargs):
    x, y = _data()
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=callbacks,
                     **kwargs)


def test_rates_are_the_steps_and_examples_over_the_timed_span(model, clock):
    history = _fit(model, [mf.callbacks.ThroughputMonitor()], 3, validation_data=_data(24))
    # Two reads per epoch: epoch 0 from its first call's end (1 step done) to its last step,
    # later epochs from on_epoch_begin (0 steps) to the last step. Validation is outside.
    assert clock == [0, 10, 30, 60, 100, 150]
    steps = np.array([STEPS - 1, STEPS, STEPS])
    seconds = np.array([10 - 0, 60 - 30, 150 - 100])
    np.testing.assert_allclose(history.history["steps_per_second"], steps / seconds,
                               rtol=1e-15)
    np.testing.assert_allclose(history.history["examples_per_second"],
                               steps * BATCH / seconds, rtol=1e-15)  # BATCH: global batch


def test_flops_and_mfu_are_the_step_cost_over_time_and_peak(model, clock):
    history = _fit(model, [mf.callbacks.ThroughputMonitor(peak_flops=2e9)], 2)
    cost = model.trainer.train_step_cost()
    assert cost.global_batch_size == BATCH
    steps_per_second = np.array([(STEPS - 1) / 10, STEPS / 30])
    tflops = steps_per_second * cost.flops / 1e12
    np.testing.assert_allclose(history.history["tflops_per_second"], tflops, rtol=1e-15)
    # 2 replicas, each with a peak of 2e9 FLOP/s.
    np.testing.assert_allclose(history.history["mfu"], tflops * 1e12 / (2e9 * 2), rtol=1e-15)


def test_an_epoch_stopped_early_ends_its_span_at_its_last_step(model, clock):
    def stop(batch, logs):
        model.stop_training = batch == 2

    history = _fit(model, [mf.callbacks.ThroughputMonitor(),
                           mf.callbacks.LambdaCallback(on_train_batch_end=stop)], 2,
                   validation_data=_data(24))
    assert history.epoch == [0] and clock == [0, 10]  # the end read before validation
    assert history.history["steps_per_second"] == [(3 - 1) / 10]


def test_an_epoch_of_one_train_call_logs_nan_then_rates(model, clock):
    x, y = _data(BATCH)
    history = model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0,
                        callbacks=[mf.callbacks.ThroughputMonitor()])
    first, second = history.history["examples_per_second"]
    assert math.isnan(first)  # its only call compiled the step: nothing left to time
    assert second == pytest.approx(BATCH / (60 - 30), rel=1e-15)


def test_keys_reach_history_and_the_progress_line_and_mfu_needs_a_peak_on_cpu(model, capsys):
    history = model.fit(*_data(), batch_size=BATCH, epochs=1, verbose=2,
                        callbacks=[mf.callbacks.ThroughputMonitor()])
    keys = {"steps_per_second", "examples_per_second", "tflops_per_second"}
    assert keys <= set(history.history) and "mfu" not in history.history  # CPU: no peak
    line = capsys.readouterr().out
    assert all(f"{key}: " in line for key in keys)
    assert all(v > 0 for key in keys for v in history.history[key])


def test_step_flops_match_a_hand_compiled_dense_step():
    # One Dense(64) layer and the crossentropy fit compiles; an optax-free SGD step written
    # by hand over the same global batch, compiled on one device: XLA's counts agree within
    # 4%; mirrorfit's step also accumulates metric statistics and masks padding rows (1.5% at
    # one replica), and with 2 replicas each replica applies the update and all-reduces the
    # gradients (3.3%).
    d, c, b = 32, 64, 64
    x = np.random.default_rng(0).normal(size=(b, d)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    def hand(params, xb, yb):
        def loss(p):
            logits = xb @ p[0] + p[1]
            return jax.numpy.mean(mf.losses.sparse_categorical_crossentropy(
                yb, logits, from_logits=True))

        return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params))

    params = [np.zeros((d, c), np.float32), np.zeros(c, np.float32)]
    expected = jax.jit(hand).lower(params, x, y).compile().cost_analysis()["flops"]
    matmuls = 2 * b * d * c * 2  # forward x @ w and the weight gradient x.T @ g
    for replicas in (1, 2):
        with mf.MirroredStrategy(jax.devices()[:replicas]).scope():
            dense = mf.Sequential([nn.Dense(c)], input_shape=(d,), seed=0)
            dense.compile(mf.optimizers.SGD(0.1),
                          mf.losses.SparseCategoricalCrossentropy(from_logits=True))
        dense.fit(x, y, batch_size=b, epochs=1, verbose=0)
        flops = dense.trainer.train_step_cost().flops
        assert flops >= matmuls
        np.testing.assert_allclose(flops, expected, rtol=0.04)


@pytest.mark.parametrize("kind, peak", [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H100 NVL", 835e12), ("NVIDIA H200", 989e12), ("NVIDIA A100-SXM4-80GB", 312e12),
    ("TPU v4", 275e12), ("TPU v5 lite", 197e12), ("TPU v5", 459e12), ("TPU v5p", 459e12),
    ("TPU v6 lite", 918e12), ("TPU v4 lite", None), ("cpu", None), ("NVIDIA L4", None)])
def test_peak_flops_table(kind, peak):
    assert throughput.peak_flops_of(kind) == peak


def test_an_unlisted_accelerator_warns_that_mfu_is_not_logged():
    class Device:
        platform, device_kind = "gpu", "NVIDIA L4"

    class Strategy:
        devices = (Device(),)

    class Model:
        strategy = Strategy()

    monitor = mf.callbacks.ThroughputMonitor()
    monitor.set_model(Model())
    with pytest.warns(MirrorfitWarning, match="'NVIDIA L4', so mfu is not logged: pass "
                                              "peak_flops"):
        monitor.on_train_begin()


@pytest.mark.parametrize("peak_flops", [0, -1.0, "1e12", True])
def test_peak_flops_must_be_a_positive_number(peak_flops):
    with pytest.raises(ValueError, match=r"peak_flops must be a positive number .* Received: "
                                         r"peak_flops="):
        mf.callbacks.ThroughputMonitor(peak_flops=peak_flops)
