"""mirrorfit.ops functions and Python operators on the symbolic tensors of a functional model
record nodes, as Keras 3's ``Operation.symbolic_call`` (mirrorfit/_src/layers/graph/symbolic.py)."""

import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import ops
from tests.helpers import mirrored_strategy

L = mf.layers
RNG = np.random.default_rng(0)


def test_ops_operators_and_slicing_on_inputs_build_a_model_that_computes_them():
    inputs = mf.Input((8, 6))
    x = ops.reshape(inputs, (-1, 4, 12))
    assert isinstance(x, mf.layers.KerasTensor) and x.shape == (None, 4, 12)
    assert ops.shape(inputs) == (None, 8, 6) and ops.dtype(inputs) == "float32"
    y = 1.0 - x * 2.0 + x / 4.0
    z = ops.concatenate([y[:, 1:, :6], -y[:, :3, 6:]], axis=-1)  # (None, 3, 12)
    s = ops.sum(ops.transpose(z, (0, 2, 1)), axis=1) ** 2  # (None, 3)
    dense = L.Dense(2)
    with mirrored_strategy(2).scope():
        model = mf.Model(inputs, [dense(s), z @ np.ones((12, 1), np.float32)])
    assert [layer.name for layer in model.layers] == ["dense"]  # ops are no layers (Keras)
    assert [w.path for w in model.weights] == ["dense/kernel", "dense/bias"]
    data = RNG.normal(size=(5, 8, 6)).astype(np.float32)
    kernel, bias = model.get_weights()
    a = data.reshape(-1, 4, 12)
    b = 1.0 - a * 2.0 + a / 4.0
    c = np.concatenate([b[:, 1:, :6], -b[:, :3, 6:]], axis=-1)
    want = (c.transpose(0, 2, 1).sum(axis=1) ** 2) @ kernel + bias
    got, summed = model.predict(data, verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(summed, c.sum(-1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_the_same_op_twice_gives_two_nodes_named_as_keras():
    inputs = mf.Input((3,))
    outputs = (inputs + 1.0) + (inputs + 2.0)
    with mirrored_strategy(1).scope():
        model = mf.Model(inputs, outputs)
    assert list(model.module.graph.names) == ["add", "add_1", "add_2"]
    np.testing.assert_allclose(model.predict(np.ones((2, 3), np.float32), verbose=0),
                               np.full((2, 3), 5.0))


def test_a_model_with_ops_trains():
    inputs = mf.Input((4,))
    hidden = L.Dense(6)(inputs)
    outputs = ops.mean(ops.reshape(hidden, (-1, 3, 2)), axis=-1)
    with mirrored_strategy(2).scope():
        model = mf.Model(inputs, outputs)
        model.compile(mf.optimizers.SGD(0.1), "mse")
    x = RNG.normal(size=(32, 4)).astype(np.float32)
    y = x[:, :3] - x[:, 3:]
    history = model.fit(x, y, batch_size=8, epochs=5, verbose=0).history
    assert history["loss"][-1] < 0.5 * history["loss"][0]


def test_jax_numpy_on_a_symbolic_tensor_names_the_fix():
    inputs = mf.Input((4,))
    with pytest.raises(TypeError, match=r"KerasTensor is symbolic.*mirrorfit.ops functions"):
        jnp.reshape(inputs, (-1, 2, 2))
    with pytest.raises(TypeError, match="no truth value"):
        bool(inputs)
