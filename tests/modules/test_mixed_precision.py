"""Tests for mf.mixed_precision (policies) and mf.optimizers.LossScaleOptimizer through fit:
dtypes inside and outside the compiled step, replica-count agreement, skipped overflow steps,
scale growth, and a float16 kill-and-resume (tests/callbacks/resume_harness.py)."""

import functools
import json
import signal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import mirrorfit as mf
from mirrorfit._src.distribute.batch import place_batches
from mirrorfit._src.modules import adapters, mixed_precision
from mirrorfit._src.trainers import data_adapters
from tests.callbacks.resume_harness import assert_same_result, backup_steps, finish, result, start
from tests.helpers import all_reduce_operands, cuda_ops, mirrored_strategy, tree_equal

LSO = mf.optimizers.LossScaleOptimizer


@pytest.fixture(autouse=True)
def _float32_global_policy():
    yield
    mf.mixed_precision.set_global_policy("float32")


def _mlp(n, policy, optimizer, *, batch_norm=False, hidden=32, **compile_kwargs):
    layers = [nn.Dense(hidden), nn.BatchNorm(), nn.relu] if batch_norm else [nn.Dense(hidden),
                                                                             nn.relu]
    with mirrored_strategy(n).scope():
        model = mf.Sequential([*layers, nn.Dense(10), nn.softmax], input_shape=(64,), seed=3,
                              dtype_policy=policy)
        model.compile(optimizer, "sparse_categorical_crossentropy", ["accuracy"],
                      **compile_kwargs)
    return model


def _digits():
    x, y = load_digits(return_X_y=True)
    return train_test_split((x / 16.0).astype(np.float32), y.astype(np.int32), test_size=0.25,
                            random_state=0)


@pytest.mark.parametrize("name, compute, variable", [
    ("float32", "float32", "float32"), ("mixed_bfloat16", "bfloat16", "float32"),
    ("mixed_float16", "float16", "float32"), ("bfloat16", "bfloat16", "bfloat16"),
    ("float16", "float16", "float16")])
def test_policy_dtypes_match_keras_for_each_name(name, compute, variable):
    policy = mf.mixed_precision.Policy(name)
    assert (policy.name, policy.compute_dtype, policy.variable_dtype) == (name, compute, variable)
    assert policy == mf.mixed_precision.Policy.from_config(policy.get_config())


def test_policy_rejects_unknown_names_and_non_strings():
    with pytest.raises(ValueError, match="mixed_bfloat16.*Received: name='mixed_bf16'"):
        mf.mixed_precision.Policy("mixed_bf16")
    with pytest.raises(TypeError, match="Received: name=16"):
        mf.mixed_precision.Policy(16)
    with pytest.raises(TypeError, match="dtype_policy must be"):
        mf.Model(nn.Dense(2), dtype_policy=jnp.bfloat16)


def test_global_policy_applies_to_models_created_after_it_unless_overridden():
    assert mf.mixed_precision.global_policy().name == "float32"
    mf.mixed_precision.set_global_policy("mixed_bfloat16")
    assert mf.mixed_precision.Policy().name == "mixed_bfloat16"
    with mirrored_strategy(1).scope():
        assert mf.Model(nn.Dense(2)).dtype_policy.name == "mixed_bfloat16"
        assert mf.Model(nn.Dense(2), dtype_policy="float32").dtype_policy.name == "float32"


@pytest.mark.slow
def test_bf16_policy_trains_digits_mlp_to_095_test_accuracy():
    x_train, x_test, y_train, y_test = _digits()
    model = _mlp(2, "mixed_bfloat16", mf.optimizers.Adam(1e-2), hidden=128)  # as digits.py
    model.fit(x_train, y_train, batch_size=128, epochs=6, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, batch_size=450, verbose=0)
    assert accuracy >= 0.95


def _compiled_train_step(model, x, y, batch_size):
    """The HLO text of ``model``'s compiled train step (after a fit) for batches of x, y."""
    data = data_adapters.get_data_adapter(x, y, batch_size=batch_size,
                                          num_replicas=model.strategy.num_replicas_in_sync)
    batch = next(place_batches(data.batches(0), model.strategy))
    statistics = model.trainer._fresh_statistics(model.state, batch)
    return model.trainer.train_fn.lower(model.state, statistics, batch)


