"""`Trainer.train_step_cost`: read from the step ``fit`` compiled, without compiling again;
one step's FLOPs whatever ``steps_per_execution``; the padded global batch."""


import flax.linen as nn
import jax
import numpy as np
import pytest

import mirrorfit as mf
from tests.helpers import jax_log_messages


def _model(replicas, steps_per_execution=1):
    with mf.MirroredStrategy(jax.devices()[:replicas]).scope():
        model = mf.Sequential([nn.Dense(64), nn.relu, nn.Dense(3)], input_shape=(16,), seed=0)
        model.compile(mf.optimizers.SGD(0.1),
                      mf.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=steps_per_execution)
    return model


def _data(rows=96):
    rng = np.random.default_rng(0)
    return rng.normal(size=(rows, 16)).astype(np.float32), rng.integers(0, 3, rows)


def _cost_and_xla_compiles(model):
    """``train_step_cost()`` after a one-epoch fit, and the XLA compilations it ran."""
    model.fit(*_data(), batch_size=32, epochs=1, verbose=0)
    with jax_log_messages() as messages:
        cost = model.trainer.train_step_cost()
    return cost, [m for m in messages if m.startswith("Finished XLA compilation")]


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_step_cost_reuses_the_compiled_step_and_counts_one_step_per_call(replicas):
    cost, compiles = _cost_and_xla_compiles(_model(replicas))
    grouped, grouped_compiles = _cost_and_xla_compiles(_model(replicas, 3))
    assert compiles == [] and grouped_compiles == []
    padded = 33 if replicas == 3 else 32  # 32 rows padded up to a multiple of the replicas
    assert cost.global_batch_size == grouped.global_batch_size == padded
    # steps_per_execution=3 runs a lax.scan of 3 steps; its cost is one step lowered alone
    # (before XLA's optimizations), against the compiled step: within 2%.
    np.testing.assert_allclose(grouped.flops, cost.flops, rtol=0.02)
    matmuls = 2 * 32 * (16 * 64 + 64 * 3) * 2 + 2 * 32 * 64 * 3  # forward, weight and
    assert cost.flops >= matmuls  # hidden-activation gradients of the global batch


def test_step_cost_before_fit_says_when_to_call_it():
    with pytest.raises(RuntimeError, match="call it in fit after the first train step"):
        _model(1).trainer.train_step_cost()
