"""Self-contained saves: the compile configuration as JSON, load_model with no extra
arguments, compile=False, custom_objects, clear errors, and single-file .keras archives."""

import dataclasses
import json
import zipfile

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from tests.helpers import tree_equal

_rng = np.random.default_rng(0)
X = _rng.normal(size=(24, 4)).astype(np.float32)
Y = _rng.integers(0, 3, size=24).astype(np.int32)


class Net(nn.Module):
    """A module with plain fields, so custom_objects can rebuild it."""

    hidden: int = 8

    @nn.compact
    def __call__(self, x):
        return nn.softmax(nn.Dense(3)(nn.relu(nn.Dense(self.hidden)(x))))


@dataclasses.dataclass(frozen=True)
class ScaledCrossentropy:
    """A custom loss with a config: stored as JSON, rebuilt through custom_objects."""

    scale: float = 1.0

    def __call__(self, y_true, y_pred):
        return self.scale * mf.losses.SparseCategoricalCrossentropy().per_example(y_true, y_pred)

    def get_config(self):
        return {"scale": self.scale}


def _trained(n=2, optimizer=None, loss="sparse_categorical_crossentropy", metrics=("accuracy",),
             steps_per_execution=2):
    with mf.MirroredStrategy(jax.devices()[:n]).scope():
        model = mf.Model(Net(hidden=6), input_shape=(4,))
        model.compile(optimizer or mf.optimizers.Adam(0.01, clipnorm=1.0), loss,
                      list(metrics), steps_per_execution=steps_per_execution)
    model.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    return model


def _continues_identically(model, loaded):
    h1 = model.fit(X, Y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    h2 = loaded.fit(X, Y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    assert h1.history == h2.history
    tree_equal(loaded.get_weights(), model.get_weights())


@pytest.mark.slow
def test_load_model_restores_compiled_model_from_configs_alone(tmp_path):
    model = _trained(optimizer=mf.optimizers.Adam(0.01, clipnorm=1.0),
                     loss=ScaledCrossentropy(2.0))
    model.save(tmp_path / "m")
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        loaded = mf.load_model(tmp_path / "m", custom_objects={
            "Net": Net, "ScaledCrossentropy": ScaledCrossentropy})
    assert loaded.module == Net(hidden=6)
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    assert loaded.compile_config["loss"] == ScaledCrossentropy(2.0)
    assert loaded.compile_config["steps_per_execution"] == 2
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations)
    _continues_identically(model, loaded)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A trained model saved once as a directory, shared by the tests that only load it."""
    path = tmp_path_factory.mktemp("saved") / "m"
    model = _trained()
    model.save(path)
    return model, path


def test_load_model_compile_false_loads_weights_only(saved):
    model, path = saved
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        loaded = mf.load_model(path, Net(hidden=6), compile=False)
    assert not loaded.compiled and loaded.optimizer is None
    tree_equal(loaded.get_weights(), model.get_weights())


@pytest.mark.slow
def test_load_model_lists_objects_without_config(tmp_path):
    model = _trained(optimizer=optax.sgd(0.1), loss=lambda y, p: jnp.mean(p, -1))
    model.save(tmp_path / "m")
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        with pytest.raises(ValueError, match=r"optimizer \(a GradientTransformationExtraArgs "
                           r"object\), loss \(a function object\).*optimizer=\.\.\., "
                           r"loss=\.\.\."):
            mf.load_model(tmp_path / "m", Net(hidden=6))
        loaded = mf.load_model(tmp_path / "m", Net(hidden=6), optimizer=optax.sgd(0.1),
                               loss="sparse_categorical_crossentropy")
    assert loaded.compiled


def test_load_model_without_module_or_custom_objects_says_what_to_pass(saved):
    with pytest.raises(ValueError, match=r"custom_objects=\{'Net': Net\}"):
        mf.load_model(saved[1])


@pytest.mark.slow
def test_save_keras_writes_one_zip_file_that_loads(tmp_path):
    model = _trained()
    path = tmp_path / "model.keras"
    model.save(path)
    assert path.is_file() and zipfile.is_zipfile(path)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    assert config["compile"]["optimizer"]["class_name"] == "Adam"
    assert config["compile"]["metrics"] == ["accuracy"]
    model.save(path)  # replaced in place, still one file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.keras"]
    with mf.MirroredStrategy(jax.devices()[:2]).scope():  # as saved: bit-identical
        loaded = mf.load_model(path, Net(hidden=6))
    _continues_identically(model, loaded)


def test_save_keras_refuses_directory_and_save_weights_refuses_keras_name(tmp_path, saved):
    model = saved[0]
    (tmp_path / "d.keras").mkdir()
    with pytest.raises(ValueError, match="is a directory; a .keras model is one file"):
        model.save(tmp_path / "d.keras")
    with pytest.raises(ValueError, match="use model.save"):
        model.save_weights(tmp_path / "w.keras")
    assert not (tmp_path / "w.keras").exists()
