"""`mf.value_and_grad` (the tf.GradientTape line of a ported loop) and `mf.GradientTape`'s error.

Gradients are checked against ``jax.grad`` of the same function written over plain arrays
(float32, rtol 1e-6); assignments the differentiated function makes to other variables must
reach those variables, or the enclosing stateless scope.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.variables.stateless_scope import StatelessScope

RTOL = 1e-6
X = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)


def _loss(w, b, x):
    return jnp.mean((x @ w + b) ** 2)


def _variables():
    rng = np.random.default_rng(1)
    return (mf.Variable(rng.normal(size=(3, 2)).astype(np.float32), name="w"),
            mf.Variable(rng.normal(size=(2,)).astype(np.float32), name="b"))


def test_value_and_grad_matches_jax_grad_of_the_values():
    w, b = _variables()
    w0, b0 = w.numpy(), b.numpy()
    loss, grads = mf.value_and_grad(lambda x: _loss(w.value, b.value, x), [w, b])(X)
    want_loss, want_grads = jax.value_and_grad(_loss, argnums=(0, 1))(w0, b0, X)
    np.testing.assert_allclose(loss, want_loss, rtol=RTOL)
    assert isinstance(grads, list) and len(grads) == 2
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=RTOL)
    np.testing.assert_array_equal(w.numpy(), w0)  # differentiating assigns nothing


def test_value_and_grad_has_aux_returns_the_aux_output():
    w, b = _variables()

    def forward(x):
        y = x @ w + b  # x is a NumPy batch: NumPy defers to the Variable's __rmatmul__
        return jnp.mean(y**2), y

    (loss, y), grads = mf.value_and_grad(forward, [w, b], has_aux=True)(X)
    np.testing.assert_allclose(y, X @ w.numpy() + b.numpy(), rtol=RTOL)
    np.testing.assert_allclose(loss, np.mean(np.asarray(y) ** 2), rtol=RTOL)
    assert [g.shape for g in grads] == [(3, 2), (2,)]


def test_value_and_grad_assigns_other_variables_the_function_updates():
    # As BatchNormalization's moving statistics or a metric updated inside the loss.
    w, b = _variables()
    seen = mf.Variable(0.0, trainable=False, name="seen")
    total = mf.Variable(jnp.zeros(2), trainable=False, name="total")

    def forward(x):
        y = x @ w + b
        seen.assign_add(1.0)
        total.assign_add(jnp.sum(y, axis=0))
        return jnp.mean(y**2)

    mf.value_and_grad(forward, [w, b])(X)
    assert float(seen.numpy()) == 1.0
    np.testing.assert_allclose(total.numpy(), (X @ w.numpy() + b.numpy()).sum(0), rtol=1e-5)


def test_value_and_grad_inside_a_scope_records_assignments_there():
    w, b = _variables()
    seen = mf.Variable(0.0, trainable=False, name="seen")
    shifted = jnp.asarray(w.numpy() + 1.0)

    def forward(x):
        seen.assign_add(1.0)
        return _loss(w.value, b.value, x)

    with StatelessScope([(w, shifted)]) as scope:
        _, (grad_w,) = mf.value_and_grad(forward, [w])(X)
    # The gradient is at the scope's value of w, and the assignment went to the scope.
    want = jax.grad(_loss)(shifted, b.numpy(), X)
    np.testing.assert_allclose(grad_w, want, rtol=RTOL)
    assert float(seen.numpy()) == 0.0
    assert [v for v, _ in scope.updates] == [seen]
    assert float(scope.get_current_value(seen)) == 1.0


def test_value_and_grad_under_jit_inside_a_scope_is_differentiable():
    w, b = _variables()

    @jax.jit
    def grads_at(w_value, x):
        with StatelessScope([(w, w_value)]):
            return mf.value_and_grad(lambda x: _loss(w.value, b.value, x), [w])(x)[1][0]

    np.testing.assert_allclose(grads_at(w.value, X), jax.grad(_loss)(w.numpy(), b.numpy(), X),
                               rtol=RTOL)


def test_value_and_grad_without_variables_raises_value_error_naming_build():
    with pytest.raises(ValueError, match=r"at least one variable.*build.*variables=\[\]"):
        mf.value_and_grad(lambda: 0.0, [])()


def test_value_and_grad_of_arrays_raises_type_error_naming_variables():
    with pytest.raises(TypeError, match=r"mf.Variable s.*Received: variables with ArrayImpl"):
        mf.value_and_grad(lambda: 0.0, [jnp.zeros(2)])()


def test_gradient_tape_raises_showing_the_value_and_grad_line():
    with pytest.raises(NotImplementedError, match=r"(?s)tf.GradientTape\(\) as tape.*"
                       r"mf.value_and_grad\(\s*forward, model.trainable_variables"):
        mf.GradientTape()
