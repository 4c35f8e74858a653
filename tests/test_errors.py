"""Bad input gets a clear ValueError/TypeError naming the argument, and nothing is lost.

Every error raised inside fit, evaluate or predict must leave the model with its last good
params and able to train again; `_assert_still_usable` checks both after each case.
"""

import math

import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from tests.helpers import mirrored_strategy

NUM_FEATURES, NUM_CLASSES, N = 12, 4, 48
_rng = np.random.default_rng(3)
X = _rng.normal(size=(N, NUM_FEATURES)).astype(np.float32)
Y = _rng.integers(0, NUM_CLASSES, size=N).astype(np.int32)


def _mlp(n=3):
    with mirrored_strategy(n).scope():
        return mf.Sequential([nn.Dense(8), nn.relu, nn.Dense(NUM_CLASSES), nn.softmax],
                             input_shape=(NUM_FEATURES,))


@pytest.fixture(scope="module")
def model():
    """A compiled plain-SGD MLP on 3 replicas (odd), shared by the cases of this file."""
    model = _mlp()
    model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(X, Y, batch_size=24, verbose=0)  # compile the train step once
    return model


def _assert_still_usable(model, before, allclose):
    """Params are the last good ones, and a following fit trains them."""
    allclose(model.get_weights(), before, rtol=0)
    history = model.fit(X, Y, batch_size=24, shuffle=False, verbose=0)
    assert math.isfinite(history.history["loss"][0])
    assert not np.allclose(model.get_weights()[0], before[0])
    model.set_weights(before)


def _batches(n, *, fail_at=None):
    for i in range(n):
        if i == fail_at:
            raise RuntimeError("input pipeline failed")
        yield X[i * 12:(i + 1) * 12], Y[i * 12:(i + 1) * 12]


BAD_FIT_CALLS = {
    "x_y_lengths": (dict(x=X, y=Y[:-1]),
                    r"x and y must have the same number of rows.*Received: x with 48 rows and "
                    r"y with 47 rows"),
    "sample_weight_length": (dict(x=X, y=Y, sample_weight=np.ones(N - 2)),
                             r"x and sample_weight .*Received: .*sample_weight with 46 rows"),
    "empty_x": (dict(x=X[:0], y=Y[:0]), r"x is empty.*Received: x with 0 rows"),
    "empty_iterable": (dict(x=iter([]), steps_per_epoch=2), r"x is empty: the generator yielded no batch"),
    "batch_size_0": (dict(x=X, y=Y, batch_size=0), r"batch_size .*Received: batch_size=0"),
    "batch_size_negative": (dict(x=X, y=Y, batch_size=-1), r"Received: batch_size=-1"),
    "batch_size_float": (dict(x=X, y=Y, batch_size=2.5), r"Received: batch_size=2.5"),
    "batch_size_bool": (dict(x=X, y=Y, batch_size=True), r"Received: batch_size=True"),
    "validation_split_negative": (dict(x=X, y=Y, validation_split=-0.1),
                                  r"validation_split .*\[0, 1\).*Received: validation_split=-0.1"),
    "validation_split_one": (dict(x=X, y=Y, validation_split=1.0),
                             r"Received: validation_split=1.0"),
    "feature_shape": (dict(x=X[:, :-1], y=Y),
                      r"expected per-example shape \(12,\).*Received: x with per-example shape "
                      r"\(11,\)"),
    "validation_feature_shape": (dict(x=X, y=Y, validation_data=(X[:, :-1], Y)),
                                 r"expected per-example shape \(12,\).*\(11,\)"),
    "validation_data_form": (dict(x=X, y=Y, validation_data=X), r"validation_data must be"),
    "y_missing": (dict(x=X), r"y is required"),
    "y_with_iterable": (dict(x=_batches(2), y=Y), r"y does not apply when x is a"),
    "iterable_item_form": (dict(x=iter([X[:12]]), steps_per_epoch=1), r"\(x, y\)"),
    "epochs_zero": (dict(x=X, y=Y, epochs=0), r"epochs must be a positive int"),
    "verbose": (dict(x=X, y=Y, verbose=3), r"Received: verbose=3"),
    "steps_per_epoch": (dict(x=X, y=Y, steps_per_epoch=0), r"Received: steps_per_epoch=0"),
}


def _changing_feature_shape():
    yield X[:12], Y[:12]
    yield X[12:24, :-1], Y[12:24]


def _one_batch(x, y, *rest):
    yield (x, y, *rest)


