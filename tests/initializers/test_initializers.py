"""`mf.initializers`: Keras' classes against their formulas, seeds, names and configs."""

import math

import jax
import numpy as np
import pytest

import mirrorfit as mf

KEY = jax.random.PRNGKey(0)
SHAPE = (300, 200)  # fan_in 300, fan_out 200


@pytest.mark.parametrize("initializer, limit", [
    (mf.initializers.GlorotUniform(), math.sqrt(6 / 500)),
    (mf.initializers.HeUniform(), math.sqrt(6 / 300)),
    (mf.initializers.LecunUniform(), math.sqrt(3 / 300)),
    (mf.initializers.RandomUniform(-0.2, 0.3), None),
])
def test_uniform_initializers_fill_keras_range(initializer, limit):
    w = np.asarray(initializer(KEY, SHAPE))
    low, high = (-limit, limit) if limit is not None else (-0.2, 0.3)
    assert low <= w.min() and w.max() <= high
    np.testing.assert_allclose(w.std(), (high - low) / math.sqrt(12), rtol=0.03)


@pytest.mark.parametrize("initializer, stddev", [
    (mf.initializers.HeNormal(), math.sqrt(2 / 300)),
    (mf.initializers.GlorotNormal(), math.sqrt(2 / 500)),
    (mf.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal"), math.sqrt(2 / 200)),
    (mf.initializers.RandomNormal(1.0, 0.5), 0.5),
])
def test_normal_initializers_have_keras_stddev(initializer, stddev):
    w = np.asarray(initializer(KEY, SHAPE))
    np.testing.assert_allclose(w.std(), stddev, rtol=0.03)


def test_constant_initializers_and_orthogonal():
    np.testing.assert_array_equal(mf.initializers.Constant(0.5)(KEY, (2, 3)), np.full((2, 3), 0.5))
    np.testing.assert_array_equal(mf.initializers.Identity(2.0)(KEY, (2, 3)), 2 * np.eye(2, 3))
    np.testing.assert_array_equal(mf.initializers.Zeros()(KEY, (2,)), [0, 0])
    q = np.asarray(mf.initializers.Orthogonal(gain=3.0)(KEY, (5, 4)))
    np.testing.assert_allclose(q.T @ q, 9 * np.eye(4), atol=1e-4)
    with pytest.raises(ValueError, match="2-D weights only"):
        mf.initializers.Identity()(KEY, (2, 2, 2))


def test_seeded_initializer_ignores_the_stream_key():
    init = mf.initializers.TruncatedNormal(stddev=1.0, seed=7)
    a, b = init(KEY, (100,)), init(jax.random.PRNGKey(1), (100,))
    np.testing.assert_array_equal(a, b)
    assert np.abs(np.asarray(a)).max() <= 2.0  # redrawn beyond two stddev


def test_names_match_classes_and_configs_round_trip_through_a_layer():
    for name, cls in [("glorot_uniform", mf.initializers.GlorotUniform),
                      ("he_normal", mf.initializers.HeNormal),
                      ("random_normal", mf.initializers.RandomNormal)]:
        np.testing.assert_array_equal(mf.initializers.get(name)(KEY, (3, 4)), cls()(KEY, (3, 4)))
    assert mf.initializers.get("HeNormal") == mf.initializers.HeNormal()
    dense = mf.layers.Dense(3, kernel_initializer=mf.initializers.VarianceScaling(0.5, seed=1),
                            bias_initializer="ones")
    config = dense.get_config()
    assert config["kernel_initializer"]["class_name"] == "VarianceScaling"
    rebuilt = mf.layers.Dense.from_config(config)
    assert rebuilt.kernel_initializer == mf.initializers.VarianceScaling(0.5, seed=1)
    assert rebuilt.bias_initializer == "ones"


@pytest.mark.parametrize("initializer, limit", [
    ("glorot_uniform", math.sqrt(6 / (2 * 3000))),
    (mf.initializers.HeUniform(), math.sqrt(6 / 3000))])
def test_fan_initializers_take_a_vector_with_keras_fans(initializer, limit):
    # Keras' compute_fans: a 1-D shape (n,) has fan_in = fan_out = n; a scalar has 1. So
    # add_weight(shape=(n,)) with the default glorot_uniform works, as in Keras.
    w = np.asarray(mf.initializers.get(initializer)(KEY, (3000,)))
    assert w.shape == (3000,) and -limit <= w.min() and w.max() <= limit
    np.testing.assert_allclose(w.std(), 2 * limit / math.sqrt(12), rtol=0.05)
    assert mf.initializers.get(initializer)(KEY, ()).shape == ()


def test_add_weight_of_a_vector_takes_keras_default_initializer():
    class Scale(mf.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1],))

        def call(self, x):
            return x * self.w

    layer = Scale()
    layer(np.ones((1, 500), np.float32))
    w = layer.w.numpy()
    limit = math.sqrt(6 / 1000)
    assert -limit <= w.min() and w.max() <= limit and w.std() > limit / 3
