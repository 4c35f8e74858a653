"""No silent wrong results (issue 16, section 3): scalar losses, sparse labels outside the
classes, validation_split given with validation_data, LearningRateScheduler's calling form.

Each test covers the class of the mistake (every reduction, every out-of-range label kind,
1 and 3 replicas, full and padded batches) and checks that the model trains afterwards.
"""

import functools
import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from mirrorfit._src.utils.checks import MirrorfitWarning

NUM_FEATURES, NUM_CLASSES, N, BATCH = 5, 4, 40, 12  # 4 steps, the last one 4 rows (padded)
_rng = np.random.default_rng(7)
X = _rng.normal(size=(N, NUM_FEATURES)).astype(np.float32)
Y = _rng.integers(0, NUM_CLASSES, size=N).astype(np.int32)


def _model(replicas, *, seed=0):
    with mf.MirroredStrategy(jax.devices()[:replicas]).scope():
        return mf.Sequential([nn.Dense(NUM_CLASSES), nn.softmax], input_shape=(NUM_FEATURES,),
                             seed=seed)


def _crossentropy(y_true, y_pred):
    return mf.losses.sparse_categorical_crossentropy(y_true, y_pred)  # [batch]


# -- a loss that reduces over the batch ------------------------------------------------------

SCALAR_LOSSES = {
    "mean": lambda y, p: jnp.mean(_crossentropy(y, p)),
    "sum": lambda y, p: jnp.sum(_crossentropy(y, p)),
    "method_mean": lambda y, p: _crossentropy(y, p).mean(),
    "optax_mean": lambda y, p: optax.losses.softmax_cross_entropy_with_integer_labels(
        jnp.log(p), y).mean(),
}


@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("reduction", list(SCALAR_LOSSES))
def test_scalar_loss_is_rejected_at_the_first_trace_with_the_per_example_form(reduction,
                                                                              replicas):
    model = _model(replicas)
    model.compile(optax.sgd(0.1), SCALAR_LOSSES[reduction])
    before = model.get_weights()
    for call in (lambda: model.fit(X, Y, batch_size=BATCH, verbose=0),
                 lambda: model.evaluate(X, Y, batch_size=BATCH, verbose=0)):
        with pytest.raises(ValueError, match=r"(?s)returned a scalar \(shape \(\)\).*one value "
                                             r"per example.*padding rows.*axis=-1\)  # \[batch\]"):
            call()
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before, strict=True))
    # The per-example form the message shows is exact on the padded last batch.
    model.compile(optax.sgd(0.1), _crossentropy)
    probs = np.asarray(model.predict(X, batch_size=BATCH, verbose=0), np.float64)
    expected = -np.mean(np.log(np.clip(probs[np.arange(N), Y], 1e-7, 1 - 1e-7)))
    got = model.evaluate(X, Y, batch_size=BATCH, verbose=0)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    model.fit(X, Y, batch_size=BATCH, verbose=0)
    assert not np.allclose(model.get_weights()[0], before[0])


# -- sparse labels outside [0, num_classes) --------------------------------------------------


@functools.cache
def _sparse_model(replicas, from_logits):
    model = _model(replicas, seed=1)
    model.compile(optax.sgd(0.05), mf.losses.SparseCategoricalCrossentropy(from_logits),
                  metrics=["accuracy"])
    return model, jax.device_get(model.state)


def _label_warnings(record):
    return [str(w.message) for w in record if "sparse labels" in str(w.message)]