# Section 4 of issue 16: each once gave an unclear error (or a wrong result); now a
# ValueError/TypeError naming the argument, what was expected and what was received.
UNCLEAR_FIT_CALLS = {
    "string_labels": (dict(x=X, y=np.array(list("abcd") * 12)), TypeError,
                      r"y must hold numbers.*np.unique\(y, return_inverse=True\).*Received: y "
                      r"with dtype <U1"),
    "object_labels": (dict(x=X, y=Y.astype(object)), TypeError,
                      r"y must hold numbers.*Received: y with dtype object"),
    "string_features": (dict(x=X.astype(str), y=Y), TypeError, r"x must hold numbers.*<U"),
    "string_labels_in_iterable": (dict(x=_one_batch(X[:12], np.array(list("abc") * 4)),
                                       steps_per_epoch=1), TypeError,
                                  r"y must hold numbers.*Received: y with dtype <U1"),
    "one_hot_targets_for_sparse_loss": (
        dict(x=X, y=np.eye(NUM_CLASSES, dtype=np.float32)[Y]), ValueError,
        r"sparse_categorical_crossentropy expects integer class labels of shape \[batch\].*"
        r"look one-hot.*Received: targets of shape \[batch, 4\] and outputs of shape "
        r"\[batch, 4\]"),
    "sparse_targets_with_extra_axis": (
        dict(x=X, y=np.stack([Y, Y], axis=1)), ValueError,
        r"expects integer class labels.*Received: targets of shape \[batch, 2\] and outputs "
        r"of shape \[batch, 4\]"),
    "sample_weight_column": (dict(x=X, y=Y, sample_weight=np.ones((N, 1))), ValueError,
                             r"sample_weight must have shape \[num_examples\].*reshape\(-1\).*"
                             r"Received: sample_weight of shape \(48, 1\)"),
    "sample_weight_column_in_iterable": (
        dict(x=_one_batch(X[:12], Y[:12], np.ones((12, 1))), steps_per_epoch=1), ValueError,
        r"sample_weight must have shape.*Received: a batch's sample_weight of shape \(12, 1\)"),
    "nested_list_x": (dict(x=X.tolist(), y=Y), TypeError,
                      r"x must be a NumPy or JAX array.*np.asarray\(x.*Received: x as a list "
                      r"of 48 lists"),
    "list_y": (dict(x=X, y=Y.tolist()), TypeError, r"Received: y as a list of 48 ints"),
    "generator_feature_shape_differs_from_model": (
        dict(x=_one_batch(X[:12, :-1], Y[:12]), steps_per_epoch=1), ValueError,
        r"expected per-example shape \(12,\).*Received: x with per-example shape \(11,\)"),
    "callbacks_not_a_list": (dict(x=X, y=Y, callbacks=mf.callbacks.EarlyStopping()), TypeError,
                             r"callbacks must be a list.*callbacks=\[EarlyStopping\(\)\].*"
                             r"Received: callbacks=.* of type EarlyStopping"),
    "callbacks_holding_a_class": (dict(x=X, y=Y, callbacks=[mf.callbacks.EarlyStopping]),
                                  TypeError, r"not classes: pass EarlyStopping\(...\) instead.*"
                                             r"Received: callbacks containing the class"),
}


@pytest.mark.parametrize("case", list(UNCLEAR_FIT_CALLS))
def test_unclear_fit_input_gets_a_clear_error_and_model_stays_usable(case, model, allclose):
    kwargs, error, match = UNCLEAR_FIT_CALLS[case]
    before = model.get_weights()
    with pytest.raises(error, match=match):
        model.fit(verbose=0, **kwargs)
    _assert_still_usable(model, before, allclose)


def test_generator_whose_feature_shape_changes_stops_with_the_last_good_params(model, allclose):
    before = model.get_weights()
    model.fit(_one_batch(X[:12], Y[:12]), steps_per_epoch=1, verbose=0)
    after_first = model.get_weights()
    model.set_weights(before)
    with pytest.raises(ValueError, match=r"per-example shapes of the first one, \(x, y\) = "
                                         r"\(\(12,\), \(\)\).*Received: a batch with "
                                         r"per-example shapes \(\(11,\), \(\)\)"):
        model.fit(_changing_feature_shape(), steps_per_epoch=2, verbose=0)
    allclose(model.get_weights(), after_first, rtol=1e-6)  # the first batch's step is kept
    model.set_weights(before)
    _assert_still_usable(model, before, allclose)


