"""Keras masks in models: made by Embedding(mask_zero=True) and Masking, honoured by the
recurrent layers, GlobalAveragePooling1D and MultiHeadAttention, passed on or dropped as
Keras does (mirrorfit/_src/layers/graph/mask_flow.py). References are NumPy runs of the unpadded
sequences (tests/layers/test_recurrent.py's Keras formulas)."""

import jax
import numpy as np

import mirrorfit as mf
from mirrorfit import layers
from mirrorfit._src.layers.graph import mask_flow
from tests.helpers import mirrored_strategy
from tests.layers.test_recurrent import gru_reference, lstm_reference

RNG = np.random.default_rng(3)
TOKENS = np.array([[3, 1, 4, 0, 0], [2, 7, 1, 8, 2], [5, 0, 0, 0, 0]], np.int32)  # 0: padding
LENGTHS = (3, 5, 1)
ONE = mirrored_strategy(1)  # the models of this file predict on one device


def _model(inputs, outputs):
    with ONE.scope():
        return mf.Model(inputs, outputs)


def _predict(model, x):
    return model.predict(x, batch_size=len(x), verbose=0)


def _simple_rnn_reference(x, kernel, recurrent, bias):
    h = np.zeros((x.shape[0], recurrent.shape[0]))
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t] @ kernel + h @ recurrent + bias)
    return h


