"""Sources of unknown length, running dry, validation sources and ``steps`` arguments."""

import itertools

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.utils.checks import MirrorfitWarning
from tests.trainers.data_adapters.helpers import BATCH, RecordSteps, X, Y, batches

RAN_OUT = "Your input ran out of data; interrupting training"


class Reiterable:
    """A re-iterable without ``len()``: the length is known only after a pass."""

    def __iter__(self):
        return batches()


def test_unknown_length_epoch_ends_when_exhausted_and_bar_learns_the_total(
        model_and_initial, allclose):
    model, initial = model_and_initial
    model.set_weights(initial)
    model.fit(X, Y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0)
    expected = model.get_weights()
    model.set_weights(initial)
    steps = RecordSteps()
    history = model.fit(Reiterable(), epochs=3, verbose=0, callbacks=[steps])
    assert steps.totals == [None, 4, 4]  # counted without a total, then the learned count
    assert history.epoch == [0, 1, 2]
    allclose(model.get_weights(), expected, rtol=1e-6, atol=1e-7)


def test_exhausted_generator_in_epoch_two_warns_and_stops_with_complete_history(
        model_and_initial, allclose):
    model, initial = model_and_initial
    model.set_weights(initial)
    model.fit(X, Y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    expected = model.get_weights()
    model.set_weights(initial)
    with pytest.warns(MirrorfitWarning, match=RAN_OUT):
        history = model.fit(batches(), epochs=3, verbose=0)
    assert history.epoch == [0]  # the one epoch that ran, fully recorded
    assert all(len(values) == 1 for values in history.history.values())
    allclose(model.get_weights(), expected, rtol=1e-6, atol=1e-7)


def test_generator_that_runs_dry_mid_epoch_with_steps_per_epoch_warns_and_stops(
        model_and_initial):
    model, initial = model_and_initial
    model.set_weights(initial)
    steps, start = RecordSteps(), int(model.strategy.fetch(model.state.step))
    with pytest.warns(MirrorfitWarning, match=RAN_OUT):  # 4 batches, 3 per epoch
        history = model.fit(batches(), steps_per_epoch=3, epochs=4, verbose=0,
                            callbacks=[steps])
    assert history.epoch == [0, 1] and steps.totals == [3, 3]
    assert model.strategy.fetch(model.state.step) == start + 4  # every batch trained once


def test_infinite_source_with_steps_per_epoch_trains_that_many_steps(model_and_initial,
                                                                     allclose):
    model, initial = model_and_initial
    model.set_weights(initial)
    model.fit(X, Y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    expected = model.get_weights()
    model.set_weights(initial)
    endless = itertools.cycle(list(batches()))
    history = model.fit(endless, steps_per_epoch=4, epochs=2, verbose=0)
    assert history.epoch == [0, 1]
    allclose(model.get_weights(), expected, rtol=1e-6, atol=1e-7)


def test_iterable_validation_data_with_validation_steps_equals_array_slice(model_and_initial):
    model, initial = model_and_initial
    model.set_weights(initial)
    history = model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
                        validation_data=batches(), validation_steps=2)
    model.set_weights(initial)
    expected = model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
                         validation_data=(X[:20], Y[:20]))
    for key in ("val_loss", "val_accuracy"):
        np.testing.assert_allclose(history.history[key], expected.history[key], rtol=1e-6)


def test_list_of_batches_as_validation_data_is_not_read_as_x_y(model_and_initial):
    model, initial = model_and_initial
    model.set_weights(initial)
    two_batches = list(batches())[:2]
    history = model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
                        validation_data=two_batches)
    model.set_weights(initial)
    expected = model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
                         validation_data=(X[:20], Y[:20]))
    np.testing.assert_allclose(history.history["val_loss"], expected.history["val_loss"],
                               rtol=1e-6)


def test_validation_batch_size_batches_array_validation_data(model_and_initial):
    model, initial = model_and_initial
    model.set_weights(initial)
    seen = []

    class CountTestBatches(mf.callbacks.Callback):
        def on_test_batch_end(self, batch, logs=None):
            seen.append(batch)

    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, validation_data=(X, Y),
              validation_batch_size=7, callbacks=[CountTestBatches()])
    assert seen == list(range(5))  # 35 rows in validation batches of 7


def test_evaluate_and_predict_steps_bound_the_batches(model_and_initial):
    model, _ = model_and_initial
    partial = model.evaluate(X, Y, batch_size=BATCH, steps=2, verbose=0, return_dict=True)
    expected = model.evaluate(X[:20], Y[:20], batch_size=BATCH, verbose=0, return_dict=True)
    assert partial == pytest.approx(expected, rel=1e-6)
    predicted = model.predict(itertools.cycle([X[:BATCH]]), steps=3, verbose=0)
    np.testing.assert_allclose(predicted, np.tile(model.predict(X[:BATCH], verbose=0), (3, 1)),
                               rtol=1e-6)
