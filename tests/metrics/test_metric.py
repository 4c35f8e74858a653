"""Metrics hold their statistics in Variables: inside ``strategy.run`` (each replica adds its
rows, the run adds the replicas' changes), under ``jax.jit`` through Keras 3's stateless API,
and as attributes of the objects that own them.

Results are compared with NumPy over the real (unpadded) rows, float32 with rtol 1e-6, and
with the same metric updated eagerly on all rows at once.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import metrics
from mirrorfit._src.variables import tracking

RTOL = 1e-6
ROWS = {"full": 24, "partial": 19}  # 19 rows are padded to 21 on 3 replicas, to 24 on 8
C = 3
_rng = np.random.default_rng(5)
X = _rng.normal(size=(24, C)).astype(np.float32)
Y = np.concatenate([np.arange(C), _rng.integers(0, C, 21)]).astype(np.int32)


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("n", [1, 3, 8])
def test_update_state_inside_run_holds_the_global_totals(n, kind):
    rows = ROWS[kind]
    x, y = X[:rows], Y[:rows]
    strategy = mf.MirroredStrategy(jax.devices()[:n])
    with strategy.scope():
        loss = metrics.Mean(name="loss")
        accuracy = metrics.SparseCategoricalAccuracy()
        f1 = metrics.F1Score()  # statistics sized by the data: created in the first trace

    def step(batch):
        x, y = batch
        per_example = -jax.nn.log_softmax(x)[jnp.arange(x.shape[0]), y]
        loss.update_state(per_example)
        accuracy.update_state(y, x)
        f1.update_state(jax.nn.one_hot(y, C), jax.nn.softmax(x))

    (batch,) = strategy.experimental_distribute_dataset([(x, y)])
    strategy.run(step, args=(batch,))
    strategy.run(step, args=(batch,))  # a second batch: the totals keep adding up
    log_probs = x - np.log(np.exp(x).sum(-1, keepdims=True))
    np.testing.assert_allclose(loss.result(), -np.mean(log_probs[np.arange(rows), y]),
                               rtol=1e-5)
    np.testing.assert_allclose(accuracy.result(), np.mean(x.argmax(-1) == y), rtol=RTOL)
    totals = {v.name: float(v.numpy()) for v in accuracy.variables}
    assert totals["count"] == 2 * rows  # padding rows excluded, each replica's rows added
    eager = metrics.F1Score()
    for _ in range(2):
        eager.update_state(np.eye(C, dtype=np.float32)[y], np.asarray(jax.nn.softmax(x)))
    np.testing.assert_allclose(f1.result(), eager.result(), rtol=RTOL)
    assert all(v.value.sharding == strategy.replicated_sharding
               for m in (loss, accuracy, f1) for v in m.variables)
    accuracy.reset_state()
    strategy.run(step, args=(batch,))
    np.testing.assert_allclose(accuracy.result(), np.mean(x.argmax(-1) == y), rtol=RTOL)


def test_statistics_are_float32_sum_variables_from_the_start():
    mean = metrics.Mean()
    assert [(v.name, v.shape, v.dtype, v.aggregation, v.trainable) for v in mean.variables] == [
        ("count", (), jnp.float32, "sum", False), ("total", (), jnp.float32, "sum", False)]
    assert len(metrics.MeanSquaredError().variables) == 2
    assert metrics.AUC().variables == []  # sized by the data: created on the first update
    auc = metrics.AUC(num_thresholds=7)
    auc.update_state(np.array([0, 1, 1]), np.array([0.2, 0.7, 0.4], np.float32))
    assert {v.shape for v in auc.variables} == {(7,)}


def test_stateless_api_under_jit_matches_the_stateful_one():
    y_true = np.array([0, 1, 2, 1], np.int32)
    y_pred = np.eye(3, dtype=np.float32)[[0, 2, 2, 1]]
    metric = metrics.SparseCategoricalAccuracy()
    start = [v.value for v in metric.variables]
    update = jax.jit(metric.stateless_update_state)
    values = update(start, y_true, y_pred)
    values = update(values, y_true[:2], y_pred[:2])
    assert float(metric.result()) == 0.0  # the variables did not change
    np.testing.assert_allclose(jax.jit(metric.stateless_result)(values), 4 / 6, rtol=RTOL)
    metric.update_state(y_true, y_pred)
    metric.update_state(y_true[:2], y_pred[:2])
    np.testing.assert_allclose(metric.result(), 4 / 6, rtol=RTOL)
    assert [float(v) for v in metric.stateless_reset_state()] == [0.0, 0.0]
    np.testing.assert_allclose(metric.result(), 4 / 6, rtol=RTOL)


def test_reset_states_is_reset_state_under_tf_keras_2_name():
    metric = metrics.Mean()
    metric.update_state(np.array([2.0, 4.0], np.float32))
    metric.reset_states()
    assert float(metric.result()) == 0.0
    assert [float(v.numpy()) for v in metric.variables] == [0.0, 0.0]


def test_metric_held_as_an_attribute_is_tracked():
    class Trainer:
        _mf_trackable = True

        def __init__(self):
            self.loss_tracker = metrics.Mean(name="loss")
            self.mae = metrics.MeanAbsoluteError()

    owner = Trainer()
    found = tracking.walk(owner)
    assert [path for path, _ in found] == [("loss_tracker", "count"), ("loss_tracker", "total"),
                                           ("mae", "count"), ("mae", "total")]
    assert [v for _, v in found] == owner.loss_tracker.variables + owner.mae.variables


def test_stateless_update_state_with_wrong_length_raises_value_error():
    with pytest.raises(ValueError, match=r"'mean': metric_variables must hold one value per "
                       r"variable.*2 values. Received: 1 values"):
        metrics.Mean().stateless_update_state([0.0], np.ones(2))


def test_update_state_inside_run_with_mismatched_rows_raises_value_error():
    strategy = mf.MirroredStrategy(jax.devices()[:2])
    metric = metrics.Accuracy()

    def step(x):
        metric.update_state(x, x[:1])

    with pytest.raises(ValueError, match=r"'accuracy'.*same number of rows.*y_pred with 1"):
        strategy.run(step, args=(np.zeros((4, 2), np.float32),))
