"""``mf.random``'s draws: shapes and dtypes, their distributions (sample statistics over
20,000 draws, within 5 standard errors), and Keras' ``seed=`` forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf

N = 20_000  # draws for the sample statistics; standard error of a mean: ~0.007 * std
SHAPED = {
    "normal": ((2, 3), {}),
    "uniform": ((2, 3), {}),
    "truncated_normal": ((2, 3), {}),
    "randint": ((2, 3), {"minval": 0, "maxval": 5}),
    "gamma": ((2, 3), {"alpha": 2.0}),
    "beta": ((2, 3), {"alpha": 2.0, "beta": 3.0}),
    "binomial": ((2, 3), {"counts": 10, "probabilities": 0.3}),
}
DTYPES = {"randint": jnp.int32}


@pytest.mark.parametrize("name", sorted(SHAPED))
def test_draw_has_shape_and_dtype(name):
    shape, kwargs = SHAPED[name]
    out = getattr(mf.random, name)(shape, **kwargs, seed=1)
    assert out.shape == shape and out.dtype == DTYPES.get(name, jnp.float32)


@pytest.mark.parametrize("name", sorted(SHAPED))
def test_int_seed_repeats_and_is_keras_key(name):
    shape, kwargs = SHAPED[name]
    draw = getattr(mf.random, name)
    first, again = draw(shape, **kwargs, seed=42), draw(shape, **kwargs, seed=42)
    np.testing.assert_array_equal(first, again)
    # Keras' JAX backend draws an int seed with the key [seed, 0].
    keras_key = jnp.array([42, 0], jnp.uint32)
    np.testing.assert_array_equal(first, draw(shape, **kwargs, seed=keras_key))
    assert not np.array_equal(first, draw(shape, **kwargs, seed=43))


def test_float16_dtype():
    assert mf.random.normal((2,), dtype="float16", seed=0).dtype == jnp.float16


def test_normal_and_truncated_normal_statistics():
    x = np.asarray(mf.random.normal((N,), mean=3.0, stddev=2.0, seed=0))
    assert abs(x.mean() - 3.0) < 5 * 2.0 / np.sqrt(N) and abs(x.std() - 2.0) < 0.05
    t = np.asarray(mf.random.truncated_normal((N,), mean=1.0, stddev=0.5, seed=0))
    assert t.min() >= 0.0 and t.max() <= 2.0  # within two standard deviations
    # std of a standard normal truncated to [-2, 2]: 0.8796
    assert abs(t.std() - 0.5 * 0.8796) < 0.01


def test_uniform_and_randint_bounds():
    u = np.asarray(mf.random.uniform((N,), minval=-1.0, maxval=3.0, seed=0))
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 5 * 4 / np.sqrt(12 * N)
    r = np.asarray(mf.random.randint((N,), 2, 6, seed=0))
    assert set(np.unique(r).tolist()) == {2, 3, 4, 5}


def test_gamma_beta_binomial_means():
    assert abs(float(mf.random.gamma((N,), 2.0, seed=0).mean()) - 2.0) < 5 * np.sqrt(2 / N)
    beta = float(mf.random.beta((N,), 2.0, 3.0, seed=0).mean())
    assert abs(beta - 0.4) < 5 * 0.2 / np.sqrt(N)
    binomial = float(mf.random.binomial((N,), 10, 0.3, seed=0).mean())
    assert abs(binomial - 3.0) < 5 * np.sqrt(2.1 / N)


def test_dropout_drops_at_rate_and_scales_the_rest():
    out = np.asarray(mf.random.dropout(jnp.ones((N,)), 0.25, seed=0))
    assert set(np.unique(out).tolist()) == {0.0, float(np.float32(1 / 0.75))}
    assert abs((out == 0).mean() - 0.25) < 5 * np.sqrt(0.25 * 0.75 / N)
    np.testing.assert_array_equal(mf.random.dropout(jnp.ones(3), 0.0), jnp.ones(3))
    np.testing.assert_array_equal(mf.random.dropout(jnp.ones(3), 1.0), jnp.zeros(3))


def test_dropout_noise_shape_broadcasts_the_mask():
    out = np.asarray(mf.random.dropout(jnp.ones((64, 5)), 0.5, noise_shape=(None, 1), seed=3))
    assert all(len(set(row.tolist())) == 1 for row in out)  # a row is kept or dropped whole
    assert 0 < (out[:, 0] == 0).sum() < 64


def test_shuffle_permutes_whole_rows():
    x = np.arange(30).reshape(10, 3)
    out = np.asarray(mf.random.shuffle(x, seed=0))
    assert sorted(map(tuple, out.tolist())) == sorted(map(tuple, x.tolist()))
    assert not np.array_equal(out, x)
    columns = np.asarray(mf.random.shuffle(x, axis=1, seed=0))
    assert sorted(columns[0].tolist()) == [0, 1, 2]
    assert (columns - columns[:, :1]).tolist() == [(columns[0] - columns[0, 0]).tolist()] * 10


def test_categorical_follows_the_logits():
    logits = jnp.log(jnp.array([[0.1, 0.9], [0.8, 0.2]]))
    out = np.asarray(mf.random.categorical(logits, N, seed=0))
    assert out.shape == (2, N) and out.dtype == np.int32
    assert abs(out[0].mean() - 0.9) < 5 * 0.3 / np.sqrt(N)
    assert abs(out[1].mean() - 0.2) < 5 * 0.4 / np.sqrt(N)


def test_variable_inputs_are_read():
    v = mf.Variable(np.arange(6.0, dtype=np.float32), name="v")
    assert sorted(np.asarray(mf.random.shuffle(v, seed=0)).tolist()) == list(range(6))
    assert mf.random.dropout(v, 0.5, seed=0).shape == (6,)


def test_draws_trace_under_jit():
    draw = jax.jit(lambda key: mf.random.normal((3,), seed=key))
    np.testing.assert_array_equal(draw(jnp.array([7, 0], jnp.uint32)),
                                  mf.random.normal((3,), seed=7))
