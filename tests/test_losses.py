"""Tests for mirrorfit.losses against NumPy implementations of the Keras 3 formulas."""

import jax
import numpy as np
import pytest

from mirrorfit import losses

EPS = 1e-7  # Keras backend epsilon.


def np_softmax(logits):
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def np_categorical_crossentropy(y_true, probs):
    """Keras 3 categorical_crossentropy(from_logits=False) in NumPy (float64)."""
    probs = probs / probs.sum(-1, keepdims=True)
    probs = np.clip(probs, EPS, 1 - EPS)
    return -np.sum(y_true * np.log(probs), axis=-1)


def np_binary_crossentropy(y_true, probs):
    """Keras 3 binary_crossentropy(from_logits=False) in NumPy, mean over the last axis."""
    probs = np.clip(probs, EPS, 1 - EPS)
    return -np.mean(y_true * np.log(probs) + (1 - y_true) * np.log(1 - probs), axis=-1)


@pytest.fixture
def classification():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 5)).astype(np.float32) * 3
    labels = rng.integers(0, 5, size=(6,))
    return logits, labels


@pytest.mark.parametrize("label_shape", [(6,), (6, 1)])
@pytest.mark.parametrize("label_dtype", [np.int32, np.float32])
def test_sparse_categorical_crossentropy_matches_keras_probs_and_logits(
    classification, label_shape, label_dtype
):
    logits, labels = classification
    probs = np_softmax(logits.astype(np.float64))
    expected = np_categorical_crossentropy(np.eye(5)[labels], probs)
    y_true = labels.reshape(label_shape).astype(label_dtype)
    from_probs = losses.SparseCategoricalCrossentropy()(y_true, probs.astype(np.float32))
    from_logits = losses.SparseCategoricalCrossentropy(from_logits=True)(y_true, logits)
    assert from_probs.shape == (6,) and from_probs.dtype == np.float32
    np.testing.assert_allclose(from_probs, expected, rtol=1e-5)
    np.testing.assert_allclose(from_logits, expected, rtol=1e-5)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_categorical_crossentropy_matches_keras_probs_and_logits(
    classification, label_smoothing
):
    logits, labels = classification
    probs = np_softmax(logits.astype(np.float64))
    one_hot = np.eye(5)[labels]
    smoothed = one_hot * (1 - label_smoothing) + label_smoothing / 5
    expected = np_categorical_crossentropy(smoothed, probs)
    loss = losses.CategoricalCrossentropy(label_smoothing=label_smoothing)
    loss_logits = losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=label_smoothing
    )
    np.testing.assert_allclose(loss(one_hot, probs.astype(np.float32)), expected, rtol=1e-5)
    np.testing.assert_allclose(loss_logits(one_hot, logits), expected, rtol=1e-5)


def test_categorical_crossentropy_renormalizes_unnormalized_probs():
    y_true = np.eye(3)[[0, 2]]
    probs = np.array([[2.0, 1.0, 1.0], [0.5, 0.5, 1.0]], np.float32)  # Rows sum to 4 and 2.
    expected = np_categorical_crossentropy(y_true, probs.astype(np.float64))  # log 2 each.
    np.testing.assert_allclose(
        losses.CategoricalCrossentropy()(y_true, probs), expected, rtol=1e-6
    )


def test_sparse_categorical_crossentropy_of_probs_is_zero_for_labels_outside_classes():
    # Keras one-hots the labels: a label outside [0, num_classes) selects no class.
    probs = np.array([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5]], np.float32)
    loss = losses.SparseCategoricalCrossentropy()(np.array([-1, 3, 2]), probs)
    np.testing.assert_allclose(loss, [0.0, 0.0, -np.log(0.5)], rtol=1e-6)


