"""The multi-process input fingerprint: shapes, dtypes and a hash of a fixed sample of rows,
compared across processes at the start of fit/evaluate/predict.

Two processes given different arrays are tested in
tests/distribute/multi_worker/test_multi_worker.py
(``test_mismatched_batch_size_and_model_fail_fast_naming_them``, ``--data-seed 0,1``).
"""

import numpy as np

from mirrorfit._src.trainers import data_adapters
from mirrorfit._src.trainers.data_adapters.array_data_adapter import (
    FINGERPRINT_ROWS,
    fingerprint,
)
from tests.trainers.data_adapters.helpers import X, Y, batches


def _fields(x, y):
    data = data_adapters.get_data_adapter(x, y, batch_size=8, num_replicas=2)
    return data_adapters.input_fingerprint(data)


def test_fingerprint_names_every_input_leaf_with_shape_and_dtype():
    fields = _fields({"a": X, "b": X[:, :2]}, Y)
    assert set(fields) == {"input x['a']", "input x['b']", "input y"}
    assert fields["input x['b']"][:2] == ((35, 2), "float32")


def test_fingerprint_is_stable_and_changes_with_a_sampled_row_or_a_shape():
    same = _fields(X.copy(), Y.copy())
    assert same == _fields(X, Y)
    changed = X.copy()
    changed[-1, 0] += 1.0  # the last row is always sampled
    assert _fields(changed, Y)["input x"] != same["input x"]
    assert _fields(changed, Y)["input y"] == same["input y"]
    assert _fields(X[:-1], Y[:-1])["input x"][0] == (34, 5)


def test_fingerprint_hashes_a_fixed_small_sample_of_rows():
    big = np.zeros((10_000, 3), np.float32)
    unsampled = big.copy()
    unsampled[1] = 5.0  # rows are evenly spaced: row 1 is not among 8 of 10 000
    assert fingerprint(big, "x") == fingerprint(unsampled, "x")
    assert FINGERPRINT_ROWS == 8


def test_sources_of_batches_have_no_fingerprint():
    data = data_adapters.get_data_adapter(batches(), batch_size=None, num_replicas=2)
    assert data_adapters.input_fingerprint(data) == {}

