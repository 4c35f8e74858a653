"""Bidirectional and TimeDistributed against the wrapped layers run by hand and NumPy, with
Keras' weight names, order and parameter counts."""

import functools

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from tests.helpers import mirrored_strategy

RNG = np.random.default_rng(5)


def _run(layer, variables, *args, **kwargs):
    return jax.jit(functools.partial(layer.apply, **kwargs))(variables, *args)


def test_bidirectional_merges_the_forward_and_backward_layers_run_by_hand():
    """Forward LSTM, backward LSTM (go_backwards, its sequence flipped back), merged as each
    merge_mode; return_state appends forward then backward states; a mask reaches both."""
    x = RNG.normal(size=(2, 4, 3)).astype(np.float32)
    wrapper = layers.Bidirectional(layers.LSTM(2, return_sequences=True, return_state=True),
                                   merge_mode=None)
    variables = wrapper.init(jax.random.key(0), x)
    params = variables["params"]
    assert sorted(params) == ["backward_lstm", "forward_lstm"]
    forward = layers.LSTM(2, return_sequences=True, return_state=True)
    backward = layers.LSTM(2, return_sequences=True, return_state=True, go_backwards=True)
    y, h, c = _run(forward, {"params": params["forward_lstm"]}, x)
    y_rev, h_rev, c_rev = _run(backward, {"params": params["backward_lstm"]}, x)
    y_rev = np.flip(y_rev, axis=1)
    a, b, *states = _run(wrapper, variables, x)  # Keras: (y, y_rev) + states
    np.testing.assert_allclose(a, y, rtol=1e-6)
    np.testing.assert_allclose(b, y_rev, rtol=1e-6)
    for got, want in zip(states, (h, c, h_rev, c_rev)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    merged = {"concat": np.concatenate([y, y_rev], -1), "sum": y + y_rev,
              "ave": (y + y_rev) / 2, "mul": y * y_rev}
    for mode, expected in merged.items():
        layer = layers.Bidirectional(layers.LSTM(2, return_sequences=True), merge_mode=mode)
        np.testing.assert_allclose(_run(layer, variables, x), expected, rtol=1e-5, atol=1e-7)
    # A mask: masked steps output zeros (Keras forces zero_output_for_mask for sequences),
    # and the real steps equal the run on the unpadded row, in both directions.
    mask = np.array([[True, True, False, False], [True, True, True, True]])
    layer = layers.Bidirectional(layers.LSTM(2, return_sequences=True))
    masked = np.asarray(_run(layer, variables, x, mask=mask))
    np.testing.assert_array_equal(masked[0, 2:], 0)
    np.testing.assert_allclose(masked[0, :2], _run(layer, variables, x[:1, :2])[0],
                               rtol=1e-5, atol=1e-7)
    last = layers.Bidirectional(layers.LSTM(2))
    np.testing.assert_allclose(_run(last, variables, x, mask=mask)[0],
                               _run(last, variables, x[:1, :2])[0], rtol=1e-5, atol=1e-7)


def test_time_distributed_applies_the_layer_to_every_step():
    x = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)
    layer = layers.TimeDistributed(layers.Dense(6, activation="relu"))
    variables = layer.init(jax.random.key(0), x)
    p = variables["params"]["dense"]
    expected = np.maximum(x @ np.asarray(p["kernel"]) + np.asarray(p["bias"]), 0)
    np.testing.assert_allclose(_run(layer, variables, x), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="at least 3 dimensions"):
        layer.apply(variables, x[:, 0, 0])


def test_wrappers_have_keras_weight_names_order_counts_and_configs():
    """Keras 3 lists this model's weights as embedding, bidirectional/forward_lstm (kernel,
    recurrent_kernel, bias), backward_lstm, time_distributed/dense, bidirectional_1/
    forward_gru, backward_gru (printed by Keras 3.15 with the jax backend): 318 params."""
    with mirrored_strategy(1).scope():
        model = mf.Sequential([
            layers.Input((None,), dtype="int32"), layers.Embedding(10, 4),
            layers.Bidirectional(layers.LSTM(3, return_sequences=True)),
            layers.TimeDistributed(layers.Dense(2)), layers.Bidirectional(layers.GRU(2))])
    assert model.count_params() == 318
    assert [w.shape for w in model.get_weights()] == [
        (10, 4), (4, 12), (3, 12), (12,), (4, 12), (3, 12), (12,), (6, 2), (2,),
        (2, 6), (2, 6), (2, 6), (2, 6), (2, 6), (2, 6)]
    assert sorted(model.params["bidirectional_1"]) == ["backward_gru", "forward_gru"]
    assert sorted(model.params["time_distributed"]) == ["dense"]
    assert model.predict(np.ones((2, 7), np.int32), verbose=0).shape == (2, 4)
    lines = []
    model.summary(print_fn=lines.append)  # the variable length shows as None, as in Keras
    assert "(None, None, 2)" in "\n".join(lines) and "(None, 4)" in "\n".join(lines)
    for layer in model.layers[1:3]:
        config = layer.get_config()
        rebuilt = type(layer).from_config(config)
        assert rebuilt.get_config() == config
    config = model.layers[1].get_config()
    assert config["layer"]["config"]["name"] == "forward_lstm"
    assert config["backward_layer"]["config"]["go_backwards"] is True


def test_bidirectional_rejects_what_keras_rejects():
    with pytest.raises(ValueError, match="Invalid merge mode.*merge_mode='max'"):
        layers.Bidirectional(layers.LSTM(2), merge_mode="max")
    with pytest.raises(ValueError, match="different `go_backwards`"):
        layers.Bidirectional(layers.LSTM(2), backward_layer=layers.LSTM(2))
    with pytest.raises(ValueError, match="return_sequences"):
        layers.Bidirectional(layers.LSTM(2), backward_layer=layers.LSTM(
            2, go_backwards=True, return_sequences=True))
    with pytest.raises(ValueError, match="mirrorfit.layers.*Received: layer=3"):
        layers.Bidirectional(3)
