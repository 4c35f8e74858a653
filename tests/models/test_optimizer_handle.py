"""model.optimizer.learning_rate and .iterations are Keras variables over the training state:
they read it live, assign writes it (mirrored), and they still act as the numbers they were."""

import flax.linen as nn
import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.models.optimizer_handle import OptimizerVariable
from tests.helpers import mirrored_strategy

X = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
Y = np.random.default_rng(1).normal(size=(16, 3)).astype(np.float32)


def _model(replicas, input_shape=(4,)):
    with mirrored_strategy(replicas).scope():
        model = mf.Model(nn.Dense(3), input_shape=input_shape)
        model.compile(mf.optimizers.SGD(0.1), "mse")
    return model


@pytest.mark.parametrize("replicas", [1, 8])
def test_learning_rate_is_a_variable_reading_and_writing_the_optimizer_state(replicas):
    model = _model(replicas)
    rate = model.optimizer.learning_rate
    assert isinstance(rate, mf.Variable) and rate.shape == () and rate.dtype == np.float32
    assert rate.numpy() == np.float32(0.1) and float(rate) == pytest.approx(0.1)
    assert rate == pytest.approx(0.1) and rate * 2 == pytest.approx(0.2)
    assert round(rate, 6) == 0.1 and f"{rate:.3f}" == "0.100"

    rate.assign(0.0)  # written into the mirrored optimizer state
    assert model.optimizer.learning_rate == 0.0 and rate == 0.0
    hyper = model.opt_state.hyperparams["learning_rate"]
    assert float(hyper) == 0.0 and len(hyper.sharding.device_set) == replicas
    before = jax.device_get(model.params)
    model.train_on_batch(X, Y)
    for old, new in zip(jax.tree.leaves(before), jax.tree.leaves(jax.device_get(model.params))):
        np.testing.assert_array_equal(old, new)  # rate 0: the step changes nothing

    model.optimizer.learning_rate = 0.05  # assignment to the attribute, as before
    assert rate.numpy() == np.float32(0.05)  # the variable read earlier sees it: live


def test_learning_rate_variable_follows_a_scheduler_during_fit():
    model = _model(1)
    rate = model.optimizer.learning_rate
    model.fit(X, Y, epochs=3, verbose=0, callbacks=[
        mf.callbacks.LearningRateScheduler(lambda epoch: 0.5 ** (epoch + 1))])
    assert rate.numpy() == np.float32(0.125)


def test_learning_rate_rejects_what_is_not_a_rate():
    model = _model(1)
    for bad in ("fast", -0.1, True, np.ones(2)):
        with pytest.raises(TypeError, match="must be set to a float >= 0"):
            model.optimizer.learning_rate = bad
    with pytest.raises(TypeError, match="must be set to a float >= 0"):
        model.optimizer.learning_rate.assign(-1.0)
    assert model.optimizer.learning_rate == pytest.approx(0.1)  # unchanged


def test_iterations_is_an_int_variable_over_the_step_counter():
    model = _model(8)
    model.fit(X, Y, batch_size=8, epochs=2, verbose=0)
    iterations = model.optimizer.iterations
    assert isinstance(iterations, OptimizerVariable) and iterations.dtype == np.int32
    assert int(iterations) == 4 and iterations.numpy() == 4 and iterations == 4
    iterations.assign(10)
    assert int(model.state.step) == 10
    assert len(model.state.step.sharding.device_set) == 8  # placed mirrored again
    iterations.assign_add(1)
    assert model.optimizer.iterations.numpy() == 11
    model.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    assert iterations.numpy() == 13  # live: fit's steps count on from the assigned value


def test_unbuilt_model_reads_the_compiled_rate_and_cannot_assign():
    with mirrored_strategy(1).scope():
        model = mf.Model(nn.Dense(3))
        model.compile(mf.optimizers.SGD(0.1), "mse")
    assert float(model.optimizer.learning_rate) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="no weights yet"):
        model.optimizer.learning_rate = 0.2
    with pytest.raises(ValueError, match="no weights yet"):
        _ = model.optimizer.iterations


def test_variable_round_and_format_act_as_the_number():
    scalar = mf.Variable(2.346)
    assert round(scalar, 1) == 2.3 and round(scalar) == 2 and isinstance(round(scalar), int)
    assert f"{scalar:.2f}" == "2.35" and f"{scalar}" == str(scalar)
    vector = mf.Variable(np.array([1.26, 2.5], np.float32))
    np.testing.assert_allclose(round(vector, 1), [1.3, 2.5])


class _LogsCounters(mf.Model):
    """A Keras ``train_step`` that logs the optimizer's live counter and rate."""

    def train_step(self, data):
        x, y = data
        iterations = mf.ops.convert_to_tensor(self.optimizer.iterations)  # before the update
        rate = mf.ops.convert_to_tensor(self.optimizer.learning_rate)
        loss, grads = mf.value_and_grad(
            lambda: self.compute_loss(x, y, self(x, training=True)), self.trainable_variables)()
        self.optimizer.apply(grads)
        return {"loss": loss, "iterations": mf.ops.cast(iterations, "float32"),
                "after": mf.ops.cast(self.optimizer.iterations, "float32"), "rate": rate}


def test_iterations_and_learning_rate_are_live_inside_a_train_step():
    with mirrored_strategy(2).scope():
        model = _LogsCounters(nn.Dense(3), input_shape=(4,))
        model.compile(mf.optimizers.SGD(0.1), "mse")
    history = model.fit(X, Y, batch_size=4, epochs=3, verbose=0,  # 4 steps per epoch
                        callbacks=[mf.callbacks.LearningRateScheduler(lambda epoch: 0.1 / 2 ** epoch)])
    # The epoch logs its last step's values, as Keras: steps 3, 7 and 11 (0-based).
    assert history.history["iterations"] == [3.0, 7.0, 11.0]
    assert history.history["after"] == [4.0, 8.0, 12.0]  # Keras' counter after apply
    np.testing.assert_allclose(history.history["rate"], [0.1, 0.05, 0.025], rtol=1e-6)
    assert int(model.optimizer.iterations) == 12
