"""Multi-output models: per-output losses, loss weights and metrics, with Keras 3's log names.

References are NumPy computations on the model's own predictions: the total loss is the
weighted sum of the per-output means over every real example (so exact despite padding), and
each ``<output>_<metric>`` is that output's metric.
"""

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest

import mirrorfit as mf

N, FEATURES, CLASSES = 45, 6, 3  # 45 rows in global batches of 16: a partial last batch
RTOL = 1e-5
_rng = np.random.default_rng(0)
X = _rng.normal(size=(N, FEATURES)).astype(np.float32)
LABELS = _rng.integers(0, CLASSES, size=N).astype(np.int32)
TARGETS = _rng.normal(size=(N, 2)).astype(np.float32)
W = _rng.uniform(0.2, 2.0, size=N).astype(np.float32)


class TwoHeads(nn.Module):
    as_dict: bool = False

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(8)(x))
        probs, values = nn.softmax(nn.Dense(CLASSES)(h)), nn.Dense(2)(h)
        return {"label": probs, "value": values} if self.as_dict else (probs, values)


def _model(n, as_dict=False, **compile_kwargs):
    with mf.MirroredStrategy(jax.devices()[:n]).scope():
        model = mf.Model(TwoHeads(as_dict), input_shape=(FEATURES,), seed=1)
        model.compile(optax.sgd(0.1), **compile_kwargs)
    return model


def _numpy_parts(model, as_dict=False):
    out = model.predict(X, batch_size=16, verbose=0)
    probs, values = (out["label"], out["value"]) if as_dict else out
    p = np.clip(probs / probs.sum(-1, keepdims=True), 1e-7, 1 - 1e-7)
    crossentropy = -np.log(p[np.arange(N), LABELS])
    squared = ((values - TARGETS) ** 2).mean(-1)
    correct = (probs.argmax(-1) == LABELS).astype(np.float64)
    absolute = np.abs(values - TARGETS).mean(-1)
    return crossentropy, squared, correct, absolute


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 3, 8])
def test_list_outputs_total_is_weighted_sum_of_output_losses(n):
    model = _model(n, loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[1.0, 0.5],
                   metrics=[["accuracy"], ["mae"]])
    logs = model.evaluate(X, (LABELS, TARGETS), batch_size=16, verbose=0, return_dict=True)
    assert list(logs) == ["loss", "output_1_loss", "output_2_loss", "output_1_accuracy",
                          "output_2_mae"]
    crossentropy, squared, correct, absolute = _numpy_parts(model)
    np.testing.assert_allclose(logs["output_1_loss"], crossentropy.mean(), rtol=RTOL)
    np.testing.assert_allclose(logs["output_2_loss"], squared.mean(), rtol=RTOL)
    np.testing.assert_allclose(logs["loss"], crossentropy.mean() + 0.5 * squared.mean(),
                               rtol=RTOL)
    np.testing.assert_allclose(logs["output_1_accuracy"], correct.mean(), rtol=RTOL)
    np.testing.assert_allclose(logs["output_2_mae"], absolute.mean(), rtol=RTOL)


@pytest.mark.slow
def test_dict_outputs_use_output_names_and_weighted_metrics():
    model = _model(3, as_dict=True, loss={"label": "sparse_categorical_crossentropy",
                                          "value": "mse"},
                   loss_weights={"label": 2.0, "value": 1.0},
                   metrics={"label": ["accuracy"]}, weighted_metrics={"label": ["accuracy"]})
    logs = model.evaluate(X, {"label": LABELS, "value": TARGETS}, sample_weight=W,
                          batch_size=16, verbose=0, return_dict=True)
    assert list(logs) == ["loss", "label_loss", "value_loss", "label_accuracy",
                          "weighted_label_accuracy"]
    crossentropy, squared, correct, _ = _numpy_parts(model, as_dict=True)
    # Keras: losses weighted by sample_weight over the example count; `metrics` unweighted.
    np.testing.assert_allclose(logs["loss"], (W * (2.0 * crossentropy + squared)).sum() / N,
                               rtol=RTOL)
    np.testing.assert_allclose(logs["label_accuracy"], correct.mean(), rtol=RTOL)
    np.testing.assert_allclose(logs["weighted_label_accuracy"], (W * correct).sum() / W.sum(),
                               rtol=RTOL)


