"""Bad input gets a clear ValueError/TypeError naming the argument, and nothing is lost.

Every error raised inside fit, evaluate or predict must leave the model with its last good
params and able to train again; `_assert_still_usable` checks both after each case.
"""

import math

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest

import mirrorfit as mf

NUM_FEATURES, NUM_CLASSES, N = 12, 4, 48
_rng = np.random.default_rng(3)
X = _rng.normal(size=(N, NUM_FEATURES)).astype(np.float32)
Y = _rng.integers(0, NUM_CLASSES, size=N).astype(np.int32)


def _strategy(n):
    return mf.MirroredStrategy(jax.devices()[:n])


def _mlp(n=3):
    with _strategy(n).scope():
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
    with _strategy(2).scope():
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
