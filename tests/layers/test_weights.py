"""Keras' get_weights order: weights laid out as tf.keras returns them load into the same
mirrorfit.layers model and give the NumPy-formula predictions."""

import jax
import numpy as np
import pytest

from mirrorfit import layers
from mirrorfit._src.layers.graph import sequential
from mirrorfit._src.layers.graph import functional
from mirrorfit._src.layers import weights as weights_lib

RNG = np.random.default_rng(3)


def keras_layout_cnn():
    """Weights in the order and shapes tf.keras documents for
    Conv2D(4, 3) -> BatchNormalization -> MaxPooling2D -> Flatten -> Dense(3)
    on [batch, 6, 6, 2] inputs."""
    return [RNG.normal(size=(3, 3, 2, 4)), RNG.normal(size=(4,)),       # conv kernel, bias
            RNG.normal(size=(4,)), RNG.normal(size=(4,)),               # gamma, beta
            RNG.normal(size=(4,)), RNG.uniform(0.5, 2, size=(4,)),      # moving mean, var
            RNG.normal(size=(16, 3)), RNG.normal(size=(3,))]            # dense kernel, bias


def cnn_reference(x, w):
    kernel, bias, gamma, beta, mean, var, dense_k, dense_b = w
    conv = np.zeros((x.shape[0], 4, 4, 4))
    for i in range(4):
        for j in range(4):
            conv[:, i, j] = np.einsum("nhwc,hwcf->nf", x[:, i:i + 3, j:j + 3], kernel)
    bn = (conv + bias - mean) / np.sqrt(var + 1e-3) * gamma + beta
    pooled = bn.reshape(-1, 2, 2, 2, 2, 4).max(axis=(2, 4))
    return pooled.reshape(len(x), -1) @ dense_k + dense_b


def cnn_layers():
    return [layers.Conv2D(4, 3), layers.BatchNormalization(), layers.MaxPooling2D(),
            layers.Flatten(), layers.Dense(3)]


@pytest.mark.parametrize("kind", ["sequential", "functional"])
def test_keras_ordered_weights_load_and_predict(kind):
    if kind == "sequential":
        module, _ = sequential.sequential_module([layers.Input((6, 6, 2)), *cnn_layers()])
    else:
        x = y = layers.Input((6, 6, 2))
        for layer in cnn_layers():
            y = layer(y)
        module = functional.functional_module(x, y)
    data = RNG.normal(size=(2, 6, 6, 2)).astype(np.float32)
    shapes = jax.eval_shape(module.init, jax.random.key(0), data)
    variables = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    keras_weights = keras_layout_cnn()
    variables = weights_lib.set_weights(module, variables, keras_weights)
    np.testing.assert_allclose(jax.jit(module.apply)(variables, data),
                               cnn_reference(data, keras_weights), rtol=1e-4, atol=1e-4)
    for got, want in zip(weights_lib.get_weights(module, variables), keras_weights):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_weight_order_for_recurrent_attention_and_sorted_dicts():
    tokens = layers.Input((5,), dtype="int32")
    emb = layers.Embedding(7, 4)(tokens)
    seq = layers.LSTM(3, return_sequences=True)(emb)
    att = layers.MultiHeadAttention(num_heads=1, key_dim=2)(seq, seq)
    out = layers.Dense(1)(layers.GlobalAveragePooling1D()(att))
    module = functional.functional_module(tokens, out)
    shapes = jax.eval_shape(module.init, jax.random.key(0), np.zeros((1, 5), np.int32))
    order = [(c, "/".join(p)) for c, p in weights_lib.keras_weight_order(module, shapes)]
    assert order == [("params", p) for p in (
        "embedding/embeddings", "lstm/cell/kernel", "lstm/cell/recurrent_kernel",
        "lstm/cell/bias", "multi_head_attention/query/kernel",
        "multi_head_attention/query/bias", "multi_head_attention/key/kernel",
        "multi_head_attention/key/bias", "multi_head_attention/value/kernel",
        "multi_head_attention/value/bias", "multi_head_attention/attention_output/kernel",
        "multi_head_attention/attention_output/bias", "dense/kernel", "dense/bias")]


