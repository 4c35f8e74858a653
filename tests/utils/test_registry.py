"""The one registry of names (`mirrorfit._src.utils.registry`) and the lookups built on it.

Unit tests of `Registry` (names, aliases, case, class names; a kind's get, serialize and
deserialize), of the user's table
(`register_serializable`, ``custom_objects``, `custom_object_scope`) and of `serialize` /
`deserialize` in Keras 3's format; then the public lookups that use it (``mf.losses.get``,
``mf.optimizers.get``, ``mf.regularizers.get``, activations and initializers by name) and
layer configs that name the user's classes and functions.
"""

import json

import jax
import jax.numpy as jnp
import pytest

import mirrorfit as mf
from mirrorfit._src.activations import activations
from mirrorfit._src.initializers import initializers
from mirrorfit._src.layers.graph import config as config_lib
from mirrorfit._src.losses.losses import LOSSES
from mirrorfit._src.metrics.metrics import METRICS
from mirrorfit._src.optimizers.optimizers import OPTIMIZERS
from mirrorfit._src.utils import object_registration, registry


@pytest.fixture(autouse=True)
def fresh_tables(monkeypatch):
    """Each test registers its own classes into an empty ``register_serializable`` table,
    and its registries are gone after it."""
    monkeypatch.setattr(object_registration, "_CUSTOM_OBJECTS", {})
    monkeypatch.setattr(object_registration, "_CUSTOM_NAMES", {})
    monkeypatch.setattr(registry, "_BY_MODULE", dict(registry._BY_MODULE))


class Thing:
    """A minimal configurable class: ``Thing(size=1)``."""

    def __init__(self, size=1):
        self.size = size

    def get_config(self):
        return {"size": self.size}


class Other(Thing):
    pass


class NoFromConfig:
    """Rebuilt with ``cls(**config)``."""

    def __init__(self, a=0):
        self.a = a

    def get_config(self):
        return {"a": self.a}


@pytest.fixture
def things():
    kind = registry.Registry("thing", "tests.things")
    kind.register(Thing, aliases=("thing", "t"))
    kind.register(Other)
    return kind


# -- Registry: names, aliases, case --------------------------------------------------------


def test_registry_finds_names_and_aliases_in_any_case(things):
    assert things.find("Thing") is things.find("THING") is things.find("t") is Thing
    assert things.find("other") is Other
    assert things.find("unknown") is None
    assert things.names() == ["Other", "Thing", "t", "thing"]
    assert things.classes() == (Thing, Other)
    assert things.name_of(Thing) == "Thing" and things.name_of(NoFromConfig) is None
    assert things.is_built_in(Other) and not things.is_built_in(NoFromConfig)


def test_registry_alias_registered_later_takes_over_a_name_but_not_a_class_name(things):
    things.register(NoFromConfig, aliases=("other",))
    assert things.find("Other") is things.find("other") is NoFromConfig
    # serialize writes exact class names: those still mean their class.
    rebuilt = things.deserialize({"class_name": "Other", "config": {"size": 2}})
    assert type(rebuilt) is Other and rebuilt.size == 2


def test_registry_refuses_two_classes_of_one_name(things):
    class Thing:  # another class of the same __name__
        get_config = dict

    with pytest.raises(ValueError, match="Two thing classes are named 'Thing'"):
        things.register(Thing)


def test_register_works_as_decorator_with_and_without_arguments():
    kind = registry.Registry("widget")

    @kind.register
    class A:
        pass

    @kind.register(name="bee", aliases=("b",))
    class B:
        pass

    assert kind.find("a") is A and kind.find("B") is kind.find("bee") is B
    assert kind.name_of(B) == "bee"


def test_metric_names_keep_keras_compile_meaning_of_accuracy():
    # "accuracy"/"acc" in any case mean the inferred accuracy, as Keras' compile; the class
    # name Accuracy in a saved config still means the Accuracy class.
    assert METRICS.find("Accuracy") is METRICS.find("acc") is mf.metrics.InferredAccuracy
    assert type(METRICS.deserialize({"class_name": "Accuracy"})) is mf.metrics.Accuracy


# -- a kind's get / serialize / deserialize (the Registry's; one line in each kind's module) -


class Needy(Thing):
    def __init__(self, size):
        super().__init__(size)


