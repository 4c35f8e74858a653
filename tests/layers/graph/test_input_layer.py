"""InputLayer: Keras 3's and tf.keras 2's arguments, and leading a Sequential."""

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from tests.helpers import mirrored_strategy


def test_input_layer_leads_a_sequential_and_is_not_one_of_its_layers():
    with mirrored_strategy(1).scope():  # tf.keras 2's input_shape= spelling
        model = mf.Sequential([layers.InputLayer(input_shape=(5,)), layers.Dense(2, name="out")])
    assert [layer.name for layer in model.layers] == ["out"]
    assert model.get_weights()[0].shape == (5, 2)  # built from the InputLayer's shape
    np.testing.assert_allclose(model.predict(np.ones((3, 5), np.float32), verbose=0),
                               np.ones((3, 5)) @ model.get_weights()[0], rtol=1e-5)


@pytest.mark.parametrize("kwargs", [
    {"shape": (5,)}, {"input_shape": (5,)}, {"batch_shape": (None, 5)},
    {"batch_input_shape": (None, 5)}, {"input_tensor": layers.Input((5,))},
    {"shape": (5,), "input_tensor": layers.Input((5,))},
])
def test_input_layer_keras_3_and_tf_keras_2_forms_give_one_input(kwargs):
    output = layers.InputLayer(**kwargs).output
    assert output.shape == (None, 5) and output.dtype == np.float32
    if "input_tensor" in kwargs:
        assert output is kwargs["input_tensor"]


def test_input_layer_output_batch_shape_dtype_and_config():
    layer = layers.InputLayer(shape=(3, 4), batch_size=8, dtype="int32", name="tokens")
    assert layer.output.shape == (8, 3, 4) and layer.batch_shape == (8, 3, 4)
    assert layer.output.dtype == np.int32 and layer.name == "tokens"
    assert layer.get_config() == {"batch_shape": [8, 3, 4], "dtype": "int32",
                                  "sparse": False, "name": "tokens"}


def test_input_layer_rejects_conflicting_arguments():
    with pytest.raises(ValueError, match="not both"):
        layers.InputLayer(shape=(3,), batch_shape=(None, 3))
    with pytest.raises(ValueError, match="agree with input_tensor"):
        layers.InputLayer(shape=(4,), input_tensor=layers.Input((3,)))
    with pytest.raises(ValueError, match="input_tensor must be a KerasTensor"):
        layers.InputLayer(input_tensor=np.zeros((1, 3)))
    with pytest.raises(ValueError, match="dense, required"):
        layers.InputLayer(shape=(3,), sparse=True)
