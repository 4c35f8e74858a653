"""Tests for Model.fit: replica parity, replication, one compile, no deadlock, logs and inputs.

Compiling is the expensive part of these tests, so the parity runs are built once
(`_train`, cached) and the other assertions about them (replication, per-replica shard
size, compile counts) reuse them.
"""

import functools
import math
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.extend.core import Primitive

import mirrorfit as mf
from mirrorfit._src.layers import auto_config
from mirrorfit._src.trainers import data_adapters, sharded_state, step_cost
from mirrorfit._src.trainers.state import TrainState
from mirrorfit._src.distribute.batch import place_batches
from mirrorfit._src.distribute import strategy as strategy_lib
from tests.helpers import all_reduce_operands, count_step_compiles, mirrored_strategy, tree_equal

NUM_FEATURES, NUM_CLASSES = 12, 4
_rng = np.random.default_rng(0)
X = _rng.normal(size=(203, NUM_FEATURES)).astype(np.float32)
Y = _rng.integers(0, NUM_CLASSES, size=203).astype(np.int32)
# f32 training on 1 vs N replicas: sums are reduced in a different order, so params agree
# to rounding (rtol), and elements that are ~0 need a small atol.
RTOL, ATOL = 1e-5, 1e-6


class RowsPerReplica(mf.metrics.Metric):
    """Rows of the global batch that one replica's step sees (sum of rows / sum of replicas)."""

    def update(self, y_true, y_pred, sample_weight):
        return {"rows": jnp.float32(y_true.shape[0]), "replicas": jnp.float32(1.0)}

    def result(self, stats):
        return mf.metrics.divide_no_nan(stats["rows"], stats["replicas"])


def _mlp(n, *, optimizer=None, steps_per_execution=1, metrics=("accuracy",), seed=0):
    """A 12 -> 16 -> 4 softmax MLP mirrored on the first ``n`` devices."""
    with mirrored_strategy(n).scope():
        model = mf.Sequential([nn.Dense(16), nn.relu, nn.Dense(NUM_CLASSES), nn.softmax],
                              input_shape=(NUM_FEATURES,), seed=seed)
        model.compile(optimizer or optax.sgd(0.1, momentum=0.9),
                      "sparse_categorical_crossentropy", metrics=list(metrics),
                      steps_per_execution=steps_per_execution)
    return model


def _fit_counting(model, x, y, **kwargs):
    with count_step_compiles() as count:
        history = model.fit(x, y, shuffle=False, verbose=0, **kwargs)
    return history, count[0]


# (rows, global batch, epochs) of the parity runs, fitted one after the other.
PHASES = (
    (192, 32, 4),  # 24 steps; 32 divides 1, 2, 4 and 8 replicas (padded to 33 on 3)
    (203, 32, 3),  # 21 steps, the last with 11 rows: a partial last batch
    (203, 20, 2),  # 22 steps; 20 divides neither 3 nor 8 replicas (padded to 21 / 24)
)
INDIVISIBLE = (1, 3, 8)  # replica counts that also run the third phase


@functools.cache
def _train(n, steps_per_execution=1):
    """Trains the MLP on ``n`` replicas through `PHASES`.

    Returns:
        (model, initial weights, one History per phase, train-step compiles per phase,
        weights after each phase).
    """
    model = _mlp(n, steps_per_execution=steps_per_execution,
                 metrics=("accuracy", RowsPerReplica("rows_per_replica")))
    initial = model.get_weights()
    phases = PHASES if n in INDIVISIBLE and steps_per_execution == 1 else PHASES[:2]
    histories, compiles, snapshots = [], [], []
    for rows, batch_size, epochs in phases:
        history, count = _fit_counting(model, X[:rows], Y[:rows], batch_size=batch_size,
                                       epochs=epochs)
        histories.append(history)
        compiles.append(count)
        snapshots.append(model.get_weights())
    return model, initial, histories, compiles, snapshots