def _named(name):
    def fn(x):
        return x

    fn.__name__ = fn.__qualname__ = name
    return fn


def _kind(saves, **kwargs):
    kind = registry.Registry("thing", "tests.kinds", base=(Thing,), expected="a callable",
                             saves=saves, **kwargs)
    kind.register(Thing, aliases=("thing",))
    kind.register(Needy)
    kind.register(abs, name="absolute")
    return kind


def test_kind_get_builds_names_rebuilds_configs_and_passes_callables():
    kind = _kind("names", default="nothing")
    assert kind.get(None) == "nothing"
    built = kind.get("THING")
    assert type(built) is Thing and built.size == 1  # a class found by name: its defaults
    assert kind.get({"class_name": "Thing", "config": {"size": 4}}).size == 4
    assert kind.get("absolute") is abs and kind.get(len) is len and kind.get(Thing) is Thing
    with pytest.raises(ValueError, match=r"Unknown thing name 'gone': thing must be one of "
                       r"\['Needy', 'Thing', 'absolute', 'thing'\] \(any case\), a callable, "
                       r"or a name of yours registered.*Received: thing='gone'"):
        kind.get("gone")
    with pytest.raises(ValueError, match=r"The thing Needy needs arguments: pass an object, e.g. "
                       r"thing=tests.kinds.Needy\(...\). Received: thing='needy'"):
        kind.get("needy")
    with pytest.raises(TypeError, match=r"thing must be a thing name, a callable. "
                       r"Received: thing=3 of type int"):
        kind.get(3)
    with pytest.raises(ValueError, match=r"Received: thing=None of type NoneType"):
        _kind("names", error=ValueError).get(None)  # no default: None is refused
    by_name = registry.Registry("act", saves="named functions")  # no module: no configs
    with pytest.raises(TypeError, match=r"Received: act=\{'class_name': 'Thing'\}"):
        by_name.get({"class_name": "Thing"})


def test_kind_get_goes_through_an_overridden_convert():
    class Tagging(registry.Registry):
        def convert(self, value, name):
            return ("converted", super().convert(value, name), name)

    tagging = Tagging("thing", base=(Thing,))
    tagging.register(Thing)
    converted, built, name = tagging.get("thing")
    assert converted == "converted" and type(built) is Thing and name == "thing"


def test_kind_serialize_saves_configs_then_names_then_functions_as_the_kind_saves():
    kinds = {saves: _kind(saves, default=None) for saves in registry._SAVES}
    registered = mf.saving.register_serializable("pkg")(_named("registered"))
    unregistered = _named("unregistered")
    for kind in kinds.values():
        assert kind.serialize(Thing(2)) == registry.serialize(Thing(2))
    for value in (None, "thing", abs):  # compile arguments: configs only
        with pytest.raises(TypeError, match=r"serialize takes an tests.kinds thing \(tests.kinds."
                           r"Thing or your subclass with get_config\); other objects have no "
                           r"config. Received: thing="):
            kinds["configs"].serialize(value)
    assert kinds["names"].serialize(None) is None and kinds["names"].serialize("x") == "x"
    with pytest.raises(ValueError, match=r"Only tests.kinds.Thing objects \(or your subclasses "
                       r"with get_config\) or names can be saved in a config, not this custom "
                       r"thing. Received: thing=<built-in function abs>"):
        kinds["names"].serialize(abs)
    assert kinds["functions"].serialize(abs) == "absolute"  # its name here
    assert kinds["functions"].serialize(registered) == "pkg>registered"
    with pytest.raises(ValueError, match=r"names or functions registered with "
                       r"@mf.saving.register_serializable\(\) can be saved.*Received: thing="):
        kinds["functions"].serialize(unregistered)
    with pytest.raises(ValueError, match=r"Received: thing=None"):
        _kind("functions").serialize(None)  # None only where get takes it
    assert kinds["named functions"].serialize(unregistered) == "unregistered"
    for unsaved in (lambda x: x, _named("absolute")):  # no name, or a built-in's name
        with pytest.raises(ValueError, match="or other named functions"):
            kinds["named functions"].serialize(unsaved)