@pytest.mark.parametrize("method", ["evaluate", "predict"])
@pytest.mark.parametrize("x, error, match", [
    (X.tolist(), TypeError, r"x must be a NumPy or JAX array"),
    (X.astype(object), TypeError, r"x must hold numbers"),
    (X[:, :-1], ValueError, r"expected per-example shape \(12,\)"),
])
def test_unclear_evaluate_and_predict_input_gets_a_clear_error(method, x, error, match, model,
                                                               allclose):
    before = model.get_weights()
    args = (x, Y) if method == "evaluate" else (x,)
    with pytest.raises(error, match=match):
        getattr(model, method)(*args, verbose=0)
    _assert_still_usable(model, before, allclose)


def _mean_loss(y_true, y_pred):
    return jnp.mean(mf.losses.SparseCategoricalCrossentropy()(y_true, y_pred))


LOSS_SHAPE_CASES = {
    "mse_targets_narrower_than_outputs": (
        "mse", np.zeros((N, 3), np.float32),
        r"loss mean_squared_error needs targets of the outputs' shape \[batch, 4\].*Received: "
        r"targets of shape \[batch, 3\] and outputs of shape \[batch, 4\]"),
    "categorical_loss_with_integer_labels": (
        "categorical_crossentropy", Y,
        r"For integer class labels use loss=\"sparse_categorical_crossentropy\".*Received: "
        r"targets of shape \[batch\] and outputs of shape \[batch, 4\]"),
    "custom_loss_per_class": (
        lambda y, p: jnp.square(p - jax.nn.one_hot(y, NUM_CLASSES)), Y,
        r"loss <lambda> must return one value per example, shape \[batch\].*axis=-1.*"
        r"returning shape \[batch, 4\] for targets of shape \[batch\]"),
    "custom_loss_broadcasting_failure": (
        lambda y, p: jnp.mean(y[:, None] - p[:, :, None] * y, axis=(1, 2)), Y,
        r"loss <lambda> failed on targets of shape \[batch\] and outputs of shape \[batch, 4\]"),
    "custom_loss_returning_a_scalar": (
        _mean_loss, Y, r"(?s)loss _mean_loss returned a scalar.*one value per example.*"
                       r"def _mean_loss\(y_true, y_pred\):.*Received: loss=_mean_loss"),
}


@pytest.mark.parametrize("case", list(LOSS_SHAPE_CASES))
def test_target_and_loss_shapes_are_checked_at_the_first_trace(case):
    loss, y, match = LOSS_SHAPE_CASES[case]
    model = _mlp(3)
    model.compile(optax.sgd(0.1), loss)
    before = model.get_weights()
    for call in (lambda: model.fit(X, y, batch_size=24, verbose=0),
                 lambda: model.evaluate(X, y, batch_size=24, verbose=0)):
        with pytest.raises(ValueError, match=match):
            call()
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before, strict=True))
    model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy")
    model.fit(X, Y, batch_size=24, verbose=0)
    assert not np.allclose(model.get_weights()[0], before[0])


@pytest.mark.parametrize("case", list(BAD_FIT_CALLS))
def test_bad_fit_argument_raises_value_error_and_model_stays_usable(case, model, allclose):
    kwargs, match = BAD_FIT_CALLS[case]
    before = model.get_weights()
    with pytest.raises(ValueError, match=match):
        model.fit(verbose=kwargs.pop("verbose", 0), **kwargs)
    _assert_still_usable(model, before, allclose)


BAD_EVALUATE_CALLS = {
    "x_y_lengths": (dict(x=X[:-3], y=Y), r"x and y must have the same number of rows"),
    "empty_x": (dict(x=X[:0], y=Y[:0]), r"x is empty"),
    "batch_size_float": (dict(x=X, y=Y, batch_size=2.5), r"Received: batch_size=2.5"),
    "batch_size_bool": (dict(x=X, y=Y, batch_size=True), r"Received: batch_size=True"),
    "feature_shape": (dict(x=np.zeros((N, 13), np.float32), y=Y),
                      r"expected per-example shape \(12,\).*Received: x with per-example shape "
                      r"\(13,\)"),
}


@pytest.mark.parametrize("case", list(BAD_EVALUATE_CALLS))
def test_bad_evaluate_argument_raises_value_error_and_model_stays_usable(case, model, allclose):
    kwargs, match = BAD_EVALUATE_CALLS[case]
    before = model.get_weights()
    with pytest.raises(ValueError, match=match):
        model.evaluate(verbose=0, **kwargs)
    _assert_still_usable(model, before, allclose)


BAD_PREDICT_CALLS = {
    "empty_x": (dict(x=X[:0]), r"x is empty"),
    "batch_size_0": (dict(x=X, batch_size=0), r"Received: batch_size=0"),
    "batch_size_negative": (dict(x=X, batch_size=-1), r"Received: batch_size=-1"),
    "feature_shape": (dict(x=X[:, None, :]),
                      r"expected per-example shape \(12,\).*Received: x with per-example shape "
                      r"\(1, 12\)"),
}


