"""Tests for Keras' optimizer options, config and lookups on mirrorfit.optimizers.

References are NumPy transcriptions of Keras 3's ``BaseOptimizer`` with the JAX backend's
``_backend_apply_gradients`` (accumulation, clipping, weight decay, SGD step, EMA).
"""

import copy
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from mirrorfit import optimizers
from mirrorfit._src.optimizers.optimizers import OPTIMIZERS

# The Keras name of every registered optimizer that builds without arguments.
KERAS_NAMES = sorted(cls.__name__.lower() for cls in OPTIMIZERS.classes()
                     if cls is not optimizers.LossScaleOptimizer)

_rng = np.random.default_rng(0)
PARAMS = {"dense": {"bias": _rng.normal(size=2).astype(np.float32),
                    "kernel": _rng.normal(size=(3, 2)).astype(np.float32)}}
# Gradient norms from ~0.3 to ~6, so that the clip bounds below clip some steps and not others.
GRADS = [jax.tree.map(lambda p, s=s: (s * _rng.normal(size=p.shape)).astype(np.float32), PARAMS)
         for s in (0.2, 3.0, 0.5, 2.0, 1.0, 0.1)]
LR = 0.1


def run(opt, grads=GRADS):
    """Params and optimizer state after each step from PARAMS."""
    params, state = jax.tree.map(jnp.asarray, PARAMS), opt.init(PARAMS)
    step = jax.jit(opt.update)
    history = []
    for g in grads:
        updates, state = step(g, state, params)
        params = optax.apply_updates(params, updates)
        history.append((params, state))
    return history


def keras_sgd(grads=GRADS, lr=LR, *, clipnorm=None, clipvalue=None, global_clipnorm=None,
              weight_decay=None, excluded=(), use_ema=False, ema_momentum=0.99,
              ema_overwrite_frequency=None, gradient_accumulation_steps=None):
    """Keras' SGD with options in float64: [(params, ema)] after each train step."""
    k = gradient_accumulation_steps or 1
    w = {name: p.astype(np.float64) for name, p in PARAMS["dense"].items()}
    acc = {name: 0.0 for name in w}
    ema = {name: np.zeros_like(p) for name, p in w.items()}
    history = []
    for raw_iteration, grad in enumerate(grads):
        g = {name: x.astype(np.float64) for name, x in grad["dense"].items()}
        is_update = (raw_iteration + 1) % k == 0
        if k > 1:
            g, acc = ({n: (g[n] + acc[n]) / k for n in g}, {n: 0.0 for n in g}) if is_update \
                else (g, {n: acc[n] + g[n] for n in g})
        if is_update:
            if clipnorm:
                g = {n: x * clipnorm / max(np.linalg.norm(x), clipnorm) for n, x in g.items()}
            if global_clipnorm:
                norm = np.sqrt(sum(np.sum(x**2) for x in g.values()))
                g = {n: x * global_clipnorm * min(1 / norm, 1 / global_clipnorm)
                     for n, x in g.items()}
            if clipvalue:
                g = {n: np.clip(x, -clipvalue, clipvalue) for n, x in g.items()}
            if weight_decay is not None:
                w = {n: x if n in excluded else x - x * weight_decay * lr for n, x in w.items()}
            w = {n: x - lr * g[n] for n, x in w.items()}
        if use_ema:
            iterations = raw_iteration // k
            m = ema_momentum if iterations != 0 else 0.0
            ema = {n: m * ema[n] + (1 - m) * x for n, x in w.items()}
            if ema_overwrite_frequency and (iterations + 1) % ema_overwrite_frequency == 0:
                w = dict(ema)
        history.append(({"dense": w}, {"dense": ema}))
    return history


@pytest.mark.parametrize("options", [
    {"clipnorm": 1.0},
    {"global_clipnorm": 1.5},
    {"clipvalue": 0.3},
    {"weight_decay": 0.2},
    {"weight_decay": 0.2, "clipnorm": 0.5},
    {"gradient_accumulation_steps": 3},
    {"gradient_accumulation_steps": 2, "global_clipnorm": 1.0, "weight_decay": 0.1},
], ids=lambda o: ",".join(o))
def test_option_matches_keras_update(options, allclose):
    got = [params for params, _ in run(optimizers.SGD(LR, **options))]
    expected = [params for params, _ in keras_sgd(**options)]
    allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_clipnorm_clips_each_variable_separately(allclose):
    (params, _), = run(optimizers.SGD(1.0, clipnorm=0.5), GRADS[1:2])
    for name in ("bias", "kernel"):
        step = np.asarray(params["dense"][name]) - PARAMS["dense"][name]
        np.testing.assert_allclose(np.linalg.norm(step), 0.5, rtol=1e-5)


