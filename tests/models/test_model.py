"""Tests for the Keras model surface: model.optimizer, model(x), model.apply, sown losses and
regularizers, and the *_on_batch methods, at 1 and 8 replicas against single-device math."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf

_rng = np.random.default_rng(0)
X = _rng.normal(size=(13, 4)).astype(np.float32)  # 13 rows: never divides by 8 replicas
Y = _rng.normal(size=(13, 3)).astype(np.float32)
LABELS = _rng.integers(0, 3, size=13).astype(np.int32)
RTOL, ATOL = 1e-5, 1e-6  # f32 sums reduced in a different order on 1 vs 8 replicas
L2_FACTOR = 0.1


class SowsL2(nn.Module):
    """A Dense layer that sows an L2 penalty of its kernel, as a kernel_regularizer would."""

    @nn.compact
    def __call__(self, x):
        dense = nn.Dense(3)
        y = dense(x)
        self.sow("losses", "kernel_l2", mf.regularizers.L2(L2_FACTOR)(
            dense.variables["params"]["kernel"]))
        return y


def _model(n, module=None, optimizer=None, loss="mse", metrics=None, cls=mf.Model):
    with mf.MirroredStrategy(jax.devices()[:n]).scope():
        model = cls(module or nn.Dense(3), input_shape=(4,))
        model.compile(optimizer or mf.optimizers.SGD(0.1), loss, metrics)
    return model


def _mse(y_pred, y):
    return jnp.mean(jnp.mean((y_pred - y) ** 2, axis=-1))


def _sgd_reference(params, loss_fn, steps, lr=0.1):
    """Single-device full-batch SGD on ``loss_fn(params)`` from ``params``."""
    grad = jax.jit(jax.grad(loss_fn))
    for _ in range(steps):
        params = jax.tree.map(lambda p, g: p - lr * g, params, grad(params))
    return params


# -- model.optimizer ----------------------------------------------------------------------


def test_optimizer_is_none_before_compile():
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        model = mf.Model(nn.Dense(3), input_shape=(4,))
    assert model.optimizer is None


def test_optimizer_learning_rate_set_applies_next_step_without_recompile(allclose):
    model = _model(8)
    model.train_on_batch(X, Y)
    train_fn = model.trainer._compiled_step(  # the jitted step train_on_batch used
        model.trainer.train_step_for(), (model.state, *_placed_args(model)), None)
    assert model.optimizer.learning_rate == pytest.approx(0.1)
    model.optimizer.learning_rate = 0.0
    before = jax.device_get(model.params)
    model.train_on_batch(X, Y)
    allclose(model.params, before, rtol=0)  # rate 0: the next step changes nothing
    assert model.optimizer.learning_rate == 0.0
    assert train_fn._cache_size() == 1


def _placed_args(model):
    from mirrorfit._src.distribute.batch import place_batches

    data = model._adapter_for(X, Y, None, 13)
    batch = next(place_batches(data.batches(0), model.strategy))
    return model.trainer._fresh_statistics(model.state, batch), batch


def test_optimizer_iterations_and_get_config():
    model = _model(2)
    model.fit(X, Y, batch_size=5, epochs=2, verbose=0)
    assert int(model.optimizer.iterations) == 6  # 3 steps per epoch
    assert model.optimizer.get_config() == mf.optimizers.SGD(0.1).get_config()


def test_optimizer_get_config_of_raw_optax_raises():
    model = _model(1, optimizer=optax.sgd(0.1))
    with pytest.raises(TypeError, match="raw optax"):
        model.optimizer.get_config()
    with pytest.raises(ValueError, match="learning_rate"):
        _ = model.optimizer.learning_rate


def test_learning_rate_scheduler_and_model_optimizer_agree():
    model = _model(1)
    seen = []

    class Record(mf.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(float(self.model.optimizer.learning_rate))

    model.fit(X, Y, epochs=2, verbose=0, callbacks=[
        mf.callbacks.LearningRateScheduler(lambda epoch: 0.5 ** (epoch + 1)), Record()])
    assert seen == pytest.approx([0.5, 0.25])


# -- model(x) and model.apply --------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 8])
def test_call_equals_predict_and_module_apply(n, allclose):
    model = _model(n)
    expected = model.module.apply({"params": jax.device_get(model.params)}, X)
    # float32 sums of 4 products: the replicas' shards (2 rows each on 8) may take another
    # matmul kernel than the 13-row whole, so near-zero outputs differ by a few ulps of the
    # terms (2e-8 seen), hence the atol.
    tol = dict(rtol=1e-6, atol=1e-6)
    allclose(model(X), expected, **tol)
    allclose(model.predict_on_batch(X), expected, **tol)
    allclose(model.apply(model.params, X), expected, **tol)


def test_call_training_uses_dropout_rng():
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        model = mf.Sequential([nn.Dense(64), nn.Dropout(0.5)], input_shape=(4,))
    x = np.ones((4, 4), np.float32)
    inference = np.asarray(model(x))
    training = np.asarray(model(x, training=True))
    assert np.array_equal(inference, np.asarray(model(x, training=False)))
    assert np.mean(training == 0) > 0.3  # about half the units dropped
    assert not np.allclose(inference, training)


def test_apply_works_under_jit_and_grad(allclose):
    model = _model(1)
    params = jax.device_get(model.params)

    def loss(p):
        return _mse(model.apply(p, X), Y)

    allclose(jax.jit(lambda x: model(x))(X), model(X), rtol=1e-6)  # callable under jit
    grads = jax.jit(jax.grad(loss))(params)
    kernel = params["kernel"]
    expected = 2.0 / (13 * 3) * X.T @ (X @ kernel + params["bias"] - Y)
    allclose(grads["kernel"], expected, rtol=1e-4, atol=1e-6)


# -- sown losses and regularizers ----------------------------------------------------------


@pytest.mark.parametrize("n", [1, 8])
def test_sown_losses_count_once_per_step(n, allclose):
    model = _model(n, module=SowsL2())
    initial = jax.device_get(model.params)
    history = model.fit(X, Y, batch_size=13, epochs=3, verbose=0, shuffle=False)

    def objective(p):
        return _mse(model.module.apply({"params": p}, X), Y) + L2_FACTOR * jnp.sum(
            p["Dense_0"]["kernel"] ** 2)

    expected = _sgd_reference(initial, objective, steps=3)
    allclose(model.params, expected, rtol=RTOL, atol=ATOL)
    # the logged loss includes the penalty: loss of the params before the last step
    before_last = _sgd_reference(initial, objective, steps=2)
    assert history.history["loss"][-1] == pytest.approx(float(objective(before_last)), rel=1e-5)


def test_model_losses_are_the_last_forward_pass_values():
    model = _model(1, module=SowsL2())
    assert model.losses == []
    model(X)
    kernel = np.asarray(model.params["Dense_0"]["kernel"])
    assert len(model.losses) == 1
    assert float(model.losses[0]) == pytest.approx(L2_FACTOR * np.sum(kernel ** 2), rel=1e-6)


@pytest.mark.parametrize("n", [1, 8])
def test_evaluate_loss_includes_sown_losses(n):
    model = _model(n, module=SowsL2())
    params = jax.device_get(model.params)
    expected = _mse(model.module.apply({"params": params}, X), Y) + L2_FACTOR * np.sum(
        np.asarray(params["Dense_0"]["kernel"]) ** 2)
    assert model.evaluate(X, Y, batch_size=5, verbose=0) == pytest.approx(float(expected),
                                                                           rel=1e-5)


def test_regularizers_match_keras_formulas_and_defaults():
    w = {"a": np.array([1.0, -2.0], np.float32), "b": np.array([[3.0]], np.float32)}
    flat = np.array([1.0, -2.0, 3.0])
    assert float(mf.regularizers.L1()(w)) == pytest.approx(0.01 * np.sum(np.abs(flat)))
    assert float(mf.regularizers.L2()(w)) == pytest.approx(0.01 * np.sum(flat ** 2))
    both = mf.regularizers.L1L2(l1=0.2, l2=0.3)
    assert float(both(w)) == pytest.approx(0.2 * 6.0 + 0.3 * 14.0)
    assert mf.regularizers.L1L2().get_config() == {"l1": 0.0, "l2": 0.0}
    assert mf.regularizers.get("l1_l2") == mf.regularizers.L1L2(0.01, 0.01)
    assert mf.regularizers.get(mf.regularizers.serialize(both)) == both


# -- *_on_batch ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 8])
def test_train_on_batch_pads_and_matches_single_device_sgd(n, allclose):
    model = _model(n)
    initial = jax.device_get(model.params)
    for _ in range(2):
        loss = model.train_on_batch(X, Y)
    expected = _sgd_reference(initial, lambda p: _mse(_model_apply(p), Y), steps=2)
    allclose(model.params, expected, rtol=RTOL, atol=ATOL)
    assert isinstance(loss, float)
    assert len(model.trainer._compiled) == 1  # one compiled train step for both calls


def _model_apply(params):
    return nn.Dense(3).apply({"params": params}, X)


def test_train_on_batch_class_weight_equals_sample_weight(allclose):
    weights = {0: 1.0, 1: 2.0, 2: 0.5}
    model = _model(1, loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                   module=nn.Sequential([nn.Dense(3), nn.softmax]))  # SGD: no optimizer state
    initial = model.get_weights()
    logs = model.train_on_batch(X, LABELS, class_weight=weights, return_dict=True)
    by_class = jax.device_get(model.params)
    model.set_weights(initial)
    row_weights = np.array([weights[c] for c in LABELS], np.float32)
    assert logs == model.train_on_batch(X, LABELS, sample_weight=row_weights, return_dict=True)
    assert set(logs) == {"loss", "accuracy"}
    allclose(model.params, by_class, rtol=0)


def test_a_class_missing_from_class_weight_weighs_one_in_train_on_batch_as_in_fit():
    # Keras 3's rule (class_weight.get(c, 1.0)) in both; train_on_batch used to raise.
    module = nn.Sequential([nn.Dense(3), nn.softmax])
    model = _model(1, loss="sparse_categorical_crossentropy", module=module)
    initial = model.get_weights()
    partial = model.train_on_batch(X, LABELS, class_weight={0: 2.0}, return_dict=True)
    model.set_weights(initial)
    row_weights = np.where(LABELS == 0, 2.0, 1.0).astype(np.float32)
    assert partial == model.train_on_batch(X, LABELS, sample_weight=row_weights,
                                           return_dict=True)
    model.set_weights(initial)
    history = model.fit(X, LABELS, class_weight={0: 2.0}, batch_size=len(X), shuffle=False,
                        verbose=0)
    assert history.history["loss"] == pytest.approx([partial["loss"]], rel=1e-6)


@pytest.mark.parametrize("n", [1, 8])
def test_test_on_batch_equals_evaluate(n):
    model = _model(n, metrics=["mae"])
    assert model.test_on_batch(X, Y) == pytest.approx(model.evaluate(X, Y, verbose=0))
    logs = model.test_on_batch(X, Y, return_dict=True)
    assert logs["mae"] == pytest.approx(float(np.mean(np.abs(np.asarray(model(X)) - Y))),
                                        rel=1e-5)


class _IgnoresInput(nn.Module):
    @nn.compact
    def __call__(self, x):
        return self.param("w", nn.initializers.zeros, (3,))


def test_a_module_whose_outputs_lack_the_batch_axis_is_named_when_built():
    # Before: fit raised the loss's "needs targets of the outputs' shape [batch] ...
    # Received: targets of shape [batch, 3] and outputs of shape [batch]", and predict
    # "IndexError: boolean index did not match indexed array along axis 0".
    with pytest.raises(ValueError, match=r"^The module _IgnoresInput must return outputs "
                                         r"\[batch, ...\].*Received: outputs of shapes "
                                         r"\[\(3,\)\] for an input batch of 2 rows"):
        with mf.MirroredStrategy(jax.devices()[:2]).scope():
            mf.Model(_IgnoresInput(), input_shape=(4,))
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Model(_IgnoresInput())
    with pytest.raises(ValueError, match="must return outputs"):
        model.predict(np.ones((5, 4), np.float32), verbose=0)
    assert not model.built  # nothing half-built is kept
