"""The one optimizer update (`mirrorfit._src.optimizers.update.apply_update`): every form of
train step gets the same reduction, sharded state, gradient accumulation and non-finite
check, so a model's own ``train_step`` equals the built-in one, and TerminateOnNaN stops it."""

import flax.linen as nn
import jax
import numpy as np
import pytest

import mirrorfit as mf
from tests.helpers import tree_allclose

ROWS, BATCH = 44, 8  # 6 steps per epoch; the last has 4 rows, one per replica at 4
_rng = np.random.default_rng(0)
X = _rng.normal(size=(ROWS, 5)).astype(np.float32)
Y = _rng.integers(0, 3, ROWS).astype(np.int32)


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.relu(nn.Dense(16)(x)))


class OwnStep(mf.Model):
    """What the built-in step does, written as a Keras 3 ``train_step``."""

    def train_step(self, data):
        x, y = data

        def loss_fn():
            return self.compute_loss(x, y, self(x, training=True))

        loss, grads = mf.value_and_grad(loss_fn, self.trainable_variables)()
        self.optimizer.apply(grads)
        return {"loss": loss}


def _fit(model_class, strategy, callbacks=(), x=X, epochs=2):
    with strategy.scope():
        model = model_class(Net(), input_shape=(5,), seed=3)
        model.compile(mf.optimizers.Adam(0.01, gradient_accumulation_steps=2),
                      mf.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, Y, batch_size=BATCH, epochs=epochs, verbose=0, shuffle=False,
              callbacks=list(callbacks))
    return model


def test_own_train_step_equals_the_builtin_one_with_sharded_state_and_accumulation():
    strategy = mf.MirroredStrategy(jax.devices()[:4], shard_optimizer_state=True)
    builtin, own = _fit(mf.Model, strategy), _fit(OwnStep, strategy)
    assert int(own.state.opt_state.inner_state.mini_step) == 0  # 12 steps, 6 updates
    tree_allclose(own.get_weights(), builtin.get_weights(), rtol=1e-5, atol=1e-6)
    tree_allclose(jax.device_get(own.opt_state), jax.device_get(builtin.opt_state),
                  rtol=1e-5, atol=1e-6)
    # Each device holds a quarter of every optimizer-state leaf that splits.
    kernel_moment = own.state.opt_state.inner_state.inner_state[0].mu
    leaf = jax.tree.leaves(kernel_moment)[1]
    assert leaf.addressable_shards[0].data.size == leaf.size // 4


def test_own_train_step_accumulates_per_replica_and_all_reduces_once_per_update():
    strategy = mf.MirroredStrategy(jax.devices()[:4])
    builtin, own = _fit(mf.Model, strategy), _fit(OwnStep, strategy)
    accumulators = jax.tree.leaves(own.state.opt_state.inner_state.accumulated_gradients)
    assert accumulators[0].shape[0] == 4  # one slot per replica, split over them
    tree_allclose(own.get_weights(), builtin.get_weights(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model_class", [mf.Model, OwnStep])
def test_terminate_on_nan_stops_an_own_step_at_the_nan_batch_with_finite_weights(model_class):
    x = X.copy()
    x[2 * BATCH + 1, 0] = np.nan  # a row of step 2 (no shuffling): NaN gradients
    seen, weights = [], []

    def record(batch, logs):
        seen.append(batch)
        weights.append(model.get_weights())

    model = None
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = model_class(Net(), input_shape=(5,), seed=3)
        model.compile(mf.optimizers.Adam(0.01),
                      mf.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, Y, batch_size=BATCH, epochs=3, verbose=0, shuffle=False, callbacks=[
        mf.callbacks.TerminateOnNaN(), mf.callbacks.LambdaCallback(on_train_batch_end=record)])
    assert seen == [0, 1, 2]
    assert int(model.state.step) == 3
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())
    # The NaN step's update was not applied: the weights are those after step 1.
    for final, before in zip(model.get_weights(), weights[1]):
        np.testing.assert_array_equal(final, before)


class ScaledOwnStep(mf.Model):
    """Keras 3's loss-scaling pattern in a ``train_step``: differentiate
    ``self.optimizer.scale_loss(loss)``; ``apply`` unscales."""

    def train_step(self, data):
        x, y = data

        def loss_fn():
            loss = self.compute_loss(x, y, self(x, training=True))
            return self.optimizer.scale_loss(loss), loss

        (_, loss), grads = mf.value_and_grad(loss_fn, self.trainable_variables, has_aux=True)()
        self.optimizer.apply(grads)
        return {"loss": loss}


def test_own_train_step_scales_the_loss_under_mixed_float16_as_the_builtin_one():
    def fit(model_class):
        with mf.MirroredStrategy(jax.devices()[:2]).scope():
            model = model_class(Net(), input_shape=(5,), seed=3, dtype_policy="mixed_float16")
            model.compile(mf.optimizers.Adam(0.01),
                          mf.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(X, Y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False)
        return model

    builtin, own = fit(mf.Model), fit(ScaledOwnStep)
    assert float(own.opt_state.dynamic_scale) == float(builtin.opt_state.dynamic_scale) == 2**15
    # float16 forward passes on another grouping of the rows (per replica vs global sums).
    tree_allclose(own.get_weights(), builtin.get_weights(), rtol=2e-3, atol=2e-3)
