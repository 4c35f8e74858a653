"""``format="onnx"`` when jax2onnx fails: the error names the recurrent layers and the
formats that take them (mirrorfit/_src/export/onnx.py). jax2onnx itself is replaced by a
stand-in that fails as it does on an LSTM, so this runs without the ``export`` extra."""

import types

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.export import onnx
from tests.helpers import mirrored_strategy


def _failing_jax2onnx(*_, **__):
    raise RuntimeError("Cannot lower scan: <ShapedArray(float32[batch,4])> tracer ...\n"
                       "(hundreds of lines of converter state)")


@pytest.fixture
def failing_converter(monkeypatch):
    monkeypatch.setattr(onnx, "require", lambda *_: types.SimpleNamespace(
        to_onnx=_failing_jax2onnx))


def test_an_lstm_that_jax2onnx_cannot_convert_is_named_with_the_alternatives(
        failing_converter, tmp_path):
    with mirrored_strategy(1).scope():
        model = mf.Sequential([mf.Input((5, 3)), mf.layers.LSTM(4, name="encoder_lstm"),
                               mf.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"recurrent loop \(lax.scan\) of the layers "
                                         r"\['encoder_lstm'\].*format='stablehlo'.*Received: "
                                         r"RuntimeError: Cannot lower scan") as error:
        model.export(tmp_path / "m.onnx", format="onnx", verbose=False)
    assert "hundreds of lines" not in str(error.value)  # the first line only; the rest chained
    assert isinstance(error.value.__cause__, RuntimeError)


def test_a_model_without_loops_names_the_endpoint(failing_converter, tmp_path):
    with mirrored_strategy(1).scope():
        model = mf.Sequential([mf.Input((3,)), mf.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"convert the endpoint 'serve' to ONNX\. Export "):
        model.export(tmp_path / "m.onnx", format="onnx", verbose=False)


def test_loop_layers_finds_each_recurrent_layer_once():
    with mirrored_strategy(1).scope():
        model = mf.Sequential([mf.Input((5, 3)), mf.layers.GRU(4, return_sequences=True),
                               mf.layers.SimpleRNN(2), mf.layers.Dense(1)])
    values = [np.asarray(v) for v in jax.tree.leaves(model.params)]

    def function(constants, x):
        params = jax.tree.unflatten(jax.tree.structure(model.params), constants)
        return model.module.apply({"params": params}, x)
    assert onnx.loop_layers(function, values, [jax.ShapeDtypeStruct((5, 3), np.float32)]) == [
        "gru", "simple_rnn"]
