"""SpatialDropout1D/2D/3D, GaussianNoise, GaussianDropout and AlphaDropout: Keras' formulas in
training, the identity at inference, and a different draw on every replica."""

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from tests.helpers import mirrored_strategy

KEY = {"dropout": jax.random.key(0)}


@pytest.mark.parametrize("layer, shape", [
    (layers.SpatialDropout1D(0.5), (64, 5, 8)),
    (layers.SpatialDropout2D(0.5), (64, 3, 4, 8)),
    (layers.SpatialDropout3D(0.5), (64, 2, 3, 2, 8)),
])
def test_spatial_dropout_drops_whole_channels_and_scales_the_rest(layer, shape):
    x = np.random.default_rng(0).uniform(1, 2, shape).astype(np.float32)
    ratio = np.asarray(layer.apply({}, x, training=True, rngs=KEY)) / x
    np.testing.assert_allclose(np.unique(ratio.round(5)), [0.0, 2.0])  # 1 / (1 - rate)
    spatial = tuple(range(1, len(shape) - 1))
    np.testing.assert_array_equal(ratio.min(spatial), ratio.max(spatial))  # one draw per channel
    assert 0.4 < np.mean(ratio == 0) < 0.6


def test_gaussian_noise_and_dropout_have_keras_moments():
    x = np.full((50_000,), 2.0, np.float32)
    noisy = np.asarray(layers.GaussianNoise(0.5).apply({}, x, training=True, rngs=KEY))
    assert abs(noisy.mean() - 2.0) < 0.01 and abs(noisy.std() - 0.5) < 0.01
    dropped = np.asarray(layers.GaussianDropout(0.2).apply({}, x, training=True, rngs=KEY)) / x
    # Multiplicative N(1, rate / (1 - rate)) noise.
    assert abs(dropped.mean() - 1.0) < 0.01 and abs(dropped.std() - np.sqrt(0.2 / 0.8)) < 0.01


def test_alpha_dropout_keeps_selu_statistics_and_sets_dropped_to_alpha_prime():
    rate = 0.2
    x = np.random.default_rng(1).normal(size=(200_000,)).astype(np.float32)
    out = np.asarray(layers.AlphaDropout(rate).apply({}, x, training=True, rngs=KEY))
    alpha_p = -1.6732632423543772 * 1.0507009873554805
    a = ((1 - rate) * (1 + rate * alpha_p**2)) ** -0.5
    b = -a * alpha_p * rate
    dropped = np.isclose(out, a * alpha_p + b)
    assert abs(dropped.mean() - rate) < 0.01
    np.testing.assert_allclose(out[~dropped], a * x[~dropped] + b, rtol=1e-5, atol=1e-6)
    assert abs(out.mean()) < 0.01 and abs(out.var() - 1.0) < 0.01  # zero mean, unit variance


def test_random_layers_are_identity_at_inference_and_differ_per_replica_in_training():
    strategy = mirrored_strategy(2)
    with strategy.scope():
        inputs = layers.Input((2, 2, 2, 4))
        flat = layers.Reshape((8, 4))(inputs)
        images = layers.Reshape((4, 2, 4))(inputs)
        # SpatialDropout2D first: each output's compile costs seconds on the shared CPUs, so
        # the replica check below skips 1D/3D, which draw as 2D does (core.drop).
        outputs = [layers.SpatialDropout2D(0.5)(images)]
        outputs += [layer(flat) for layer in (layers.GaussianNoise(0.5),
                                              layers.GaussianDropout(0.5),
                                              layers.AlphaDropout(0.5))]
        outputs += [layers.SpatialDropout1D(0.5)(flat), layers.SpatialDropout3D(0.5)(inputs)]
        model = mf.Model(inputs, outputs)
    x = np.ones((4, 2, 2, 2, 4), np.float32)  # 2 identical rows per replica
    for i, out in enumerate(model(x)):  # inference: the identity
        np.testing.assert_array_equal(out, np.ones_like(out), err_msg=f"output {i}")
    batch = next(iter(strategy.experimental_distribute_dataset([x])))
    trained = strategy.run(lambda b: model(b, training=True)[:4], args=(batch,))
    for i, train in enumerate(trained):
        train = np.asarray(strategy.gather(train, axis=0))
        assert not np.array_equal(train[:2], train[2:4]), f"output {i}: replicas 0 and 1 agree"
        assert not np.array_equal(train, np.ones_like(train)), f"output {i} is not random"
