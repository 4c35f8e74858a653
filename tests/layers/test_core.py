"""Identity, Lambda and ActivityRegularization (Dense, Dropout, Embedding, ...:
test_layers.py)."""

import jax
import numpy as np
import pytest

from mirrorfit import layers
from tests.helpers import cuda_ops

X = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)


def test_identity_returns_its_inputs_unchanged():
    tree = {"a": X, "b": [X[:1]]}
    out = layers.Identity().apply({}, tree)
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    np.testing.assert_array_equal(out["a"], X)


def test_lambda_passes_arguments_and_the_training_flag():
    scaled = layers.Lambda(lambda x, factor: x * factor, arguments={"factor": 3.0})
    np.testing.assert_allclose(scaled.apply({}, X), 3 * X)

    def noisy(x, training):
        return x + 1.0 if training else x

    layer = layers.Lambda(noisy)
    np.testing.assert_array_equal(layer.apply({}, X), X)
    np.testing.assert_array_equal(layer.apply({}, X, training=True), X + 1)


def test_lambda_of_a_python_lambda_cannot_be_saved():
    with pytest.raises(ValueError, match="register_serializable"):
        layers.Lambda(lambda x: x).get_config()


def test_activity_regularization_adds_keras_penalty_over_batch_size():
    layer = layers.ActivityRegularization(l1=0.1, l2=0.01)
    out, state = layer.apply({}, X, mutable=["losses"])
    np.testing.assert_array_equal(out, X)
    penalty = sum(jax.tree.leaves(state["losses"]))
    expected = (0.1 * np.abs(X).sum() + 0.01 * np.square(X).sum()) / X.shape[0]
    np.testing.assert_allclose(penalty, expected, rtol=1e-5)
    assert layer.get_config()["l1"] == 0.1



@pytest.mark.parametrize("dtype", ["mixed_bfloat16", "mixed_float16"])
def test_embedding_under_a_mixed_dtype_gathers_float32_rows_and_casts_them(dtype):
    layer = layers.Embedding(50, 8, dtype=dtype)
    tokens = np.array([[3, 7, 7], [0, 49, 12]], np.int32)
    params = layer.init(jax.random.key(0), tokens)["params"]
    table = params["embeddings"]
    out = layer.apply({"params": params}, tokens)
    half = layer.compute_dtype
    # As before (the table cast whole, then gathered) and as Keras: the rows cast.
    np.testing.assert_array_equal(out, np.asarray(table.astype(half))[tokens])
    assert table.dtype == np.float32 and out.dtype == half

    def loss(p):
        return layer.apply({"params": p}, tokens).astype(np.float32).sum()

    ops = cuda_ops(jax.value_and_grad(loss), params)
    # No convert of the whole table, either way; its gradient a float32 scatter-add.
    assert not [op for op in ops if op[0] == "stablehlo.convert" and "tensor<50x8x" in str(op)]
    assert [op[2] for op in ops if op[0] == "stablehlo.scatter"] == [["tensor<50x8xf32>"]]
