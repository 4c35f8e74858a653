"""strategy.run outputs returned as mf.Mirrored, and the MIRRORFIT_CHECK_MIRRORED debug check
that catches a forgotten gradient all-reduce."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf

OPT = optax.sgd(0.5)
DATA = np.arange(48, dtype=np.float32).reshape(16, 3)


def _setup():
    strategy = mf.MirroredStrategy(jax.devices()[:8])
    params = strategy.replicate({"w": jnp.zeros(3)})
    opt_state = strategy.replicate(OPT.init({"w": jnp.zeros(3)}))
    batch = next(iter(strategy.experimental_distribute_dataset([DATA])))
    return strategy, params, opt_state, batch


def _loss(x):
    return lambda p: mf.compute_average_loss(jnp.sum((x - p["w"]) ** 2, -1))


def synced_step(params, opt_state, x):
    return mf.Mirrored(mf.apply_gradients(OPT, jax.grad(_loss(x))(params), opt_state, params)[0])


def forgot_all_reduce(params, opt_state, x):
    updates, _ = OPT.update(jax.grad(_loss(x))(params), opt_state, params)  # local grads only
    return mf.Mirrored(optax.apply_updates(params, updates))


def test_run_returns_mirrored_outputs_as_one_replicated_value(monkeypatch, allclose):
    monkeypatch.setenv("MIRRORFIT_CHECK_MIRRORED", "1")
    strategy, params, opt_state, batch = _setup()
    new = strategy.run(synced_step, (params, opt_state, batch))
    assert isinstance(new["w"], mf.Mirrored)
    w = new["w"].value
    assert w.sharding.is_fully_replicated and len(w.sharding.device_set) == 8
    allclose(w, DATA.mean(0), rtol=1e-6)  # one SGD step (lr 0.5) on the global mean loss


def test_check_mirrored_names_the_leaf_that_differs(monkeypatch):
    strategy, params, opt_state, batch = _setup()
    monkeypatch.delenv("MIRRORFIT_CHECK_MIRRORED", raising=False)
    strategy.run(forgot_all_reduce, (params, opt_state, batch))  # off by default: no error
    monkeypatch.setenv("MIRRORFIT_CHECK_MIRRORED", "1")
    with pytest.raises(ValueError, match=r"MIRRORFIT_CHECK_MIRRORED: the value at \['w'\] that "
                       r"forgot_all_reduce returns as mf.Mirrored differs across replicas"):
        strategy.run(forgot_all_reduce, (params, opt_state, batch))
