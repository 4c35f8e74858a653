"""Tests for mirrorfit.optimizers against NumPy implementations of the Keras 3 update rules."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mirrorfit import optimizers

# Gradients span magnitudes so that where epsilon enters the update matters.
W0 = np.array([0.5, -1.5, 2.0, 10.0], np.float32)
GRADS = [
    np.array([1e-6, -2e-5, 3e-3, 10.0], np.float32),
    np.array([-3e-6, 1e-5, -1e-3, 4.0], np.float32),
    np.array([2e-6, 5e-5, 2e-3, -7.0], np.float32),
]


def run_steps(opt, grads=GRADS):
    """Applies ``grads`` one step each from W0; returns the params after every step."""
    params = {"w": jnp.asarray(W0)}
    state = opt.init(params)
    step = jax.jit(opt.update)
    history = []
    for g in grads:
        updates, state = step({"w": jnp.asarray(g)}, state, params)
        params = optax.apply_updates(params, updates)
        history.append(np.asarray(params["w"]))
    return history


def keras_adam(lr=1e-3, b1=0.9, b2=0.999, eps=1e-7, weight_decay=0.0):
    """keras.optimizers.Adam/AdamW update_step in float64."""
    w, m, v, history = W0.astype(np.float64), 0.0, 0.0, []
    for t, g in enumerate(GRADS, start=1):
        w = w - w * weight_decay * lr  # Keras' _apply_weight_decay, before the step.
        alpha = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        m = m + (g - m) * (1 - b1)
        v = v + (g.astype(np.float64) ** 2 - v) * (1 - b2)
        w = w - alpha * m / (np.sqrt(v) + eps)
        history.append(w)
    return history


def keras_sgd(lr=0.01, momentum=0.0, nesterov=False):
    """keras.optimizers.SGD update_step in float64."""
    w, m, history = W0.astype(np.float64), 0.0, []
    for g in GRADS:
        m = momentum * m - lr * g
        w = w + (momentum * m - lr * g if nesterov else m)
        history.append(w)
    return history


def keras_rmsprop(lr=1e-3, rho=0.9, momentum=0.0, eps=1e-7, centered=False):
    """keras.optimizers.RMSprop update_step in float64 (epsilon inside the sqrt)."""
    w, v, avg, mom, history = W0.astype(np.float64), 0.0, 0.0, 0.0, []
    for g in GRADS:
        g = g.astype(np.float64)
        v = rho * v + (1 - rho) * g**2
        if centered:
            avg = rho * avg + (1 - rho) * g
            denominator = v - avg**2 + eps
        else:
            denominator = v + eps
        increment = lr * g / np.sqrt(denominator)
        mom = momentum * mom + increment
        w = w - (mom if momentum > 0 else increment)
        history.append(w)
    return history


@pytest.mark.parametrize(
    "name,reference",
    [
        ("adam", keras_adam()),
        ("adamw", keras_adam(weight_decay=0.004)),
        ("sgd", keras_sgd()),
        ("rmsprop", keras_rmsprop()),
    ],
)
def test_named_optimizer_matches_keras_update_rule(name, reference, allclose):
    allclose(run_steps(optimizers.get(name)), reference, rtol=1e-5)


@pytest.mark.parametrize(
    "opt,reference",
    [
        (optimizers.Adam(0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-5),
         keras_adam(0.01, 0.8, 0.99, 1e-5)),
        (optimizers.AdamW(0.01, weight_decay=0.1), keras_adam(0.01, weight_decay=0.1)),
        (optimizers.SGD(0.1, momentum=0.9), keras_sgd(0.1, momentum=0.9)),
        (optimizers.SGD(0.1, momentum=0.9, nesterov=True), keras_sgd(0.1, 0.9, nesterov=True)),
        (optimizers.RMSprop(0.01, momentum=0.5), keras_rmsprop(0.01, momentum=0.5)),
        (optimizers.RMSprop(0.01, rho=0.8, centered=True), keras_rmsprop(0.01, 0.8, centered=True)),
    ],
)
def test_configured_optimizer_matches_keras_update_rule(opt, reference, allclose):
    allclose(run_steps(opt), reference, rtol=1e-5)


def test_rmsprop_matches_keras_docstring_example():
    # keras.optimizers.RMSprop docstring: var 10, grad 10, lr 0.1 -> 9.683772.
    (params,) = run_steps(optimizers.RMSprop(learning_rate=0.1), [W0 * 0 + 10.0])
    np.testing.assert_allclose(params[3], 9.683772, rtol=1e-6)


@pytest.mark.parametrize(
    "name,default_lr", [("adam", 1e-3), ("AdamW", 1e-3), ("SGD", 0.01), ("rmsprop", 1e-3)]
)
def test_learning_rate_readable_and_settable_without_retracing(name, default_lr):
    opt = optimizers.get(name)
    params = {"w": jnp.asarray(W0)}
    state = opt.init(params)
    np.testing.assert_allclose(state.hyperparams["learning_rate"], default_lr, rtol=1e-7)
    traces = []

    @jax.jit
    def step(state):
        traces.append(1)
        return opt.update({"w": jnp.asarray(GRADS[0])}, state, params)

    _, after_one = step(state)
    # A strongly typed float32 scalar keeps the avals (a weak-typed 0.0 would retrace).
    zero_lr = jnp.asarray(0.0, after_one.hyperparams["learning_rate"].dtype)
    slow = after_one._replace(hyperparams={**after_one.hyperparams, "learning_rate": zero_lr})
    updates, after_two = step(slow)
    np.testing.assert_array_equal(updates["w"], np.zeros(4))  # Also no weight decay.
    np.testing.assert_allclose(after_two.hyperparams["learning_rate"], 0.0)
    assert len(traces) == 1


def test_get_passes_gradient_transformations_through():
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    assert optimizers.get(opt) is opt
    assert isinstance(optimizers.get("RMSProp"), optax.GradientTransformation)


def test_get_unknown_name_raises_value_error():
    with pytest.raises(ValueError, match=r"'adamw'.*Received: optimizer='adamwx'"):
        optimizers.get("adamwx")


def test_get_wrong_type_raises_type_error():
    with pytest.raises(TypeError, match=r"Received: optimizer=None of type NoneType"):
        optimizers.get(None)
