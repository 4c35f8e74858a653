"""Keras masks through the merge layers, as Keras 3's ``keras/src/layers/merging/``: the
element-wise merges OR their inputs' masks (none unless every input has one), Concatenate
joins them along its axis, Dot drops them, and Maximum/Minimum/Multiply read them for their
values. References are the Keras formulas written in NumPy; in a model the mask reaches a
GlobalAveragePooling1D, whose output is then the masked mean."""

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from tests.helpers import mirrored_strategy

RNG = np.random.default_rng(5)
X1, X2 = (RNG.normal(size=(2, 4, 3)).astype(np.float32) for _ in range(2))
M1 = np.array([[True, True, False, False], [True, False, True, False]])
M2 = np.array([[True, False, True, False], [False, False, True, True]])
NONE_SET = (layers.Add(), layers.Subtract(), layers.Average(), layers.Multiply(),
            layers.Maximum(), layers.Minimum())


@pytest.mark.parametrize("layer", NONE_SET, ids=lambda layer: type(layer).__name__)
def test_elementwise_merges_or_the_masks_only_when_every_input_has_one(layer):
    np.testing.assert_array_equal(layer.compute_mask([X1, X2], [M1, M2]), M1 | M2)
    assert layer.compute_mask([X1, X2], [M1, None]) is None
    assert layer.compute_mask([X1, X2], None) is None


def test_concatenate_joins_masks_along_its_axis_and_dot_drops_them():
    features, steps = layers.Concatenate(), layers.Concatenate(axis=1)
    np.testing.assert_array_equal(features.compute_mask([X1, X2], [M1, M2]), M1 | M2)
    # An input without a mask counts as all kept.
    np.testing.assert_array_equal(features.compute_mask([X1, X2], [M1, None]), np.ones_like(M1))
    np.testing.assert_array_equal(steps.compute_mask([X1, X2], [M1, None]),
                                  np.concatenate([M1, np.ones_like(M1)], axis=1))
    assert features.compute_mask([X1, X2], [None, None]) is None
    assert layers.Dot(axes=2).compute_mask([X1, X2], [M1, M2]) is None


def test_merge_masks_must_be_one_per_input():
    with pytest.raises(ValueError, match="must be a list"):
        layers.Add().compute_mask([X1, X2], M1)
    with pytest.raises(ValueError, match="one mask"):
        layers.Concatenate().compute_mask([X1, X2], [M1])


def _where(mask, a, b):
    return np.where(mask[..., None], a, b)


@pytest.mark.parametrize("masks, expected", [
    # Both masked: a position masked in one input takes the other's value.
    ((M1, M2), _where(M1 & M2, np.maximum(X1, X2), _where(M2, X2, X1))),
    # Only the first: its masked positions take the second's value.
    ((M1, None), _where(M1, np.maximum(X1, X2), X2)),
    ((None, None), np.maximum(X1, X2)),
])
def test_maximum_gives_masked_positions_the_other_inputs_value(masks, expected):
    np.testing.assert_array_equal(layers.Maximum().apply({}, [X1, X2], mask=list(masks)),
                                  expected)


def test_minimum_and_multiply_read_the_masks_as_keras():
    minimum = layers.Minimum().apply({}, [X1, X2], mask=[M1, M2])
    np.testing.assert_array_equal(
        minimum, _where(M1 & M2, np.minimum(X1, X2), _where(M2, X2, X1)))
    # Multiply: a masked position is 1 in the product, 0 where every input is masked.
    product = layers.Multiply().apply({}, [X1, X2], mask=[M1, M2])
    np.testing.assert_allclose(product, _where(M1 | M2, _where(M1, X1, 1) * _where(M2, X2, 1),
                                               0), rtol=1e-6)
    product = layers.Multiply().apply({}, [X1, X2], mask=[M1, None])
    np.testing.assert_allclose(product, _where(M1, X1, 1) * X2, rtol=1e-6)


def test_merged_masks_reach_the_next_layer_in_a_model():
    """Masking on both inputs, then Maximum and Concatenate(axis=1) into
    GlobalAveragePooling1D: the pooled means are over the merged mask's steps."""
    a, b = layers.Input((4, 3)), layers.Input((4, 3))
    ma, mb = layers.Masking()(a), layers.Masking()(b)
    merged = layers.Maximum()([ma, mb])
    joined = layers.Concatenate(axis=1)([ma, b])
    assert merged.mask.shape == (None, 4) and joined.mask.shape == (None, 8)
    assert layers.Add()([ma, b]).mask is None and layers.Dot(axes=2)([ma, mb]).mask is None
    with mirrored_strategy(1).scope():
        model = mf.Model([a, b], [layers.GlobalAveragePooling1D()(merged),
                                  layers.GlobalAveragePooling1D()(joined)])
    x1, x2 = _where(M1, X1, 0), _where(M2, X2, 0)  # what Masking masks
    pooled_max, pooled_cat = model.predict([x1, x2], verbose=0)
    maximum = _where(M1 & M2, np.maximum(x1, x2), _where(M2, x2, x1))
    mask = (M1 | M2)[..., None]
    np.testing.assert_allclose(pooled_max, (maximum * mask).sum(1) / mask.sum(1), rtol=1e-6)
    cat_x, cat_mask = np.concatenate([x1, x2], 1), np.concatenate([M1, np.ones_like(M2)], 1)
    np.testing.assert_allclose(pooled_cat, (cat_x * cat_mask[..., None]).sum(1)
                               / cat_mask.sum(1, keepdims=True), rtol=1e-6)
