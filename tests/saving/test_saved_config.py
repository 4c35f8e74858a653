"""The saved compile configuration: every registered loss, metric and optimizer class survives
``model.save`` + ``mf.load_model`` with the same configuration and the same ``evaluate``.

The cases are generated from the registries (`LOSSES`, `METRICS`, `OPTIMIZERS`), so a class
registered later is covered without editing this file. Each class gets targets of its kind
(`KIND`: binary, sparse labels, one-hot, or positive regression values; regression unless
listed) and, where it needs them, constructor arguments (`ARGS`). To stay fast, all losses
and metrics share one model with one output per loss (metrics on the first output of their
kind), saved and loaded once; each optimizer gets a one-layer model trained one step.
Reloaded values must equal the original's within rtol 1e-6 (the same weights and the same
computation: only the save/load round trip is under test).
"""

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.losses.losses import LOSSES
from mirrorfit._src.metrics.metrics import METRICS
from mirrorfit._src.optimizers.optimizers import OPTIMIZERS
from mirrorfit._src.saving import saved_config

L, M = mf.losses, mf.metrics
RTOL = 1e-6
REPLICAS = 2
N, FEATURES, CLASSES = 8, 4, 3  # one global batch of 8 rows: 4 per replica
_rng = np.random.default_rng(0)
X = _rng.normal(size=(N, FEATURES)).astype(np.float32)
LABELS = np.array([0, 1, 2, 0, 1, 2, 1, 0], np.int32)
TARGETS = {
    "binary": (LABELS % 2).astype(np.float32)[:, None],  # [N, 1] in {0, 1}, both present
    "sparse": LABELS,  # [N] class ids
    "categorical": np.eye(CLASSES, dtype=np.float32)[LABELS],  # [N, CLASSES] one-hot
    "regression": _rng.uniform(0.5, 1.5, size=(N, CLASSES)).astype(np.float32),  # > 0
}
HEADS = {"binary": (1, "sigmoid"), "sparse": (CLASSES, "softmax"),
         "categorical": (CLASSES, "softmax"), "regression": (CLASSES, "softplus")}
"""Units and activation of the output a class of each kind is computed on."""

KIND = {
    L.BinaryCrossentropy: "binary", L.BinaryFocalCrossentropy: "binary",
    M.AUC: "binary", M.Precision: "binary", M.Recall: "binary", M.TruePositives: "binary",
    M.TrueNegatives: "binary", M.FalsePositives: "binary", M.FalseNegatives: "binary",
    M.BinaryAccuracy: "binary", M.BinaryCrossentropy: "binary",
    L.SparseCategoricalCrossentropy: "sparse", L.InferredCrossentropy: "sparse",
    M.SparseCategoricalCrossentropy: "sparse", M.SparseCategoricalAccuracy: "sparse",
    M.SparseTopKCategoricalAccuracy: "sparse", M.InferredAccuracy: "sparse",
    M.IoU: "sparse", M.MeanIoU: "sparse",
    L.CategoricalCrossentropy: "categorical", L.CategoricalFocalCrossentropy: "categorical",
    L.CategoricalHinge: "categorical", M.CategoricalCrossentropy: "categorical",
    M.CategoricalAccuracy: "categorical", M.TopKCategoricalAccuracy: "categorical",
    M.CategoricalHinge: "categorical", M.F1Score: "categorical", M.FBetaScore: "categorical",
    M.OneHotIoU: "categorical", M.OneHotMeanIoU: "categorical",
}
"""The targets each classification class needs; every other class gets regression ones."""

ARGS = {
    M.IoU: {"num_classes": CLASSES, "target_class_ids": [0, 2], "sparse_y_pred": False},
    M.MeanIoU: {"num_classes": CLASSES, "sparse_y_pred": False},
    M.OneHotIoU: {"num_classes": CLASSES, "target_class_ids": [1]},
    M.OneHotMeanIoU: {"num_classes": CLASSES},
    M.TopKCategoricalAccuracy: {"k": 2},
    M.SparseTopKCategoricalAccuracy: {"k": 2},
    mf.optimizers.LossScaleOptimizer: {"inner_optimizer": mf.optimizers.SGD(0.1)},
}
"""Constructor arguments of the classes that need them (or whose defaults don't fit 3 classes)."""

NOT_COMPILED = {
    M.Mean: "averages values, not (y_true, y_pred)",
    M.Sum: "adds values, not (y_true, y_pred)",
    M.MeanMetricWrapper: "wraps a function, which has no JSON config",
}
"""Registered metrics that a compile configuration cannot hold as JSON: their config round
trip is checked in memory instead."""


def _kind(cls):
    return KIND.get(cls, "regression")


def _new(cls):
    return cls(**ARGS.get(cls, {}))


def _name(cls):
    return cls.__name__