@pytest.mark.slow
def test_bf16_policy_keeps_float32_state_and_computes_matmuls_in_bf16():
    x, y = _digits()[0][:64], _digits()[2][:64]
    model = _mlp(2, "mixed_bfloat16", "adam", batch_norm=True)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    state = model.state
    floats = [leaf for leaf in jax.tree.leaves((state.params, state.model_state, state.opt_state))
              if jnp.issubdtype(leaf.dtype, jnp.floating)]
    assert floats and all(leaf.dtype == jnp.float32 for leaf in floats)  # BatchNorm stats too
    hlo = _compiled_train_step(model, x, y, 32).as_text()
    dots = [line for line in hlo.splitlines() if "dot_general" in line]
    # forward of both Dense layers, then both kernel gradients and the hidden activation's
    # gradient: all five on bf16 operands with bf16 results
    assert len(dots) == 5 and all("bf16" in line and "f32" not in line.split(":")[-1]
                                  for line in dots), dots
    assert model.predict(x[:5], verbose=0).dtype == np.float32


@pytest.mark.slow
def test_bf16_policy_one_and_eight_replicas_agree_within_bf16_rounding(allclose):
    x, y = _digits()[0][:128], _digits()[2][:128]
    weights = []
    for n in (1, 8):
        model = _mlp(n, "mixed_bfloat16", mf.optimizers.SGD(0.1))
        model.fit(x, y, batch_size=64, epochs=1, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    # 2 SGD steps: each replica's bf16 partial sums round differently from one device's,
    # by about bf16's epsilon (2**-8) relative; after 2 steps of lr 0.1 that is < 1e-3.
    allclose(weights[0], weights[1], rtol=0, atol=1e-3)
    assert not all(np.array_equal(a, b) for a, b in zip(*weights))  # bf16 is really used


def test_mixed_float16_compile_wraps_optimizer_with_keras_defaults():
    def compiled_optimizer(policy, optimizer, **kwargs):
        with mirrored_strategy(1).scope():
            model = mf.Model(nn.Dense(2), dtype_policy=policy)  # unbuilt: nothing to compile
        model.compile(optimizer, "mse", **kwargs)
        return model.trainer.config.optimizer

    optimizer = compiled_optimizer("mixed_float16", "adam")
    assert isinstance(optimizer, LSO) and isinstance(optimizer.inner_optimizer,
                                                     mf.optimizers.Adam)
    assert (optimizer.initial_scale, optimizer.dynamic_growth_steps) == (2.0**15, 2000)
    assert not isinstance(compiled_optimizer("mixed_float16", "adam", auto_scale_loss=False),
                          LSO)
    explicit = LSO(mf.optimizers.SGD(), initial_scale=8.0)
    assert compiled_optimizer("mixed_float16", explicit) is explicit
    assert not isinstance(compiled_optimizer("mixed_bfloat16", "adam"), LSO)


@pytest.mark.slow
def test_loss_scaling_with_finite_grads_matches_the_unscaled_optimizer(allclose):
    # A power-of-two scale and global batch: scaling and unscaling are exact in float32; XLA
    # fuses the two programs differently, which leaves float32 rounding (a few ulp).
    x, y = _digits()[0][:128], _digits()[2][:128]
    weights = []
    for optimizer in (mf.optimizers.Adam(), LSO(mf.optimizers.Adam(), initial_scale=2.0**20)):
        model = _mlp(2, "float32", optimizer)
        model.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    allclose(weights[0], weights[1], rtol=1e-6, atol=1e-9)


class _Recorder(mf.callbacks.Callback):
    """Host copies, after every train step, of each device's state and the logged scale."""

    def __init__(self):
        super().__init__()
        self.states, self.logged = [], []

    def on_train_batch_end(self, batch, logs=None):
        state = self.model.state
        self.states.append([jax.device_get(jax.tree.map(lambda a, i=i: a.addressable_shards[i]
                                                        .data, state))
                            for i in range(len(state.step.addressable_shards))])
        self.logged.append(logs["loss_scale"])


@pytest.mark.parametrize("n", [1, 3, 8])
def test_overflow_on_one_replica_skips_that_step_everywhere_and_halves_the_scale(n):
    # mse on y = 1e18 is finite (1e36) but its gradient times 2**100 overflows float32; that
    # row sits on the last replica of the third step. The scale doubles every 2 finite steps.
    rng = np.random.default_rng(0)
    rows = 8 * n
    x = rng.normal(size=(5 * rows, 4)).astype(np.float32)
    y = rng.normal(size=5 * rows).astype(np.float32)
    y[3 * rows - 1] = 1e18
    with mirrored_strategy(n).scope():
        model = mf.Model(nn.Dense(1), input_shape=(4,))
        model.compile(LSO(mf.optimizers.Adam(), initial_scale=2.0**100, dynamic_growth_steps=2),
                      lambda y_true, y_pred: (y_pred[:, 0] - y_true) ** 2)
    recorder = _Recorder()
    model.fit(x, y, batch_size=rows, epochs=1, shuffle=False, verbose=0, callbacks=[recorder])

    scales = [2.0**100, 2.0**101, 2.0**100, 2.0**100, 2.0**101]
    for after, per_device in enumerate(recorder.states):
        for state in per_device:  # every replica holds the same state
            assert float(state.opt_state.dynamic_scale) == scales[after]
            assert int(state.opt_state.step_counter) == [1, 0, 0, 1, 0][after]
            assert int(state.step) == after + 1
        assert recorder.logged[after] == scales[after]
    before, skipped = recorder.states[1], recorder.states[2]
    for old, new in zip(before, skipped):
        # params and Adam's state, count included
        tree_equal((old.params, old.opt_state.inner_state),
                   (new.params, new.opt_state.inner_state))
    assert not np.array_equal(recorder.states[3][0].params["kernel"], before[0].params["kernel"])
    # The finite flags travel in the step's one all-reduce: an operand per gradient leaf and
    # one for all statistics, as without loss scaling.
    if n > 1:
        hlo = _compiled_train_step(model, x, y, rows).compile().as_text()
        all_reduces = all_reduce_operands(hlo)
        assert len(all_reduces) == 1
        assert len(all_reduces[0]) == len(jax.tree.leaves(model.params)) + 1


@pytest.mark.slow
def test_loss_scale_is_logged_for_training_only():
    x, y = _digits()[0][:64], _digits()[2][:64]
    model = _mlp(2, "mixed_float16", "adam")
    history = model.fit(x, y, batch_size=32, epochs=2, validation_data=(x, y), verbose=0)
    assert history.history["loss_scale"] == [2.0**15, 2.0**15]
    assert "val_loss_scale" not in history.history
    assert "loss_scale" not in model.evaluate(x, y, verbose=0, return_dict=True)


@pytest.mark.slow
def test_float16_fit_resumes_bitwise_after_sigkill_with_loss_scale_state(tmp_path):
    # resume_worker.py trains under "mixed_float16" with LossScaleOptimizer(initial_scale=2**18,
    # dynamic_growth_steps=4), which overflows and grows during the run. Killed after step
    # 22, mid-epoch, the rerun resumes from the backup of step 20 (or of step 16, when the
    # background write of step 20's was still in flight at the kill).
    env = {"DTYPE_POLICY": "mixed_float16"}
    code, output = finish(start(tmp_path / "reference", env, "--no-backup"))
    assert code == 0, output
    expected = result(tmp_path / "reference")
    scales = expected["history_loss_scale"]
    assert scales[0] < 2.0**18 and scales[1] > scales[0], scales  # halved, then grew
    code, output = finish(start(tmp_path / "killed", {**env, "KILL_AT_STEP": "22"}))
    assert code == -signal.SIGKILL, output
    code, output = finish(start(tmp_path / "killed", env))
    assert code == 0, output
    got = result(tmp_path / "killed")
    assert int(got.pop("first_step")) in [s for s in backup_steps() if s < 22][-2:]
    assert_same_result(got, expected)


def test_loss_scale_optimizer_config_round_trips_through_json():
    optimizer = LSO(mf.optimizers.SGD(0.05, momentum=0.9), initial_scale=8.0,
                    dynamic_growth_steps=3)
    config = json.loads(json.dumps(optimizer.get_config()))
    assert config["inner_optimizer"]["class_name"] == "SGD"
    rebuilt = LSO.from_config(config)
    assert (rebuilt.initial_scale, rebuilt.dynamic_growth_steps) == (8.0, 3)
    assert rebuilt.inner_optimizer.get_config() == optimizer.inner_optimizer.get_config()
    with pytest.raises(TypeError, match="serialize takes an mf.optimizers optimizer"):
        LSO(optax.sgd(0.1)).get_config()


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", LSO(mf.optimizers.SGD(0.1), initial_scale=4.0,
                                                  dynamic_growth_steps=2)])