# -- 1. parity between 1 and N replicas -----------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_params_match_single_replica_with_full_and_partial_last_batch(n, allclose):
    _, initial1, hist1, _, snaps1 = _train(1)
    _, initialn, histn, _, snapsn = _train(n)
    allclose(initialn, initial1, rtol=0)  # same seed, same init
    # After 24 steps over full batches only, then after 21 more with a partial last batch.
    for phase in range(2):
        allclose(snapsn[phase], snaps1[phase], rtol=RTOL, atol=ATOL)
        assert not np.allclose(snapsn[phase][1], (snaps1[phase - 1] if phase else initial1)[1])
        np.testing.assert_allclose(histn[phase].history["loss"], hist1[phase].history["loss"],
                                   rtol=RTOL)
        assert histn[phase].history["accuracy"] == pytest.approx(
            hist1[phase].history["accuracy"], rel=1e-6)


@pytest.mark.parametrize("n", [3, 8])
def test_params_match_single_replica_when_global_batch_not_divisible(n, allclose):
    _, _, hist1, _, snaps1 = _train(1)
    _, _, histn, _, snapsn = _train(n)
    allclose(snapsn[2], snaps1[2], rtol=RTOL, atol=ATOL)
    assert not np.allclose(snapsn[2][1], snaps1[1][1])
    np.testing.assert_allclose(histn[2].history["loss"], hist1[2].history["loss"], rtol=RTOL)


def _keras_sparse_ce(params, x, y):
    """Mean Keras sparse CE of the MLP on (x, y): softmax, renormalize, clip 1e-7, -log."""
    h = jax.nn.relu(x @ params["layers_0"]["kernel"] + params["layers_0"]["bias"])
    p = jax.nn.softmax(h @ params["layers_2"]["kernel"] + params["layers_2"]["bias"])
    p = jnp.clip(p / p.sum(-1, keepdims=True), 1e-7, 1 - 1e-7)
    return -jnp.mean(jnp.log(jnp.take_along_axis(p, y[:, None], axis=1)))


def test_params_match_plain_single_device_sgd_reference(allclose):
    """A hand-written single-device SGD (momentum 0.9) loop over the same batches."""
    _, initial, _, _, snaps = _train(8)

    def as_params(w):  # get_weights order: per layer kernel, then bias (as Keras)
        return {"layers_0": {"kernel": w[0], "bias": w[1]},
                "layers_2": {"kernel": w[2], "bias": w[3]}}

    params = as_params(initial)
    tx = optax.sgd(0.1, momentum=0.9)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, x, y):
        grads = jax.grad(_keras_sparse_ce)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    for phase, (rows, batch_size, epochs) in enumerate(PHASES):
        for _ in range(epochs):
            for start in range(0, rows, batch_size):
                stop = min(start + batch_size, rows)
                params, opt_state = step(params, opt_state, X[start:stop], Y[start:stop])
        allclose(as_params(snaps[phase]), params, rtol=RTOL, atol=ATOL)


# -- 2. replication and shard size --------------------------------------------------------


@pytest.mark.parametrize("n", [3, 8])
def test_params_and_opt_state_stay_replicated_on_strategy_devices(n):
    model = _train(n)[0]
    devices = set(model.strategy.devices)
    assert len(devices) == n
    assert len(jax.tree.leaves(model.opt_state)) > 0  # momentum traces
    for leaf in jax.tree.leaves((model.params, model.opt_state)):
        assert leaf.sharding.is_fully_replicated
        assert leaf.sharding.device_set == devices
        first = np.asarray(leaf.addressable_shards[0].data)
        for shard in leaf.addressable_shards[1:]:  # mirrored: the same values everywhere
            np.testing.assert_array_equal(np.asarray(shard.data), first)


@pytest.mark.parametrize("n, rows", [
    (1, [32, 32, 20]), (2, [16, 16]), (3, [11, 11, 7]), (4, [8, 8]), (8, [4, 4, 3]),
])
def test_each_replica_step_sees_global_batch_over_replicas_rows(n, rows):
    # Global batches of 32 and 20 rows, padded up to a multiple of n when needed
    # (33 on 3 replicas; 21 and 24 for 20 rows on 3 and 8).
    histories = _train(n)[2]
    assert [h.history["rows_per_replica"] for h in histories] == [
        [r] * len(h.epoch) for r, h in zip(rows, histories)]


# -- 4. one compile -----------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 8])
def test_train_step_compiles_once_per_fit_including_partial_last_batch(n):
    # Each fit compiles the train step at most once, although 2 of the 3 fits end with a
    # partial batch (padded, not recompiled). The second fit has new data (203 rows) with
    # the first one's batch shape: no compile at all. The third has a new batch size.
    assert _train(n)[3] == [1, 0, 1]