@pytest.mark.parametrize("options", [
    {"use_ema": True},
    {"use_ema": True, "ema_momentum": 0.5, "ema_overwrite_frequency": 2},
    {"use_ema": True, "ema_momentum": 0.7, "ema_overwrite_frequency": 1},
    {"use_ema": True, "ema_momentum": 0.5, "ema_overwrite_frequency": 2,
     "gradient_accumulation_steps": 2},
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_ema_and_overwrite_match_keras(options, allclose):
    got = run(optimizers.SGD(LR, **options))
    expected = keras_sgd(**options)
    allclose([p for p, _ in got], [p for p, _ in expected], rtol=1e-5, atol=1e-7)
    allclose([optimizers.ema_params(s) for _, s in got], [e for _, e in expected],
             rtol=1e-5, atol=1e-7)


def test_ema_overwrite_sets_params_to_average_every_n_iterations(allclose):
    history = run(optimizers.SGD(LR, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=3))
    for iteration, (params, state) in enumerate(history):
        overwritten = (iteration + 1) % 3 == 0
        ema = optimizers.ema_params(state)
        if overwritten:
            allclose(params, ema, rtol=1e-6)
        elif iteration > 0:  # At iteration 0 Keras' EMA starts at the params (momentum 0).
            assert not np.allclose(params["dense"]["kernel"], ema["dense"]["kernel"])


def test_finalize_variable_values_returns_ema_only_with_use_ema(allclose):
    (params, state), = run(optimizers.Adam(LR, use_ema=True), GRADS[:1])
    allclose(optimizers.finalize_variable_values(params, state), optimizers.ema_params(state),
             rtol=0)
    (params, state), = run(optimizers.Adam(LR), GRADS[:1])
    assert optimizers.finalize_variable_values(params, state) is params
    with pytest.raises(ValueError, match="use_ema=True"):
        optimizers.ema_params(state)


def test_gradient_accumulation_leaves_params_unchanged_between_updates(allclose):
    history = run(optimizers.Adam(LR, gradient_accumulation_steps=3))
    allclose([p for p, _ in history[:2]], [PARAMS, PARAMS], rtol=0)
    mean = jax.tree.map(lambda *g: sum(g) / 3, *GRADS[:3])
    (direct, _), = run(optimizers.Adam(LR), [mean])
    allclose(history[2][0], direct, rtol=1e-5, atol=1e-7)  # sums in another order


def test_exclude_from_weight_decay_skips_matching_param_paths(allclose):
    opt = optimizers.AdamW(LR, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_names=["bias"])
    (params, _), = run(opt, GRADS[:1])
    (decayed, _), = run(optimizers.AdamW(LR, weight_decay=0.5), GRADS[:1])
    (plain, _), = run(optimizers.Adam(LR), GRADS[:1])
    allclose(params["dense"]["bias"], plain["dense"]["bias"], rtol=1e-6)
    allclose(params["dense"]["kernel"], decayed["dense"]["kernel"], rtol=1e-6)
    assert not np.allclose(decayed["dense"]["bias"], plain["dense"]["bias"])


def test_exclude_from_weight_decay_after_init_or_with_var_list_raises():
    opt = optimizers.AdamW()
    with pytest.raises(TypeError, match="Received: var_list="):
        opt.exclude_from_weight_decay(var_list=["w"])
    with pytest.raises(TypeError, match="Received: var_names='bias'"):
        opt.exclude_from_weight_decay(var_names="bias")
    opt.init(PARAMS)
    with pytest.raises(ValueError, match="before the optimizer is built"):
        opt.exclude_from_weight_decay(var_names=["bias"])


@pytest.mark.parametrize("make,match", [
    (lambda: optimizers.SGD(clipnorm=-1.0), r"`clipnorm` must be a positive.*clipnorm=-1.0"),
    (lambda: optimizers.Adam(clipvalue=0), r"`clipvalue`.*Received: clipvalue=0"),
    (lambda: optimizers.Adam(clipnorm=1.0, global_clipnorm=1.0),
     r"Only one of.*clipnorm=1.0, clipvalue=None, global_clipnorm=1.0"),
    (lambda: optimizers.SGD(weight_decay=-0.1), r"`weight_decay`.*weight_decay=-0.1"),
    (lambda: optimizers.SGD(use_ema=True, ema_momentum=1.5), r"ema_momentum=1.5"),
    (lambda: optimizers.SGD(use_ema=True, ema_overwrite_frequency=0),
     r"ema_overwrite_frequency=0"),
    (lambda: optimizers.SGD(gradient_accumulation_steps=1), r"gradient_accumulation_steps=1"),
    (lambda: optimizers.SGD(loss_scale_factor=2.0), r"not recognized.*loss_scale_factor=2.0"),
    (lambda: optimizers.Adam(learning_rate="fast"), r"learning_rate='fast'"),
    (lambda: optimizers.SGD(momentum=2.0), r"momentum=2.0"),
    (lambda: optimizers.AdamW(weight_decay=None), r"weight_decay=None"),
    (lambda: optimizers.Lion(beta_1=0.0), r"beta_1=0.0"),
    (lambda: optimizers.Ftrl(learning_rate_power=0.5), r"learning_rate_power=0.5"),
    (lambda: optimizers.Ftrl(l1_regularization_strength=-1.0),
     r"l1_regularization_strength=-1.0"),
])
def test_bad_option_raises_value_error_naming_it(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("make", [
    optimizers.AdamW,  # decoupled weight decay
    lambda: optimizers.SGD(use_ema=True),
    optimizers.Adafactor,
    optimizers.Ftrl,
])
def test_update_without_params_raises_value_error(make):
    opt = make()
    state = opt.init(PARAMS)
    with pytest.raises(ValueError, match=r"needs the current params.*Received: params=None"):
        opt.update(GRADS[0], state)


@pytest.mark.parametrize("name", KERAS_NAMES)
def test_config_round_trips_through_json(name, allclose):
    opt = optimizers.get({"class_name": name, "config": {
        "learning_rate": 0.05, "clipnorm": 2.0, "use_ema": True, "ema_overwrite_frequency": 2,
        "weight_decay": 0.01, "name": "mine"}})
    opt.exclude_from_weight_decay(var_names=["bias"])
    config = json.loads(json.dumps(optimizers.serialize(opt)))
    rebuilt = optimizers.deserialize(config)
    assert type(rebuilt) is type(opt)
    assert rebuilt.get_config() == opt.get_config() == config["config"]
    assert config["config"]["exclude_from_weight_decay"] == ["bias"]
    assert rebuilt.get_config()["learning_rate"] == 0.05 and repr(rebuilt) == repr(opt)


def test_rebuilt_optimizer_updates_as_the_original(allclose):
    opt = optimizers.AdamW(0.05, global_clipnorm=1.0, use_ema=True, gradient_accumulation_steps=2)
    opt.exclude_from_weight_decay(var_names=["bias"])
    rebuilt = optimizers.get(json.loads(json.dumps(optimizers.serialize(opt))))
    allclose(run(rebuilt, GRADS[:2]), run(opt, GRADS[:2]), rtol=0)


def test_deepcopy_and_tree_map_keep_the_optimizer():
    opt = optimizers.Nadam(0.01, global_clipnorm=1.0)
    opt.exclude_from_weight_decay(var_names=["scale"])
    copied = copy.deepcopy(opt)
    assert isinstance(copied, optimizers.Nadam) and copied.get_config() == opt.get_config()
    # A pytree node without leaves: tree functions over a config holding it keep it whole.
    assert jax.tree.leaves({"optimizer": opt}) == []
    assert jax.tree.map(lambda x: x, {"optimizer": opt})["optimizer"] is opt


def test_get_config_with_schedule_raises_and_schedule_drives_learning_rate():
    opt = optimizers.SGD(optax.linear_schedule(1.0, 0.0, 4))
    _, state = run(opt, GRADS[:2])[-1]
    # The rate the second step used: the schedule at step count 1.
    np.testing.assert_allclose(state.hyperparams["learning_rate"], 0.75)
    with pytest.raises(TypeError, match="learning_rate=<function"):
        opt.get_config()


def test_get_accepts_multisteps_and_rejects_other_objects(allclose):
    tx = optimizers.get(optax.MultiSteps(optax.sgd(LR), every_k_schedule=2))
    history = run(tx, GRADS[:2])
    allclose(history[0][0], PARAMS, rtol=0)
    mean = jax.tree.map(lambda a, b: (a + b) / 2, *GRADS[:2])
    allclose(history[1][0], run(optax.sgd(LR), [mean])[0][0], rtol=1e-6)
    with pytest.raises(TypeError, match=r"Call the class: Adam\(\)"):
        optimizers.get(optimizers.Adam)
    with pytest.raises(TypeError, match=r"optax.MultiSteps.*Received: optimizer=3 of type int"):
        optimizers.get(3)
    with pytest.raises(ValueError, match="Unknown optimizer class_name"):
        optimizers.get({"class_name": "Muon"})


# -- Through fit: accumulation over replicas equals one large batch ------------------------

X = _rng.normal(size=(48, 5)).astype(np.float32)
Y = _rng.normal(size=(48, 3)).astype(np.float32)


def _fit(num_replicas, batch_size, optimizer):
    """(params before, params after) one epoch of fit on X, Y in order."""
    with mf.MirroredStrategy(jax.devices()[:num_replicas]).scope():
        model = mf.Sequential([nn.Dense(4), nn.tanh, nn.Dense(3)], input_shape=(5,), seed=0)
        model.compile(optimizer, "mse")
    before = jax.device_get(model.state.params)
    model.fit(X, Y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    return before, model.state.params


@pytest.mark.slow
def test_gradient_accumulation_in_fit_on_8_replicas_equals_one_large_batch(allclose):
    # 48 examples: 3 steps of global batch 16 on 8 replicas (2 rows per replica),
    # accumulated, vs 1 step of global batch 48 on 1 device. Mean-reduced loss.
    _, accumulated = _fit(8, 16, optimizers.Adam(0.05, gradient_accumulation_steps=3))
    before, large = _fit(1, 48, optimizers.Adam(0.05))
    allclose(accumulated, large, rtol=1e-5, atol=1e-7)
    assert not np.allclose(jax.tree.leaves(large)[0], jax.tree.leaves(before)[0])


@pytest.mark.slow
def test_ema_and_accumulation_state_checkpoint_and_resume_step_exactly(tmp_path, allclose):
    # 3 steps leave one gradient accumulated (k=2); saving there and resuming must match
    # 6 uninterrupted steps, EMA included.
    def make():
        return optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5, gradient_accumulation_steps=2)

    layers = [nn.Dense(4), nn.tanh, nn.Dense(3)]
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        straight = mf.Sequential(layers, input_shape=(5,), seed=0)
        straight.compile(make(), "mse")
        straight.fit(X, Y, batch_size=8, shuffle=False, verbose=0)
        first = mf.Sequential(layers, input_shape=(5,), seed=0)
        first.compile(make(), "mse")
        first.fit(X[:24], Y[:24], batch_size=8, shuffle=False, verbose=0)
        first.save(tmp_path / "m")
        resumed = mf.load_model(tmp_path / "m", layers, optimizer=make(), loss="mse")
        resumed.fit(X[24:], Y[24:], batch_size=8, shuffle=False, verbose=0)
    allclose(resumed.state.params, straight.state.params, rtol=1e-6)
    allclose(optimizers.ema_params(resumed.state.opt_state),
             optimizers.ema_params(straight.state.opt_state), rtol=1e-6)


def test_fit_ends_with_the_ema_weights_as_keras(allclose):
    # Keras' fit calls optimizer.finalize_variable_values after the last epoch: with use_ema,
    # the model keeps the EMA weights, so evaluate, predict and save use them.
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 4)).astype(np.float32), rng.normal(size=(32, 3)).astype(np.float32)
    params = {}
    for use_ema in (False, True):
        with mf.MirroredStrategy(jax.devices()[:2]).scope():
            model = mf.Sequential([nn.Dense(3)], input_shape=(4,))
            model.compile(mf.optimizers.SGD(0.1, use_ema=use_ema, ema_momentum=0.5), "mse")
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        params[use_ema] = jax.device_get(model.params)
    allclose(params[True], jax.device_get(mf.optimizers.ema_params(model.opt_state)), rtol=0)
    assert not np.allclose(params[True]["layers_0"]["kernel"], params[False]["layers_0"]["kernel"])
