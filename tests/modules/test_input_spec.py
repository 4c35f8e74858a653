"""Which per-example axes of a model's inputs may vary: the None dimensions of its Inputs,
or the timesteps of a sequence input for a model built from its first batch."""

import jax
import numpy as np
import pytest

from mirrorfit import layers
from mirrorfit._src.modules import input_spec


def _spec(*arrays):
    return input_spec.spec_of(tuple(arrays) if len(arrays) > 1 else arrays[0])


def test_variable_axes_follow_declared_inputs_and_sequence_inputs():
    tokens, features = np.zeros((1, 16), np.int32), np.zeros((1, 16, 3), np.float32)
    declared = [layers.Input((None,), dtype="int32"), layers.Input((None, 3))]
    assert input_spec.variable_axes(declared, _spec(tokens, features)) == (
        (True,), (True, False))
    assert input_spec.variable_axes(None, _spec(tokens, features)) == ((True,), (True, False))
    images = np.zeros((1, 8, 8, 3), np.float32)
    assert input_spec.variable_axes(None, _spec(images)) == (False, False, False)
    assert input_spec.variable_axes(None, _spec(np.zeros((1, 12), np.float32))) == (False,)


def test_check_matches_accepts_only_variable_axes():
    spec = _spec(np.zeros((1, 16, 3), np.float32))
    variable = input_spec.variable_axes(None, spec)
    input_spec.check_matches(spec, np.zeros((2, 5, 3)), variable=variable)
    with pytest.raises(ValueError, match=r"expected per-example shape \(16, 3\).*\(5, 4\)"):
        input_spec.check_matches(spec, np.zeros((2, 5, 4)), variable=variable)
    with pytest.raises(ValueError, match=r"expected per-example shape \(16, 3\)"):
        input_spec.check_matches(spec, np.zeros((2, 5, 3)))  # no variable axes given
    assert jax.tree.leaves(variable) == [True, False]