@pytest.mark.parametrize("case", list(BAD_PREDICT_CALLS))
def test_bad_predict_argument_raises_value_error_and_model_stays_usable(case, model, allclose):
    kwargs, match = BAD_PREDICT_CALLS[case]
    before = model.get_weights()
    with pytest.raises(ValueError, match=match):
        model.predict(verbose=0, **kwargs)
    _assert_still_usable(model, before, allclose)


def test_fit_and_evaluate_before_compile_raise_while_predict_works():
    model = _mlp(2)
    before = model.get_weights()
    with pytest.raises(ValueError, match=r"model.compile\(.*\) before model.fit\(\)"):
        model.fit(X, Y, verbose=0)
    with pytest.raises(ValueError, match=r"model.compile\(.*\) before model.evaluate\(\)"):
        model.evaluate(X, Y, verbose=0)
    pred = model.predict(X, verbose=0)
    assert pred.shape == (N, NUM_CLASSES)
    model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy")
    np.testing.assert_array_equal(model.predict(X, verbose=0), pred)
    model.fit(X, Y, batch_size=24, verbose=0)
    assert not np.allclose(model.get_weights()[0], before[0])


@pytest.mark.parametrize("kwargs, match, known", [
    (dict(optimizer="adamx", loss="mse"), r"optimizer='adamx'", ["adam", "adamw", "rmsprop",
                                                                 "sgd"]),
    (dict(optimizer="sgd", loss="sparse_crossentropy"), r"loss='sparse_crossentropy'",
     ["sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
      "mse", "mae"]),
    (dict(optimizer="sgd", loss="mse", metrics=["acuracy"]), r"metrics='acuracy'",
     ["accuracy", "sparse_categorical_accuracy", "mae", "mse"]),
])
def test_unknown_names_list_the_known_names(kwargs, match, known, model, allclose):
    before = model.get_weights()
    with pytest.raises(ValueError, match=match) as info:
        model.compile(**kwargs)
    for name in known:
        assert f"'{name}'" in str(info.value)
    # A failed compile keeps the previous configuration.
    _assert_still_usable(model, before, allclose)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(loss=None), ValueError, r"Received: loss=None"),
    (dict(loss="mse", metrics="accuracy"), TypeError, r"metrics must be a list"),
    (dict(loss="mse", steps_per_execution=0), ValueError, r"Received: steps_per_execution=0"),
    (dict(loss="mse", optimizer=3), TypeError, r"optimizer"),
    (dict(loss=3), TypeError, r"Received: loss=3"),
])
def test_bad_compile_arguments_name_the_argument(kwargs, error, match):
    with mirrored_strategy(2).scope():
        model = mf.Model(nn.Dense(2))
    with pytest.raises(error, match=match):
        model.compile(**{"optimizer": "sgd", **kwargs})


def test_duplicated_devices_raise_value_error():
    device = jax.devices()[0]
    with pytest.raises(ValueError, match=r"devices must not repeat a device.*Received: devices="):
        mf.MirroredStrategy([device, jax.devices()[1], device])


def test_empty_devices_raise_value_error():
    with pytest.raises(ValueError, match=r"devices must name at least one device"):
        mf.MirroredStrategy([])


@pytest.mark.parametrize("devices", [["cpu:0", "cpu:1"], [0, 1], "cpu", jax.devices()[0]])
def test_devices_that_are_not_jax_devices_raise_type_error(devices):
    with pytest.raises(TypeError, match=r"devices must .*jax.Device.*Received: devices="):
        mf.MirroredStrategy(devices)


def test_devices_mixing_platforms_raise_value_error():
    others = [d for backend in ("gpu", "tpu") for d in _devices_or_empty(backend)]
    if not others:
        pytest.skip("only the CPU platform is available")
    with pytest.raises(ValueError, match=r"devices must all be on one platform"):
        mf.MirroredStrategy([jax.devices("cpu")[0], others[0]])


def _devices_or_empty(backend):
    try:
        return jax.devices(backend)
    except RuntimeError:
        return []


def test_error_inside_the_step_keeps_params_and_model_usable(model, allclose):
    # One-hot targets for a sparse loss: the train step fails while being traced, before
    # any buffer is donated.
    before = model.get_weights()
    with pytest.raises(ValueError):
        model.fit(X, np.eye(NUM_CLASSES, dtype=np.float32)[Y][:, :3], batch_size=24, verbose=0)
    _assert_still_usable(model, before, allclose)