def test_steps_per_execution_compiles_once_and_matches_single_steps(allclose):
    # 6 steps per epoch (groups 4 + 2), then 7 (4 + 3): partial last groups in both fits.
    model, _, hist, compiles, snaps = _train(8, steps_per_execution=4)
    ref, _, ref_hist, _, ref_snaps = _train(8)
    assert compiles == [1, 0]
    for phase in range(2):
        allclose(snaps[phase], ref_snaps[phase], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(hist[phase].history["loss"], ref_hist[phase].history["loss"],
                                   rtol=RTOL)
    assert int(model.state.step) == 4 * 6 + 3 * 7


# -- compiled step: what it costs per replica ---------------------------------------------


def test_train_step_all_reduces_statistics_as_one_operand():
    # XLA:CPU rendezvous once per all-reduce operand: one per gradient leaf, one for all
    # statistics (loss, accuracy, not-probabilities count), and nothing else.
    model = _mlp(2)
    model.fit(X[:32], Y[:32], batch_size=32, epochs=1, verbose=0)
    trainer = model.trainer
    data = data_adapters.get_data_adapter(X, Y, batch_size=32, num_replicas=2)
    batch = next(place_batches(data.batches(0), model.strategy))
    statistics = trainer._fresh_statistics(model.state, batch)
    hlo = trainer.train_fn.lower(model.state, statistics, batch).compile().as_text()
    all_reduces = all_reduce_operands(hlo)
    assert len(all_reduces) == 1
    assert len(all_reduces[0]) == len(jax.tree.leaves(model.params)) + 1


def test_a_second_fit_runs_only_its_steps_on_the_devices(monkeypatch):
    # Between a fit's steps the devices wait for the host: a second fit (same shapes) binds
    # no JAX primitive (no eager op such as a copy of the params at its end, no trace),
    # places no statistics (each epoch starts from the zeros placed once) and walks no state
    # for the step's out specs (they matter only to compile), for its shapes (read by
    # train_step_cost only) or for variables to track (when a step's state is assigned).
    model = _mlp(2)
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0)
    before = jax.device_get(model.state)
    bound, placed, walks = [], [], []
    bind, replicate, shapes_of, flat_values = (
        Primitive.bind, type(model.strategy).replicate_arrays, step_cost.shapes_of,
        auto_config.flat_values)
    monkeypatch.setattr(Primitive, "bind", lambda p, *a, **k: bound.append(p.name) or bind(
        p, *a, **k))
    monkeypatch.setattr(type(model.strategy), "replicate_arrays", lambda self, tree: placed.append(
        jax.tree.structure(tree)) or replicate(self, tree))
    monkeypatch.setattr(sharded_state, "state_out_specs", lambda *a: walks.append("out specs"))
    monkeypatch.setattr(step_cost, "shapes_of", lambda args: shapes_of(args) if not any(
        isinstance(a, TrainState) for a in args) else walks.append("shapes"))
    monkeypatch.setattr(auto_config, "flat_values", lambda value: flat_values(value) if not
                        isinstance(value, TrainState) else iter(walks.append("variables") or ()))
    history = model.fit(X, Y, batch_size=32, epochs=3, verbose=0)
    assert (bound, placed, walks) == ([], [], [])
    monkeypatch.undo()
    # Bitwise what a new model from the same state (its zeros placed anew) trains.
    again = _mlp(2)
    again.assign_state(**before._asdict())
    tree_equal(again.fit(X, Y, batch_size=32, epochs=3, verbose=0).history, history.history)
    tree_equal(again.get_weights(), model.get_weights())