def test_kind_deserialize_reads_what_the_kind_saves():
    kinds = {saves: _kind(saves, default=None) for saves in registry._SAVES}
    mf.saving.register_serializable("pkg")(_named("registered"))
    with pytest.raises(ValueError, match=r"A thing config must be .*Received: thing='thing'"):
        kinds["configs"].deserialize("thing")
    assert type(kinds["names"].deserialize("thing")) is Thing  # what get gives
    assert kinds["names"].deserialize(None) is None
    assert kinds["functions"].deserialize("THING") == "THING"  # a built-in name stays a name
    assert kinds["functions"].deserialize("pkg>registered").__name__ == "registered"
    for kind in kinds.values():
        assert kind.deserialize({"class_name": "Thing", "config": {"size": 3}}).size == 3


def test_kind_deserialize_lends_custom_objects_to_nested_configs():
    class Outer(Thing):  # its config holds another object's config
        def __init__(self, size=1, inner=None):
            super().__init__(size)
            self.inner = registry.deserialize(inner) if isinstance(inner, dict) else inner

    saved = {"class_name": "Outer", "config": {"inner": registry.serialize(NoFromConfig(7))}}
    rebuilt = _kind("configs").deserialize(saved, {"Outer": Outer, "NoFromConfig": NoFromConfig})
    assert type(rebuilt) is Outer and rebuilt.inner.a == 7


# -- serialize / deserialize ---------------------------------------------------------------


def test_serialize_built_in_writes_keras_3_format_that_survives_json():
    config = registry.serialize(mf.losses.Huber(delta=2.0))
    assert config == {"module": "mirrorfit.losses", "class_name": "Huber",
                      "config": mf.losses.Huber(delta=2.0).get_config(),
                      "registered_name": None}
    assert registry.deserialize(json.loads(json.dumps(config))) == mf.losses.Huber(delta=2.0)


def test_serialize_user_class_writes_its_module_and_registered_name():
    config = registry.serialize(Thing(3))
    assert config == {"module": __name__, "class_name": "Thing", "config": {"size": 3},
                      "registered_name": "Thing"}
    mf.saving.register_serializable("pkg", name="Renamed")(Thing)
    assert registry.serialize(Thing(3))["registered_name"] == "pkg>Renamed"


@pytest.mark.parametrize("obj", [Thing, len, object()], ids=["class", "function", "object"])
def test_serialize_refuses_objects_without_get_config(obj):
    with pytest.raises(TypeError, match="get_config.*Received"):
        registry.serialize(obj)


def test_deserialize_accepts_old_configs_and_any_case_of_built_in_names(things):
    assert type(things.deserialize({"class_name": "THING"})) is Thing
    assert type(OPTIMIZERS.deserialize({"class_name": "adam"})) is mf.optimizers.Adam
    assert things.deserialize({"class_name": "Thing", "config": None}).size == 1


def test_deserialize_finds_user_classes_by_custom_objects_or_registration(things):
    saved = registry.serialize(NoFromConfig(5))
    assert things.deserialize(saved, {"NoFromConfig": NoFromConfig}).a == 5  # cls(**config)
    with registry.custom_object_scope({"NoFromConfig": NoFromConfig}):
        assert registry.deserialize(saved).a == 5
    mf.saving.register_serializable("pkg")(NoFromConfig)
    registered = registry.serialize(NoFromConfig(6))
    assert registered["registered_name"] == "pkg>NoFromConfig"
    assert things.deserialize(registered).a == 6
    assert registry.deserialize(json.loads(json.dumps(registered))).a == 6


def test_deserialize_never_mistakes_a_user_class_for_the_built_in_of_its_name(things):
    class Huber(mf.losses.Loss):  # a user class named like a built-in loss
        def call(self, y_true, y_pred):
            return y_pred

    saved = registry.serialize(Huber())
    assert saved["module"] == __name__
    with pytest.raises(ValueError, match=r"Unknown loss class_name 'Huber' of module"):
        LOSSES.deserialize(saved)
    assert type(LOSSES.deserialize(saved, {"Huber": Huber})) is Huber


def test_custom_objects_win_over_built_ins(things):
    assert type(things.deserialize({"class_name": "Thing"}, {"Thing": Other})) is Other


def test_deserialize_errors_say_what_to_do(things):
    with pytest.raises(ValueError, match=r"Unknown thing class_name 'Gone' \(built-in ones "
                       r"come from tests.things\): decorate your class with "
                       r"@mf.saving.register_serializable\(\).*custom_objects=\{'Gone': Gone\}"
                       r". Received: custom_objects=\['Other'\]"):
        things.deserialize({"class_name": "Gone"}, {"Other": Other})
    with pytest.raises(ValueError, match=r"A thing config must be \{'class_name'.*"
                       r"Received: thing='Thing'"):
        things.deserialize("Thing")


