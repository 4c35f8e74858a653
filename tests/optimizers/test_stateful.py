"""The stateful optimizer object of custom loops: build, apply_gradients, apply, variables,
iterations, stateless_apply, and the gradient all-reduce inside ``strategy.run``.

Each update is checked against the same optimizer used as an optax transformation on a
params pytree (the path ``compile``/``fit`` take), float32 with rtol 1e-6.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from mirrorfit._src.optimizers import optimizers as optimizers_module
from mirrorfit._src.optimizers import sliceable
from mirrorfit._src.optimizers.base import Optimizer
from mirrorfit._src.variables import tracking

RTOL = 1e-6
_rng = np.random.default_rng(0)
W0 = _rng.normal(size=(3, 2)).astype(np.float32)
B0 = _rng.normal(size=(2,)).astype(np.float32)
GRADS = [(_rng.normal(size=(3, 2)).astype(np.float32), _rng.normal(size=(2,)).astype(np.float32))
         for _ in range(3)]


def _variables():
    return mf.Variable(W0, name="dense/kernel"), mf.Variable(B0, name="dense/bias")


def _optax_steps(opt, grads_list):
    params = [{"dense/kernel": jnp.asarray(W0)}, {"dense/bias": jnp.asarray(B0)}]
    state = opt.init(params)
    for gw, gb in grads_list:
        updates, state = opt.update([{"dense/kernel": gw}, {"dense/bias": gb}], state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
    return [params[0]["dense/kernel"], params[1]["dense/bias"]]


@pytest.mark.parametrize("make", [lambda: mf.optimizers.Adam(0.1),
                                  lambda: mf.optimizers.SGD(0.1, momentum=0.9),
                                  lambda: mf.optimizers.AdamW(0.1, weight_decay=0.1)],
                         ids=["Adam", "SGD", "AdamW"])
def test_apply_gradients_equals_the_optax_update(make):
    w, b = _variables()
    opt = make()
    for gw, gb in GRADS:
        assert opt.apply_gradients(zip([gw, gb], [w, b])) is opt.iterations
    want = _optax_steps(make(), GRADS)
    np.testing.assert_allclose(w.numpy(), want[0], rtol=RTOL)
    np.testing.assert_allclose(b.numpy(), want[1], rtol=RTOL)
    assert int(opt.iterations) == 3 and opt.iterations.dtype == jnp.int32


def test_apply_without_variables_uses_the_built_ones_in_any_order():
    w, b = _variables()
    opt = mf.optimizers.Adam(0.1)
    opt.build([w, b])
    gw, gb = GRADS[0]
    opt.apply([gw, gb])
    opt.apply([GRADS[1][1], GRADS[1][0]], [b, w])  # Keras allows any order
    want = _optax_steps(mf.optimizers.Adam(0.1), GRADS[:2])
    np.testing.assert_allclose(w.numpy(), want[0], rtol=RTOL)
    np.testing.assert_allclose(b.numpy(), want[1], rtol=RTOL)


def test_variables_hold_the_optax_state_and_are_tracked():
    w, b = _variables()
    opt = mf.optimizers.Adam(0.1)
    assert opt.variables == [opt.iterations] and not opt.built
    opt.apply_gradients(zip(GRADS[0], [w, b]))
    names = [v.name for v in opt.variables]
    assert names[0] == "iteration" and "hyperparams/learning_rate" in names
    assert sum("mu" in n for n in names) == 2 and sum("nu" in n for n in names) == 2
    assert all(not v.trainable for v in opt.variables)
    assert [v for _, v in tracking.walk(opt)] == opt.variables
    lr = next(v for v in opt.variables if v.name == "hyperparams/learning_rate")
    np.testing.assert_allclose(lr.numpy(), 0.1, rtol=RTOL)


def test_constraint_is_applied_after_the_update():
    w = mf.Variable(np.array([0.5, -0.5], np.float32), constraint=lambda v: jnp.maximum(v, 0.0))
    mf.optimizers.SGD(1.0).apply_gradients([(np.array([1.0, -1.0], np.float32), w)])
    np.testing.assert_array_equal(w.numpy(), [0.0, 0.5])  # -0.5 clipped, 0.5 kept


def test_exclude_from_weight_decay_matches_variable_paths():
    w, b = _variables()
    opt = mf.optimizers.AdamW(0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_names=["bias"])
    opt.apply_gradients(zip([np.zeros_like(W0), np.zeros_like(B0)], [w, b]))
    np.testing.assert_allclose(w.numpy(), W0 * (1 - 0.1 * 0.5), rtol=RTOL)  # decayed only
    np.testing.assert_array_equal(b.numpy(), B0)


def test_stateless_apply_returns_the_values_apply_assigns():
    w, b = _variables()
    opt = mf.optimizers.Adam(0.1)
    opt.build([w, b])
    values = [v.value for v in opt.variables]
    new_trainable, new_values = jax.jit(opt.stateless_apply)(values, list(GRADS[0]),
                                                             [w.value, b.value])
    np.testing.assert_array_equal(w.numpy(), W0)  # nothing assigned
    assert int(opt.iterations) == 0
    opt.apply(list(GRADS[0]))
    np.testing.assert_allclose(new_trainable[0], w.numpy(), rtol=RTOL)
    np.testing.assert_allclose(new_trainable[1], b.numpy(), rtol=RTOL)
    for got, variable in zip(new_values, opt.variables):
        np.testing.assert_allclose(got, variable.numpy(), rtol=RTOL)


@pytest.mark.parametrize("n", [1, 3, 8])
def test_apply_gradients_inside_run_all_reduces_like_one_device(n):
    strategy = mf.MirroredStrategy(jax.devices()[:n])
    x = np.random.default_rng(4).normal(size=(24, 3)).astype(np.float32)
    with strategy.scope():
        w = mf.Variable(W0, name="kernel")
        opt = mf.optimizers.SGD(0.1)

    def loss(x):
        return jnp.sum((x @ w) ** 2, axis=1)

    def step(x):  # each replica's loss is its share of the global mean: SUM all-reduce
        _, grads = mf.value_and_grad(lambda x: mf.compute_average_loss(loss(x)), [w])(x)
        opt.apply_gradients(zip(grads, [w]))

    def step_of_replica_means(x):  # a replica-mean loss, all-reduced with MEAN
        mf.get_replica_context().gradient_reduce_op = mf.ReduceOp.MEAN
        _, grads = mf.value_and_grad(lambda x: jnp.mean(loss(x)), [w])(x)
        opt.apply_gradients(zip(grads, [w]))

    (batch,) = strategy.experimental_distribute_dataset([x])
    want = W0 - 0.1 * jax.grad(lambda w: jnp.mean(jnp.sum((x @ w) ** 2, axis=1)))(W0)
    strategy.run(step, args=(batch,))
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-5)
    want = want - 0.1 * jax.grad(lambda w: jnp.mean(jnp.sum((x @ w) ** 2, axis=1)))(want)
    strategy.run(step_of_replica_means, args=(batch,))
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-5)
    assert int(opt.iterations) == 2
    # Built inside the replica function's first trace, the state is concrete and mirrored.
    assert all(v.value.sharding == strategy.replicated_sharding for v in opt.variables)


def test_apply_before_build_without_variables_raises_value_error_naming_build():
    with pytest.raises(ValueError, match=r"optimizer.build\(model.trainable_variables\).*"
                       "never built"):
        mf.optimizers.Adam().apply([np.zeros(2)])


def test_apply_with_unknown_variable_raises_value_error_naming_it():
    w, b = _variables()
    opt = mf.optimizers.Adam()
    opt.build([w])
    with pytest.raises(ValueError, match=r"not built with \['dense/bias'\], and without "
                       r"\['dense/kernel'\]"):
        opt.apply([np.zeros(2)], [b])


def test_none_gradient_raises_value_error_naming_the_variable():
    w, b = _variables()
    with pytest.raises(ValueError, match=r"None gradients for \['dense/bias'\]"):
        mf.optimizers.Adam().apply_gradients([(np.zeros((3, 2)), w), (None, b)])


def test_stateless_apply_with_wrong_lengths_raises_value_error():
    w, b = _variables()
    opt = mf.optimizers.Adam()
    with pytest.raises(ValueError, match=r"stateless_apply.*never built"):
        opt.stateless_apply([], [], [])
    opt.build([w, b])
    with pytest.raises(ValueError, match=r"optimizer_variables must hold one value per "
                       r"variable.*Received: 1 values"):
        opt.stateless_apply([0], list(GRADS[0]), [w.value, b.value])


def test_optimizer_stays_an_optax_transformation_after_stateful_use():
    w, b = _variables()
    opt = mf.optimizers.Adam(0.1)
    opt.apply_gradients(zip(GRADS[0], [w, b]))
    assert isinstance(opt, optax.GradientTransformation)
    want = _optax_steps(mf.optimizers.Adam(0.1), GRADS)
    np.testing.assert_allclose(_optax_steps(opt, GRADS)[0], want[0], rtol=RTOL)


def test_the_optimizers_that_update_blocks_are_the_sliceable_ones():
    # A custom loop under shard_optimizer_state=True refuses the others, as compile does.
    classes = [c for c in vars(optimizers_module).values()
               if isinstance(c, type) and issubclass(c, Optimizer) and c is not Optimizer]
    assert {c for c in classes if c._updates_blocks} == set(sliceable.SLICEABLE_OPTIMIZERS)
    assert {c.__name__ for c in classes if not c._updates_blocks} == {"Adafactor", "Lamb"}
