"""`Model`'s mixins declare the attributes they share, and a model has every one of them."""

import flax.linen as nn
import jax
import pytest

import mirrorfit as mf
from mirrorfit._src.models.keras_models import ModelLayers
from mirrorfit._src.models.model import Model
from mirrorfit._src.models.model_calls import ModelCalls
from mirrorfit._src.models.weights import ModelVariables
from mirrorfit._src.trainers.model_hooks import ModelHooks
from mirrorfit._src.trainers.training_api import TrainingAPI

MIXINS = [TrainingAPI, ModelHooks, ModelCalls, ModelVariables, ModelLayers]


def test_model_is_composed_of_the_mixins():
    assert [cls for cls in Model.__mro__ if cls in MIXINS] == MIXINS


@pytest.mark.parametrize("mixin", MIXINS, ids=lambda cls: cls.__name__)
def test_every_attribute_a_mixin_declares_exists_on_a_compiled_model(mixin):
    """A declaration names a real attribute: one renamed in its owner fails here."""
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Sequential([nn.Dense(2)], input_shape=(3,))
    model.compile("sgd", "mse")
    declared = vars(mixin).get("__annotations__", {})
    assert declared  # every mixin reads something another class owns
    assert [name for name in declared if not hasattr(model, name)] == []
