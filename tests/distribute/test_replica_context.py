"""Tests for mf.get_replica_context (all_reduce, all_gather, replica ids), the padding mask it
exposes inside strategy.run, and the loss helpers compute_average_loss and
scale_regularization_loss, all compared with NumPy.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from tests.helpers import mirrored_strategy

REPLICAS = [1, 2, 8]
ROWS = {"full": 16, "partial": 11}


_strategy = functools.cache(mirrored_strategy)  # one strategy (and its compiled fns) per count


def _data(rows, features=3, seed=0):
    return np.random.default_rng(seed).normal(size=(rows, features)).astype(np.float32)


def _distribute(strategy, batch):
    (distributed,) = list(strategy.experimental_distribute_dataset([batch]))
    return distributed


def _masked_sum(x):
    mask = mf.get_replica_context().mask
    return jnp.sum(jnp.where(mask[:, None], x, 0.0), axis=0)


# -- the default context ----------------------------------------------------------------------


def test_get_replica_context_outside_run_is_single_replica_default():
    context = mf.get_replica_context()
    assert isinstance(context, mf.ReplicaContext)
    assert context.num_replicas_in_sync == 1
    assert context.replica_id_in_sync_group == 0
    assert context.mask is None
    value = {"a": jnp.arange(3.0)}
    np.testing.assert_array_equal(context.all_reduce(mf.ReduceOp.SUM, value)["a"], np.arange(3.0))
    np.testing.assert_array_equal(context.all_gather(jnp.arange(3.0), axis=0), np.arange(3.0))


def test_gradient_reduce_op_defaults_to_sum_and_accepts_names():
    assert mf.get_replica_context().gradient_reduce_op is mf.ReduceOp.SUM
    assert mf.ReplicaContext(gradient_reduce_op="mean").gradient_reduce_op is mf.ReduceOp.MEAN
    seen = []

    def replica_fn():
        seen.append(mf.get_replica_context().gradient_reduce_op)
        return jnp.zeros(())

    _strategy(2).run(replica_fn)
    assert seen and set(seen) == {mf.ReduceOp.SUM}  # TF's convention inside strategy.run


def test_gradient_reduce_op_unknown_raises_value_error_naming_it():
    with pytest.raises(ValueError, match=r"Received: gradient_reduce_op='max'"):
        mf.ReplicaContext(gradient_reduce_op="max")


def test_get_replica_context_is_default_again_after_run():
    _strategy(8).run(lambda: mf.get_replica_context().replica_id_in_sync_group)
    assert mf.get_replica_context().num_replicas_in_sync == 1


# -- inside run ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n", REPLICAS)
def test_replica_context_ids_and_count_inside_run(n):
    strategy = _strategy(n)

    def fn():
        context = mf.get_replica_context()
        return context.replica_id_in_sync_group, jnp.int32(context.num_replicas_in_sync)

    ids, counts = strategy.run(fn)
    np.testing.assert_array_equal(np.asarray(ids.values), np.arange(n))
    np.testing.assert_array_equal(np.asarray(counts.values), np.full(n, n))


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("n", REPLICAS)
def test_all_reduce_sum_and_mean_match_numpy(n, kind):
    strategy = _strategy(n)
    x = _data(ROWS[kind])

    def fn(x):
        context = mf.get_replica_context()
        local = {"sum": _masked_sum(x), "id": context.replica_id_in_sync_group * 1.0}
        return (context.all_reduce(mf.ReduceOp.SUM, local),
                context.all_reduce("mean", local["id"]))

    total, mean_id = strategy.run(fn, args=(_distribute(strategy, x),))
    # Every replica holds the all-reduced value.
    np.testing.assert_allclose(
        np.asarray(total["sum"].values), np.tile(x.sum(axis=0), (n, 1)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(total["id"].values), np.full(n, n * (n - 1) / 2))
    np.testing.assert_allclose(np.asarray(mean_id.values), np.full(n, (n - 1) / 2))


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("n", REPLICAS)
def test_all_gather_matches_numpy(n, kind):
    strategy = _strategy(n)
    x = _data(ROWS[kind])

    def fn(x):
        context = mf.get_replica_context()
        return context.all_gather(x, axis=0), context.all_gather(context.mask, axis=0)

    rows, masks = strategy.run(fn, args=(_distribute(strategy, x),))
    for r in range(n):  # every replica sees the whole global batch
        replica_rows = np.asarray(rows.values[r])
        np.testing.assert_array_equal(replica_rows[np.asarray(masks.values[r])], x)


@pytest.mark.parametrize("n", REPLICAS)
def test_all_gather_axis_1_matches_numpy(n):
    strategy = _strategy(n)
    x = _data(16)
    out = strategy.run(lambda x: mf.get_replica_context().all_gather(x, axis=1),
                       args=(_distribute(strategy, x),))
    np.testing.assert_array_equal(np.asarray(out.values[0]),
                                  np.concatenate(np.split(x, n), axis=1))


@pytest.mark.parametrize("kind", ROWS)
def test_replica_context_mask_marks_real_rows_of_each_shard(kind):
    strategy = _strategy(8)
    rows = ROWS[kind]
    mask = strategy.run(lambda x: mf.get_replica_context().mask,
                        args=(_distribute(strategy, _data(rows)),))
    np.testing.assert_array_equal(np.asarray(mask.values).reshape(-1), np.arange(16) < rows)


# -- loss helpers ------------------------------------------------------------------------------


def test_compute_average_loss_outside_run_matches_numpy():
    loss = np.array([1.0, 2.0, 4.0, 9.0], np.float32)
    weight = np.array([1.0, 0.5, 0.0, 2.0], np.float32)
    np.testing.assert_allclose(mf.compute_average_loss(loss), loss.mean(), rtol=1e-6)
    np.testing.assert_allclose(
        mf.compute_average_loss(loss, sample_weight=weight), (loss * weight).sum() / 4, rtol=1e-6)
    np.testing.assert_allclose(
        mf.compute_average_loss(loss, global_batch_size=16), loss.sum() / 16, rtol=1e-6)


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("n", REPLICAS)
def test_compute_average_loss_summed_over_replicas_is_mean_over_real_rows(n, kind):
    strategy = _strategy(n)
    rows = ROWS[kind]
    loss = np.random.default_rng(3).uniform(size=rows).astype(np.float32)
    weight = np.random.default_rng(4).uniform(size=rows).astype(np.float32)

    def fn(loss, weight):
        return (mf.compute_average_loss(loss),
                mf.compute_average_loss(loss, sample_weight=weight),
                mf.compute_average_loss(loss, global_batch_size=64))

    plain, weighted, fixed = strategy.reduce(
        mf.ReduceOp.SUM, strategy.run(fn, args=_distribute(strategy, (loss, weight))))
    np.testing.assert_allclose(float(plain), loss.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(weighted), (loss * weight).sum() / rows, rtol=1e-5)
    np.testing.assert_allclose(float(fixed), loss.sum() / 64, rtol=1e-5)


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("n", REPLICAS)
def test_all_reduced_grads_of_average_loss_equal_single_device_grads(n, kind):
    strategy = _strategy(n)
    rows = ROWS[kind]
    x, y = _data(rows, features=4), _data(rows, features=1, seed=1)[:, 0]
    w = np.random.default_rng(2).normal(size=4).astype(np.float32)

    def per_example(w, x, y):
        return (x @ w - y) ** 2

    def fn(w, batch):
        x, y = batch
        grads = jax.grad(lambda w: mf.compute_average_loss(per_example(w, x, y)))(w)
        return mf.get_replica_context().all_reduce(mf.ReduceOp.SUM, grads)

    grads = strategy.run(fn, args=(strategy.replicate(w), _distribute(strategy, (x, y))))
    expected = 2 * x.T @ (x @ w - y) / rows  # d/dw mean((x w - y)^2)
    for replica_grads in np.asarray(grads.values):
        np.testing.assert_allclose(replica_grads, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", REPLICAS)
def test_scale_regularization_loss_divides_by_replicas(n):
    strategy = _strategy(n)
    penalty = np.float32(6.0)
    scaled = strategy.run(mf.scale_regularization_loss, args=(strategy.replicate(penalty),))
    np.testing.assert_allclose(np.asarray(scaled.values), np.full(n, penalty / n), rtol=1e-6)
    np.testing.assert_allclose(float(strategy.reduce("SUM", scaled)), penalty, rtol=1e-6)
    assert float(mf.scale_regularization_loss(penalty)) == penalty  # default context


def test_compute_average_loss_scalar_raises_value_error_naming_per_example_loss():
    with pytest.raises(ValueError, match="per_example_loss"):
        mf.compute_average_loss(jnp.float32(1.0))


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [{"a": "text"}, {"a": None}, [object()]])
def test_all_reduce_non_array_leaves_raise_type_error_naming_value(value):
    with pytest.raises(TypeError, match="value"):
        mf.get_replica_context().all_reduce(mf.ReduceOp.SUM, value)


def test_all_reduce_non_array_leaves_inside_run_raise_type_error():
    with pytest.raises(TypeError, match="all_reduce"):
        _strategy(2).run(lambda: mf.get_replica_context().all_reduce("SUM", ["text"]))


def test_all_reduce_unknown_op_raises_value_error_naming_reduce_op():
    with pytest.raises(ValueError, match="reduce_op"):
        mf.get_replica_context().all_reduce("MAX", jnp.ones(2))


# -- regressions: padding masks of labels-only and PerReplica arguments -------------------------


def test_compute_average_loss_of_second_batch_leaf_ignores_padding():
    strategy = _strategy(8)
    x, y = _data(11), np.arange(11, dtype=np.float32)
    _, labels = _distribute(strategy, (x, y))
    loss = strategy.reduce("SUM", strategy.run(mf.compute_average_loss, args=(labels,)))
    np.testing.assert_allclose(float(loss), y.mean(), rtol=1e-6)


def test_compute_average_loss_of_masked_per_replica_ignores_padding():
    strategy = _strategy(8)
    y = np.arange(11, dtype=np.float32)
    predictions = strategy.run(lambda y: y * 2.0, args=(_distribute(strategy, y),))
    assert predictions.mask is not None
    loss = strategy.reduce("SUM", strategy.run(mf.compute_average_loss, args=(predictions,)))
    np.testing.assert_allclose(float(loss), 2.0 * y.mean(), rtol=1e-6)
