"""`keras_op`: Keras' arguments (positional, by name, defaults), renames, dropped arguments,
`Variable` arguments, and the signature and docstring every op of ``mf.ops`` carries."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import ops
from mirrorfit._src.ops import core, linalg, math, nn
from mirrorfit._src.ops import numpy as numpy_ops
from mirrorfit._src.ops.wrapping import keras_op

X = np.arange(6, dtype=np.float32).reshape(2, 3)
TABLES = [core, linalg, math, nn, numpy_ops]
NAMES = sorted(name for name in ops.__all__)


def test_every_public_op_comes_from_the_table_with_its_own_name():
    in_tables = {name for table in TABLES for name, value in vars(table).items()
                 if callable(value) and getattr(value, "__wrapped__", None) is not None}
    assert set(NAMES) == in_tables
    assert len(NAMES) > 250
    for name in NAMES:
        op = getattr(ops, name)
        assert op.__name__ == name
        assert op.__doc__.startswith(f"Keras' ``ops.{name}(")


def test_options_bind_by_keras_position_and_name():
    # Keras' sum(x, axis, keepdims); jnp.sum's third parameter is dtype.
    expected = X.sum(axis=1, keepdims=True)
    np.testing.assert_array_equal(ops.sum(X, 1, True), expected)
    np.testing.assert_array_equal(ops.sum(x=X, axis=1, keepdims=True), expected)
    # Keras' prod(x, axis, keepdims, dtype) against jnp.prod(a, axis, dtype, out, keepdims).
    assert ops.prod(X + 1, 0, False, "float32").dtype == jnp.float32
    # one_hot's axis and dtype are keyword-only in jax.nn.one_hot.
    assert ops.one_hot(jnp.array([0, 2]), 3, 0, "int32").tolist() == [[1, 0], [0, 0], [0, 1]]


def test_keras_names_of_data_arguments_are_accepted():
    # jnp.where's arguments are positional-only; Keras names them condition, x1, x2.
    out = ops.where(condition=X > 2, x1=X, x2=-X)
    np.testing.assert_array_equal(out, np.where(X > 2, X, -X))
    np.testing.assert_array_equal(ops.add(x1=X, x2=X), 2 * X)
    np.testing.assert_array_equal(ops.clip(X, x_min=1.0, x_max=4.0), np.clip(X, 1.0, 4.0))


def test_keras_defaults_replace_jax_defaults():
    # Keras' leaky_relu slope is 0.2 (jax.nn's is 0.01).
    np.testing.assert_allclose(ops.leaky_relu(jnp.array([-1.0, 2.0])), [-0.2, 2.0], rtol=1e-6)


def test_renamed_and_dropped_arguments():
    # slice_update(inputs, start_indices, updates) is dynamic_update_slice(operand, update, ...)
    out = ops.slice_update(jnp.zeros(5), (1,), jnp.ones(2))
    np.testing.assert_array_equal(out, [0, 1, 1, 0, 0])
    # unstack's num is accepted and ignored, as in Keras' JAX backend: 1 is num, not axis.
    parts = ops.unstack(X, 2)
    assert len(parts) == 2 and parts[1].tolist() == X[1].tolist()
    values, indices = ops.top_k(jnp.array([1.0, 3.0, 2.0]), 2, sorted=False)
    assert values.tolist() == [3.0, 2.0] and indices.tolist() == [1, 2]


def test_an_argument_keras_has_and_jax_lacks_is_refused():
    with pytest.raises(TypeError, match="sparse"):
        ops.one_hot(jnp.array([0]), 2, sparse=True)


def test_a_missing_argument_names_keras_parameter():
    with pytest.raises(TypeError, match="x2"):
        ops.add(X)


def test_signature_is_keras():
    assert str(inspect.signature(ops.sum)) == "(x, axis=None, keepdims=False)"
    assert str(inspect.signature(ops.einsum)) == "(subscripts, *operands, **kwargs)"
    assert str(inspect.signature(ops.vectorize)) == "(pyfunc, *, excluded=(), signature=None)"


def test_variable_arguments_are_read_as_values():
    v = mf.Variable(X, name="v")
    np.testing.assert_allclose(ops.sin(v), np.sin(X), rtol=1e-6)
    np.testing.assert_array_equal(ops.concatenate([v, v], axis=0), np.concatenate([X, X]))
    np.testing.assert_array_equal(ops.stop_gradient(v), X)
    # Under jit too (jnp.sin(v) itself fails there on JAX 0.10).
    np.testing.assert_allclose(jax.jit(lambda: ops.exp(v))(), np.exp(X), rtol=1e-6)


def test_ops_trace_and_differentiate():
    grad = jax.grad(lambda x: ops.sum(ops.square(x)))(jnp.asarray(X))
    np.testing.assert_allclose(grad, 2 * X, rtol=1e-6)
    stopped = jax.grad(lambda x: ops.sum(ops.stop_gradient(x) * x))(jnp.asarray(X))
    np.testing.assert_allclose(stopped, X, rtol=1e-6)


def test_keras_op_with_varargs_passes_leading_arguments_by_position():
    # lax.switch(index, branches, *operands): index and branches must stay positional.
    out = ops.switch(1, [lambda a, b: a - b, lambda a, b: a + b], 2.0, 3.0)
    assert float(out) == 5.0
    mesh = ops.meshgrid(jnp.arange(2), jnp.arange(3), indexing="ij")
    assert [m.shape for m in mesh] == [(2, 3), (2, 3)]


def test_keras_op_builds_from_a_path():
    op = keras_op("total", "numpy.sum", "x, axis=None")
    assert op.__name__ == "total" and op.__wrapped__ is np.sum
    assert op(X, 0).tolist() == [3.0, 5.0, 7.0]


def test_python_lists_are_arrays_as_keras_converts_them():
    assert int(ops.sum([1, 2, 3])) == 6
    np.testing.assert_array_equal(ops.sum([[1.0, 2.0], [3.0, 4.0]], axis=0), [4.0, 6.0])
    np.testing.assert_array_equal(ops.maximum([1, 5], (3, 3)), [3, 5])
    # stack takes a sequence of arrays: stacked along the given axis, not first converted.
    stacked = ops.stack([jnp.ones(2), jnp.zeros(2)], axis=1)
    np.testing.assert_array_equal(stacked, np.stack([np.ones(2), np.zeros(2)], axis=1))


def test_shape_arithmetic_on_constants_traces_under_jit():
    # keras-io's causal attention mask (the miniature GPT, the translation examples):
    # TensorFlow evaluates the multiples eagerly, JAX would stage them and refuse them as
    # tile's static repeats.
    def causal_attention_mask(batch_size, n_dest, n_src, dtype):
        i = ops.arange(n_dest)[:, None]
        j = ops.arange(n_src)
        m = i >= j - n_src + n_dest
        mask = ops.cast(m, dtype)
        mask = ops.reshape(mask, [1, n_dest, n_src])
        mult = ops.concatenate(
            [ops.expand_dims(batch_size, -1), ops.convert_to_tensor([1, 1])], 0)
        return ops.tile(mask, mult)

    got = jax.jit(lambda x: causal_attention_mask(x.shape[0], x.shape[1], x.shape[1],
                                                  "bool"))(jnp.zeros((2, 3)))
    np.testing.assert_array_equal(got, np.broadcast_to(np.tril(np.ones((3, 3), bool)),
                                                       (2, 3, 3)))
    # A constant array as reshape's shape; a traced argument is still staged as before.
    assert jax.jit(lambda x: ops.reshape(x, ops.convert_to_tensor([3, 2])))(
        jnp.ones(6)).shape == (3, 2)
    with pytest.raises(TypeError):  # a traced shape cannot be static: JAX's own error
        jax.jit(lambda x, s: ops.reshape(x, s))(jnp.ones(6), jnp.array([3, 2]))
