"""LSTM, GRU, SimpleRNN and MultiHeadAttention against NumPy written from Keras' formulas."""

import functools

import jax
import numpy as np
import pytest

from mirrorfit import layers

RNG = np.random.default_rng(1)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def random_variables(layer, *args):
    shapes = jax.eval_shape(layer.init, jax.random.key(0), *args)
    return jax.tree.map(lambda v: (0.5 * RNG.normal(size=v.shape)).astype(np.float32), shapes)


def run(layer, variables, *args, **kwargs):
    return jax.jit(functools.partial(layer.apply, **kwargs))(variables, *args)


def lstm_reference(x, kernel, recurrent, bias):
    """keras.layers.LSTMCell: gates i, f, c, o in kernel columns."""
    units = recurrent.shape[0]
    h = c = np.zeros((x.shape[0], units))
    outputs = []
    for t in range(x.shape[1]):
        z = x[:, t] @ kernel + h @ recurrent + bias
        i, f, g, o = np.split(z, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, 1), h, c


def gru_reference(x, kernel, recurrent, bias):
    """keras.layers.GRUCell with reset_after=True: bias [2, 3*units], gates z, r, h."""
    u = recurrent.shape[0]
    h = np.zeros((x.shape[0], u))
    outputs = []
    for t in range(x.shape[1]):
        xw = x[:, t] @ kernel + bias[0]
        hu = h @ recurrent + bias[1]
        z = sigmoid(xw[:, :u] + hu[:, :u])
        r = sigmoid(xw[:, u:2 * u] + hu[:, u:2 * u])
        hh = np.tanh(xw[:, 2 * u:] + r * hu[:, 2 * u:])
        h = z * h + (1 - z) * hh
        outputs.append(h)
    return np.stack(outputs, 1), h


def test_lstm_matches_keras_gate_layout_with_sequences_and_states():
    layer = layers.LSTM(3, return_sequences=True, return_state=True)
    x = RNG.normal(size=(2, 5, 4)).astype(np.float32)
    v = random_variables(layer, x)
    cell = v["params"]["cell"]
    assert cell["kernel"].shape == (4, 12) and cell["recurrent_kernel"].shape == (3, 12)
    seq, h, c = run(layer, v, x)
    ref_seq, ref_h, ref_c = lstm_reference(x, cell["kernel"], cell["recurrent_kernel"],
                                           cell["bias"])
    for got, want in ((seq, ref_seq), (h, ref_h), (c, ref_c)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_lstm_initial_forget_bias_is_one():
    bias = layers.LSTM(2).init(jax.random.key(0), np.zeros((1, 3, 2)))["params"]["cell"]["bias"]
    np.testing.assert_array_equal(bias, [0, 0, 1, 1, 0, 0, 0, 0])


def test_gru_matches_keras_reset_after_formula():
    layer = layers.GRU(3)
    x = RNG.normal(size=(2, 4, 2)).astype(np.float32)
    v = random_variables(layer, x)
    cell = v["params"]["cell"]
    assert cell["bias"].shape == (2, 9)
    _, ref_h = gru_reference(x, cell["kernel"], cell["recurrent_kernel"], cell["bias"])
    np.testing.assert_allclose(run(layer, v, x), ref_h, rtol=1e-4, atol=1e-5)


def test_gru_reset_before_and_simple_rnn_match_numpy():
    x = RNG.normal(size=(2, 3, 2)).astype(np.float32)
    gru = layers.GRU(2, reset_after=False)
    v = random_variables(gru, x)
    c = v["params"]["cell"]
    k, rk, b = c["kernel"], c["recurrent_kernel"], c["bias"]
    h = np.zeros((2, 2))
    for t in range(3):
        xw = x[:, t] @ k + b
        z = sigmoid(xw[:, :2] + h @ rk[:, :2])
        r = sigmoid(xw[:, 2:4] + h @ rk[:, 2:4])
        h = z * h + (1 - z) * np.tanh(xw[:, 4:] + (r * h) @ rk[:, 4:])
    np.testing.assert_allclose(run(gru, v, x), h, rtol=1e-4, atol=1e-5)
    rnn = layers.SimpleRNN(3, go_backwards=True)
    v = random_variables(rnn, x)
    c = v["params"]["cell"]
    h = np.zeros((2, 3))
    for t in reversed(range(3)):
        h = np.tanh(x[:, t] @ c["kernel"] + h @ c["recurrent_kernel"] + c["bias"])
    np.testing.assert_allclose(run(rnn, v, x), h, rtol=1e-4, atol=1e-5)


def mha_reference(q_in, v_in, p, num_heads, key_dim, mask=None):
    q = np.einsum("btd,dnh->btnh", q_in, p["query"]["kernel"]) + p["query"]["bias"]
    k = np.einsum("bsd,dnh->bsnh", v_in, p["key"]["kernel"]) + p["key"]["bias"]
    v = np.einsum("bsd,dnh->bsnh", v_in, p["value"]["kernel"]) + p["value"]["bias"]
    logits = np.einsum("btnh,bsnh->bnts", q / np.sqrt(key_dim), k)
    if mask is not None:
        logits = np.where(mask[:, None], logits, -1e9)
    scores = np.exp(logits - logits.max(-1, keepdims=True))
    scores /= scores.sum(-1, keepdims=True)
    out = np.einsum("bnts,bsnh->btnh", scores, v)
    o = p["attention_output"]
    return np.einsum("btnh,nho->bto", out, o["kernel"]) + o["bias"], scores


@pytest.mark.parametrize("masked", [False, True])
def test_multi_head_attention_matches_keras_formula(masked):
    layer = layers.MultiHeadAttention(num_heads=2, key_dim=3)
    query = RNG.normal(size=(2, 4, 5)).astype(np.float32)
    value = RNG.normal(size=(2, 6, 7)).astype(np.float32)
    mask = RNG.random((2, 4, 6)) > 0.3 if masked else None
    v = random_variables(layer, query, value)
    p = v["params"]
    assert p["query"]["kernel"].shape == (5, 2, 3) and p["value"]["kernel"].shape == (7, 2, 3)
    assert p["attention_output"]["kernel"].shape == (2, 3, 5)
    expected, expected_scores = mha_reference(query, value, p, 2, 3, mask)
    out = run(layer, v, query, value, attention_mask=mask)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    out, scores = run(layer, v, query, value, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_causal_mask_hides_the_future():
    layer = layers.MultiHeadAttention(num_heads=1, key_dim=2)
    x = RNG.normal(size=(1, 4, 3)).astype(np.float32)
    v = random_variables(layer, x, x)
    full = np.asarray(run(layer, v, x, x, use_causal_mask=True))
    changed = x.copy()
    changed[:, -1] += 5.0
    out = np.asarray(run(layer, v, changed, changed, use_causal_mask=True))
    np.testing.assert_allclose(out[:, :3], full[:, :3], rtol=1e-5, atol=1e-6)
    assert not np.allclose(out[:, 3], full[:, 3])
