"""Tests for strategy.run and the cross-replica operations on its results.

Covers `MirroredStrategy.run`, `reduce`, `gather` and `experimental_local_results`,
compile caching of ``run``, a hand-written training loop checked against ``Model.fit``, and
the errors for bad input. Every numeric result is compared with NumPy on the real (unpadded)
rows. Batches are "full" (16 rows: divides by 1, 2 and 8 replicas) or "partial" (11 rows:
padded to 12 on 2 replicas and to 16 on 8).
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

import mirrorfit as mf
from tests.helpers import mirrored_strategy

REPLICAS = [1, 2, 8]
ROWS = {"full": 16, "partial": 11}
FEATURES = 3  # differs from every per-replica batch size used here (16, 8, 2, 11, 6)
RTOL = 1e-6  # float32 sums of at most 16 rows


# One strategy per replica count, so tests share its cache of compiled ``run`` fns.
_strategy = functools.cache(mirrored_strategy)


def _data(rows, seed=0):
    return np.random.default_rng(seed).normal(size=(rows, FEATURES)).astype(np.float32)


def _distribute(strategy, batch):
    (distributed,) = list(strategy.experimental_distribute_dataset([batch]))
    return distributed


def _identity(x):
    return x


def _square(x):
    return x**2


def _real_row_sum(x):
    """Per-replica sum of the real rows of this replica's shard: ``[FEATURES]``."""
    mask = mf.get_replica_context().mask
    return jnp.sum(jnp.where(mask[:, None], x, 0.0), axis=0)