# -- register_serializable, get_registered_object, custom_object_scope ---------------------


def test_register_serializable_names_package_and_class():
    decorated = mf.saving.register_serializable()(Thing)
    assert decorated is Thing
    assert mf.saving.get_registered_name(Thing) == "Custom>Thing"
    assert mf.saving.get_registered_object("Custom>Thing") is Thing
    assert mf.saving.get_registered_name(Other) == "Other"  # not registered: __name__


def test_register_serializable_registers_functions_too():
    @mf.saving.register_serializable("acts")
    def doubled(x):
        return 2 * x

    assert mf.saving.get_registered_object("acts>doubled") is doubled


def test_register_serializable_rejects_bad_package_and_classes_without_config():
    with pytest.raises(ValueError, match=r"package must be a non-empty string without '>'.*"
                       r"Received: package='a>b'"):
        mf.saving.register_serializable("a>b")
    with pytest.raises(ValueError, match="define get_config"):
        mf.saving.register_serializable()(type("Bare", (), {}))


def test_get_registered_object_looks_in_arguments_then_scope_then_registered_then_module():
    mf.saving.register_serializable()(Thing)
    assert registry.get_registered_object("Custom>Thing") is Thing
    assert registry.get_registered_object("x", module_objects={"x": Other}) is Other
    with registry.custom_object_scope({"x": Thing, "Custom>Thing": Other}):
        assert registry.get_registered_object("Custom>Thing") is Other
        assert registry.get_registered_object("x", module_objects={"x": Other}) is Thing
        assert registry.get_registered_object("x", {"x": NoFromConfig}) is NoFromConfig
    assert registry.get_registered_object("nothing") is None


def test_custom_object_scopes_nest_and_restore():
    with mf.saving.custom_object_scope({"a": Thing}):
        with mf.saving.CustomObjectScope({"b": Other}):
            assert registry.get_registered_object("a") is Thing
            assert registry.get_registered_object("b") is Other
        assert registry.get_registered_object("b") is None
    assert registry.get_registered_object("a") is None


def test_public_saving_module_re_exports_the_registry():
    assert mf.saving.register_serializable is registry.register_serializable
    assert mf.saving.serialize_keras_object is registry.serialize
    assert mf.saving.deserialize_keras_object is registry.deserialize
    assert "saving" in mf.__all__ and set(mf.saving.__all__) == {
        "CustomObjectScope", "custom_object_scope", "deserialize_keras_object",
        "get_registered_name", "get_registered_object", "register_serializable",
        "serialize_keras_object"}


# -- The public lookups on the registry ------------------------------------------------------


def test_losses_get_finds_registered_user_losses_by_name():
    @mf.saving.register_serializable("mine")
    class Cubed(mf.losses.Loss):
        def call(self, y_true, y_pred):
            return jnp.mean(jnp.abs(y_pred - y_true) ** 3, axis=-1)

    loss = mf.losses.get("mine>Cubed")
    assert type(loss.loss) is Cubed
    assert float(loss(jnp.zeros((1, 2)), jnp.full((1, 2), 2.0))[0]) == 8.0
    with pytest.raises(ValueError, match=r"Unknown loss name.*Received: loss='mine>Gone'"):
        mf.losses.get("mine>Gone")


def test_metrics_get_wraps_a_registered_function():
    @mf.saving.register_serializable("mine")
    def max_error(y_true, y_pred):
        return jnp.max(jnp.abs(y_true - y_pred), axis=-1)

    metric = mf.metrics.get("mine>max_error")
    assert isinstance(metric, mf.metrics.MeanMetricWrapper) and metric.fn is max_error


