"""The learning rate in an optimizer state, read and written without a model: a new value
keeps the leaf's dtype and the rest of the state, and a scheduled or absent rate is refused."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from mirrorfit._src.optimizers.learning_rate import get_learning_rate, set_learning_rate

PARAMS = {"w": jnp.ones((3,))}


def test_set_learning_rate_returns_a_new_state_with_the_rate_and_dtype():
    state = mf.optimizers.Adam(1e-3).init(PARAMS)
    new = set_learning_rate(state, 0.25)
    assert get_learning_rate(new) == 0.25
    assert get_learning_rate(state) == pytest.approx(1e-3)  # the input is not changed
    assert new.hyperparams["learning_rate"].dtype == state.hyperparams["learning_rate"].dtype
    np.testing.assert_array_equal(new.inner_state[0].mu["w"], state.inner_state[0].mu["w"])


def test_set_learning_rate_sets_every_rate_in_a_chain():
    tx = optax.chain(optax.inject_hyperparams(optax.sgd)(learning_rate=0.1),
                     optax.inject_hyperparams(optax.sgd)(learning_rate=0.2))
    new = set_learning_rate(tx.init(PARAMS), 0.5)
    assert [float(s.hyperparams["learning_rate"]) for s in new] == [0.5, 0.5]


def test_get_learning_rate_names_the_owner_without_an_injected_rate():
    with pytest.raises(ValueError, match=r"ReduceLROnPlateau needs an optimizer whose learning "
                                         r"rate lives in its state.*Received"):
        get_learning_rate(optax.adam(1e-3).init(PARAMS), "ReduceLROnPlateau")
    with pytest.raises(ValueError, match="Received: .*NoneType"):
        get_learning_rate(None)


def test_set_learning_rate_refuses_a_scheduled_rate():
    schedule = optax.linear_schedule(0.1, 0.0, 10)
    state = optax.inject_hyperparams(optax.sgd)(learning_rate=schedule).init(PARAMS)
    with pytest.raises(ValueError, match="optax schedule"):
        set_learning_rate(state, 0.5, "LearningRateScheduler")
