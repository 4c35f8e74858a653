"""``class_weight`` as Keras (label or one-hot argmax, times ``sample_weight``), and weighted
evaluation that is exact across replica counts."""

import numpy as np
import pytest

from mirrorfit._src.trainers.data_adapters.class_weight import (
    check_class_weight,
    class_weights_to_sample_weights,
)
from tests.trainers.data_adapters.helpers import BATCH, NUM_CLASSES, W, X, Y, make_model

CLASS_WEIGHT = {0: 0.5, 2: 3.0}  # class 1 is missing: weight 1


def _numpy_class_weights(labels):
    return np.array([CLASS_WEIGHT.get(int(c), 1.0) for c in labels], np.float32)


@pytest.mark.parametrize("encoding", ["sparse", "column", "one_hot", "float_sparse"])
def test_class_weights_follow_label_or_argmax_as_numpy(encoding):
    labels = np.array([0, 1, 2, 2, 0, 1, 5])
    y = {"sparse": labels, "column": labels[:, None], "float_sparse": labels + 0.1,
         "one_hot": np.eye(6)[labels]}[encoding]
    np.testing.assert_array_equal(class_weights_to_sample_weights(y, CLASS_WEIGHT),
                                  _numpy_class_weights(labels))


def test_class_weight_keys_and_type_are_checked():
    assert check_class_weight({np.int64(1): 2}) == {1: 2.0}
    with pytest.raises(TypeError, match="integer class indices.*'a'"):
        check_class_weight({"a": 1.0})
    with pytest.raises(TypeError, match="class_weight must be a dict"):
        check_class_weight([1.0, 2.0])


@pytest.mark.parametrize("with_sample_weight", [False, True])
def test_fit_class_weight_equals_fit_with_the_numpy_sample_weights(with_sample_weight,
                                                                    model_and_initial,
                                                                    allclose):
    model, initial = model_and_initial
    sample_weight = W if with_sample_weight else None
    expected_weights = _numpy_class_weights(Y) * (W if with_sample_weight else 1.0)
    model.set_weights(initial)
    expected = model.fit(X, Y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                         sample_weight=expected_weights)
    expected_params = model.get_weights()
    model.set_weights(initial)
    history = model.fit(X, Y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                        class_weight=CLASS_WEIGHT, sample_weight=sample_weight)
    allclose(model.get_weights(), expected_params, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(history.history["loss"], expected.history["loss"], rtol=1e-6)
    # ... and it changes training: the unweighted run differs.
    model.set_weights(initial)
    model.fit(X, Y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    assert not np.allclose(model.get_weights()[0], expected_params[0])


def test_class_weight_applies_to_training_rows_only_with_validation_split(model_and_initial):
    model, initial = model_and_initial
    model.set_weights(initial)
    history = model.fit(X, Y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                        class_weight=CLASS_WEIGHT, validation_split=0.4)
    val_loss = history.history["val_loss"][0]
    plain = model.evaluate(X[21:], Y[21:], batch_size=BATCH, verbose=0, return_dict=True)["loss"]
    np.testing.assert_allclose(val_loss, plain, rtol=1e-6)


@pytest.mark.parametrize("num_replicas", [1, 3, 8])
def test_weighted_evaluate_is_exact_across_replicas(num_replicas):
    model = make_model(num_replicas, metrics=())
    # As Keras 3: `metrics` ignore sample_weight, `weighted_metrics` use it.
    model.compile(model.compile_config["optimizer"], "sparse_categorical_crossentropy",
                  weighted_metrics=["accuracy"])
    logs = model.evaluate(X, Y, batch_size=BATCH, sample_weight=W, verbose=0,
                          return_dict=True)
    probabilities = model.predict(X, verbose=0).astype(np.float64)
    per_example = -np.log(probabilities[np.arange(len(Y)), Y])
    # Keras' weighted mean loss ("sum_over_batch_size" per batch, averaged over batches by
    # rows) and weighted accuracy, over all 35 rows.
    correct = (probabilities.argmax(-1) == Y).astype(np.float64)
    np.testing.assert_allclose(logs["accuracy"], (W * correct).sum() / W.sum(), rtol=1e-5)
    expected_loss = (W * per_example).sum() / len(Y)
    np.testing.assert_allclose(logs["loss"], expected_loss, rtol=1e-5)
    assert NUM_CLASSES == probabilities.shape[1]