def test_crossentropy_gradients_match_keras_formula():
    # The gradient (what fit applies) of Keras' formula, including renormalization and clip.
    rng = np.random.default_rng(1)
    probs = rng.uniform(0.01, 1.0, size=(4, 3)).astype(np.float32)
    probs[0] = [1.0, 0.0, 0.0]  # clipped entries get no gradient through the clip
    labels = np.array([0, 1, 2, 1])

    def keras(p):
        q = jax.numpy.clip(p / p.sum(-1, keepdims=True), EPS, 1 - EPS)
        return -jax.numpy.sum(jax.nn.one_hot(labels, 3) * jax.numpy.log(q))

    def ours(p):
        return losses.SparseCategoricalCrossentropy()(labels, p).sum()

    np.testing.assert_allclose(jax.grad(ours)(probs), jax.grad(keras)(probs), rtol=1e-6)


def test_crossentropies_clip_zero_and_one_probs_to_finite_keras_values():
    probs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32)
    labels = np.array([0, 2])
    expected = np_categorical_crossentropy(np.eye(3)[labels], probs.astype(np.float64))
    sparse = losses.SparseCategoricalCrossentropy()(labels, probs)
    categorical = losses.CategoricalCrossentropy()(np.eye(3)[labels], probs)
    # Keras' formula itself; float32 rounds 1 - EPS to 1 - 1.19e-7.
    np.testing.assert_allclose(sparse, expected, rtol=1e-5, atol=2e-7)
    np.testing.assert_allclose(categorical, expected, rtol=1e-5, atol=2e-7)
    np.testing.assert_allclose(sparse[1], -np.log(EPS), rtol=1e-5)  # ~16.1, not inf.

    y_true = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    binary_probs = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    binary = losses.BinaryCrossentropy()(y_true, binary_probs)
    assert np.all(np.isfinite(binary))
    # Keras clips in float32, where 1 - EPS rounds to 1 - 1.19e-7; then log in float64.
    clipped32 = np.clip(binary_probs, np.float32(EPS), np.float32(1 - EPS))
    expected_binary = np_binary_crossentropy(y_true, clipped32.astype(np.float64))
    np.testing.assert_allclose(binary, expected_binary, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_binary_crossentropy_matches_keras_probs_and_logits(label_smoothing):
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(7, 3)).astype(np.float32) * 2
    y_true = rng.integers(0, 2, size=(7, 3)).astype(np.float32)
    probs = 1 / (1 + np.exp(-logits.astype(np.float64)))
    smoothed = y_true * (1 - label_smoothing) + 0.5 * label_smoothing
    expected = np_binary_crossentropy(smoothed, probs)
    loss = losses.BinaryCrossentropy(label_smoothing=label_smoothing)
    loss_logits = losses.BinaryCrossentropy(from_logits=True, label_smoothing=label_smoothing)
    np.testing.assert_allclose(loss(y_true, probs.astype(np.float32)), expected, rtol=1e-5)
    np.testing.assert_allclose(loss_logits(y_true, logits), expected, rtol=1e-5)


def test_binary_crossentropy_rank_1_targets_against_column_outputs_per_example():
    y_true = np.array([0.0, 1.0, 1.0], np.float32)
    probs = np.array([[0.2], [0.9], [0.4]], np.float32)
    expected = np_binary_crossentropy(y_true[:, None], probs.astype(np.float64))
    np.testing.assert_allclose(losses.BinaryCrossentropy()(y_true, probs), expected, rtol=1e-6)


@pytest.mark.parametrize(
    "true_shape,pred_shape", [((4,), (4, 1)), ((4, 1), (4,)), ((4,), (4,)), ((4, 3), (4, 3))]
)
def test_mse_and_mae_per_example_for_rank_mixes(true_shape, pred_shape):
    rng = np.random.default_rng(2)
    y_true = rng.normal(size=true_shape).astype(np.float32)
    y_pred = rng.normal(size=pred_shape).astype(np.float32)
    diff = y_pred.reshape(4, -1) - y_true.reshape(4, -1)
    np.testing.assert_allclose(
        losses.MeanSquaredError()(y_true, y_pred), np.mean(diff**2, -1), rtol=1e-6
    )
    np.testing.assert_allclose(
        losses.MeanAbsoluteError()(y_true, y_pred), np.mean(np.abs(diff), -1), rtol=1e-6
    )