@pytest.mark.slow
def test_fit_on_two_outputs_matches_one_device(allclose):
    histories, params = [], []
    for n in (1, 8):
        model = _model(n, loss=["sparse_categorical_crossentropy", "mse"],
                       loss_weights=[1.0, 0.5])
        histories.append(model.fit(X, (LABELS, TARGETS), batch_size=16, epochs=2,
                                   shuffle=False, verbose=0).history)
        params.append(jax.device_get(model.params))
    allclose(params[1], params[0], rtol=1e-5, atol=1e-6)
    for key in ("loss", "output_1_loss", "output_2_loss"):
        np.testing.assert_allclose(histories[1][key], histories[0][key], rtol=1e-5)


@pytest.mark.slow
def test_one_builtin_loss_for_several_outputs_is_a_clear_error():
    model = _model(2, loss="mse")
    with pytest.raises(ValueError, match=r"'mean_squared_error'.*2 outputs.*one loss per output"):
        model.evaluate(X, (LABELS, TARGETS), batch_size=16, verbose=0)
    model.compile(optax.sgd(0.1), loss=["sparse_categorical_crossentropy", "mse"])
    assert np.isfinite(model.evaluate(X, (LABELS, TARGETS), batch_size=16, verbose=0)[0])


@pytest.mark.slow
@pytest.mark.parametrize("kwargs, match", [
    (dict(loss=["mse"]), r"loss is given per output for outputs \['output_1'\]"),
    (dict(loss=["mse", "mse"], loss_weights=[1.0]), r"loss_weights must have one entry per"),
    (dict(loss={"label": "mse", "other": "mse"}), r"loss is given per output"),
    (dict(loss=["mse", "mse"], metrics={"nope": ["mae"]}), r"metrics names outputs \['nope'\]"),
    (dict(loss="mse", metrics=[["mae"], ["mae"]]), r"metrics is given per output, but loss is"),
])
def test_per_output_arguments_that_do_not_match_the_outputs_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        model = _model(2, **kwargs)
        model.evaluate(X, (LABELS, TARGETS), batch_size=16, verbose=0)


@pytest.mark.slow
@pytest.mark.parametrize("reduction", ["sum", "mean_with_sample_weight"])
def test_a_reduction_fit_would_not_honour_is_refused_at_compile(reduction):
    with pytest.raises(ValueError, match=rf"cannot use reduction='{reduction}'.*Drop `reduction=`"):
        _model(1, loss=mf.losses.MeanSquaredError(reduction=reduction))
    model = _model(1, loss=["sparse_categorical_crossentropy",
                            mf.losses.MeanSquaredError(reduction=None)])
    assert np.isfinite(model.evaluate(X, (LABELS, TARGETS), batch_size=16, verbose=0)[0])


@pytest.mark.slow
def test_per_output_compile_arguments_are_saved_and_restored(tmp_path):
    model = _model(2, loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[1.0, 0.5],
                   metrics=[["accuracy"], ["mae"]], weighted_metrics=[["accuracy"], []])
    model.save(tmp_path / "m")
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        loaded = mf.load_model(tmp_path / "m", TwoHeads(), optimizer=optax.sgd(0.1))
    args = dict(batch_size=16, sample_weight=W, verbose=0, return_dict=True)
    assert loaded.evaluate(X, (LABELS, TARGETS), **args) == pytest.approx(
        model.evaluate(X, (LABELS, TARGETS), **args), rel=1e-6)


_TWO = (LABELS, TARGETS)
_BY_NAME = {"label": LABELS, "value": TARGETS}


@pytest.mark.parametrize("call, argument", [
    (lambda m, y: m.fit(X, y, batch_size=16, verbose=0), "y"),
    (lambda m, y: m.evaluate(X, y, batch_size=16, verbose=0), "y"),
    (lambda m, y: m.train_on_batch(X[:16], jax.tree.map(lambda a: a[:16], y)), "y"),
    (lambda m, y: m.fit(X, _TWO if isinstance(y, tuple) else _BY_NAME, batch_size=16,
                        verbose=0, validation_data=(X, y)), "validation_data"),
])
@pytest.mark.parametrize("as_dict, y, received", [
    (False, (LABELS, TARGETS, TARGETS), "a tuple of 3 targets"),
    (False, (LABELS,), "a tuple of 1 targets"),
    (True, {"label": LABELS, "valu": TARGETS}, "missing: ['value']; unknown: ['valu']"),
    (True, {"label": LABELS}, "missing: ['value']"),
])
def test_targets_that_do_not_match_the_outputs_are_named(call, argument, as_dict, y, received):
    # Before: a 3-tuple trained silently on the first two, a 1-tuple raised "IndexError:
    # tuple index out of range", and a dict with a wrong key raised "KeyError: 'value'".
    loss = ({"label": "sparse_categorical_crossentropy", "value": "mse"} if as_dict else
            ["sparse_categorical_crossentropy", "mse"])
    model = _model(1, as_dict=as_dict, loss=loss)
    initial = model.get_weights()
    names = "['label', 'value']" if as_dict else "['output_1', 'output_2']"
    with pytest.raises(ValueError, match=rf"^{argument} must hold one target per output") as e:
        call(model, y)
    assert names in str(e.value) and received in str(e.value)
    for before, after in zip(initial, model.get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)  # no step ran