class _FailAtBatch(mf.callbacks.Callback):
    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            raise RuntimeError("callback failed")


def test_exception_mid_fit_keeps_the_last_good_params(model, allclose):
    before = model.get_weights()
    # Reference: exactly 3 steps.
    model.fit(X, Y, batch_size=12, shuffle=False, steps_per_epoch=3, verbose=0)
    after_three = model.get_weights()
    model.set_weights(before)
    with pytest.raises(RuntimeError, match="callback failed"):
        model.fit(X, Y, batch_size=12, shuffle=False, callbacks=[_FailAtBatch(2)], verbose=0)
    allclose(model.get_weights(), after_three, rtol=1e-6)
    model.set_weights(before)
    # An input pipeline that fails on its third batch: two steps are kept.
    model.fit(X, Y, batch_size=12, shuffle=False, steps_per_epoch=2, verbose=0)
    after_two = model.get_weights()
    model.set_weights(before)
    with pytest.raises(RuntimeError, match="input pipeline failed"):
        model.fit(_batches(4, fail_at=2), steps_per_epoch=4, verbose=0)
    allclose(model.get_weights(), after_two, rtol=1e-6)
    model.set_weights(before)
    _assert_still_usable(model, before, allclose)


class _NeedsMask(nn.Module):
    @nn.compact
    def __call__(self, x, mask):
        return nn.Dense(NUM_CLASSES)(x) * mask


class _NnxNeedsMask(nnx.Module):
    def __init__(self):
        self.dense = nnx.Linear(NUM_FEATURES, NUM_CLASSES, rngs=nnx.Rngs(0))

    def __call__(self, x, mask):
        return self.dense(x) * mask


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(seed=-1), ValueError, r"seed must be a non-negative int.*Received: seed=-1"),
    (dict(seed="abc"), TypeError, r"seed must be an int. Received: seed='abc'"),
    (dict(seed=1.5), TypeError, r"Received: seed=1.5"),
    (dict(input_shape="8"), TypeError, r"input_shape must be .*Received: input_shape='8'"),
])
def test_bad_model_arguments_are_refused_at_construction(kwargs, error, match):
    with mirrored_strategy(2).scope(), pytest.raises(error, match=match):
        mf.Sequential([nn.Dense(2)], **{"input_shape": (NUM_FEATURES,), **kwargs})


@pytest.mark.parametrize("input_shape", [NUM_FEATURES, np.int64(NUM_FEATURES)])
def test_int_input_shape_means_one_axis(input_shape, allclose):
    with mirrored_strategy(2).scope():
        from_int = mf.Sequential([nn.Dense(2)], input_shape=input_shape, seed=1)
        from_tuple = mf.Sequential([nn.Dense(2)], input_shape=(NUM_FEATURES,), seed=1)
    allclose(from_int.get_weights(), from_tuple.get_weights(), rtol=0)
    assert from_int.predict(X, verbose=0).shape == (N, 2)


@pytest.mark.parametrize("module", [_NeedsMask, _NnxNeedsMask])
def test_module_needing_an_argument_mirrorfit_does_not_pass_says_what_is_passed(module):
    name = module.__name__
    with mirrored_strategy(2).scope():
        with pytest.raises(TypeError, match=rf"{name} cannot be called with the arguments "
                                            r"mirrorfit passes.*missing.*mask.*one positional "
                                            r"argument per model input.*train=True/False or "
                                            rf"training=True/False.*Received: {name}.__call__"
                                            r"\(self, x, mask\)"):
            mf.Model(module(), input_shape=(NUM_FEATURES,))
        model = mf.Model(module(), input_shape=((NUM_FEATURES,), (NUM_CLASSES,)))
    assert model.predict((X, np.ones((N, NUM_CLASSES), np.float32)), verbose=0).shape == (
        N, NUM_CLASSES)


def test_unbuilt_model_fed_from_a_generator_builds_from_its_first_batch():
    # Once a crash ('NoneType' has no attribute 'params'); now the first batch, read ahead
    # and kept for the epoch, builds the model as Keras does.
    with mirrored_strategy(3).scope():
        model = mf.Sequential([nn.Dense(NUM_CLASSES), nn.softmax])
    model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy")
    history = model.fit(_batches(2), steps_per_epoch=2, verbose=0)
    assert model.built and model.input_spec.shape == (NUM_FEATURES,)
    assert math.isfinite(history.history["loss"][0])
    assert model.predict(iter([X[:12]]), verbose=0).shape == (12, NUM_CLASSES)