def test_arrays_next_epoch_first_batch_is_read_before_waiting_for_the_epoch_logs(
        monkeypatch):
    # The wait for an epoch's logs (a fetch of its statistics) would leave the devices idle
    # while the host gathered and placed the next epoch's first batch: it is read before.
    events = []
    gather, fetch = data_adapters.ArrayDataAdapter._gather, type(mirrored_strategy(2)).fetch
    monkeypatch.setattr(data_adapters.ArrayDataAdapter, "_gather",
                        lambda *a: events.append("batch") or gather(*a))
    monkeypatch.setattr(type(mirrored_strategy(2)), "fetch",
                        lambda self, tree: events.append("fetch") or fetch(self, tree))
    model = _mlp(2)
    history = model.fit(X[:64], Y[:64], batch_size=32, epochs=2, verbose=0)
    assert events == ["batch", "batch", "batch", "fetch", "batch", "fetch"]
    monkeypatch.undo()
    # The same shuffled batches as one epoch per fit call (nothing read ahead there).
    once = _mlp(2)
    losses = [once.fit(X[:64], Y[:64], batch_size=32, epochs=e + 1, initial_epoch=e,
                       verbose=0).history["loss"][0] for e in range(2)]
    assert losses == history.history["loss"]
    tree_equal(once.get_weights(), model.get_weights())


@pytest.mark.slow
def test_small_or_aligned_one_device_batches_reach_the_step_as_numpy_and_train_the_same(
        monkeypatch):
    # One device: a batch of at most HOST_BATCH_BYTES, or one in aligned buffers on a CPU
    # device, goes into the step unplaced (its call transfers it); other large batches and
    # several replicas are placed on the mesh first.
    from mirrorfit._src.distribute import batch as batch_lib
    raw = batch_lib.host_buffer((X.size + 1,), np.float32)
    unaligned = raw[1:].reshape(X.shape)  # 4 bytes past a 64-byte boundary
    unaligned[:] = X
    one, two = mirrored_strategy(1), mirrored_strategy(2)

    def first(x, num_replicas=1, strategy=one, shuffle=False):
        data = data_adapters.get_data_adapter(x, Y, batch_size=32, num_replicas=num_replicas,
                                              shuffle=shuffle)
        return next(place_batches(data.batches(0), strategy))

    small = first(unaligned)
    assert isinstance(small.x, np.ndarray) and isinstance(small.mask, np.ndarray)
    assert isinstance(first(X, 2, two).x, jax.Array)
    monkeypatch.setattr(batch_lib, "HOST_BATCH_BYTES", small.x.nbytes - 1)
    large = first(unaligned)
    assert isinstance(large.x, jax.Array) and large.x.sharding == one.batch_sharding
    monkeypatch.setattr(batch_lib, "ALIGNED_MIN_BYTES", 0)  # align even this small data
    assert isinstance(first(X, shuffle=True).x, np.ndarray)  # gathered into aligned buffers

    # Trained on a device other than the default one, unplaced batches give the params the
    # placed ones give, bit for bit, and the state stays on the strategy's device.
    def fit():
        with mf.MirroredStrategy([jax.devices()[5]]).scope():
            model = mf.Sequential([nn.Dense(16), nn.relu, nn.Dense(NUM_CLASSES), nn.softmax],
                                  input_shape=(NUM_FEATURES,), seed=0)
            model.compile(optax.adam(1e-2), "sparse_categorical_crossentropy",
                          metrics=["accuracy"])
        history = model.fit(X[:100], Y[:100], batch_size=32, epochs=2, verbose=0)
        assert {d for leaf in jax.tree.leaves(model.params) for d in leaf.devices()} == {
            jax.devices()[5]}
        return history.history, jax.tree.map(np.asarray, model.params)

    unplaced_logs, unplaced = fit()
    monkeypatch.setattr(batch_lib, "takes_host_batch", lambda mesh, tree: False)
    placed_logs, placed = fit()
    assert unplaced_logs == placed_logs
    tree_equal(unplaced, placed)


