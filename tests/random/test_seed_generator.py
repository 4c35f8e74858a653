"""Where ``mf.random``'s keys come from: `SeedGenerator`, ``seed=None``, the call context of a
compiled step (per step, per draw), the replicas of ``strategy.run``, and
``mf.utils.set_random_seed``."""

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.random.seed_generator import draw_seed
from mirrorfit._src.variables import call_context


def _draw(seed):
    return np.asarray(mf.random.normal((4,), seed=seed))


def test_seed_generator_gives_new_values_every_draw():
    gen = mf.random.SeedGenerator(1337)
    assert not np.array_equal(_draw(gen), _draw(gen))
    assert not np.array_equal(_draw(None), _draw(None))


def test_seed_generators_fold_in_their_seeds():
    key = jax.random.PRNGKey(0)

    def first_draw(gen):
        with call_context.call_context(rng=key):
            return _draw(gen)

    same = first_draw(mf.random.SeedGenerator(1))
    np.testing.assert_array_equal(same, first_draw(mf.random.SeedGenerator(1)))
    assert not np.array_equal(same, first_draw(mf.random.SeedGenerator(2)))
    assert not np.array_equal(same, first_draw(None))


def test_draws_differ_per_step_key_and_per_draw_inside_a_compiled_step():
    gen = mf.random.SeedGenerator(5)

    @jax.jit
    def step(key):
        # what fit's step does: the step's per-replica key opens the forward pass's context
        with call_context.call_context(training=True, rng=key):
            return mf.random.normal((4,), seed=gen), mf.random.dropout(
                jnp.ones(8), 0.5, seed=gen)

    first, mask = step(jax.random.PRNGKey(1))
    again, _ = step(jax.random.PRNGKey(1))
    other, _ = step(jax.random.PRNGKey(2))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert mask.shape == (8,)


def test_draws_differ_per_replica_in_strategy_run():
    strategy = mf.MirroredStrategy()
    assert strategy.num_replicas_in_sync == 8
    gen = mf.random.SeedGenerator(3)

    def per_replica():
        replica = mf.get_replica_context().replica_id_in_sync_group
        return mf.random.normal((4,), seed=gen), mf.random.normal((4,), seed=7), replica

    generated, seeded, replicas = strategy.run(per_replica)
    generated = np.asarray(generated.values)
    assert np.asarray(replicas.values).tolist() == list(range(8))
    assert len({tuple(row) for row in generated.tolist()}) == 8
    # An int seed gives every replica the same values.
    np.testing.assert_array_equal(np.asarray(seeded.values), np.tile(_draw(7), (8, 1)))


def test_a_key_seed_passes_through():
    key = jax.random.PRNGKey(4)
    assert draw_seed(key) is key


@pytest.mark.parametrize("seed", [1.5, "1", True])
def test_draw_refuses_other_seeds(seed):
    with pytest.raises(ValueError, match="seed"):
        mf.random.normal((2,), seed=seed)


def test_seed_generator_arguments_and_config():
    gen = mf.random.SeedGenerator(seed=9, name="noise")
    assert gen.get_config() == {"seed": 9, "name": "noise"}
    copy = mf.random.SeedGenerator.from_config(gen.get_config())
    assert (copy.seed, copy.name) == (9, "noise")
    assert mf.random.SeedGenerator().name == "seed_generator"
    with pytest.raises(ValueError, match="Received: seed=1.5"):
        mf.random.SeedGenerator(1.5)
    with pytest.raises(ValueError, match="backend"):
        mf.random.SeedGenerator(1, backend="jax")


def test_set_random_seed_restarts_every_stream():
    mf.utils.set_random_seed(123)
    first = (_draw(None), _draw(mf.random.SeedGenerator(1)), np.random.rand(), random.random())
    mf.utils.set_random_seed(123)
    again = (_draw(None), _draw(mf.random.SeedGenerator(1)), np.random.rand(), random.random())
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    mf.utils.set_random_seed(124)
    assert not np.array_equal(first[0], _draw(None))


def test_set_random_seed_refuses_a_non_int():
    with pytest.raises(ValueError, match="Received: seed=1.0"):
        mf.utils.set_random_seed(1.0)
