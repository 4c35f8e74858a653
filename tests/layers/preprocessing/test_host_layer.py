"""serialize_host_layer/deserialize_host_layer: a host layer's config and what adapt learned."""

import json

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.layers.preprocessing.host_layer import (
    deserialize_host_layer,
    serialize_host_layer,
)


def test_serialized_host_layers_keep_what_adapt_learned():
    integers = mf.layers.IntegerLookup()
    integers.adapt([7, 3, 3, 9, 9, 9])
    tf_idf = mf.layers.TextVectorization(output_mode="tf_idf")
    tf_idf.adapt(["a b c", "b c d", "c"])
    for layer, inputs in ((integers, [9, 7, 5]), (tf_idf, ["a c z", "d"])):
        config = json.loads(json.dumps(serialize_host_layer(layer)))
        assert config["config"]["vocabulary"] is None  # as Keras: learned state is an asset
        rebuilt = deserialize_host_layer(config)
        assert type(rebuilt) is type(layer)
        np.testing.assert_array_equal(rebuilt(inputs), layer(inputs))
    fresh = deserialize_host_layer(serialize_host_layer(mf.layers.StringLookup()))
    assert fresh.get_vocabulary() == ["[UNK]"]  # nothing learned, nothing stored


def test_serializing_a_host_layer_with_a_python_function_raises_naming_it():
    custom = mf.layers.TextVectorization(standardize=str.upper, vocabulary=["A"], name="upper")
    with pytest.raises(TypeError, match="'upper' as JSON"):
        serialize_host_layer(custom)


def test_output_shapes_come_from_the_config_as_keras():
    assert mf.layers.TextVectorization(output_sequence_length=7).compute_output_shape(
        (None,)) == (None, 7)
    multi_hot = mf.layers.TextVectorization(output_mode="multi_hot", vocabulary=["a", "b"])
    assert multi_hot.compute_output_shape((None,)) == (None, 3)  # "[UNK]", a, b
    counts = mf.layers.IntegerLookup(output_mode="count", max_tokens=10,
                                     pad_to_max_tokens=True, vocabulary=[1, 2])
    assert counts.compute_output_shape((None, 4)) == (None, 10)
    assert mf.layers.StringLookup().compute_output_shape((None, 4)) == (None, 4)
