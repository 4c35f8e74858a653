"""Log values as Keras shows and keeps them: small values in scientific notation, and metrics
with one value per class as arrays in `History`, evaluate's dict and the progress line."""

import flax.linen as nn
import jax
import numpy as np
import pytest
from sklearn.metrics import f1_score

import mirrorfit as mf
from mirrorfit._src.callbacks.callback import format_value


@pytest.mark.parametrize("value, shown", [(0.12345, "0.1235"), (1e-5, "1.0000e-05"),
                                          (0.001, "1.0000e-03"), (0.0, "0.0000e+00"),
                                          (-2.5, "-2.5000")])
def test_progress_values_are_formatted_as_keras_progbar(value, shown):
    # keras.utils.Progbar: f"{v:.4f}" if abs(v) > 1e-3 else f"{v:.4e}"
    assert format_value(value) == shown


def test_per_class_metric_is_an_array_in_history_evaluate_and_progress_line(capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(45, 4)).astype(np.float32)
    labels = np.argmax(x[:, :3], axis=1)
    y = np.eye(3, dtype=np.float32)[labels]
    with mf.MirroredStrategy(jax.devices()[:3]).scope():
        model = mf.Sequential([nn.Dense(3), nn.softmax], input_shape=(4,))
        model.compile("adam", "categorical_crossentropy", [mf.metrics.F1Score(average=None)])
    tiny = mf.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: logs.update(tiny=1e-5))
    history = model.fit(x, y, batch_size=12, epochs=1, verbose=2, callbacks=[tiny])
    assert history.history["f1_score"][0].shape == (3,)
    assert "tiny: 1.0000e-05" in capsys.readouterr().out
    got = model.evaluate(x, y, batch_size=12, verbose=0, return_dict=True)["f1_score"]
    predicted = np.argmax(model.predict(x, verbose=0), axis=1)
    np.testing.assert_allclose(got, f1_score(labels, predicted, average=None, labels=[0, 1, 2],
                                             zero_division=0), rtol=1e-5, atol=1e-6)
