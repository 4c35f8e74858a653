"""Tests for distributed input: experimental_distribute_dataset, distribute_datasets_from_function,
mf.InputContext and mf.batch_mask.

A distributed batch must hold the global batch in order, split ``P("batch")`` with
``padded / num_replicas`` rows per replica, and its mask must mark exactly the real rows.
"""

import functools

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import mirrorfit as mf
from tests.helpers import mirrored_strategy

REPLICAS = [1, 2, 8]


@functools.cache
def _padded(rows, n):
    return -(-rows // n) * n


# -- experimental_distribute_dataset --------------------------------------------------------


@pytest.mark.parametrize("rows", [16, 11])
@pytest.mark.parametrize("n", REPLICAS)
def test_distribute_dataset_shards_batch_and_masks_padding(n, rows):
    strategy = mirrored_strategy(n)
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    y = np.arange(rows, dtype=np.int32)
    (batch,) = list(strategy.experimental_distribute_dataset([{"x": x, "y": y}]))

    padded = _padded(rows, n)
    assert set(batch) == {"x", "y"}
    for leaf, host in ((batch["x"], x), (batch["y"], y)):
        assert isinstance(leaf, jax.Array)
        assert leaf.shape == (padded,) + host.shape[1:]
        assert leaf.dtype == host.dtype
        assert leaf.sharding.spec == P("batch") and leaf.sharding.mesh == strategy.mesh
        assert {shard.data.shape[0] for shard in leaf.addressable_shards} == {padded // n}
        np.testing.assert_array_equal(np.asarray(leaf)[:rows], host)  # real rows, in order
    mask = mf.batch_mask(batch)
    np.testing.assert_array_equal(np.asarray(mask), np.arange(padded) < rows)
    assert mask.sharding.spec == P("batch")


def test_distribute_dataset_keeps_batch_order_over_a_generator_and_partial_last_batch():
    strategy = mirrored_strategy(8)
    x = np.arange(40, dtype=np.float32)

    def batches():
        for start in range(0, 40, 16):  # 16, 16, then a partial 8
            yield x[start:start + 16], x[start:start + 16] * 2

    rows = [np.asarray(xb)[np.asarray(mf.batch_mask((xb, yb)))]
            for xb, yb in strategy.experimental_distribute_dataset(batches())]
    assert [len(r) for r in rows] == [16, 16, 8]
    np.testing.assert_array_equal(np.concatenate(rows), x)


def test_distribute_dataset_iterates_a_list_again_on_each_pass():
    strategy = mirrored_strategy(2)
    dataset = strategy.experimental_distribute_dataset([np.ones(4), np.zeros(4)])
    for _ in range(2):
        np.testing.assert_array_equal([float(b.sum()) for b in dataset], [4.0, 0.0])


def test_distribute_dataset_places_next_batch_before_handing_out_current():
    strategy = mirrored_strategy(2)
    pulled = []

    def batches():
        for i in range(3):
            pulled.append(i)
            yield np.full(4, i, np.float32)

    iterator = iter(strategy.experimental_distribute_dataset(batches()))
    first = next(iterator)
    assert pulled == [0, 1]  # batch 1 is on its way while batch 0 is used
    np.testing.assert_array_equal(np.asarray(first), np.zeros(4))


def test_batch_mask_of_arrays_not_from_a_distributed_dataset_is_none():
    strategy = mirrored_strategy(2)
    assert mf.batch_mask(strategy.replicate(np.ones(4))) is None
    assert mf.batch_mask(np.ones(4)) is None


def test_distribute_dataset_leaves_with_different_leading_sizes_raise_value_error():
    strategy = mirrored_strategy(2)
    dataset = strategy.experimental_distribute_dataset([(np.ones((4, 2)), np.ones(3))])
    with pytest.raises(ValueError, match="batch.*leading sizes"):
        list(dataset)


def test_distribute_dataset_not_iterable_raises_type_error_naming_dataset():
    with pytest.raises(TypeError, match="dataset"):
        mirrored_strategy(2).experimental_distribute_dataset(42)


# -- InputContext and distribute_datasets_from_function -------------------------------------


@pytest.mark.parametrize("n", REPLICAS)
def test_input_context_per_replica_batch_size(n):
    context = mf.InputContext(num_replicas_in_sync=n)
    assert context.get_per_replica_batch_size(64) == 64 // n
    assert context.get_per_replica_batch_size(8 * n) == 8


@pytest.mark.parametrize("n, global_batch", [(2, 5), (8, 12), (8, 1)])
def test_input_context_global_batch_not_divisible_raises_value_error(n, global_batch):
    context = mf.InputContext(num_replicas_in_sync=n)
    with pytest.raises(ValueError, match=f"global_batch_size={global_batch}"):
        context.get_per_replica_batch_size(global_batch)


@pytest.mark.parametrize("n", REPLICAS)
def test_distribute_datasets_from_function_gets_input_context(n):
    strategy = mirrored_strategy(n)
    x = np.arange(32, dtype=np.float32)
    contexts = []

    def dataset_fn(context):
        contexts.append(context)
        per_replica = context.get_per_replica_batch_size(16)
        return [x[i:i + per_replica] for i in range(0, len(x), per_replica)]

    batches = list(strategy.distribute_datasets_from_function(dataset_fn))

    (context,) = contexts
    assert isinstance(context, mf.InputContext)
    assert (context.num_input_pipelines, context.input_pipeline_id) == (1, 0)
    assert context.num_replicas_in_sync == n
    assert [b.shape for b in batches] == [(16,), (16,)]
    assert all(b.sharding.spec == P("batch") for b in batches)
    np.testing.assert_array_equal(np.concatenate([np.asarray(b) for b in batches]), x)


def test_distribute_datasets_from_function_not_callable_raises_type_error():
    with pytest.raises(TypeError, match="dataset_fn"):
        mirrored_strategy(2).distribute_datasets_from_function([np.ones(4)])