# -- run ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("n", REPLICAS)
def test_run_matches_numpy_per_replica(n, kind):
    strategy = _strategy(n)
    x = _data(ROWS[kind])
    w = np.random.default_rng(1).normal(size=(FEATURES, 2)).astype(np.float32)
    batch = _distribute(strategy, x)

    def fn(x, w, scale):
        return jnp.tanh(x) @ w * scale, mf.get_replica_context().replica_id_in_sync_group

    y, replica_id = strategy.run(fn, args=(batch, strategy.replicate(w)), kwargs={"scale": 2.0})

    assert isinstance(y, mf.PerReplica) and isinstance(replica_id, mf.PerReplica)
    per_replica = -(-ROWS[kind] // n)
    assert y.values.shape == (n, per_replica, 2)
    np.testing.assert_array_equal(np.asarray(replica_id.values), np.arange(n))
    np.testing.assert_allclose(
        np.asarray(strategy.gather(y, axis=0)), np.tanh(x) @ w * 2.0, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", REPLICAS)
def test_run_gives_each_replica_its_own_shard_full_batch(n):
    strategy = _strategy(n)
    x = _data(16)
    ids = strategy.run(_identity, args=(_distribute(strategy, x),))
    np.testing.assert_array_equal(np.asarray(ids.values), x.reshape(n, 16 // n, FEATURES))


@pytest.mark.parametrize("n", REPLICAS)
def test_run_passes_per_replica_values_back_per_replica(n):
    strategy = _strategy(n)
    x = _data(16)
    first = strategy.run(_square, args=(_distribute(strategy, x),))
    second = strategy.run(lambda v: v + 1.0, args=(first,))
    np.testing.assert_allclose(
        np.asarray(second.values), (x**2 + 1.0).reshape(n, 16 // n, FEATURES), rtol=RTOL)


def test_run_gives_numpy_and_replicated_values_whole():
    strategy = _strategy(8)
    table = np.arange(6.0, dtype=np.float32)
    out = strategy.run(lambda t, r: t * r, args=(table, strategy.replicate(np.float32(3.0))))
    np.testing.assert_array_equal(np.asarray(out.values), np.tile(table * 3.0, (8, 1)))


# -- reduce -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
@pytest.mark.parametrize("n", REPLICAS)
def test_reduce_axis_none_matches_numpy_full_batch(n, op):
    strategy = _strategy(n)
    x = _data(16)
    value = strategy.run(_square, args=(_distribute(strategy, x),))
    expected = getattr(np, op.lower())((x**2).reshape(n, 16 // n, FEATURES), axis=0)
    np.testing.assert_allclose(
        np.asarray(strategy.reduce(getattr(mf.ReduceOp, op), value, axis=None)), expected,
        rtol=RTOL)


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("n", REPLICAS)
def test_reduce_axis_none_of_masked_sums_matches_numpy(n, kind, op):
    strategy = _strategy(n)
    x = _data(ROWS[kind])
    partial_sums = strategy.run(_real_row_sum, args=(_distribute(strategy, x),))
    expected = x.sum(axis=0) / (n if op == "MEAN" else 1)
    np.testing.assert_allclose(
        np.asarray(strategy.reduce(op, partial_sums, axis=None)), expected, rtol=1e-5,
        atol=1e-6)


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("n", REPLICAS)
def test_reduce_axis_0_matches_numpy_over_real_rows(n, kind, op):
    strategy = _strategy(n)
    x = _data(ROWS[kind])
    value = strategy.run(_square, args=(_distribute(strategy, x),))
    expected = getattr(np, op.lower())(x**2, axis=0)
    np.testing.assert_allclose(
        np.asarray(strategy.reduce(op, value, axis=0)), expected, rtol=1e-5)


def test_reduce_mean_axis_0_on_padded_batch_ignores_padding():
    strategy = _strategy(8)
    x = np.arange(11 * FEATURES, dtype=np.float32).reshape(11, FEATURES)
    batch = _distribute(strategy, x)
    value = strategy.run(_identity, args=(batch,))
    padded = np.asarray(value.values).reshape(16, FEATURES)
    assert not np.allclose(padded.mean(axis=0), x.mean(axis=0))  # padding would show
    np.testing.assert_allclose(
        np.asarray(strategy.reduce(mf.ReduceOp.MEAN, value, axis=0)), x.mean(axis=0),
        rtol=1e-6)


@pytest.mark.parametrize("n", REPLICAS)
def test_reduce_axis_1_matches_numpy(n):
    strategy = _strategy(n)
    x = _data(16)
    value = strategy.run(_square, args=(_distribute(strategy, x),))
    expected = (x**2).reshape(n, 16 // n, FEATURES).sum(axis=2).sum(axis=0)
    np.testing.assert_allclose(
        np.asarray(strategy.reduce("SUM", value, axis=1)), expected, rtol=1e-5)


def test_reduce_accepts_op_names_and_pytrees():
    strategy = _strategy(2)
    x = _data(16)
    out = strategy.run(lambda x: {"a": x, "b": (jnp.sum(x),)}, args=(_distribute(strategy, x),))
    reduced = strategy.reduce("mean", out, axis=None)
    np.testing.assert_allclose(np.asarray(reduced["a"]), x.reshape(2, 8, 3).mean(0), rtol=RTOL)
    np.testing.assert_allclose(float(reduced["b"][0]), x.sum() / 2, rtol=1e-5)


def test_reduce_of_mirrored_value_mean_is_identity_and_sum_raises():
    strategy = _strategy(2)
    value = strategy.replicate(np.arange(3.0, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(strategy.reduce("MEAN", value)), np.arange(3.0))
    with pytest.raises(ValueError, match="SUM"):
        strategy.reduce("SUM", value)


# -- gather and local results -------------------------------------------------------------


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("n", REPLICAS)
def test_gather_axis_0_matches_numpy_without_padding(n, kind):
    strategy = _strategy(n)
    x = _data(ROWS[kind])
    value = strategy.run(_square, args=(_distribute(strategy, x),))
    gathered = np.asarray(strategy.gather(value, axis=0))
    assert gathered.shape == (ROWS[kind], FEATURES)
    np.testing.assert_allclose(gathered, x**2, rtol=RTOL)


@pytest.mark.parametrize("n", REPLICAS)
def test_gather_axis_1_concatenates_replicas(n):
    strategy = _strategy(n)
    x = _data(16)
    value = strategy.run(_square, args=(_distribute(strategy, x),))
    expected = np.concatenate(np.split(x**2, n), axis=1)
    np.testing.assert_allclose(np.asarray(strategy.gather(value, axis=1)), expected, rtol=RTOL)


@pytest.mark.parametrize("n", REPLICAS)
def test_experimental_local_results_in_replica_order(n):
    strategy = _strategy(n)
    x = _data(16)
    value = strategy.run(
        lambda x: x + 100.0 * mf.get_replica_context().replica_id_in_sync_group,
        args=(_distribute(strategy, x),))
    parts = strategy.experimental_local_results(value)
    assert isinstance(parts, tuple) and len(parts) == n
    for r, (part, rows) in enumerate(zip(parts, np.split(x, n))):
        np.testing.assert_allclose(np.asarray(part), rows + 100.0 * r, rtol=RTOL)


def test_experimental_local_results_of_plain_value_is_one_tuple():
    strategy = _strategy(2)
    value = np.ones(2, np.float32)
    assert strategy.experimental_local_results(value) == (value,)


def test_experimental_local_results_of_mirrored_value_has_one_copy_per_replica():
    strategy = _strategy(8)
    value = strategy.replicate(np.arange(3, dtype=np.float32))
    parts = strategy.experimental_local_results(value)
    assert len(parts) == 8
    assert [next(iter(p.devices())) for p in parts] == list(strategy.devices)
    for part in parts:
        np.testing.assert_array_equal(np.asarray(part), np.arange(3))


def test_replicate_returns_mirrored_values_that_print_and_act_as_arrays():
    strategy = _strategy(8)
    placed = strategy.replicate({"w": np.arange(3, dtype=np.float32)})
    assert isinstance(placed["w"], mf.Mirrored)
    assert repr(placed["w"]) == "Mirrored(float32[3], on 8 devices)"
    np.testing.assert_array_equal(np.asarray(placed["w"] * 2 + 1), np.arange(3) * 2 + 1)
    np.testing.assert_array_equal(np.asarray(jnp.dot(placed["w"], placed["w"])), 5.0)
    grads = jax.grad(lambda t: jnp.sum(t["w"] ** 2))(placed)  # a pytree node over the array
    np.testing.assert_array_equal(np.asarray(grads["w"]), 2 * np.arange(3))


# -- compile caching ------------------------------------------------------------------------


def test_run_loop_of_200_calls_compiles_fn_once():
    strategy = mf.MirroredStrategy(jax.devices()[:8])  # a fresh, empty run cache
    x = _data(16 * 3 + 11)  # the 11-row last batch pads to the same 16-row shape
    dataset = strategy.experimental_distribute_dataset(
        [x[i:i + 16] for i in range(0, len(x), 16)])
    traces = []
    compiles = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(kwargs.get("fun_name"))

    def step(w, x):
        traces.append(1)
        grads = jax.grad(lambda w: mf.compute_average_loss(jnp.sum((x * w) ** 2, axis=1)))(w)
        return w - 0.01 * mf.get_replica_context().all_reduce(mf.ReduceOp.SUM, grads)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        w = strategy.replicate(np.ones(FEATURES, np.float32))
        calls = 0
        while calls < 200:
            for batch in dataset:
                w = strategy.reduce(mf.ReduceOp.MEAN, strategy.run(step, args=(w, batch)))
                calls += 1
                if calls == 1:
                    after_first_call = len(compiles)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)

    # One trace to compile, plus two shape-only traces (no compile) on the first call: the
    # first finds the variables fn uses, both find which outputs follow the padded batch's
    # rows.
    assert len(traces) == 3
    assert strategy._runner.num_compiled == 1
    assert compiles[after_first_call:] == []  # nothing compiled after the first call
    assert sum("per_replica" in str(name) for name in compiles) == 1


# -- a custom loop equals fit -----------------------------------------------------------------


def _classification_data(rows=50, features=6, classes=3):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32) + (x[:, 2] > 1).astype(np.int32)
    return x, y


@pytest.mark.slow
@pytest.mark.parametrize("n", REPLICAS)
def test_custom_loop_matches_fit_with_partial_last_batch(n):
    x, y = _classification_data()
    batch_size, epochs = 16, 2  # 50 rows: batches of 16, 16, 16 and a partial 2
    strategy = _strategy(n)
    with strategy.scope():
        model = mf.Sequential([nn.Dense(8), nn.relu, nn.Dense(3), nn.softmax],
                              input_shape=(6,), seed=3)
    initial = jax.tree.map(np.asarray, model.params)
    loss_fn = mf.losses.get("sparse_categorical_crossentropy")
    tx = optax.sgd(0.1, momentum=0.9)  # stateful, float-only state

    model.compile(optimizer=tx, loss=loss_fn)
    model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)

    def train_step(params, opt_state, batch):
        images, labels = batch

        def loss(p):
            probs = model.module.apply({"params": p}, images, train=True)
            return mf.compute_average_loss(loss_fn(labels, probs))

        grads = mf.get_replica_context().all_reduce(mf.ReduceOp.SUM, jax.grad(loss)(params))
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    params = strategy.replicate(initial)
    opt_state = strategy.replicate(tx.init(params))
    dataset = strategy.experimental_distribute_dataset(
        [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)])
    for _ in range(epochs):
        for batch in dataset:
            per_replica = strategy.run(train_step, args=(params, opt_state, batch))
            params, opt_state = strategy.reduce(mf.ReduceOp.MEAN, per_replica, axis=None)

    assert not np.allclose(jax.tree.leaves(initial)[0], jax.tree.leaves(model.params)[0])
    fitted = jax.tree.map(np.asarray, model.params)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(fitted)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


# -- bad input ------------------------------------------------------------------------------


def test_run_non_callable_raises_type_error_naming_fn():
    with pytest.raises(TypeError, match="fn"):
        _strategy(2).run("not a function", args=())


def test_run_args_not_tuple_raises_type_error_naming_args():
    with pytest.raises(TypeError, match="args"):
        _strategy(2).run(_identity, args=np.ones(2))


@pytest.mark.parametrize("op", ["MAX", 0, None, "avg"])
def test_reduce_unknown_op_raises_value_error_naming_reduce_op(op):
    strategy = _strategy(2)
    value = strategy.run(_identity, args=(_distribute(strategy, _data(4)),))
    with pytest.raises(ValueError, match="reduce_op"):
        strategy.reduce(op, value)


@pytest.mark.parametrize("axis", [2, -3, 5])
def test_reduce_axis_outside_rank_raises_value_error_naming_axis(axis):
    strategy = _strategy(2)
    value = strategy.run(_identity, args=(_distribute(strategy, _data(4)),))  # rank 2
    with pytest.raises(ValueError, match="axis"):
        strategy.reduce("SUM", value, axis=axis)


def test_reduce_axis_0_of_scalar_per_replica_raises_value_error_naming_axis():
    strategy = _strategy(2)
    value = strategy.run(lambda x: jnp.sum(x), args=(_distribute(strategy, _data(4)),))
    with pytest.raises(ValueError, match="axis"):
        strategy.reduce("SUM", value, axis=0)


def test_gather_axis_outside_rank_raises_value_error_naming_axis():
    strategy = _strategy(2)
    value = strategy.run(_identity, args=(_distribute(strategy, _data(4)),))
    with pytest.raises(ValueError, match="axis"):
        strategy.gather(value, axis=2)


def test_replicate_non_array_leaves_raises_type_error_naming_tree():
    with pytest.raises(TypeError, match="tree"):
        _strategy(2).replicate({"w": np.ones(2), "name": "dense"})


def test_replicate_is_idempotent_and_mirrored():
    strategy = _strategy(8)
    once = strategy.replicate({"w": np.arange(4.0, dtype=np.float32)})
    twice = strategy.replicate(once)
    assert twice["w"].sharding == strategy.replicated_sharding
    assert len(twice["w"].addressable_shards) == 8
    np.testing.assert_array_equal(np.asarray(twice["w"]), np.arange(4.0))


# -- regressions: padding masks of outputs, int dtypes --------------------------------------


def test_reduce_and_gather_of_feature_vector_equal_to_per_replica_batch_size():
    strategy = _strategy(8)
    x = np.arange(11 * 2, dtype=np.float32).reshape(11, 2)  # per-replica batch 2, 2 features
    column_sums = strategy.run(_real_row_sum, args=(_distribute(strategy, x),))  # [8, 2]
    assert np.asarray(strategy.gather(column_sums, axis=0)).shape == (16,)
    np.testing.assert_allclose(float(strategy.reduce("SUM", column_sums, axis=0)), x.sum())


def test_reduce_mean_keeps_int_dtype_so_state_loop_compiles_once():
    strategy = mf.MirroredStrategy(jax.devices()[:2])
    traces = []

    def count_up(count):
        traces.append(1)
        return count + 1

    count = strategy.replicate(np.int32(0))
    for _ in range(3):
        count = strategy.reduce(mf.ReduceOp.MEAN, strategy.run(count_up, args=(count,)))
    assert count.dtype == np.int32 and int(count) == 3
    assert len(traces) == 2  # the shape-only trace that finds the variables, and the compile


@pytest.mark.slow
def test_custom_loop_without_host_reads_completes_on_8_devices():
    # Queuing many collective calls deadlocks XLA's CPU all-reduce; run/reduce keep at most
    # two in flight. A regression aborts the process ("Termination timeout for all reduce").
    strategy = mf.MirroredStrategy(jax.devices()[:8])
    state = strategy.replicate([np.zeros(4, np.float32)] * 8)
    batch = next(iter(strategy.experimental_distribute_dataset([np.ones((64, 4), np.float32)])))

    def step(state, x):
        total = mf.get_replica_context().all_reduce("SUM", jnp.sum(x, 0))
        return [v + total for v in state]

    for _ in range(1000):
        state = strategy.reduce("MEAN", strategy.run(step, args=(state, batch)))
    np.testing.assert_allclose(np.asarray(state[0]), np.full(4, 64.0 * 1000))


# -- replica functions on objects: variables read and assigned --------------------------------


def test_run_combines_assigned_variables_by_aggregation():
    strategy = _strategy(8)
    with strategy.scope():
        agreed = mf.Variable(jnp.zeros(()), aggregation="none", name="agreed")
        mean = mf.Variable(jnp.zeros(()), aggregation="mean", name="mean")
        total = mf.Variable(jnp.full((), 10.0), aggregation="sum", name="total")
        first = mf.Variable(jnp.zeros(()), aggregation="only_first_replica", name="first")
        untouched = mf.Variable(jnp.full((), 7.0), name="untouched")

    def replica_fn(x):
        replica = mf.get_replica_context().replica_id_in_sync_group
        agreed.assign(agreed + jnp.sum(mf.get_replica_context().all_reduce("SUM", x)))
        mean.assign(replica.astype(jnp.float32))
        total.assign_add(jnp.sum(x))
        first.assign(replica.astype(jnp.float32) + 1.0)
        return untouched.value

    x = _data(16)
    (batch,) = strategy.experimental_distribute_dataset([x])
    out = strategy.run(replica_fn, args=(batch,))
    np.testing.assert_allclose(agreed.numpy(), x.sum(), rtol=1e-5)
    np.testing.assert_allclose(mean.numpy(), np.mean(np.arange(8)), rtol=RTOL)
    np.testing.assert_allclose(total.numpy(), 10.0 + x.sum(), rtol=1e-5)
    assert float(first.numpy()) == 1.0
    np.testing.assert_array_equal(strategy.experimental_local_results(out), [7.0] * 8)
    for variable in (agreed, mean, total, first):
        assert variable.value.sharding == strategy.replicated_sharding


def test_run_with_variables_compiles_once_and_reads_their_current_values():
    strategy = mf.MirroredStrategy(jax.devices()[:2])  # a fresh, empty run cache
    with strategy.scope():
        count = mf.Variable(jnp.zeros((), jnp.int32), name="count")
    traces = []

    def replica_fn(x):
        traces.append(1)
        count.assign_add(1)
        return count.value + jnp.zeros_like(x[:, 0], jnp.int32)

    x = _data(4)
    for step in range(1, 21):
        out = strategy.run(replica_fn, args=(x,))
        assert int(strategy.experimental_local_results(out)[0][0]) == step
    assert int(count.numpy()) == 20
    assert len(traces) == 2  # one shape-only trace finds `count`, one compiles
    assert strategy._runner.num_compiled == 1


# -- the TF custom-training tutorial, ported with the one gradient line -----------------------
# https://www.tensorflow.org/tutorials/distribute/custom_training: a subclassed model, a loss
# averaged over the global batch with compute_average_loss plus the scaled regularization
# losses, optimizer.apply_gradients inside strategy.run, metric trackers updated in the
# replica functions and reset between epochs, @mf.function on the distributed steps.

TUTORIAL_CLASSES, TUTORIAL_BATCH, TUTORIAL_EPOCHS, L2 = 3, 16, 2, 1e-3


class _Classifier(mf.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = mf.layers.Dense(8, activation="relu",
                                      kernel_regularizer=mf.regularizers.L2(L2))
        self.classes = mf.layers.Dense(TUTORIAL_CLASSES)

    def call(self, x, training=False):
        return self.classes(self.hidden(x))


def _tutorial_data(rows, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    y = ((x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0.5)).astype(np.int32)
    return x, y


def _batches(x, y):
    return [(x[i:i + TUTORIAL_BATCH], y[i:i + TUTORIAL_BATCH])
            for i in range(0, len(x), TUTORIAL_BATCH)]


def _reference(initial, train, test):
    """The same training on one device in plain JAX: full global batches, mean loss."""

    def logits(params, x):
        w1, b1, w2, b2 = params
        return jax.nn.relu(x @ w1 + b1) @ w2 + b2

    def ce(params, x, y):
        return -jax.nn.log_softmax(logits(params, x))[jnp.arange(len(y)), y]

    def loss(params, x, y):
        return jnp.mean(ce(params, x, y)) + L2 * jnp.sum(params[0] ** 2)

    opt = mf.optimizers.Adam(0.01)
    params = [jnp.asarray(p) for p in initial]
    state = opt.init(params)
    history = []
    for _ in range(TUTORIAL_EPOCHS):
        losses, correct = [], 0
        for x, y in _batches(*train):
            correct += int(np.sum(np.asarray(logits(params, x)).argmax(-1) == y))
            value, grads = jax.value_and_grad(loss)(params, x, y)
            updates, state = opt.update(grads, state, params)
            params = optax.apply_updates(params, updates)
            losses.append(float(value))
        x, y = test
        history.append((np.mean(losses), correct / len(train[0]),
                        float(jnp.mean(ce(params, x, y))),
                        float(np.mean(np.asarray(logits(params, x)).argmax(-1) == y))))
    return params, history


@pytest.mark.parametrize("n", [1, 3, 8])
def test_tf_custom_training_tutorial_loop_equals_one_device(n):
    strategy = mf.MirroredStrategy(jax.devices()[:n])
    train, test = _tutorial_data(60, seed=0), _tutorial_data(20, seed=1)  # partial batches
    train_dist_dataset = strategy.experimental_distribute_dataset(_batches(*train))
    test_dist_dataset = strategy.experimental_distribute_dataset(_batches(*test))

    with strategy.scope():
        loss_object = mf.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                              reduction="none")

        def compute_loss(labels, predictions, model_losses):
            per_example_loss = loss_object(labels, predictions)
            loss = mf.compute_average_loss(per_example_loss)
            if model_losses:
                loss += mf.scale_regularization_loss(sum(model_losses))
            return loss

        test_loss = mf.metrics.Mean(name="test_loss")
        train_accuracy = mf.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        test_accuracy = mf.metrics.SparseCategoricalAccuracy(name="test_accuracy")
        model = _Classifier()
        model(jnp.zeros((1, 5)))
        optimizer = mf.optimizers.Adam(learning_rate=0.01)
    initial = [v.numpy() for v in model.trainable_variables]

    def train_step(inputs):
        images, labels = inputs

        def forward(images, labels):
            predictions = model(images, training=True)
            return compute_loss(labels, predictions, model.losses), predictions

        # The one line that differs from TF's `with tf.GradientTape() as tape: ...`.
        (loss, predictions), gradients = mf.value_and_grad(
            forward, model.trainable_variables, has_aux=True)(images, labels)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_accuracy.update_state(labels, predictions)
        return loss

    def test_step(inputs):
        images, labels = inputs
        predictions = model(images, training=False)
        t_loss = loss_object(labels, predictions)
        test_loss.update_state(t_loss)
        test_accuracy.update_state(labels, predictions)

    @mf.function
    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(mf.ReduceOp.SUM, per_replica_losses, axis=None)

    @mf.function
    def distributed_test_step(dataset_inputs):
        return strategy.run(test_step, args=(dataset_inputs,))

    history = []
    for _ in range(TUTORIAL_EPOCHS):
        total_loss, num_batches = 0.0, 0
        for x in train_dist_dataset:
            total_loss += distributed_train_step(x)
            num_batches += 1
        train_loss = total_loss / num_batches
        for x in test_dist_dataset:
            distributed_test_step(x)
        history.append((float(train_loss), float(train_accuracy.result()),
                        float(test_loss.result()), float(test_accuracy.result())))
        test_loss.reset_state()
        train_accuracy.reset_state()
        test_accuracy.reset_state()

    params, want = _reference(initial, train, test)
    for variable, expected in zip(model.trainable_variables, params):
        np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(history, want, rtol=1e-5)
    assert int(optimizer.iterations) == TUTORIAL_EPOCHS * 4


def test_random_layers_and_draws_differ_per_call_and_per_replica_inside_run():
    # Dropout in a model called inside the replica function, and mf.random draws, take the
    # call's key folded with the replica index: a new mask every call, and per replica.
    strategy = mf.MirroredStrategy()
    with strategy.scope():
        inputs = mf.layers.Input((6,))
        model = mf.Model(inputs, mf.layers.Dropout(0.5)(inputs))

    def replica_fn(x):
        return model(x, training=True), mf.random.normal((3,))

    batch = strategy.experimental_distribute_dataset([np.ones((16, 6), np.float32)])
    batch = next(iter(batch))
    (masks_a, draws_a), (masks_b, draws_b) = (strategy.run(replica_fn, args=(batch,))
                                              for _ in range(2))
    a, b = np.asarray(strategy.gather(masks_a, axis=0)), np.asarray(strategy.gather(masks_b, axis=0))
    assert set(np.unique(a)) <= {0.0, 2.0}  # dropout at rate 0.5 scales the kept values by 2
    assert not np.array_equal(a, b)
    assert not np.array_equal(a[:2], a[2:4])  # replicas 0 and 1 (2 rows each)
    draws = np.asarray(draws_a.values)
    assert len({tuple(row) for row in draws}) == strategy.num_replicas_in_sync
    assert not np.array_equal(draws, np.asarray(draws_b.values))


def test_run_takes_a_model_and_optimizer_created_outside_the_scope():
    # The guide: objects created outside strategy.scope() are copied to the replicas on every
    # call. Before: the first (shape-finding) trace read their arrays of the default
    # one-device mesh inside the per-replica function: JAX's "use_abstract_mesh cannot change
    # the size of the mesh".
    x, y = _data(16), _data(16, seed=1)[:, :2]

    def train(model, optimizer, strategy):
        def step(xb, yb):
            loss, grads = mf.value_and_grad(lambda: mf.compute_average_loss(
                jnp.mean((model(xb) - yb) ** 2, axis=-1)), model.trainable_variables)()
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        batch = _distribute(strategy, (x, y))
        return [float(strategy.reduce("SUM", strategy.run(step, args=batch), axis=None))
                for _ in range(2)]

    with warnings.catch_warnings():  # "created outside any strategy.scope()", once per process
        warnings.simplefilter("ignore", mf.MirrorfitWarning)
        outside = mf.Sequential([mf.layers.Input((FEATURES,)), mf.layers.Dense(2)])
    losses = train(outside, mf.optimizers.SGD(0.1), mirrored_strategy(8))
    with mirrored_strategy(8).scope():  # the same run, all mirrored
        inside = mf.Sequential([mf.layers.Input((FEATURES,)), mf.layers.Dense(2)])
        optimizer = mf.optimizers.SGD(0.1)
    np.testing.assert_allclose(losses, train(inside, optimizer, mirrored_strategy(8)),
                               rtol=1e-6)
    for a, b in zip(outside.get_weights(), inside.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert losses[1] < losses[0]