def _functional_two_heads(n):
    """keras-io's functional-API guide in small: list outputs named by their layers."""
    inputs = mf.Input((FEATURES,), name="features")
    h = mf.layers.Dense(8, activation="relu")(inputs)
    cls = mf.layers.Dense(CLASSES, activation="softmax", name="cls")(h)
    reg = mf.layers.Dense(2, name="reg")(h)
    with mf.MirroredStrategy(jax.devices()[:n]).scope():
        return mf.Model(inputs, [cls, reg])


def test_functional_list_outputs_take_compile_arguments_and_targets_by_output_name():
    model = _functional_two_heads(2)
    assert model.output_names == ["cls", "reg"]
    model.compile(optax.sgd(0.1), loss={"reg": "mse", "cls": "sparse_categorical_crossentropy"},
                  loss_weights={"cls": 1.0, "reg": 0.5}, metrics={"cls": "accuracy",
                                                                   "reg": ["mae"]})
    by_name = model.evaluate(X, {"reg": TARGETS, "cls": LABELS}, batch_size=16, verbose=0,
                             return_dict=True)
    assert list(by_name) == ["loss", "cls_loss", "reg_loss", "cls_accuracy", "reg_mae"]
    by_position = model.evaluate(X, (LABELS, TARGETS), batch_size=16, verbose=0,
                                 return_dict=True)
    assert by_position == pytest.approx(by_name, rel=1e-6)
    # The values: NumPy on the model's own predictions.
    probs, values = model.predict(X, verbose=0)
    crossentropy = -np.log(np.clip(probs, 1e-7, 1 - 1e-7)[np.arange(N), LABELS])
    squared = ((values - TARGETS) ** 2).mean(-1)
    np.testing.assert_allclose(by_name["loss"], crossentropy.mean() + 0.5 * squared.mean(),
                               rtol=RTOL)
    np.testing.assert_allclose(by_name["reg_mae"], np.abs(values - TARGETS).mean(), rtol=RTOL)
    history = model.fit(X, {"cls": LABELS, "reg": TARGETS}, batch_size=16, verbose=0)
    assert set(history.history) == set(by_name)


@pytest.mark.parametrize("kwargs, y, match", [
    (dict(loss={"cls": "mse", "bad": "mse"}), (LABELS, TARGETS),
     (r"^loss names outputs \['bad'\] that the model does not have; the outputs are "
      r"\['cls', 'reg'\] \(model.output_names\)")),
    (dict(loss=["sparse_categorical_crossentropy", "mse"]), {"cls": LABELS, "rg": TARGETS},
     (r"^y must hold one target per output.*\['cls', 'reg'\].*Received: y=a dict with keys "
      r"\['cls', 'rg'\]")),
    (dict(loss=["mse"]), (LABELS, TARGETS), r"loss is given per output for outputs \['cls'\]"),
])
def test_functional_outputs_are_named_by_their_layers_in_errors(kwargs, y, match):
    model = _functional_two_heads(1)
    with pytest.raises(ValueError, match=match):
        model.compile(optax.sgd(0.1), **kwargs)
        model.evaluate(X, y, batch_size=16, verbose=0)


def test_a_loss_given_for_some_outputs_takes_only_their_targets():
    # Keras' "partially defined" loss (the miniature GPT: loss=[fn, None], y one array).
    model = _functional_two_heads(2)
    model.compile(optax.sgd(0.1), loss=["sparse_categorical_crossentropy", None])
    one_array = model.evaluate(X, LABELS, batch_size=16, verbose=0, return_dict=True)
    assert list(one_array) == ["loss"]  # as Keras: no per-output loss for one loss
    probs, _ = model.predict(X, verbose=0)
    crossentropy = -np.log(np.clip(probs, 1e-7, 1 - 1e-7)[np.arange(N), LABELS])
    np.testing.assert_allclose(one_array["loss"], crossentropy.mean(), rtol=RTOL)
    as_list = model.evaluate(X, [LABELS], batch_size=16, verbose=0, return_dict=True)
    assert as_list["loss"] == pytest.approx(one_array["loss"], rel=1e-6)
    with pytest.raises(ValueError, match="one target per output"):
        model.evaluate(X, (LABELS, TARGETS, TARGETS), batch_size=16, verbose=0)
