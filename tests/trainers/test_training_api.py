"""fit's checks at its start: a one-shot validation generator it would read more than once;
and ``model.history`` keeping the epochs completed before an error."""

import numpy as np
import pytest

import mirrorfit as mf
from tests.trainers.data_adapters.helpers import BATCH, X, Y, batches


def _one_shot():
    return batches(X[:20], Y[:20])


@pytest.mark.parametrize("epochs, validation_freq", [(2, 1), (4, 2)])
def test_a_one_shot_validation_generator_read_twice_is_refused_at_fit_start(
        model_and_initial, epochs, validation_freq):
    # Before: epoch 1 trained and validated, then the second validation raised "The input
    # yielded no batch: a generator or iterator can be used only once ...", epochs in.
    model, initial = model_and_initial
    model.set_weights(initial)
    with pytest.raises(ValueError, match=r"^validation_data is a one-shot generator .*"
                                         rf"validates 2 times \(epochs={epochs}, "
                                         rf"initial_epoch=0, validation_freq={validation_freq}"
                                         r"\).*validation_steps"):
        model.fit(X, Y, batch_size=BATCH, epochs=epochs, verbose=0,
                  validation_data=_one_shot(), validation_freq=validation_freq)
    for before, after in zip(initial, model.get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)  # refused before any step


@pytest.mark.parametrize("kwargs", [
    {"epochs": 1},  # validated once: the generator is read once
    {"epochs": 3, "validation_freq": 2},  # validates after epoch 2 only
    {"epochs": 2, "validation_steps": 1},  # Keras: each validation reads on
])
def test_a_one_shot_validation_generator_read_once_or_with_steps_is_accepted(
        model_and_initial, kwargs):
    model, initial = model_and_initial
    model.set_weights(initial)
    history = model.fit(X, Y, batch_size=BATCH, verbose=0, validation_data=_one_shot(),
                        **kwargs)
    assert "val_loss" in history.history


def test_history_keeps_the_epochs_completed_before_an_error(model_and_initial):
    model, initial = model_and_initial
    model.set_weights(initial)

    class FailAtEpoch2(mf.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 2:
                raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        model.fit(X, Y, batch_size=BATCH, epochs=4, verbose=0, callbacks=[FailAtEpoch2()])
    assert model.history.epoch == [0, 1]
    assert len(model.history.history["loss"]) == 2
