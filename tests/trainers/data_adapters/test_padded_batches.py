"""Tests for the input adapters: fixed-shape padded and masked global batches.

A global batch that does not divide by the replica count, and the last partial batch of an
epoch, must be padded to one static shape and masked so that no example is dropped and none
is counted twice.
"""

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.distribute import batch as batch_lib
from mirrorfit._src.trainers import data_adapters as data_lib


def _real_rows(batches, leaf=lambda b: b.x):
    """Concatenates the real (mask == 1) rows of a list of Batch, in order."""
    return np.concatenate([leaf(b)[b.mask == 1] for b in batches])


def test_padded_size_is_smallest_multiple_of_replicas():
    assert batch_lib.padded_size(32, 8) == 32
    assert batch_lib.padded_size(20, 8) == 24
    assert batch_lib.padded_size(20, 3) == 21
    assert batch_lib.padded_size(11, 1) == 11


def test_check_batch_size_defaults_to_keras_32_and_accepts_numpy_ints():
    assert data_lib.check_batch_size(None) == 32
    assert data_lib.check_batch_size(np.int64(7)) == 7


@pytest.mark.parametrize("batch_size, num_replicas", [(32, 8), (20, 3), (20, 8), (7, 1)])
def test_array_batches_cover_every_row_once_with_static_shape(batch_size, num_replicas):
    n = 203
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n)
    data = data_lib.ArrayDataAdapter(x, y, batch_size=batch_size, num_replicas=num_replicas)
    padded = batch_lib.padded_size(batch_size, num_replicas)
    batches = list(data.batches(0))
    assert data.steps == len(batches) == -(-n // batch_size)
    assert data.padded_batch_size == padded
    for b in batches:
        assert b.x.shape == (padded, 2) and b.y.shape == (padded,)
        assert b.mask.shape == (padded,) and b.sample_weight is None  # weighted by the mask
        assert b.mask.dtype == bool
        # Real rows first, then padding.
        real = int(b.mask.sum())
        np.testing.assert_array_equal(b.mask[:real], 1.0)
        np.testing.assert_array_equal(b.mask[real:], 0.0)
        # Padding repeats real rows, so the model only sees finite, in-range data.
        for pad_row in b.x[real:]:
            assert any(np.array_equal(pad_row, r) for r in b.x[:real])
    assert [int(b.mask.sum()) for b in batches[:-1]] == [batch_size] * (len(batches) - 1)
    assert int(batches[-1].mask.sum()) == n - batch_size * (len(batches) - 1)
    # No example dropped, none counted twice, order kept.
    np.testing.assert_array_equal(_real_rows(batches), x)
    np.testing.assert_array_equal(_real_rows(batches, lambda b: b.y), y)


def test_sample_weight_is_zero_on_padding_rows():
    n = 10
    w = np.linspace(0.5, 2.0, n).astype(np.float32)
    data = data_lib.ArrayDataAdapter(np.zeros((n, 1)), np.zeros(n), w, batch_size=4, num_replicas=3)
    batches = list(data.batches(0))
    assert data.padded_batch_size == 6
    np.testing.assert_allclose(np.concatenate([b.sample_weight[b.mask == 1] for b in batches]), w)
    for b in batches:
        np.testing.assert_array_equal(b.sample_weight[b.mask == 0], 0.0)


def test_batch_size_larger_than_data_is_one_batch():
    data = data_lib.ArrayDataAdapter(np.zeros((5, 1)), np.zeros(5), batch_size=64, num_replicas=8)
    (batch,) = list(data.batches(0))
    assert data.steps == 1
    assert batch.x.shape == (8, 1) and int(batch.mask.sum()) == 5


def test_shuffle_visits_every_row_once_in_a_new_order_each_epoch():
    n = 50
    x = np.arange(n, dtype=np.float32)[:, None]
    data = data_lib.ArrayDataAdapter(x, np.arange(n), batch_size=8, num_replicas=3, shuffle=True, seed=3)
    orders = []
    for epoch in range(2):
        rows = _real_rows(list(data.batches(epoch)))[:, 0]
        np.testing.assert_array_equal(np.sort(rows), x[:, 0])
        orders.append(rows)
    assert not np.array_equal(orders[0], orders[1])
    assert not np.array_equal(orders[0], x[:, 0])
    # Deterministic in (seed, epoch).
    again = data_lib.ArrayDataAdapter(x, np.arange(n), batch_size=8, num_replicas=3, shuffle=True,
                               seed=3)
    np.testing.assert_array_equal(_real_rows(list(again.batches(1)))[:, 0], orders[1])


def test_grouped_batches_fill_partial_last_group_with_fully_masked_batches():
    n, batch_size, group = 203, 32, 4  # 7 steps: groups of 4 and 3 (+1 filler)
    x = np.arange(n, dtype=np.float32)[:, None]
    data = data_lib.ArrayDataAdapter(x, np.arange(n), batch_size=batch_size, num_replicas=8)
    groups = list(data.batches(0, group=group))
    assert len(groups) == 2
    for g in groups:
        assert g.x.shape == (group, 32, 1) and g.mask.shape == (group, 32)
    np.testing.assert_array_equal(groups[1].mask[3], 0.0)
    assert groups[1].sample_weight is None  # the filler is weighted by its all-False mask
    singles = [jax.tree.map(lambda a, i=i: a[i], g) for g in groups for i in range(group)]
    np.testing.assert_array_equal(_real_rows(singles), x)


def test_dict_and_tuple_inputs_are_batched_leafwise():
    n = 11
    x = {"a": np.arange(n, dtype=np.float32)[:, None], "b": np.arange(n * 3).reshape(n, 3)}
    data = data_lib.ArrayDataAdapter(x, np.arange(n), batch_size=4, num_replicas=3)
    batches = list(data.batches(0))
    np.testing.assert_array_equal(_real_rows(batches, lambda b: b.x["a"]), x["a"])
    np.testing.assert_array_equal(_real_rows(batches, lambda b: b.x["b"]), x["b"])
    tup = data_lib.ArrayDataAdapter((x["a"], x["b"]), np.arange(n), batch_size=4, num_replicas=3)
    for b in tup.batches(0):
        assert isinstance(b.x, tuple) and b.x[0].shape == (6, 1) and b.x[1].shape == (6, 3)


def test_validation_split_holds_out_the_last_rows_before_shuffling():
    n = 20
    x = np.arange(n, dtype=np.float32)[:, None]
    data = data_lib.ArrayDataAdapter(x, np.arange(n), batch_size=4, num_replicas=1, shuffle=True)
    train, val = data.split(0.25, 1)
    assert train.num_examples == 15 and val.num_examples == 5
    np.testing.assert_array_equal(val.x, x[15:])
    np.testing.assert_array_equal(np.sort(_real_rows(list(train.batches(0)))[:, 0]), x[:15, 0])
    assert train.shuffle and not val.shuffle


def test_iterable_pads_smaller_batches_to_the_first_batch_shape():
    batches = [(np.full((6, 2), i, np.float32), np.full(6, i)) for i in range(2)]
    batches.append((np.full((2, 2), 9.0, np.float32), np.full(2, 9), np.array([0.5, 2.0])))
    data = data_lib.IterableDataAdapter(batches, steps_per_epoch=None, num_replicas=4)
    out = list(data.batches(0))
    assert data.padded_batch_size == 8  # 6 rows padded up to a multiple of 4
    for b in out:
        assert b.x.shape == (8, 2) and b.mask.shape == (8,)
    assert [int(b.mask.sum()) for b in out] == [6, 6, 2]
    np.testing.assert_array_equal(out[2].sample_weight, [0.5, 2.0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(out[2].x[out[2].mask == 0], 9.0)  # repeats real rows
    # A list is re-iterable: every epoch starts over.
    assert len(list(data.batches(1))) == 3


def test_generator_continues_across_epochs_and_respects_steps_per_epoch():
    def gen():
        for i in range(10):
            yield np.full((4, 1), i, np.float32), np.full(4, i)

    data = data_lib.IterableDataAdapter(gen(), steps_per_epoch=3, num_replicas=2)
    first = [int(b.x[0, 0]) for b in data.batches(0)]
    second = [int(b.x[0, 0]) for b in data.batches(1)]
    assert first == [0, 1, 2] and second == [3, 4, 5]


def test_iterable_rejects_a_batch_larger_than_the_first():
    batches = [(np.zeros((4, 1)), np.zeros(4)), (np.zeros((9, 1)), np.zeros(9))]
    data = data_lib.IterableDataAdapter(batches, steps_per_epoch=None, num_replicas=2)
    with pytest.raises(ValueError, match="at most as many rows as the first one"):
        list(data.batches(0))


def test_place_batches_puts_padded_rows_over_replicas_and_reuses_full_mask():
    strategy = mf.MirroredStrategy(jax.devices()[:3])
    n = 50
    x = np.arange(n, dtype=np.float32)[:, None]
    data = data_lib.ArrayDataAdapter(x, np.arange(n), batch_size=20, num_replicas=3)
    placed = list(batch_lib.place_batches(data.batches(0), strategy))
    assert len(placed) == 3
    for b in placed:
        assert b.sample_weight is None  # no sample weights: the steps weight by the mask
        for leaf in (b.x, b.y, b.mask):
            assert leaf.shape[0] == 21
            assert leaf.sharding.device_set == set(strategy.devices)
            assert [s.data.shape[0] for s in leaf.addressable_shards] == [7, 7, 7]
    # Full batches share one device copy of the all-ones-but-padding mask.
    assert placed[0].mask is placed[1].mask
    assert int(np.asarray(placed[2].mask).sum()) == 10
    np.testing.assert_array_equal(
        np.concatenate([np.asarray(b.x)[np.asarray(b.mask) == 1] for b in placed]), x)


def test_is_array_input_tells_inputs_from_iterables_of_batches():
    a = np.zeros((4, 2))
    assert data_lib.is_array_input(a)
    assert data_lib.is_array_input((a, a))  # two model inputs
    assert data_lib.is_array_input({"a": a, "b": a})
    assert not data_lib.is_array_input([(a, a), (a, a)])  # a list of (x, y) batches
    assert not data_lib.is_array_input(iter([(a, a)]))
    assert not data_lib.is_array_input(x for x in [a])


@pytest.mark.parametrize("group, start_step", [(1, 0), (1, 3), (3, 1)])
def test_array_index_batches_are_the_rows_batches_gathers(group, start_step):
    # Device-resident data is indexed by these: same rows, order, padding, masks and
    # fillers as the host batches, from a resumed step and in steps_per_execution groups.
    n = 23
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    data = data_lib.ArrayDataAdapter(x, np.arange(n), batch_size=5, num_replicas=3,
                                     shuffle=True, seed=4)
    host = list(data.batches(1, start_step=start_step, group=group))
    indices = list(data.index_batches(1, start_step=start_step, group=group))
    assert len(indices) == len(host) and data.steps_seen == data.steps
    for batch, (index, mask) in zip(host, indices):
        assert index.dtype == np.int32 and index.shape == batch.mask.shape
        np.testing.assert_array_equal(x[index], batch.x)
        np.testing.assert_array_equal(mask, batch.mask)