@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("from_logits", [False, True])
@pytest.mark.parametrize("bad_label", [-1, NUM_CLASSES, 10])
def test_out_of_range_sparse_labels_are_counted_and_warned_once_per_fit(bad_label, from_logits,
                                                                        replicas):
    model, initial = _sparse_model(replicas, from_logits)
    model.state = model.strategy.replicate_arrays(initial)
    y = Y.copy()
    bad_rows = [0, 13, N - 1]  # the last row sits in the padded last batch
    y[bad_rows] = bad_label
    for _ in range(2):  # once per fit, not once per compile
        with pytest.warns(MirrorfitWarning) as record:
            model.fit(X, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
        found = _label_warnings(record)
        assert len(found) == 1, found
        assert re.search(rf"^{len(bad_rows)} sparse labels .* outside the valid range "
                         rf"\[0, {NUM_CLASSES}\) .*class ids must be 0 \.\. {NUM_CLASSES - 1}",
                         found[0])
    model.state = model.strategy.replicate_arrays(initial)
    history = model.fit(X, Y, batch_size=BATCH, verbose=0)  # valid labels: no warning
    assert math.isfinite(history.history["loss"][0])


# -- validation_split given with validation_data ---------------------------------------------


@pytest.mark.parametrize("replicas", [1, 3])
def test_validation_data_wins_over_validation_split_with_a_warning(replicas):
    model = _model(replicas)
    model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
    x_val, y_val = X[:7] + 1.0, Y[:7]
    steps = []
    counter = mf.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: steps.append(b))
    with pytest.warns(MirrorfitWarning, match=r"validation_data is used and validation_split "
                                              r"ignored.*Received: validation_split=0.5"):
        history = model.fit(X, Y, batch_size=BATCH, validation_split=0.5, verbose=0,
                            validation_data=(x_val, y_val), callbacks=[counter])
    assert len(steps) == math.ceil(N / BATCH)  # every row trained: no split taken
    val_loss, val_accuracy = model.evaluate(x_val, y_val, batch_size=BATCH, verbose=0)
    np.testing.assert_allclose(history.history["val_loss"], [val_loss], rtol=1e-6)
    np.testing.assert_allclose(history.history["val_accuracy"], [val_accuracy], rtol=1e-6)


# -- LearningRateScheduler: the calling form comes from the signature ------------------------


class _Halving:
    def __call__(self, epoch, lr):
        return lr * 0.5


def _epoch_only(epoch):
    return 0.1 / (epoch + 1)


def _with_default(epoch, lr=None):
    return 0.2 if lr is None else lr * 0.5


SCHEDULES = {  # schedule, rate set for epoch 1 (0-based) after a start at 0.1
    "two_arguments": (lambda epoch, lr: lr * 0.5, 0.025),
    "epoch_only": (_epoch_only, 0.05),
    "optional_lr": (_with_default, 0.025),
    "callable_object": (_Halving(), 0.025),
    "partial": (functools.partial(lambda scale, epoch, lr: lr * scale, 0.5), 0.025),
    "varargs": (lambda *args: args[1] * 0.5, 0.025),
}


@pytest.fixture(scope="module")
def sgd_model():
    model = _model(3)
    model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    return model, jax.device_get(model.state)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_learning_rate_scheduler_calls_the_form_its_signature_takes(name, sgd_model):
    model, initial = sgd_model
    model.state = model.strategy.replicate_arrays(initial)
    schedule, expected = SCHEDULES[name]
    history = model.fit(X, Y, batch_size=BATCH, epochs=2, verbose=0,
                        callbacks=[mf.callbacks.LearningRateScheduler(schedule)])
    np.testing.assert_allclose(history.history["learning_rate"][1], expected, rtol=1e-6)


def _buggy_two(epoch, lr):
    raise TypeError("unsupported operand in my schedule")


def _buggy_one(epoch):
    return "0.1" * 1.5  # a TypeError of the user's own


@pytest.mark.parametrize("schedule, match", [
    (_buggy_two, r"^unsupported operand in my schedule$"),
    (_buggy_one, r"can't multiply sequence"),
])
def test_learning_rate_scheduler_lets_the_schedules_own_type_error_through(schedule, match,
                                                                          sgd_model):
    model, initial = sgd_model
    model.state = model.strategy.replicate_arrays(initial)
    with pytest.raises(TypeError, match=match) as info:
        model.fit(X, Y, batch_size=BATCH, verbose=0,
                  callbacks=[mf.callbacks.LearningRateScheduler(schedule)])
    assert info.value.__context__ is None  # raised once, not retried as another form
    history = model.fit(X, Y, batch_size=BATCH, verbose=0)
    assert math.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("schedule", [lambda: 0.1, lambda epoch, lr, extra: 0.1,
                                      lambda *, epoch: 0.1])
def test_learning_rate_scheduler_refuses_a_schedule_it_cannot_call(schedule):
    with pytest.raises(TypeError, match=r"schedule must take \(epoch, lr\) or \(epoch\).*"
                                        r"Received: schedule with signature \("):
        mf.callbacks.LearningRateScheduler(schedule)