def test_set_weights_rejects_wrong_count_and_shape():
    module, _ = sequential.sequential_module([layers.Dense(2)])
    shapes = jax.eval_shape(module.init, jax.random.key(0), np.zeros((1, 3)))
    variables = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    with pytest.raises(ValueError, match="expects 2 arrays"):
        weights_lib.set_weights(module, variables, [np.zeros((3, 2))])
    with pytest.raises(ValueError, match=r"dense/kernel has shape \(3, 2\)"):
        weights_lib.set_weights(module, variables, [np.zeros((2, 3)), np.zeros(2)])


_KERAS_CASES = {
    "Dense": (lambda m: m.Dense(3, activation="tanh"), (2, 4)),
    "Conv2D": (lambda m: m.Conv2D(3, 3, strides=2, padding="same"), (2, 7, 7, 2)),
    "Conv2D_groups": (lambda m: m.Conv2D(4, 2, groups=2, dilation_rate=2), (1, 6, 6, 4)),
    "Conv1D_causal": (lambda m: m.Conv1D(2, 3, padding="causal", dilation_rate=2), (2, 9, 3)),
    "Conv3D": (lambda m: m.Conv3D(2, 2, strides=(1, 2, 1)), (1, 3, 4, 3, 2)),
    "Conv2DTranspose_valid": (lambda m: m.Conv2DTranspose(2, 3, strides=2), (1, 4, 4, 3)),
    "Conv2DTranspose_same": (lambda m: m.Conv2DTranspose(2, 4, strides=2, padding="same"),
                             (1, 4, 5, 3)),
    "DepthwiseConv2D": (lambda m: m.DepthwiseConv2D(3, depth_multiplier=2, padding="same"),
                        (1, 5, 5, 3)),
    "SeparableConv2D": (lambda m: m.SeparableConv2D(4, 3, strides=2, depth_multiplier=2),
                        (1, 7, 7, 3)),
    "AveragePooling2D_same": (lambda m: m.AveragePooling2D(3, strides=2, padding="same"),
                              (1, 6, 7, 2)),
    "MaxPooling1D_same": (lambda m: m.MaxPooling1D(3, padding="same"), (1, 7, 2)),
    "BatchNormalization": (lambda m: m.BatchNormalization(), (2, 5)),
    "LayerNormalization": (lambda m: m.LayerNormalization(), (2, 3, 5)),
    "GroupNormalization": (lambda m: m.GroupNormalization(groups=2), (2, 3, 4)),
    "UpSampling2D_bilinear": (lambda m: m.UpSampling2D(interpolation="bilinear"),
                              (1, 3, 3, 2)),
    "LSTM": (lambda m: m.LSTM(3, return_sequences=True), (2, 5, 4)),
    "LSTM_backwards": (lambda m: m.LSTM(3, go_backwards=True, return_sequences=True),
                       (2, 5, 4)),
    "GRU": (lambda m: m.GRU(3), (2, 5, 4)),
    "GRU_reset_before": (lambda m: m.GRU(3, reset_after=False), (2, 5, 4)),
    "SimpleRNN": (lambda m: m.SimpleRNN(3), (2, 5, 4)),
    "MultiHeadAttention": (lambda m: m.MultiHeadAttention(2, 3), (2, 4, 5)),
}


@pytest.mark.parametrize("name", sorted(_KERAS_CASES))
def test_keras_get_weights_load_and_match_keras_predictions(name):
    keras = pytest.importorskip("keras", reason="Keras is not installed here; the NumPy "
                                "formulas in the tests above stand in for it")
    make, shape = _KERAS_CASES[name]
    data = RNG.normal(size=shape).astype(np.float32)
    k_inputs = keras.Input(shape[1:])
    k_layer = make(keras.layers)
    k_out = k_layer(k_inputs, k_inputs) if name == "MultiHeadAttention" else k_layer(k_inputs)
    k_model = keras.Model(k_inputs, k_out)
    k_model.set_weights([RNG.uniform(0.5, 1.5, w.shape) for w in k_model.get_weights()])
    x = layers.Input(shape[1:])
    ours = make(layers)
    module = functional.functional_module(x, ours(x, x) if name == "MultiHeadAttention"
                                          else ours(x))
    shapes = jax.eval_shape(module.init, jax.random.key(0), data)
    variables = weights_lib.set_weights(
        module, jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes),
        k_model.get_weights())
    np.testing.assert_allclose(module.apply(variables, data), k_model.predict(data, verbose=0),
                               rtol=1e-4, atol=1e-4)