def test_masked_rnns_equal_numpy_on_the_unpadded_sequences():
    """LSTM, GRU and SimpleRNN (forwards and go_backwards) after Embedding(mask_zero=True):
    each row's output is the run on that row without its padding; with return_sequences a
    masked step repeats the previous output (Keras' JAX rnn) and the states stay those of
    the last real step."""
    inputs = layers.Input((5,), dtype="int32")
    embedding = layers.Embedding(10, 4, mask_zero=True)
    x = embedding(inputs)
    rnns = {"lstm": layers.LSTM(3), "lstm_back": layers.LSTM(3, go_backwards=True),
            "gru": layers.GRU(3), "gru_back": layers.GRU(3, go_backwards=True),
            "rnn": layers.SimpleRNN(3), "rnn_back": layers.SimpleRNN(3, go_backwards=True),
            "seq": layers.LSTM(2, return_sequences=True, return_state=True)}
    model = _model(inputs, {name: rnn(x) for name, rnn in rnns.items()})
    got = _predict(model, TOKENS)
    params = {name: model.params[rnn.name]["cell"] for name, rnn in rnns.items()}
    params = {name: {k: np.asarray(v) for k, v in p.items()} for name, p in params.items()}
    table = np.asarray(model.params[embedding.name]["embeddings"])
    for row, length in enumerate(LENGTHS):
        seq = table[TOKENS[row:row + 1, :length]]
        references = {"lstm": lambda s, p: lstm_reference(s, *p)[1],
                      "gru": lambda s, p: gru_reference(s, *p)[1],
                      "rnn": lambda s, p: _simple_rnn_reference(s, *p)}
        for name, reference in references.items():
            p = params[name]
            np.testing.assert_allclose(
                got[name][row], reference(seq, (p["kernel"], p["recurrent_kernel"],
                                                p["bias"]))[0], rtol=1e-4, atol=1e-5)
            p = params[f"{name}_back"]
            np.testing.assert_allclose(
                got[f"{name}_back"][row],
                reference(seq[:, ::-1], (p["kernel"], p["recurrent_kernel"], p["bias"]))[0],
                rtol=1e-4, atol=1e-5)
    sequences, h, c = got["seq"]
    p = params["seq"]
    expected, expected_h, expected_c = lstm_reference(table[TOKENS[:1, :3]], p["kernel"],
                                                      p["recurrent_kernel"], p["bias"])
    np.testing.assert_allclose(sequences[0, :3], expected[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(sequences[0, 3:], np.repeat(sequences[0, 2:3], 2, axis=0))
    np.testing.assert_allclose(h[0], expected_h[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c[0], expected_c[0], rtol=1e-4, atol=1e-5)


def test_mask_passes_dense_and_dropout_to_global_average_pooling():
    """Dense and Dropout pass the mask on (Keras' supports_masking); GlobalAveragePooling1D
    averages the real steps only; without mask_zero it is the plain mean."""
    inputs = layers.Input((5,), dtype="int32")
    outputs = {}
    for mask_zero in (True, False):
        embedding = layers.Embedding(10, 4, mask_zero=mask_zero,
                                     embeddings_initializer="glorot_uniform")
        dense = layers.Dense(3)
        x = layers.Dropout(0.5)(dense(embedding(inputs)))
        outputs[mask_zero] = (layers.GlobalAveragePooling1D()(x), embedding, dense)
    model = _model(inputs, [outputs[True][0], outputs[False][0]])
    masked, plain = _predict(model, TOKENS)
    for pooled, (_, embedding, dense), mask_zero in ((masked, outputs[True], True),
                                                     (plain, outputs[False], False)):
        p = model.params
        steps = (np.asarray(p[embedding.name]["embeddings"])[TOKENS]
                 @ np.asarray(p[dense.name]["kernel"]) + np.asarray(p[dense.name]["bias"]))
        weight = (TOKENS != 0 if mask_zero else np.ones(TOKENS.shape))[..., None]
        expected = (steps * weight).sum(1) / weight.sum(1)
        np.testing.assert_allclose(pooled, expected, rtol=1e-5, atol=1e-6)


def test_masking_layer_zeroes_and_masks_padded_steps_in_a_sequential():
    x = RNG.normal(size=(2, 4, 3)).astype(np.float32)
    x[0, 2:] = -1.0
    rnn = layers.SimpleRNN(2)
    with ONE.scope():
        model = mf.Sequential([layers.Input((4, 3)), layers.Masking(mask_value=-1.0), rnn])
    got = _predict(model, x)
    p = {k: np.asarray(v) for k, v in model.params[rnn.name]["cell"].items()}
    for row, length in enumerate((2, 4)):
        expected = _simple_rnn_reference(x[row:row + 1, :length], p["kernel"],
                                         p["recurrent_kernel"], p["bias"])
        np.testing.assert_allclose(got[row], expected[0], rtol=1e-4, atol=1e-5)
    out = jax.jit(layers.Masking(mask_value=-1.0).apply)({}, x)
    np.testing.assert_array_equal(out, np.where((x != -1.0).any(-1, keepdims=True), x, 0))


def test_multi_head_attention_uses_query_and_value_masks():
    """As Keras' _compute_attention_mask: query mask [B, T, 1] and value (and key) mask
    [B, 1, S]; equal to the layer given that attention_mask by hand."""
    inputs = layers.Input((5,), dtype="int32")
    embedding = layers.Embedding(10, 4, mask_zero=True)
    x = embedding(inputs)
    attention = layers.MultiHeadAttention(num_heads=2, key_dim=3)
    model = _model(inputs, attention(x, x))
    got = _predict(model, TOKENS)
    embedded = np.asarray(model.params[embedding.name]["embeddings"])[TOKENS]
    mask = TOKENS != 0
    variables = {"params": model.params[attention.name]}
    apply = jax.jit(attention.apply)
    by_hand = apply(variables, embedded, embedded,
                    attention_mask=mask[:, :, None] & mask[:, None, :])
    np.testing.assert_allclose(got, by_hand, rtol=1e-5, atol=1e-6)
    unmasked = np.asarray(apply(variables, embedded, embedded))
    assert not np.allclose(got[0, :3], unmasked[0, :3], atol=1e-4)


def test_compute_mask_matches_keras():
    mask = np.array([[True, False]])
    assert layers.LSTM(2).compute_mask(None, mask) is None
    assert layers.LSTM(2, return_sequences=True).compute_mask(None, mask) is mask
    assert layers.GRU(2, return_sequences=True, return_state=True).compute_mask(
        None, mask) == [mask, None]
    assert layers.Embedding(3, 2).compute_mask(np.array([[0, 1]]), None) is None
    np.testing.assert_array_equal(
        layers.Embedding(3, 2, mask_zero=True).compute_mask(np.array([[0, 1]]), None),
        [[False, True]])
    assert layers.Dense(2).compute_mask(None, mask) is mask
    # Layers without Keras' masking support drop it; GlobalAveragePooling1D consumes it.
    for layer in (layers.Flatten(), layers.GlobalMaxPooling1D(), layers.Conv1D(2, 2),
                  layers.GlobalAveragePooling1D()):
        assert mask_flow.output_masks(layer, None, np.zeros(2), mask) == [None]


class _ScaleSteps(layers.Layer):
    """A Keras-style layer that consumes the mask and passes it on (overrides
    compute_mask, so supports_masking, as Keras)."""

    def call(self, inputs, mask=None):
        return inputs * mask[..., None].astype(inputs.dtype)  # a mask also when built

    def compute_mask(self, inputs, previous_mask):
        return previous_mask


def test_keras_style_layers_take_the_mask_and_pass_it_on_when_they_support_masking():
    class Plain(layers.Layer):
        def call(self, inputs):
            return inputs

    assert _ScaleSteps().supports_masking and not Plain().supports_masking
    inputs = layers.Input((5,), dtype="int32")
    x = layers.Embedding(10, 4, mask_zero=True)(inputs)
    scaled = _ScaleSteps()(x)
    assert scaled.mask.shape == (None, 5) and scaled.mask.dtype == bool
    pooled = layers.GlobalAveragePooling1D()(scaled)
    dropped = layers.GlobalAveragePooling1D()(Plain()(x))  # the mask stops at Plain
    model = _model(inputs, [scaled, pooled, dropped])
    scaled, pooled, dropped = _predict(model, TOKENS)
    mask = (TOKENS != 0)[..., None]
    np.testing.assert_array_equal(scaled[~mask[..., 0]], 0)
    np.testing.assert_allclose(pooled, scaled.sum(1) / mask.sum(1), rtol=1e-5, atol=1e-7)
    table = np.asarray(model.params["embedding"]["embeddings"])
    np.testing.assert_allclose(dropped, table[TOKENS].mean(1), rtol=1e-5, atol=1e-7)