def test_gathered_and_stacked_batches_are_placed_on_a_cpu_device_without_a_copy(monkeypatch):
    # Shuffled array batches (one step or a steps_per_execution group) and stacked generator
    # batches are built in 64-byte-aligned buffers, which XLA's CPU client uses in place;
    # below ALIGNED_MIN_BYTES (all of this small data, so it is lowered) NumPy allocates them.
    from mirrorfit._src.distribute import batch as batch_lib
    monkeypatch.setattr(batch_lib, "ALIGNED_MIN_BYTES", 0)

    def generator():
        for start in range(0, 96, 32):
            yield X[start:start + 32], Y[start:start + 32]

    one = mirrored_strategy(1)
    array_data = data_adapters.get_data_adapter(X, Y, batch_size=32, num_replicas=1,
                                                shuffle=True)
    host = [*array_data.batches(0), *array_data.batches(1, group=2),
            *data_adapters.get_data_adapter(generator(), batch_size=None,
                                            num_replicas=1).batches(0, group=3)]
    for batch in host:
        for leaf in (batch.x, batch.y):
            assert leaf.ctypes.data % 64 == 0
        placed = one.shard_batch(batch.x, leading_axes=batch.x.ndim - 2)
        assert placed.addressable_shards[0].data.unsafe_buffer_pointer() == batch.x.ctypes.data
    order = array_data.epoch_order(1)
    np.testing.assert_array_equal(host[7].x[1], X[order[32:64]])  # group 2 of epoch 1, step 2
    np.testing.assert_array_equal(host[-1].y[2], Y[64:96])


def test_batch_logs_stay_readable_after_later_steps():
    # A callback may keep a batch's logs and read them after the next steps ran: the
    # accumulators of a step are not donated to the next one.
    kept = []

    class Keep(mf.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            kept.append(logs)

    model = _mlp(2)
    history = model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[Keep()],
                        shuffle=False)
    losses = [logs["loss"] for logs in kept]
    assert len(losses) == 7 and all(math.isfinite(v) for v in losses)
    assert losses[-1] == pytest.approx(history.history["loss"][0], rel=1e-6)


# -- 5. no deadlock -----------------------------------------------------------------------