def test_optimizers_get_names_every_keras_optimizer_and_asks_for_arguments():
    assert type(mf.optimizers.get("RMSPROP")) is mf.optimizers.RMSprop
    with pytest.raises(ValueError, match=r"LossScaleOptimizer needs arguments.*"
                       r"Received: optimizer='lossscaleoptimizer'"):
        mf.optimizers.get("lossscaleoptimizer")
    inner = mf.optimizers.SGD(0.5, momentum=0.9)
    wrapped = mf.optimizers.LossScaleOptimizer(inner, initial_scale=8.0)
    rebuilt = mf.optimizers.deserialize(json.loads(json.dumps(
        mf.optimizers.serialize(wrapped))))
    assert type(rebuilt) is mf.optimizers.LossScaleOptimizer
    assert rebuilt.get_config() == wrapped.get_config()


def test_regularizers_get_names_and_configs_including_user_subclasses():
    assert mf.regularizers.get("L1") == mf.regularizers.L1()
    assert mf.regularizers.get("l1_l2") == mf.regularizers.L1L2(0.01, 0.01)

    @mf.saving.register_serializable("mine")
    class L3(mf.regularizers.Regularizer):
        def __init__(self, l3=0.1):
            self.l3 = l3

        def __call__(self, x):
            return self.l3 * jnp.sum(jnp.abs(x) ** 3)

        def get_config(self):
            return {"l3": self.l3}

    saved = mf.regularizers.serialize(L3(0.5))
    assert saved["registered_name"] == "mine>L3"
    assert mf.regularizers.get(saved).l3 == 0.5
    with pytest.raises(ValueError, match=r"Only mf.regularizers.Regularizer objects.*"
                       r"Received: regularizer=<function"):
        mf.regularizers.serialize(lambda w: 0.0)


def test_activations_and_initializers_by_keras_name_registered_name_or_scope():
    assert activations.get("ReLU") is activations.get("relu")
    assert activations.serialize(activations.get("swish")) == "silu"  # its first name
    assert initializers.serialize(initializers.get("zeros")) == "zeros"

    @mf.saving.register_serializable("mine")
    def half_ones(key, shape, dtype=jnp.float32):
        return jnp.full(shape, 0.5, dtype)

    assert initializers.serialize(half_ones) == "mine>half_ones"
    assert initializers.get("mine>half_ones") is half_ones
    with pytest.raises(ValueError, match=r"initializer must be one of .*"
                       r"Received: initializer='half_twos'"):
        initializers.get("half_twos")
    with registry.custom_object_scope({"half_twos": half_ones}):
        assert initializers.get("half_twos") is half_ones


# -- Layer configs name the user's classes and functions ------------------------------------


def _mish_like(x):
    return x * jnp.tanh(x)


def test_layer_config_with_user_activation_and_regularizer_loads_through_custom_objects():
    class L3(mf.regularizers.Regularizer):
        def __init__(self, l3=0.1):
            self.l3 = l3

        def __call__(self, x):
            return self.l3 * jnp.sum(jnp.abs(x) ** 3)

        def get_config(self):
            return {"l3": self.l3}

    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        module = mf.Sequential([mf.Input((3,)), mf.layers.Dense(
            2, activation=_mish_like, kernel_regularizer=L3(0.5))]).module
    text = json.dumps(config_lib.functional_config(module))
    with pytest.raises(ValueError, match=r"register_serializable.*custom_objects. "
                       r"Received: activation='_mish_like'"):
        config_lib.module_from_config(json.loads(text))
    with pytest.raises(ValueError, match="Unknown regularizer class_name 'L3'"):
        config_lib.module_from_config(json.loads(text), {"_mish_like": _mish_like})
    rebuilt = config_lib.module_from_config(
        json.loads(text), {"L3": L3, "_mish_like": _mish_like})
    dense = rebuilt.stack.layers[0]
    assert dense.activation is _mish_like and dense.kernel_regularizer.l3 == 0.5
    assert json.dumps(config_lib.functional_config(rebuilt)) == text


def test_layer_config_of_registered_user_layer_loads_without_custom_objects():
    @mf.saving.register_serializable("mine")
    class Scale(mf.layers.FlaxLayer):
        factor: float = 2.0

        def __call__(self, x, training=False):
            return x * self.factor

    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        module = mf.Sequential([mf.Input((3,)), Scale(3.0, name="scale")]).module
    config = json.loads(json.dumps(config_lib.functional_config(module)))
    assert config["config"]["layers"][0]["registered_name"] == "mine>Scale"
    rebuilt = config_lib.module_from_config(config)
    assert type(rebuilt.stack.layers[0]) is Scale and rebuilt.stack.layers[0].factor == 3.0
