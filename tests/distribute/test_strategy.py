"""Tests for mf.MirroredStrategy: devices, mesh, scope, placement and per-replica functions.

conftest.py gives 8 simulated CPU devices; strategies here use subsets of them, including an
odd replica count (3) so that nothing silently relies on powers of two.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import mirrorfit as mf
from tests.helpers import mirrored_strategy


def test_default_strategy_uses_every_local_device():
    strategy = mf.MirroredStrategy()
    assert strategy.num_replicas_in_sync == jax.local_device_count() == 8
    assert strategy.devices == tuple(jax.local_devices())


@pytest.mark.parametrize("n", [1, 3, 8])
def test_mesh_is_one_dimensional_over_batch_axis(n):
    strategy = mirrored_strategy(n)
    assert strategy.num_replicas_in_sync == n
    assert strategy.devices == tuple(jax.devices()[:n])
    assert strategy.mesh.axis_names == ("batch",)
    assert strategy.mesh.devices.shape == (n,)
    assert list(strategy.mesh.devices) == list(jax.devices()[:n])


def test_get_strategy_outside_scope_is_single_device():
    default = mf.get_strategy()
    assert default.num_replicas_in_sync == 1
    assert default.devices == (jax.local_devices()[0],)


def test_scope_nests_and_restores_innermost_strategy():
    outer, inner = mirrored_strategy(2), mirrored_strategy(3)
    with outer.scope() as entered:
        assert entered is outer
        assert mf.get_strategy() is outer
        with inner.scope():
            assert mf.get_strategy() is inner
        assert mf.get_strategy() is outer
    assert mf.get_strategy().num_replicas_in_sync == 1


def test_scope_is_left_when_body_raises():
    strategy = mirrored_strategy(3)
    with pytest.raises(RuntimeError, match="boom"):
        with strategy.scope():
            raise RuntimeError("boom")
    assert mf.get_strategy() is not strategy


@pytest.mark.parametrize("n", [1, 3, 8])
def test_shard_batch_gives_each_replica_global_batch_over_replicas_rows(n):
    strategy = mirrored_strategy(n)
    global_batch = 24
    x = np.arange(global_batch * 5, dtype=np.float32).reshape(global_batch, 5)
    y = np.arange(global_batch, dtype=np.int32)
    xs, ys = strategy.shard_batch((x, y))
    for arr, host in ((xs, x), (ys, y)):
        assert arr.shape == host.shape
        assert arr.sharding.device_set == set(strategy.devices)
        assert not arr.sharding.is_fully_replicated or n == 1
        shards = sorted(arr.addressable_shards, key=lambda s: s.index[0].start or 0)
        assert len(shards) == n
        for shard in shards:
            assert shard.data.shape[0] == global_batch // n
        # Replica r holds rows [r * B/n, (r + 1) * B/n): concatenating them in mesh order
        # gives back the global batch.
        by_device = {s.device: np.asarray(s.data) for s in arr.addressable_shards}
        np.testing.assert_array_equal(
            np.concatenate([by_device[d] for d in strategy.devices]), host)


def test_shard_batch_with_leading_axis_splits_the_second_dimension():
    strategy = mirrored_strategy(3)
    stacked = np.arange(4 * 6 * 2, dtype=np.float32).reshape(4, 6, 2)  # [K, batch, 2]
    arr = strategy.shard_batch(stacked, leading_axes=1)
    np.testing.assert_array_equal(np.asarray(arr), stacked)
    for shard in arr.addressable_shards:
        assert shard.data.shape == (4, 2, 2)


def test_replicate_places_a_full_copy_on_every_replica():
    strategy = mirrored_strategy(3)
    tree = {"w": np.ones((2, 3), np.float32), "b": np.arange(3, dtype=np.float32)}
    placed = strategy.replicate(tree)
    for leaf, host in zip(jax.tree.leaves(placed), jax.tree.leaves(tree)):
        assert leaf.sharding.is_fully_replicated
        assert leaf.sharding.device_set == set(strategy.devices)
        for shard in leaf.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), host)


def test_compile_replica_fn_maps_per_replica_function_with_collectives():
    strategy = mirrored_strategy(3)

    def per_replica(w, x):
        # x: this replica's rows; w: whole on every replica.
        local = jnp.sum(x * w)
        return lax.psum(local, "batch"), x + lax.axis_index("batch").astype(x.dtype)

    fn = strategy.compile_replica_fn(per_replica, (P(), P("batch")), (P(), P("batch")))
    x = np.arange(6, dtype=np.float32)
    w = np.float32(2.0)
    total, shifted = fn(strategy.replicate(w), strategy.shard_batch(x))
    np.testing.assert_allclose(float(total), 2.0 * x.sum(), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(shifted), x + np.repeat(np.arange(3), 2))


def test_single_replica_program_is_plain_jit_with_shard_map_results():
    # One replica: compile_replica_fn binds the axis with a size-1 vmap instead of shard_map
    # (the single-device fast path). Collectives must still trace and give exactly what the
    # shard_map program gives, with the same output shardings.
    strategy = mirrored_strategy(1)

    def fn(w, x):
        mean = lax.pmean(w * jnp.sum(x), "batch")
        return mean, lax.psum(x, "batch") + lax.axis_index("batch"), lax.all_gather(
            x, "batch", tiled=True)

    w = strategy.replicate_arrays(jnp.float32(1.5))
    x = strategy.shard_batch(np.arange(12, dtype=np.float32).reshape(6, 2))
    in_specs, out_specs = (P(), P("batch")), (P(), P("batch"), P())
    fast = strategy.compile_replica_fn(fn, in_specs, out_specs)
    reference = jax.jit(jax.shard_map(fn, mesh=strategy.mesh, in_specs=in_specs,
                                      out_specs=out_specs, check_vma=False))
    assert "shard_map" not in str(jax.make_jaxpr(fast)(w, x))
    assert "shard_map" in str(jax.make_jaxpr(reference)(w, x))
    for got, want, spec in zip(fast(w, x), reference(w, x), out_specs):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.sharding == jax.sharding.NamedSharding(strategy.mesh, spec)
