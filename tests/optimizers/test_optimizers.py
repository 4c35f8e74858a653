"""Tests for mirrorfit.optimizers against NumPy implementations of the Keras 3 update rules."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mirrorfit import optimizers
from mirrorfit._src.optimizers.optimizers import OPTIMIZERS

# The Keras name of every registered optimizer that builds without arguments.
KERAS_NAMES = sorted(cls.__name__.lower() for cls in OPTIMIZERS.classes()
                     if cls is not optimizers.LossScaleOptimizer)

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


# -- Keras 3 optimizers beyond the first four: NumPy transcriptions of each update_step ----

LR = 0.1  # Large enough that a 1% error in an update shows at rtol 1e-5 on the params.


def _keras_loop(step, state):
    """Runs ``step(w, g, t, state) -> (w, state)`` over GRADS in float64 from W0."""
    w, history = W0.astype(np.float64), []
    for t, g in enumerate(GRADS, start=1):
        w, state = step(w, g.astype(np.float64), t, state)
        history.append(w)
    return history


def keras_adagrad(lr=LR, initial=0.1, eps=1e-7):
    def step(w, g, t, acc):
        acc = acc + g**2
        return w - lr * g / np.sqrt(acc + eps), acc
    return _keras_loop(step, np.full(4, initial))


def keras_adadelta(lr=LR, rho=0.95, eps=1e-7):
    def step(w, g, t, state):
        acc_g, acc_dx = state
        acc_g = rho * acc_g + (1 - rho) * g**2
        delta = -np.sqrt(acc_dx + eps) * g / np.sqrt(acc_g + eps)
        acc_dx = rho * acc_dx + (1 - rho) * delta**2
        return w + lr * delta, (acc_g, acc_dx)
    return _keras_loop(step, (0.0, 0.0))


def keras_adamax(lr=LR, b1=0.9, b2=0.999, eps=1e-7):
    def step(w, g, t, state):
        m, u = state
        m = m + (g - m) * (1 - b1)
        u = np.maximum(b2 * u, np.abs(g))
        return w - lr * m / ((1 - b1**t) * (u + eps)), (m, u)
    return _keras_loop(step, (0.0, 0.0))


def keras_nadam(lr=LR, b1=0.9, b2=0.999, eps=1e-7):
    def step(w, g, t, state):
        m, v, u_product = state
        u_product = u_product * b1 * (1 - 0.5 * 0.96**t)
        u_t, u_next = b1 * (1 - 0.5 * 0.96**t), b1 * (1 - 0.5 * 0.96 ** (t + 1))
        m = m + (g - m) * (1 - b1)
        v = v + (g**2 - v) * (1 - b2)
        m_hat = u_next * m / (1 - u_product * u_next) + (1 - u_t) * g / (1 - u_product)
        v_hat = v / (1 - b2**t)
        return w - m_hat * lr / (np.sqrt(v_hat) + eps), (m, v, u_product)
    return _keras_loop(step, (0.0, 0.0, 1.0))


def keras_lion(lr=LR, b1=0.9, b2=0.99):
    def step(w, g, t, m):
        w = w - lr * np.sign(m * b1 + g * (1 - b1))
        return w, m * b2 + g * (1 - b2)
    return _keras_loop(step, 0.0)


def keras_lamb(lr=LR, b1=0.9, b2=0.999, eps=1e-7, weight_decay=0.0):
    def step(w, g, t, state):
        m, v = state
        w = w - w * weight_decay * lr
        m = m + (g - m) * (1 - b1)
        v = v + (g**2 - v) * (1 - b2)
        update = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(update)
        ratio = w_norm / g_norm if w_norm > 0 and g_norm > 0 else 1.0
        return w - ratio * lr * update, (m, v)
    return _keras_loop(step, (0.0, 0.0))


def keras_ftrl(lr=LR, power=-0.5, initial=0.1, l1=0.0, l2=0.0, shrinkage=0.0, beta=0.0):
    def step(w, g, t, state):
        accum, linear = state
        l2_total = l2 + beta / (2.0 * lr)
        new_accum = accum + g**2
        linear = linear + (g + 2 * shrinkage * w) - (new_accum**-power - accum**-power) / lr * w
        quadratic = new_accum**-power / lr + 2 * l2_total
        return (np.clip(linear, -l1, l1) - linear) / quadratic, (new_accum, linear)
    return _keras_loop(step, (np.full(4, initial), 0.0))


@pytest.mark.parametrize(
    "opt,reference",
    [
        (optimizers.Adagrad(LR), keras_adagrad()),
        (optimizers.Adagrad(LR, initial_accumulator_value=0.5, epsilon=1e-3),
         keras_adagrad(initial=0.5, eps=1e-3)),
        (optimizers.Adadelta(LR), keras_adadelta()),
        (optimizers.Adadelta(LR, rho=0.8, epsilon=1e-4), keras_adadelta(rho=0.8, eps=1e-4)),
        (optimizers.Adamax(LR), keras_adamax()),
        (optimizers.Adamax(LR, beta_1=0.8, epsilon=0.1), keras_adamax(b1=0.8, eps=0.1)),
        (optimizers.Nadam(LR), keras_nadam()),
        (optimizers.Nadam(LR, beta_1=0.8, beta_2=0.9, epsilon=1e-4),
         keras_nadam(b1=0.8, b2=0.9, eps=1e-4)),
        (optimizers.Lion(LR), keras_lion()),
        (optimizers.Lion(LR, beta_1=0.5, beta_2=0.9), keras_lion(b1=0.5, b2=0.9)),
        (optimizers.Lamb(LR), keras_lamb()),
        (optimizers.Lamb(LR, weight_decay=0.5), keras_lamb(weight_decay=0.5)),
        (optimizers.Ftrl(LR), keras_ftrl()),
        (optimizers.Ftrl(LR, learning_rate_power=-0.7, initial_accumulator_value=0.3,
                         l1_regularization_strength=1e-3, l2_regularization_strength=0.2,
                         l2_shrinkage_regularization_strength=0.1, beta=0.5),
         keras_ftrl(power=-0.7, initial=0.3, l1=1e-3, l2=0.2, shrinkage=0.1, beta=0.5)),
    ],
    ids=lambda x: repr(x) if isinstance(x, optax.GradientTransformation) else "",
)
def test_more_optimizers_match_keras_update_rule(opt, reference, allclose):
    allclose(run_steps(opt), reference, rtol=1e-5, atol=1e-7)


def keras_adafactor(params, grads, lr, beta_2_decay=-0.8, eps1=1e-30, eps2=1e-3, clip=1.0):
    """keras.optimizers.Adafactor update_step in float64, for dicts of arrays."""
    params = {k: v.astype(np.float64) for k, v in params.items()}
    r = {k: 0.0 for k in params}
    c = {k: 0.0 for k in params}
    v = {k: 0.0 for k in params}
    rms = lambda x: np.sqrt(np.mean(np.square(x)))
    history = []
    for t, grad in enumerate(grads, start=1):
        rho = min(lr, 1 / np.sqrt(t))
        beta = 1 - t**beta_2_decay
        for k, w in params.items():
            g = grad[k].astype(np.float64)
            alpha = max(eps2, rms(w)) * rho
            g2 = g**2 + eps1
            if w.ndim >= 2:
                r[k] = beta * r[k] + (1 - beta) * g2.mean(-1)
                c[k] = beta * c[k] + (1 - beta) * g2.mean(-2)
                v[k] = (r[k] / r[k].mean(-1, keepdims=True))[..., None] * c[k][..., None, :]
            else:
                v[k] = beta * v[k] + (1 - beta) * g2
            u = g / np.sqrt(v[k])
            params[k] = w - alpha * u / max(1.0, rms(u) / clip)
        history.append(dict(params))
    return history


@pytest.mark.parametrize("lr,kwargs", [(1e-3, {}), (0.8, {"clip_threshold": 0.5,
                                                          "epsilon_2": 0.5})])
def test_adafactor_matches_keras_update_rule_factored_and_not(lr, kwargs, allclose):
    rng = np.random.default_rng(1)
    params = {"b": rng.normal(size=3).astype(np.float32),
              "k": rng.normal(size=(2, 4, 3)).astype(np.float32)}
    grads = [{k: rng.normal(size=p.shape).astype(np.float32) for k, p in params.items()}
             for _ in range(3)]
    opt = optimizers.Adafactor(lr, **kwargs)
    state = opt.init(params)
    got, p = [], jax.tree.map(jnp.asarray, params)
    for g in grads:
        updates, state = jax.jit(opt.update)(g, state, p)
        p = optax.apply_updates(p, updates)
        got.append(p)
    renamed = {"clip_threshold": "clip", "epsilon_2": "eps2"}
    allclose(got, keras_adafactor(params, grads, lr, **{renamed[k]: v for k, v in kwargs.items()}),
             rtol=1e-5)


@pytest.mark.parametrize("name", KERAS_NAMES)
def test_every_keras_name_builds_an_optimizer_with_injected_learning_rate(name):
    opt = optimizers.get(name)
    assert isinstance(opt, optax.GradientTransformation)
    assert type(opt).__name__.lower() == name
    state = opt.init({"w": jnp.ones((2, 2))})
    assert state.hyperparams["learning_rate"].dtype == jnp.float32