def test_load_model_restores_dtype_policy_and_loss_scale_state(tmp_path, optimizer, allclose):
    x, _, y, _ = _digits()
    model = _mlp(2, "mixed_float16", optimizer)
    model.fit(x[:128], y[:128], batch_size=32, epochs=1, verbose=0)  # 4 finite steps
    model.save(tmp_path / "m.keras")
    with mirrored_strategy(2).scope():  # the global policy stays float32: the saved one must win
        restored = mf.load_model(tmp_path / "m.keras", model.module)
    assert restored.dtype_policy == mf.mixed_precision.Policy("mixed_float16")
    restored_optimizer = restored.trainer.config.optimizer
    assert isinstance(restored_optimizer, LSO)
    assert restored_optimizer.get_config() == model.trainer.config.optimizer.get_config()
    saved, loaded = (jax.device_get((m.state.opt_state.dynamic_scale,
                                     m.state.opt_state.step_counter)) for m in (model, restored))
    assert saved != (restored_optimizer.initial_scale, 0)  # fit changed the scale or counter
    assert loaded == saved
    allclose(restored.get_weights(), model.get_weights(), rtol=0, atol=0)


def test_loss_scale_halves_down_to_its_floor_and_no_further():
    opt = LSO(mf.optimizers.SGD(0.1), initial_scale=4.0)
    state = opt.init(jnp.zeros(2))
    scales = []
    for _ in range(4):
        updates, state = opt.update(jnp.array([jnp.nan, 1.0]), state)
        assert np.array_equal(updates, np.zeros(2))
        scales.append(float(state.dynamic_scale))
    assert scales == [2.0, 1.0, 1.0, 1.0]
    # A scale that starts below the floor is not raised to it, nor lowered.
    low = LSO(mf.optimizers.SGD(0.1), initial_scale=0.25)
    assert float(low.update(jnp.array([jnp.inf]), low.init(jnp.zeros(1)))[1].dynamic_scale) \
        == 0.25