LOSS_CLASSES = LOSSES.classes()
METRIC_CLASSES = [cls for cls in METRICS.classes() if cls not in NOT_COMPILED]
# Each kind's metrics go on the first loss output of that kind.
ANCHORS = {kind: _name(next(c for c in LOSS_CLASSES if _kind(c) == kind)) for kind in HEADS}


def _same_object_config(got, want):
    assert type(got) is type(want)
    assert got.get_config() == want.get_config()


def _assert_logs_equal(got, want):
    assert list(got) == list(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=RTOL, err_msg=key)


def _load(path, *args, **kwargs):
    with mf.MirroredStrategy(jax.devices()[:REPLICAS]).scope():
        return mf.load_model(path, *args, **kwargs)


@pytest.fixture(scope="module")
def losses_and_metrics(tmp_path_factory):
    """One model with an output per registered loss, and every compilable registered metric
    on the output of its kind; evaluated, saved, loaded and evaluated again."""
    with mf.MirroredStrategy(jax.devices()[:REPLICAS]).scope():
        x = mf.Input((FEATURES,))
        hidden = mf.layers.Dense(8, activation="relu")(x)
        outputs = {_name(cls): mf.layers.Dense(*HEADS[_kind(cls)], name=_name(cls))(hidden)
                   for cls in LOSS_CLASSES}
        model = mf.Model(inputs=x, outputs=outputs)
        model.compile("sgd", loss={_name(cls): _new(cls) for cls in LOSS_CLASSES},
                      metrics={anchor: [_new(cls) for cls in METRIC_CLASSES
                                        if _kind(cls) == kind]
                               for kind, anchor in ANCHORS.items()})
    y = {_name(cls): TARGETS[_kind(cls)] for cls in LOSS_CLASSES}
    logs = model.evaluate(X, y, batch_size=N, verbose=0, return_dict=True)
    path = tmp_path_factory.mktemp("saved") / "model.keras"
    model.save(path)
    loaded = _load(path)
    loaded_logs = loaded.evaluate(X, y, batch_size=N, verbose=0, return_dict=True)
    return model, loaded, logs, loaded_logs


def test_reloaded_model_has_the_same_compile_configuration(losses_and_metrics):
    model, loaded, logs, loaded_logs = losses_and_metrics
    stored = saved_config.serialize_compile(model.compile_config)
    assert stored["unstored"] == []
    assert saved_config.serialize_compile(loaded.compile_config) == stored
    _assert_logs_equal(loaded_logs, logs)


@pytest.mark.parametrize("cls", LOSS_CLASSES, ids=_name)
def test_every_registered_loss_reloads_with_its_config_and_value(cls, losses_and_metrics):
    _, loaded, logs, loaded_logs = losses_and_metrics
    _same_object_config(loaded.compile_config["loss"][_name(cls)], _new(cls))
    key = f"{_name(cls)}_loss"
    assert np.isfinite(logs[key])
    np.testing.assert_allclose(loaded_logs[key], logs[key], rtol=RTOL)


@pytest.mark.parametrize("cls", METRIC_CLASSES, ids=_name)
def test_every_registered_metric_reloads_with_its_config_and_value(cls, losses_and_metrics):
    model, loaded, logs, loaded_logs = losses_and_metrics
    anchor = ANCHORS[_kind(cls)]
    index = [type(m) for m in model.compile_config["metrics"][anchor]].index(cls)
    metric = loaded.compile_config["metrics"][anchor][index]
    _same_object_config(metric, _new(cls))
    key = f"{anchor}_{metric.name}"
    assert np.all(np.isfinite(logs[key]))
    np.testing.assert_allclose(loaded_logs[key], logs[key], rtol=RTOL)


@pytest.mark.parametrize("cls", list(NOT_COMPILED), ids=_name)
def test_metrics_outside_compile_configs_round_trip_their_config(cls):
    metric = cls(mf.losses.mean_squared_error) if cls is M.MeanMetricWrapper else cls()
    _same_object_config(METRICS.deserialize(mf.saving.serialize_keras_object(metric)), metric)


@pytest.mark.parametrize("cls", OPTIMIZERS.classes(), ids=_name)
def test_every_registered_optimizer_reloads_with_its_config_and_state(cls, tmp_path, allclose):
    with mf.MirroredStrategy(jax.devices()[:REPLICAS]).scope():
        model = mf.Sequential([mf.Input((FEATURES,)), mf.layers.Dense(CLASSES)])
        model.compile(_new(cls), "mse")
    model.fit(X, TARGETS["regression"], batch_size=N, verbose=0)  # state after one step
    logs = model.evaluate(X, TARGETS["regression"], batch_size=N, verbose=0, return_dict=True)
    model.save(tmp_path / "m")
    loaded = _load(tmp_path / "m")
    _same_object_config(loaded.optimizer, model.optimizer)
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations) == 1
    allclose(loaded.state.opt_state, model.state.opt_state, rtol=RTOL)
    _assert_logs_equal(loaded.evaluate(X, TARGETS["regression"], batch_size=N, verbose=0,
                                       return_dict=True), logs)


