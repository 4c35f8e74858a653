"""`mf.utils.to_categorical` and `mf.utils.normalize` against hand-computed NumPy arrays."""

import numpy as np
import pytest

import mirrorfit as mf


def test_to_categorical_one_hots_class_ids_with_the_class_axis_last():
    out = mf.utils.to_categorical(np.array([[0, 2], [1, 0]]), num_classes=4)
    assert out.shape == (2, 2, 4) and out.dtype == np.float64
    np.testing.assert_array_equal(out[0, 1], [0, 0, 1, 0])
    np.testing.assert_array_equal(out.argmax(-1), [[0, 2], [1, 0]])


def test_to_categorical_drops_a_trailing_axis_of_one_and_infers_num_classes():
    out = mf.utils.to_categorical([[1], [2], [0]])
    np.testing.assert_array_equal(out, np.eye(3)[[1, 2, 0]])


def test_to_categorical_of_empty_labels_needs_num_classes():
    with pytest.raises(ValueError, match="needs num_classes"):
        mf.utils.to_categorical([])


@pytest.mark.parametrize("axis, order", [(-1, 2), (0, 2), (1, 1), (-1, np.inf)])
def test_normalize_divides_by_the_norm_along_axis(axis, order):
    x = np.array([[3.0, -4.0, 0.0], [1.0, 2.0, 2.0]])
    expected = x / np.linalg.norm(x, order, axis, keepdims=True)
    np.testing.assert_allclose(mf.utils.normalize(x, axis=axis, order=order), expected,
                               rtol=1e-12)


def test_normalize_leaves_zero_rows_at_zero_and_takes_one_norm_for_axis_none():
    x = np.array([[0.0, 0.0], [3.0, 4.0]])
    np.testing.assert_array_equal(mf.utils.normalize(x), [[0, 0], [0.6, 0.8]])
    np.testing.assert_allclose(mf.utils.normalize(x, axis=None), x / 5.0, rtol=1e-12)
