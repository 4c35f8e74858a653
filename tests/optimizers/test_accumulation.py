"""The accumulators of a checkpoint carried over to another replica count, or to and from
the params-shaped form: the slots summed into the first, so their sum (what the update
all-reduces) is kept."""

import numpy as np

from mirrorfit._src.optimizers.accumulation import resized_accumulators

KEY = "opt_state/inner_state/accumulated_gradients/params/Dense_0/kernel"


def test_resized_accumulators_keep_the_sum_of_the_slots():
    slots = np.arange(3 * 4 * 2, dtype=np.float32).reshape(3, 4, 2)
    other = {"opt_state/inner_state/mu/params/Dense_0/kernel": np.ones((3, 4, 2), np.float32)}
    arrays = {KEY: slots, **other}
    to_eight = resized_accumulators(arrays, {KEY: (8, 4, 2)})[KEY]
    assert to_eight.shape == (8, 4, 2) and to_eight.dtype == np.float32
    np.testing.assert_array_equal(to_eight[0], slots.sum(axis=0))
    assert not np.any(to_eight[1:])
    to_params = resized_accumulators(arrays, {KEY: (4, 2)})[KEY]
    np.testing.assert_array_equal(to_params, slots.sum(axis=0))
    from_params = resized_accumulators({KEY: to_params}, {KEY: (2, 4, 2)})[KEY]
    np.testing.assert_array_equal(from_params.sum(axis=0), to_params)
    # Other entries, and shapes that differ in more than the replica axis, stay for the
    # caller's mismatch report.
    kept = resized_accumulators(arrays, {KEY: (8, 5, 2), **dict.fromkeys(other, (8, 4, 2))})
    assert kept.keys() == arrays.keys() and all(kept[k] is arrays[k] for k in arrays)
