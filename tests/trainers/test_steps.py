"""One step family per model, chosen at compile: the built-in steps and the steps of a Model
subclass that overrides a hook run no filler batch of a ``steps_per_execution`` group and
average BatchNorm statistics across replicas alike (`mirrorfit._src.trainers.step_family`)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import mirrorfit as mf
from mirrorfit._src.distribute.batch import Batch, place_batches, stack
from mirrorfit._src.distribute.run import compile_per_replica, specs_like
from mirrorfit._src.trainers.hooked_steps import HookedSteps
from mirrorfit._src.trainers.statistics import StatsLayout
from mirrorfit._src.trainers.steps import BUILTIN

ROWS = 24  # one global batch, a multiple of every replica count below: no padding rows
MOMENTUM = 0.9
_rng = np.random.default_rng(0)
# Row i is shifted by i / 2, so every replica's shard has its own mean and variance.
X = (_rng.normal(size=(ROWS, 4)) + np.arange(ROWS)[:, None] / 2).astype(np.float32)
Y = _rng.normal(size=(ROWS, 2)).astype(np.float32)


class NormThenDense(nn.Module):
    """BatchNorm straight on the inputs, so its batch statistics are NumPy's of ``x``."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.BatchNorm(use_running_average=not train, momentum=MOMENTUM)(x)
        return nn.Dense(2)(x)


class WithPenalty(mf.Model):
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training)
        return loss + 0.01 * jnp.sum(self.params["Dense_0"]["kernel"] ** 2)


class WithRowsLog(mf.Model):
    def train_step(self, state, batch):
        state, logs = super().train_step(state, batch)
        rows = mf.get_replica_context().all_reduce("sum", jnp.sum(batch.mask, dtype=jnp.float32))
        return state, {**logs, "rows": rows}


FAMILIES = {"built-in": mf.Model, "compute_loss": WithPenalty, "train_step": WithRowsLog}


def _model(family, n):
    with mf.MirroredStrategy(jax.devices()[:n]).scope():
        model = FAMILIES[family](NormThenDense(), input_shape=(4,), seed=1)
        model.compile(optimizer=mf.optimizers.Adam(0.1), loss="mse")
    return model


@pytest.mark.parametrize("family", FAMILIES)
def test_compile_chooses_the_family_from_the_overrides(family):
    chosen = _model(family, 1).trainer.config.family
    if family == "built-in":
        assert chosen is BUILTIN
    else:
        assert isinstance(chosen, HookedSteps)


@pytest.mark.parametrize("n", [1, 3, 8])
@pytest.mark.parametrize("family", FAMILIES)
def test_fillers_that_end_a_group_leave_the_state_as_its_real_steps_left_it(family, n):
    model = _model(family, n)
    cfg = model.trainer.config
    real = Batch(X, Y, None, np.ones(ROWS, bool))
    filler = real._replace(mask=np.zeros(ROWS, bool))  # as the data adapters make one
    [placed_real] = list(place_batches([real], model.strategy))
    [group] = list(place_batches([stack([real, filler, filler])], model.strategy, stacked=True))
    state = model.state
    layout = StatsLayout.from_shapes(cfg.family.statistics_shapes(cfg, state, placed_real,
                                                                  "train"))
    statistics = model.strategy.replicate_arrays(np.arange(layout.size, dtype=np.float32))
    before = jax.device_get((state, statistics))

    def compiled(step, batch):
        args = (state, statistics, batch)
        return compile_per_replica(model.strategy, step, specs_like(model.strategy, args),
                                   (P(), P()))

    one = jax.device_get(compiled(cfg.family.train_step(cfg), placed_real)(
        state, statistics, placed_real))
    grouped = jax.device_get(compiled(cfg.family.multi_train_step(cfg), group)(
        state, statistics, group))
    # A loop body and a plain call are two programs: equal to float32 rounding.
    for got, expected in zip(jax.tree.leaves(grouped), jax.tree.leaves(one)):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    # The real step updated everything: the step count (once, the fillers ran no step),
    # the optimizer state, the params and the BatchNorm moving statistics.
    updated, new_statistics = grouped
    assert int(updated.step) == int(before[0].step) + 1
    assert int(updated.opt_state.inner_state[0].count) == 1
    for leaf, old in zip(jax.tree.leaves((updated.params, updated.model_state)),
                         jax.tree.leaves((before[0].params, before[0].model_state))):
        assert not np.array_equal(leaf, old)
    assert not np.array_equal(new_statistics, before[1])


def _numpy_moving_statistics(n):
    """Flax BatchNorm's moving mean and variance after one step on ``X``, each replica's
    batch statistics (its shard of ``ROWS // n`` rows, biased variance) averaged."""
    shards = X.astype(np.float64).reshape(n, ROWS // n, -1)
    mean, var = shards.mean(axis=1).mean(axis=0), shards.var(axis=1).mean(axis=0)
    return (1 - MOMENTUM) * mean, MOMENTUM * 1.0 + (1 - MOMENTUM) * var


@pytest.mark.parametrize("n", [1, 3, 8])
def test_batch_norm_statistics_are_the_replica_average_in_every_family(n):
    expected_mean, expected_var = _numpy_moving_statistics(n)
    found = {}
    for family in FAMILIES:
        model = _model(family, n)
        model.fit(X, Y, batch_size=ROWS, epochs=1, shuffle=False, verbose=0)  # one step
        found[family] = stats = jax.device_get(model.state.model_state["batch_stats"])
        # rtol: float32 sums over ROWS // n rows, and Flax's E[x^2] - E[x]^2 variance.
        np.testing.assert_allclose(stats["BatchNorm_0"]["mean"], expected_mean, rtol=1e-5)
        np.testing.assert_allclose(stats["BatchNorm_0"]["var"], expected_var, rtol=1e-5)
    # The families run the same forward pass and the same average: the same bits.
    for family in FAMILIES:
        for got, built_in in zip(jax.tree.leaves(found[family]),
                                 jax.tree.leaves(found["built-in"])):
            np.testing.assert_array_equal(got, built_in)
