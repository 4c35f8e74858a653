"""``compile``'s resolved configuration: layers frozen before ``compile`` get no updates."""

import jax
import numpy as np
import pytest

import mirrorfit as mf


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_layer_frozen_before_compile_keeps_its_weights_under_every_policy(policy):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 3)).astype(np.float32)
    y = rng.normal(size=(16, 2)).astype(np.float32)
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Sequential([mf.Input((3,)), mf.layers.Dense(4, name="frozen"),
                               mf.layers.Dense(2, name="trained")], dtype_policy=policy)
    model.get_layer("frozen").trainable = False
    before = jax.device_get(model.params)
    model.compile("sgd", "mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    after = jax.device_get(model.params)
    for name in ("kernel", "bias"):  # exactly: the update is set to zero
        np.testing.assert_array_equal(after["frozen"][name], before["frozen"][name])
    assert not np.array_equal(after["trained"]["kernel"], before["trained"]["kernel"])
