"""`mf.utils.pad_sequences` against hand-written NumPy arrays (Keras' semantics)."""

import numpy as np
import pytest

import mirrorfit as mf

SEQUENCES = [[1], [2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("padding, truncating, expected", [
    ("pre", "pre", [[0, 0, 1], [0, 2, 3], [5, 6, 7]]),
    ("post", "pre", [[1, 0, 0], [2, 3, 0], [5, 6, 7]]),
    ("pre", "post", [[0, 0, 1], [0, 2, 3], [4, 5, 6]]),
    ("post", "post", [[1, 0, 0], [2, 3, 0], [4, 5, 6]]),
])
def test_pad_sequences_pads_and_truncates_at_the_requested_end(padding, truncating, expected):
    out = mf.utils.pad_sequences(SEQUENCES, maxlen=3, padding=padding, truncating=truncating)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.array(expected))


def test_pad_sequences_defaults_to_the_longest_length_and_keeps_value_and_dtype():
    out = mf.utils.pad_sequences([[1.5], [], [2.5, 3.5]], dtype="float32", value=-1.0)
    np.testing.assert_array_equal(out, np.array([[-1, 1.5], [-1, -1], [2.5, 3.5]], np.float32))
    assert out.dtype == np.float32


def test_pad_sequences_keeps_the_sample_shape_of_multi_feature_steps():
    out = mf.utils.pad_sequences([np.ones((1, 2)), np.full((3, 2), 2)], padding="post")
    assert out.shape == (2, 3, 2)
    np.testing.assert_array_equal(out[0], [[1, 1], [0, 0], [0, 0]])


def test_pad_sequences_pads_strings_with_dtype_object():
    out = mf.utils.pad_sequences([["a"], ["b", "c"]], dtype=object, value="<pad>")
    assert out.tolist() == [["<pad>", "a"], ["b", "c"]]


@pytest.mark.parametrize("kwargs, match", [
    ({"padding": "middle"}, "padding must be 'pre' or 'post'"),
    ({"truncating": "x"}, "truncating must be"),
    ({"value": "pad"}, "dtype=object"),
])
def test_pad_sequences_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mf.utils.pad_sequences(SEQUENCES, **kwargs)


def test_pad_sequences_rejects_non_sequence_elements():
    with pytest.raises(ValueError, match="Received: element 3"):
        mf.utils.pad_sequences([[1, 2], 3])