def test_losses_average_all_non_batch_axes():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=(2, 3, 4))
    per_position = np_categorical_crossentropy(
        np.eye(5)[labels], np_softmax(logits.astype(np.float64))
    )
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
    np.testing.assert_allclose(loss, per_position.mean(axis=(1, 2)), rtol=1e-5)
    y_true = rng.normal(size=(2, 3, 4)).astype(np.float32)
    mse = losses.MeanSquaredError()(y_true, logits[..., 0])
    np.testing.assert_allclose(mse, ((logits[..., 0] - y_true) ** 2).mean((1, 2)), rtol=1e-6)


def test_losses_trace_under_jit(classification):
    logits, labels = classification
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)
    np.testing.assert_allclose(jax.jit(loss)(labels, logits), loss(labels, logits), rtol=1e-6)
    flags = jax.jit(losses.SparseCategoricalCrossentropy().not_probabilities)(logits)
    assert flags.shape == (6,) and flags.dtype == bool


def test_not_probabilities_flags_categorical_rows():
    y_pred = np.array(
        [
            [0.2, 0.3, 0.5],  # Distribution.
            [0.2, 0.3, 0.5005],  # Sum off by 5e-4: within tolerance.
            [0.5, 0.5, 0.5],  # Sums to 1.5.
            [1.5, -0.5, 0.0],  # Sums to 1 but out of range.
            [2.0, -1.0, 0.4],  # Logits.
        ],
        np.float32,
    )
    expected = [False, False, True, True, True]
    for loss in (losses.SparseCategoricalCrossentropy(), losses.CategoricalCrossentropy()):
        assert loss.expects_probabilities
        np.testing.assert_array_equal(loss.not_probabilities(y_pred), expected)


def test_not_probabilities_flags_binary_values_only_by_range():
    y_pred = np.array([[0.1, 0.9], [0.9, 0.9], [1.0005, 0.0], [1.2, 0.5], [0.3, -0.2]], np.float32)
    flags = losses.BinaryCrossentropy().not_probabilities(y_pred)
    np.testing.assert_array_equal(flags, [False, False, False, True, True])


def test_not_probabilities_none_when_not_expecting_probabilities():
    logits = np.array([[3.0, -2.0]], np.float32)
    for loss in (
        losses.SparseCategoricalCrossentropy(from_logits=True),
        losses.CategoricalCrossentropy(from_logits=True),
        losses.BinaryCrossentropy(from_logits=True),
        losses.MeanSquaredError(),
        losses.MeanAbsoluteError(),
    ):
        assert not loss.expects_probabilities
        assert loss.not_probabilities(logits) is None


def test_not_probabilities_warning_formats_with_name():
    text = losses.NOT_PROBABILITIES_WARNING.format(name="sparse_categorical_crossentropy")
    assert "sparse_categorical_crossentropy" in text and "from_logits=True" in text


@pytest.mark.parametrize(
    "name,cls",
    [
        ("sparse_categorical_crossentropy", losses.SparseCategoricalCrossentropy),
        ("Categorical_Crossentropy", losses.CategoricalCrossentropy),
        ("binary_crossentropy", losses.BinaryCrossentropy),
        ("MSE", losses.MeanSquaredError),
        ("mean_squared_error", losses.MeanSquaredError),
        ("mae", losses.MeanAbsoluteError),
        ("mean_absolute_error", losses.MeanAbsoluteError),
    ],
)
def test_get_resolves_names_case_insensitively(name, cls):
    loss = losses.get(name)
    assert type(loss) is cls and loss.name == cls.name
    assert not getattr(loss, "from_logits", False)


def test_get_returns_callables_and_instantiates_loss_classes():
    def my_loss(y_true, y_pred):
        return (y_true - y_pred)[:, 0]

    custom = losses.CategoricalCrossentropy(from_logits=True)
    assert losses.get(my_loss) is my_loss
    assert losses.get(custom) is custom
    assert losses.get(losses.BinaryCrossentropy) == losses.BinaryCrossentropy()


def test_get_unknown_name_raises_value_error():
    with pytest.raises(ValueError, match=r"binary_crossentropy.*Received: loss='hinge'"):
        losses.get("hinge")


def test_get_wrong_type_raises_type_error():
    with pytest.raises(TypeError, match=r"Received: loss=3 of type int"):
        losses.get(3)
