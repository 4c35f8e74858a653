"""UnitNormalization and BatchNormalization under a Keras mask against NumPy (the other
normalization layers: test_layers.py)."""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import mirrorfit as mf
from mirrorfit import layers
from tests.helpers import mirrored_strategy

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("axis", [-1, (1, 2)])
def test_unit_normalization_scales_to_unit_l2_norm(axis):
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    out = layers.UnitNormalization(axis=axis).apply({}, x)
    norm = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=axis, keepdims=True))
    np.testing.assert_allclose(out, x / norm, rtol=1e-5, atol=1e-7)
    # Keras' epsilon: a zero row stays zero instead of NaN.
    np.testing.assert_array_equal(layers.UnitNormalization().apply({}, np.zeros((1, 3))), 0)


def masked_moments(x, mask):
    """Keras' masked ``BatchNormalization._moments`` in NumPy (float64): over the unmasked
    steps of ``x [batch, steps, features]``, divisor ``count + 1e-7``."""
    keep = np.broadcast_to(mask[..., None], x.shape)
    count = keep.sum((0, 1)) + 1e-7
    mean = np.where(keep, x, 0).sum((0, 1)) / count
    return mean, np.where(keep, (x - mean) ** 2, 0).sum((0, 1)) / count


X = RNG.normal(size=(8, 5, 3)).astype(np.float32) * 2 + 1
MASK = RNG.random((8, 5)) < 0.6
MASK[:2] = True  # the replicas' shares of unmasked steps differ
MASK[6:] = False
MASK[7, 0] = True


def test_batch_normalization_statistics_count_only_unmasked_steps():
    bn = layers.BatchNormalization(momentum=0.9)
    variables = bn.init(jax.random.key(0), X)
    out, state = bn.apply(variables, X, training=True, mask=MASK, mutable=["batch_stats"])
    mean, var = masked_moments(X.astype(np.float64), MASK)
    np.testing.assert_allclose(out, (X - mean) / np.sqrt(var + 1e-3), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state["batch_stats"]["moving_mean"], 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(state["batch_stats"]["moving_variance"], 0.9 + 0.1 * var,
                               rtol=1e-5)
    np.testing.assert_array_equal(bn.compute_mask(X, MASK), MASK)  # passed on, as Keras
    with pytest.raises(ValueError, match="one dimension less"):
        bn.apply(variables, X, training=True, mask=MASK[:, :, None], mutable=["batch_stats"])


@pytest.mark.parametrize("replicas", [1, 4])
def test_synchronized_masked_batch_normalization_equals_the_global_batch(replicas):
    """Each replica holds a different share of unmasked steps (one none at all): synchronized
    statistics are the global batch's masked moments, unsynchronized ones each replica's."""
    mesh = Mesh(np.array(jax.devices()[:replicas]), ("batch",))
    out = {}
    for sync in (True, False):
        bn = layers.BatchNormalization(synchronized=sync)
        variables = bn.init(jax.random.key(0), X)

        def step(x, mask, bn=bn, variables=variables):
            y, state = bn.apply(variables, x, training=True, mask=mask, mutable=["batch_stats"])
            return y, jax.tree.map(lambda v: v[None], state)

        out[sync] = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=P("batch"),
                                          out_specs=P("batch")))(X, MASK)
    mean, var = masked_moments(X.astype(np.float64), MASK)
    y, state = out[True]
    np.testing.assert_allclose(y, (X - mean) / np.sqrt(var + 1e-3), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(state["batch_stats"]["moving_mean"],
                               np.broadcast_to(0.01 * mean, (replicas, 3)), rtol=1e-6)
    rows = len(X) // replicas
    local_mean, local_var = masked_moments(X[-rows:].astype(np.float64), MASK[-rows:])
    np.testing.assert_allclose(out[False][0][-rows:],
                               (X[-rows:] - local_mean) / np.sqrt(local_var + 1e-3),
                               rtol=1e-6, atol=1e-5)  # x - mean of one step, in float32


def test_batch_normalization_in_a_model_uses_and_passes_on_the_embedding_mask():
    """Embedding(mask_zero=True) -> BatchNormalization -> GlobalAveragePooling1D: one fit step
    (learning rate 0) moves the moving mean by the masked mean, and the pooling averages the
    unmasked steps only (the mask passed BatchNormalization)."""
    tokens = np.array([[3, 1, 4, 0, 0], [2, 7, 1, 8, 2], [5, 0, 0, 0, 0]], np.int32)
    with mirrored_strategy(1).scope():
        inputs = layers.Input((5,), dtype="int32")
        embedded = layers.Embedding(10, 3, mask_zero=True)(inputs)
        normalized = layers.BatchNormalization()(embedded)
        model = mf.Model(inputs, [normalized, layers.GlobalAveragePooling1D()(normalized)])
        model.compile(mf.optimizers.SGD(0.0), ["mse", "mse"])
    table = np.asarray(model.params["embedding"]["embeddings"], np.float64)
    model.fit(tokens, (np.zeros((3, 5, 3)), np.zeros((3, 3))), batch_size=3, verbose=0)
    mean, _ = masked_moments(table[tokens], tokens != 0)
    np.testing.assert_allclose(
        model.state.model_state["batch_stats"]["batch_normalization"]["moving_mean"],
        0.01 * mean, rtol=1e-5)
    steps, pooled = model.predict(tokens, verbose=0)
    keep = (tokens != 0)[..., None]
    np.testing.assert_allclose(pooled, (steps * keep).sum(1) / keep.sum(1), rtol=1e-5)
