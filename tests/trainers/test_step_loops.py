"""Variable-length inputs: one compile per distinct input shape, and the warning past a few
(`PerShapeStep` in mirrorfit/_src/trainers/step_loops.py)."""

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from mirrorfit._src.trainers import step_loops
from tests.helpers import count_step_compiles, mirrored_strategy

RNG = np.random.default_rng(7)


def _batches(lengths, rows=4):
    for length in lengths:
        x = RNG.integers(0, 9, size=(rows, length)).astype(np.int32)
        yield x, (x[:, 0] > 4).astype(np.float32)


def _model(functional=True):
    """Token ids -> a probability: a functional model on ``Input(shape=(None,))``, or the
    same layers as a Sequential without an Input (built from its first batch)."""
    with mirrored_strategy(2).scope():
        tail = [layers.Embedding(9, 4, mask_zero=True), layers.GlobalAveragePooling1D(),
                layers.Dense(1, activation="sigmoid")]
        if functional:
            inputs = x = layers.Input(shape=(None,), dtype="int32")
            for layer in tail:
                x = layer(x)
            model = mf.Model(inputs, x)
        else:
            model = mf.Sequential(tail)
    model.compile("sgd", "binary_crossentropy")
    return model


def test_fit_on_two_lengths_compiles_the_train_step_once_per_length():
    model = _model()
    with count_step_compiles() as compiles:
        history = model.fit(_batches([6, 9, 6, 9]), steps_per_epoch=4, verbose=0)
    assert compiles == [2]
    assert model._trainer.train_fn.shapes == [((4, 6),), ((4, 9),)]
    assert model._trainer.train_fn.compile_count() == 2
    assert np.isfinite(history.history["loss"][0])
    x = RNG.integers(0, 9, size=(6, 5)).astype(np.int32)
    assert model.predict(x, verbose=0).shape == (6, 1)  # a third length, in predict
    with count_step_compiles() as compiles:  # arrays of one shape: one compile for the fit
        model.fit(x, np.ones(6), batch_size=2, epochs=2, verbose=0)
    assert compiles == [1]


def test_fit_warns_once_past_a_few_shapes_naming_pad_sequences(monkeypatch):
    monkeypatch.setattr(step_loops, "MANY_SHAPES", 1)  # warn from the second shape on
    model = _model(functional=False)  # unbuilt: it takes other lengths than its first's
    with pytest.warns(mf.MirrorfitWarning, match=r"train step has compiled for 2 distinct "
                                                 r"input shapes.*pad_sequences") as record:
        model.fit(_batches([3, 4, 3, 5]), steps_per_epoch=4, verbose=0)
    assert len([w for w in record if "distinct input shapes" in str(w.message)]) == 1
    assert step_loops.MANY_SHAPES == 1 and len(model._trainer.train_fn.shapes) == 3