def test_sparse_crossentropy_object_from_logits_reloads_without_arguments(tmp_path):
    # The bug this registry fixed: every mf.losses/mf.metrics object in a compile
    # configuration failed to load ("Unknown class 'SparseCategoricalCrossentropy' in the
    # saved compile configuration").
    with mf.MirroredStrategy(jax.devices()[:REPLICAS]).scope():
        model = mf.Sequential([mf.Input((FEATURES,)), mf.layers.Dense(CLASSES)])
        model.compile("adam", loss=L.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[M.SparseCategoricalAccuracy()])
    model.fit(X, LABELS, batch_size=N, verbose=0)
    model.save(tmp_path / "m")
    loaded = _load(tmp_path / "m")
    assert loaded.compile_config["loss"] == L.SparseCategoricalCrossentropy(from_logits=True)
    _same_object_config(loaded.compile_config["metrics"][0], M.SparseCategoricalAccuracy())
    _assert_logs_equal(loaded.evaluate(X, LABELS, batch_size=N, verbose=0, return_dict=True),
                       model.evaluate(X, LABELS, batch_size=N, verbose=0, return_dict=True))


class ScaledMse(L.Loss):
    """A user loss with a config: ``scale * mse``."""

    def __init__(self, scale=1.0, name="scaled_mse", reduction="sum_over_batch_size"):
        super().__init__(name=name, reduction=reduction)
        self.scale = scale

    def call(self, y_true, y_pred):
        return self.scale * L.mean_squared_error(y_true, y_pred)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


@mf.saving.register_serializable("test_saved_config")
class RegisteredScaledMse(ScaledMse):
    """`ScaledMse`, registered as ``"test_saved_config>RegisteredScaledMse"``."""


def _saved_with_loss(loss, path):
    with mf.MirroredStrategy(jax.devices()[:REPLICAS]).scope():
        model = mf.Sequential([mf.Input((FEATURES,)), mf.layers.Dense(CLASSES)])
        model.compile("sgd", loss=loss)
    model.save(path)
    return model


def test_registered_user_loss_reloads_without_custom_objects(tmp_path):
    model = _saved_with_loss(RegisteredScaledMse(3.0), tmp_path / "m")
    stored = saved_config.serialize_compile(model.compile_config)["loss"]
    assert stored["registered_name"] == "test_saved_config>RegisteredScaledMse"
    loaded = _load(tmp_path / "m")
    assert loaded.compile_config["loss"] == RegisteredScaledMse(3.0)
    _assert_logs_equal(
        loaded.evaluate(X, TARGETS["regression"], batch_size=N, verbose=0, return_dict=True),
        model.evaluate(X, TARGETS["regression"], batch_size=N, verbose=0, return_dict=True))


def test_unregistered_user_loss_needs_custom_objects(tmp_path):
    model = _saved_with_loss(ScaledMse(3.0), tmp_path / "m")
    with pytest.raises(ValueError, match=r"Unknown loss class_name 'ScaledMse'.*"
                       r"register_serializable.*custom_objects=\{'ScaledMse': ScaledMse\}"):
        _load(tmp_path / "m")
    loaded = _load(tmp_path / "m", custom_objects={"ScaledMse": ScaledMse})
    assert loaded.compile_config["loss"] == ScaledMse(3.0)
    _assert_logs_equal(
        loaded.evaluate(X, TARGETS["regression"], batch_size=N, verbose=0, return_dict=True),
        model.evaluate(X, TARGETS["regression"], batch_size=N, verbose=0, return_dict=True))


def test_configs_saved_before_module_and_registered_name_still_load():
    stored = {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.5}},
              "loss": {"class_name": "Huber", "config": {"delta": 2.0}},
              "metrics": [{"class_name": "AUC", "config": {"curve": "PR"}}, "acc"],
              "loss_weights": None, "weighted_metrics": None, "unstored": []}
    args = saved_config.deserialize_compile(stored, {}, {}, "old/model")
    _same_object_config(args["optimizer"], mf.optimizers.Adam(0.5))
    assert args["loss"] == L.Huber(delta=2.0)
    _same_object_config(args["metrics"][0], M.AUC(curve="PR"))
    assert args["metrics"][1] == "acc"


def test_given_compile_arguments_replace_stored_classes_that_are_gone():
    stored = {"optimizer": "sgd", "loss": {"module": "gone", "class_name": "OldLoss",
                                           "config": {}, "registered_name": "OldLoss"},
              "metrics": None, "loss_weights": None, "weighted_metrics": None, "unstored": []}
    with pytest.raises(ValueError, match="Unknown loss class_name 'OldLoss' of module 'gone'"):
        saved_config.deserialize_compile(stored, {}, {}, "m")
    assert saved_config.deserialize_compile(stored, {"loss": "mse"}, {}, "m")["loss"] == "mse"