@pytest.mark.slow
def test_two_thousand_steps_over_eight_devices_complete():
    with mirrored_strategy(8).scope():
        model = mf.Sequential([nn.Dense(2), nn.softmax], input_shape=(4,))
        model.compile(optax.sgd(0.01), "sparse_categorical_crossentropy")
    x = np.random.default_rng(1).normal(size=(16000, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert int(model.state.step) == 2000
    assert math.isfinite(history.history["loss"][0])


# -- logs: NaN, History, verbose, warnings ----------------------------------------------


@pytest.fixture(scope="module")
def sgd_model():
    """A plain-SGD MLP on 3 replicas (stateless optimizer: set_weights resets training)."""
    model = _mlp(3, optimizer=optax.sgd(0.1))
    return model, model.get_weights()


def test_nan_loss_is_reported_as_nan(sgd_model):
    model, initial = sgd_model
    model.set_weights(initial)
    x = X.copy()
    x[5, 0] = np.inf
    history = model.fit(x, Y, batch_size=24, epochs=2, verbose=0, shuffle=False)
    assert math.isnan(history.history["loss"][0]) and math.isnan(history.history["loss"][1])


def test_history_has_loss_metrics_val_keys_and_epoch_numbers(sgd_model):
    model, initial = sgd_model
    model.set_weights(initial)
    history = model.fit(X, Y, batch_size=24, epochs=3, initial_epoch=1, validation_split=0.2,
                        shuffle=False, verbose=0)
    assert isinstance(history, mf.History)
    assert model.history is history
    assert history.epoch == [1, 2]
    assert list(history.history) == ["loss", "accuracy", "val_loss", "val_accuracy"]
    for values in history.history.values():
        assert len(values) == 2 and all(isinstance(v, float) for v in values)
    # Keras' validation_split holds out the last 20% of rows (int(203 * 0.2) = 40).
    val = model.evaluate(X[-40:], Y[-40:], batch_size=24, verbose=0, return_dict=True)
    assert history.history["val_loss"][-1] == pytest.approx(val["loss"], rel=1e-6)
    assert history.history["val_accuracy"][-1] == pytest.approx(val["accuracy"], rel=1e-6)


def test_validation_freq_validates_every_nth_epoch(sgd_model):
    model, initial = sgd_model
    model.set_weights(initial)
    history = model.fit(X[:160], Y[:160], batch_size=24, epochs=4, shuffle=False, verbose=0,
                        validation_data=(X[160:], Y[160:]), validation_freq=2)
    assert history.epoch == [0, 1, 2, 3]
    assert len(history.history["loss"]) == 4
    assert len(history.history["val_loss"]) == 2


def test_verbose_2_prints_one_line_per_epoch(sgd_model, capsys):
    model, initial = sgd_model
    model.set_weights(initial)
    model.fit(X, Y, batch_size=24, epochs=2, shuffle=False, verbose=2)
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 2
    for epoch, line in enumerate(lines, start=1):
        assert line.startswith(f"Epoch {epoch}/2")
        assert 0 < line.index("loss: ") < line.index("accuracy: ")
    assert "step" not in err  # no progress bar


def test_verbose_0_is_silent(sgd_model, capsys):
    model, initial = sgd_model
    model.set_weights(initial)
    model.fit(X, Y, batch_size=24, epochs=2, shuffle=False, verbose=0)
    model.evaluate(X, Y, batch_size=24, verbose=0)
    model.predict(X, batch_size=24, verbose=0)
    assert capsys.readouterr() == ("", "")


def test_verbose_1_shows_a_progress_bar_per_epoch(sgd_model, capsys):
    model, initial = sgd_model
    model.set_weights(initial)
    model.fit(X, Y, batch_size=24, epochs=2, shuffle=False, verbose=1)
    out, err = capsys.readouterr()
    assert out == ""
    assert "Epoch 1/2" in err and "Epoch 2/2" in err
    assert "9/9" in err  # ceil(203 / 24) steps per epoch
    assert "loss=" in err or "loss: " in err


def test_outside_scope_model_warns_once_naming_scope(monkeypatch):
    monkeypatch.setattr(strategy_lib, "_warned_outside_scope", False)
    module = nn.Sequential([nn.Dense(2)])
    with pytest.warns(UserWarning, match=r"scope\(\)") as record:
        model = mf.Model(module)
    assert sum("scope()" in str(w.message) for w in record) == 1
    assert "8 devices" in str(record[0].message)
    assert model.strategy.num_replicas_in_sync == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mf.Model(module)  # second model outside the scope: no second warning
        monkeypatch.setattr(strategy_lib, "_warned_outside_scope", False)
        with mirrored_strategy(8).scope():
            mf.Model(module)  # inside a scope: no warning


def test_outputs_that_are_not_probabilities_warn_once():
    with mirrored_strategy(2).scope():
        model = mf.Sequential([nn.Dense(NUM_CLASSES)], input_shape=(NUM_FEATURES,))
        model.compile(optax.sgd(0.01), mf.losses.SparseCategoricalCrossentropy(from_logits=False))
    x = X * 10.0  # logits far outside [0, 1]
    with pytest.warns(UserWarning, match="from_logits") as record:
        model.fit(x, Y, batch_size=32, epochs=2, verbose=0)
    assert sum("from_logits" in str(w.message) for w in record) == 1


def test_probability_outputs_do_not_warn(sgd_model):
    model, initial = sgd_model
    model.set_weights(initial)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(X, Y, batch_size=24, epochs=1, verbose=0)


# -- inputs: multi-input, iterables ------------------------------------------------------


class _TupleInputs(nn.Module):
    @nn.compact
    def __call__(self, a, b, c):
        return nn.softmax(nn.Dense(3)(jnp.concatenate([a, b, c], axis=-1)))


class _DictInputs(nn.Module):
    @nn.compact
    def __call__(self, inputs):
        x = jnp.concatenate([inputs["a"], inputs["b"], inputs["c"]], axis=-1)
        return nn.softmax(nn.Dense(3)(x))


class _TwoInputs(nn.Module):
    @nn.compact
    def __call__(self, a, b):
        return nn.softmax(nn.Dense(3)(jnp.concatenate([a, b], axis=-1)))


def test_tuple_and_dict_inputs_train_the_same_as_each_other(allclose):
    parts = (X[:, :5], X[:, 5:9], X[:, 9:])
    models = {}
    with mirrored_strategy(8).scope():
        for name, module, x, shape in (
            ("tuple", _TupleInputs(), parts, ((5,), (4,), (3,))),
            ("dict", _DictInputs(), dict(zip("abc", parts)), {"a": (5,), "b": (4,), "c": (3,)}),
        ):
            model = mf.Model(module, input_shape=shape)
            model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy", ["accuracy"])
            initial = model.get_weights()
            history = model.fit(x, Y % 3, batch_size=20, epochs=2, shuffle=False, verbose=0)
            models[name] = (model, initial, history, x)
    allclose(models["tuple"][1], models["dict"][1], rtol=0)  # one Dense over the concat
    allclose(models["tuple"][0].get_weights(), models["dict"][0].get_weights(), rtol=1e-6)
    assert not np.allclose(models["tuple"][0].get_weights()[1], models["tuple"][1][1])
    loss = models["dict"][2].history["loss"]
    assert loss[1] < loss[0]
    preds = [m.predict(x, batch_size=20, verbose=0) for m, _, _, x in models.values()]
    assert preds[0].shape == (len(X), 3)
    np.testing.assert_allclose(preds[0], preds[1], rtol=1e-6)


def test_two_tuple_inputs_fit_then_predict():
    with mirrored_strategy(2).scope():
        model = mf.Model(_TwoInputs(), input_shape=((5,), (7,)))
        model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy")
    x = (X[:, :5], X[:, 5:])
    model.fit(x, Y % 3, batch_size=20, verbose=0)
    assert model.predict(x, verbose=0).shape == (len(X), 3)


def test_list_input_shape_accepts_tuple_of_inputs():
    with mirrored_strategy(2).scope():
        model = mf.Model(_TupleInputs(), input_shape=[(5,), (4,), (3,)])
        model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy")
    history = model.fit((X[:, :5], X[:, 5:9], X[:, 9:]), Y % 3, batch_size=20, verbose=0)
    assert math.isfinite(history.history["loss"][0])


def _batches(x, y, batch_size, w=None):
    for start in range(0, len(x), batch_size):
        sl = slice(start, start + batch_size)
        yield (x[sl], y[sl]) if w is None else (x[sl], y[sl], w[sl])


def test_generator_with_steps_per_epoch_equals_array_input(sgd_model, allclose):
    model, initial = sgd_model
    x, y = X[:100], Y[:100]  # batches of 24, 24, 24, 24 and 4 rows
    model.set_weights(initial)
    from_arrays = model.fit(x, y, batch_size=24, epochs=1, shuffle=False, verbose=0)
    expected = model.get_weights()
    model.set_weights(initial)
    from_gen = model.fit(_batches(x, y, 24), steps_per_epoch=5, epochs=1, verbose=0)
    allclose(model.get_weights(), expected, rtol=1e-6)
    assert from_gen.history["loss"] == pytest.approx(from_arrays.history["loss"], rel=1e-6)


class _Batches:
    """A re-iterable of batches, like a dataset object."""

    def __init__(self, *arrays, batch_size):
        self.arrays, self.batch_size = arrays, batch_size

    def __iter__(self):
        return _batches(*self.arrays[:2], self.batch_size, *self.arrays[2:])


@pytest.mark.parametrize("container", ["list", "dataset"])
def test_weighted_reiterable_of_batches_over_epochs_equals_array_input(container, sgd_model,
                                                                       allclose):
    model, initial = sgd_model
    x, y = X[:100], Y[:100]
    w = np.linspace(0.1, 2.0, 100).astype(np.float32)
    model.set_weights(initial)
    from_arrays = model.fit(x, y, batch_size=24, epochs=2, shuffle=False, sample_weight=w,
                            verbose=0)
    expected = model.get_weights()
    model.set_weights(initial)
    # Re-iterable, no steps_per_epoch: each epoch is one pass from the first batch.
    batches = _Batches(x, y, w, batch_size=24)
    from_iterable = model.fit(list(batches) if container == "list" else batches, epochs=2,
                              verbose=0)
    allclose(model.get_weights(), expected, rtol=1e-6)
    assert from_iterable.history.keys() == from_arrays.history.keys()
    for key, values in from_arrays.history.items():
        np.testing.assert_allclose(from_iterable.history[key], values, rtol=1e-6)


def test_generator_continues_across_epochs_with_steps_per_epoch(sgd_model, allclose):
    model, initial = sgd_model
    x, y = X[:96], Y[:96]
    model.set_weights(initial)
    model.fit(x, y, batch_size=24, epochs=1, shuffle=False, verbose=0)
    expected = model.get_weights()
    model.set_weights(initial)
    # 2 epochs of 2 steps from one generator: it must continue, not restart.
    history = model.fit(_batches(x, y, 24), steps_per_epoch=2, epochs=2, verbose=0)
    assert history.epoch == [0, 1]
    allclose(model.get_weights(), expected, rtol=1e-6)