def test_float16_overflow_on_every_step_keeps_the_scale_at_its_floor_and_warns_once():
    # Inputs beyond float16's range (65504) are inf in the float16 compute: every gradient is
    # non-finite. Without a floor the scale would reach 0 after ~150 halvings and vanish from
    # the logs; with it the scale stops at 1, every step is skipped and fit warns once.
    x = np.full((40 * 8, 4), 1e6, np.float32)
    y = np.zeros(40 * 8, np.float32)
    with mirrored_strategy(2).scope():
        model = mf.Model(nn.Dense(1), input_shape=(4,), dtype_policy="mixed_float16")
        model.compile("sgd", "mse")
    before = model.get_weights()
    with pytest.warns(mf.MirrorfitWarning, match="loss scale already at its floor") as record:
        history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    assert sum("floor" in str(w.message) for w in record) == 1
    assert history.history["loss_scale"] == [1.0, 1.0, 1.0]
    assert float(model.state.opt_state.dynamic_scale) == 1.0
    tree_equal(model.get_weights(), before)  # every update skipped, weights finite
    assert all(np.isfinite(w).all() for w in jax.tree.leaves(model.get_weights()))


class _EmbedNet(nn.Module):
    """mf.layers.Embedding nested in a Flax module (its table at params/embed/embeddings)."""

    @nn.compact
    def __call__(self, tokens):
        rows = mf.layers.Embedding(500, 16, name="embed")(tokens)
        return nn.Dense(3)(rows.reshape(rows.shape[0], -1))


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_policy_leaves_the_embedding_table_uncast_with_todays_values(policy):
    tokens = jnp.asarray(np.random.default_rng(0).permutation(500)[:24].reshape(4, 6))
    adapter = mixed_precision.PolicyAdapter(adapters.LinenAdapter(_EmbedNet()),
                                            mf.mixed_precision.Policy(policy))
    params, state = adapter.init(jax.random.key(0), tokens)
    assert adapter._uncast == {("embed", "embeddings")}
    before = mixed_precision.PolicyAdapter(adapter.inner, adapter.policy)
    before._uncast = frozenset()  # the policy's casts before: every param cast whole

    def loss(p, adapter):
        return adapter.apply(p, state, tokens, train=True, rng=jax.random.key(1))[0].sum()

    # Unique tokens: each row's gradient is rounded once either way, so all are equal.
    for ours, todays in zip(jax.value_and_grad(loss)(params, adapter),
                            jax.value_and_grad(loss)(params, before)):
        tree_equal(ours, todays)
    ops = cuda_ops(jax.value_and_grad(functools.partial(loss, adapter=adapter)), params)
    assert not [op for op in ops if op[0] == "stablehlo.convert" and "tensor<500x16x" in str(op)]
    assert [op[2] for op in ops if op[0] == "stablehlo.scatter"] == [["tensor<500x16xf32>"]]


def test_embedding_in_a_sequential_under_a_mixed_policy_predicts_as_before():
    tokens = np.random.default_rng(0).integers(0, 50, (8, 5)).astype(np.int32)

    def sequential(policy):
        with mirrored_strategy(1).scope():
            return mf.Sequential([mf.layers.Input((5,), dtype="int32"),
                                  mf.layers.Embedding(50, 4), mf.layers.Flatten(),
                                  mf.layers.Dense(3)], seed=2, dtype_policy=policy)

    mixed, reference = sequential("mixed_bfloat16"), sequential("float32")
    # Before: every weight (the table too) cast to bf16 whole, the layers computing in float32.
    reference.set_weights([np.asarray(jnp.asarray(w).astype(jnp.bfloat16).astype(jnp.float32))
                           for w in mixed.get_weights()])
    np.testing.assert_array_equal(mixed.predict(tokens, verbose=0),
                                  reference.predict(tokens, verbose=0))
