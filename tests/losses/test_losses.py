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
    from_probs = losses.SparseCategoricalCrossentropy().per_example(
        y_true, probs.astype(np.float32))
    from_logits = losses.SparseCategoricalCrossentropy(from_logits=True).per_example(y_true, logits)
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
    np.testing.assert_allclose(loss.per_example(one_hot, probs.astype(np.float32)), expected,
                               rtol=1e-5)
    np.testing.assert_allclose(loss_logits.per_example(one_hot, logits), expected, rtol=1e-5)


def test_categorical_crossentropy_renormalizes_unnormalized_probs():
    y_true = np.eye(3)[[0, 2]]
    probs = np.array([[2.0, 1.0, 1.0], [0.5, 0.5, 1.0]], np.float32)  # Rows sum to 4 and 2.
    expected = np_categorical_crossentropy(y_true, probs.astype(np.float64))  # log 2 each.
    np.testing.assert_allclose(
        losses.CategoricalCrossentropy().per_example(y_true, probs), expected, rtol=1e-6
    )


def test_sparse_categorical_crossentropy_of_probs_is_zero_for_labels_outside_classes():
    # Keras one-hots the labels: a label outside [0, num_classes) selects no class.
    probs = np.array([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5]], np.float32)
    loss = losses.SparseCategoricalCrossentropy().per_example(np.array([-1, 3, 2]), probs)
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
        return losses.SparseCategoricalCrossentropy().per_example(labels, p).sum()

    np.testing.assert_allclose(jax.grad(ours)(probs), jax.grad(keras)(probs), rtol=1e-6)


def test_crossentropies_clip_zero_and_one_probs_to_finite_keras_values():
    probs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32)
    labels = np.array([0, 2])
    expected = np_categorical_crossentropy(np.eye(3)[labels], probs.astype(np.float64))
    sparse = losses.SparseCategoricalCrossentropy().per_example(labels, probs)
    categorical = losses.CategoricalCrossentropy().per_example(np.eye(3)[labels], probs)
    # Keras' formula itself; float32 rounds 1 - EPS to 1 - 1.19e-7.
    np.testing.assert_allclose(sparse, expected, rtol=1e-5, atol=2e-7)
    np.testing.assert_allclose(categorical, expected, rtol=1e-5, atol=2e-7)
    np.testing.assert_allclose(sparse[1], -np.log(EPS), rtol=1e-5)  # ~16.1, not inf.

    y_true = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    binary_probs = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    binary = losses.BinaryCrossentropy().per_example(y_true, binary_probs)
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
    np.testing.assert_allclose(loss.per_example(y_true, probs.astype(np.float32)), expected,
                               rtol=1e-5)
    np.testing.assert_allclose(loss_logits.per_example(y_true, logits), expected, rtol=1e-5)


def test_binary_crossentropy_rank_1_targets_against_column_outputs_per_example():
    y_true = np.array([0.0, 1.0, 1.0], np.float32)
    probs = np.array([[0.2], [0.9], [0.4]], np.float32)
    expected = np_binary_crossentropy(y_true[:, None], probs.astype(np.float64))
    np.testing.assert_allclose(losses.BinaryCrossentropy().per_example(y_true, probs), expected,
                               rtol=1e-6)


@pytest.mark.parametrize(
    "true_shape,pred_shape", [((4,), (4, 1)), ((4, 1), (4,)), ((4,), (4,)), ((4, 3), (4, 3))]
)
def test_mse_and_mae_per_example_for_rank_mixes(true_shape, pred_shape):
    rng = np.random.default_rng(2)
    y_true = rng.normal(size=true_shape).astype(np.float32)
    y_pred = rng.normal(size=pred_shape).astype(np.float32)
    diff = y_pred.reshape(4, -1) - y_true.reshape(4, -1)
    np.testing.assert_allclose(
        losses.MeanSquaredError().per_example(y_true, y_pred), np.mean(diff**2, -1), rtol=1e-6
    )
    np.testing.assert_allclose(
        losses.MeanAbsoluteError().per_example(y_true, y_pred), np.mean(np.abs(diff), -1),
        rtol=1e-6
    )


def test_losses_average_all_non_batch_axes():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=(2, 3, 4))
    per_position = np_categorical_crossentropy(
        np.eye(5)[labels], np_softmax(logits.astype(np.float64))
    )
    loss = losses.SparseCategoricalCrossentropy(from_logits=True).per_example(labels, logits)
    np.testing.assert_allclose(loss, per_position.mean(axis=(1, 2)), rtol=1e-5)
    y_true = rng.normal(size=(2, 3, 4)).astype(np.float32)
    mse = losses.MeanSquaredError().per_example(y_true, logits[..., 0])
    np.testing.assert_allclose(mse, ((logits[..., 0] - y_true) ** 2).mean((1, 2)), rtol=1e-6)


def test_losses_trace_under_jit(classification):
    logits, labels = classification
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)
    np.testing.assert_allclose(jax.jit(loss.per_example)(labels, logits),
                               loss.per_example(labels, logits), rtol=1e-6)
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
    assert isinstance(loss, losses.PerExampleLoss) and type(loss.loss) is cls
    assert loss.name == cls().name
    assert not getattr(loss.loss, "from_logits", False)


def test_get_returns_callables_and_wraps_loss_objects_per_example():
    def my_loss(y_true, y_pred):
        return (y_true - y_pred)[:, 0]

    custom = losses.CategoricalCrossentropy(from_logits=True)
    assert losses.get(my_loss) is my_loss
    assert losses.get(custom).loss is custom
    assert losses.get(losses.BinaryCrossentropy).loss == losses.BinaryCrossentropy()
    y_true, logits = np.eye(3)[[0, 2]], np.array([[2.0, 0.0, 1.0], [0.0, 1.0, 3.0]], np.float32)
    np.testing.assert_allclose(losses.get(custom)(y_true, logits),
                               custom.per_example(y_true, logits), rtol=1e-6)
    flags = losses.get("categorical_crossentropy").not_probabilities(logits)
    np.testing.assert_array_equal(flags, [True, True])


def test_get_unknown_name_raises_value_error():
    with pytest.raises(ValueError, match=r"binary_crossentropy.*Received: loss='hingee'"):
        losses.get("hingee")


def test_get_wrong_type_raises_type_error():
    with pytest.raises(TypeError, match=r"Received: loss=3 of type int"):
        losses.get(3)


# -- the rest of Keras' loss set, against Keras' formulas in NumPy (float64) ---------------

def np_normalize(x):
    return x / np.sqrt(np.maximum((x**2).sum(-1, keepdims=True), EPS**2))


def np_hinge_labels(y):
    return 2 * y - 1 if np.all((y == 0) | (y == 1)) else y


def _np_focal_binary(y, p, balance, alpha=0.25, gamma=2.0):
    pc = np.clip(p, EPS, 1 - EPS)
    bce = -(y * np.log(pc) + (1 - y) * np.log(1 - pc))
    out = (1 - (y * p + (1 - y) * (1 - p))) ** gamma * bce
    if balance:
        out = (y * alpha + (1 - y) * (1 - alpha)) * out
    return out.mean(-1)


def _np_focal_categorical(y, p, alpha=0.25, gamma=2.0):
    q = np.clip(p / p.sum(-1, keepdims=True), EPS, 1 - EPS)
    return np.sum(alpha * (1 - q) ** gamma * -y * np.log(q), -1)


NP_FORMULAS = {  # (loss object, NumPy formula of its per-example values, data kind)
    "huber": (losses.Huber(delta=0.7), lambda t, p: np.mean(np.where(
        np.abs(p - t) <= 0.7, 0.5 * (p - t) ** 2, 0.7 * np.abs(p - t) - 0.5 * 0.7**2), -1), "real"),
    "log_cosh": (losses.LogCosh(), lambda t, p: np.mean(np.log(np.cosh(p - t)), -1), "real"),
    "mape": (losses.MeanAbsolutePercentageError(), lambda t, p: 100 * np.mean(
        np.abs((t - p) / np.maximum(np.abs(t), EPS)), -1), "real"),
    "msle": (losses.MeanSquaredLogarithmicError(), lambda t, p: np.mean(
        (np.log(np.maximum(p, EPS) + 1) - np.log(np.maximum(t, EPS) + 1)) ** 2, -1), "real"),
    "cosine": (losses.CosineSimilarity(), lambda t, p: -np.sum(
        np_normalize(t) * np_normalize(p), -1), "real"),
    "kld": (losses.KLDivergence(), lambda t, p: np.sum(
        np.clip(t, EPS, 1) * np.log(np.clip(t, EPS, 1) / np.clip(p, EPS, 1)), -1), "probs"),
    "poisson": (losses.Poisson(), lambda t, p: np.mean(p - t * np.log(p + EPS), -1), "probs"),
    "hinge": (losses.Hinge(), lambda t, p: np.mean(
        np.maximum(1 - np_hinge_labels(t) * p, 0), -1), "binary"),
    "squared_hinge": (losses.SquaredHinge(), lambda t, p: np.mean(
        np.maximum(1 - np_hinge_labels(t) * p, 0) ** 2, -1), "binary"),
    "categorical_hinge": (losses.CategoricalHinge(), lambda t, p: np.maximum(
        np.max((1 - t) * p, -1) - np.sum(t * p, -1) + 1, 0), "onehot"),
    "binary_focal": (losses.BinaryFocalCrossentropy(), lambda t, p: _np_focal_binary(
        t, p, False), "binary_probs"),
    "binary_focal_balanced": (losses.BinaryFocalCrossentropy(apply_class_balancing=True),
                              lambda t, p: _np_focal_binary(t, p, True), "binary_probs"),
    "categorical_focal": (losses.CategoricalFocalCrossentropy(), _np_focal_categorical,
                          "onehot_probs"),
}


def _loss_data(kind):
    rng = np.random.default_rng(7)
    real = rng.normal(size=(6, 4))
    probs = np_softmax(real * 2)
    onehot = np.eye(4)[rng.integers(0, 4, 6)]
    binary = rng.integers(0, 2, size=(6, 4)).astype(np.float64)
    return {"real": (rng.uniform(0.1, 3, size=(6, 4)), real + 1.0),
            "probs": (np_softmax(rng.normal(size=(6, 4))), probs),
            "binary": (binary, real), "onehot": (onehot, real),
            "binary_probs": (binary, 1 / (1 + np.exp(-real))),
            "onehot_probs": (onehot, probs)}[kind]


@pytest.mark.parametrize("key", sorted(NP_FORMULAS))
def test_new_losses_match_keras_formula_per_example(key):
    loss, formula, kind = NP_FORMULAS[key]
    y_true, y_pred = _loss_data(kind)
    expected = formula(y_true, y_pred)
    got = loss.per_example(y_true.astype(np.float32), y_pred.astype(np.float32))
    assert got.shape == (6,)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6)


def test_hinge_keeps_minus_one_one_labels_and_focal_from_logits_matches_probs():
    y_true = np.array([[-1.0, 1.0], [1.0, 1.0]], np.float32)
    y_pred = np.array([[0.3, -0.2], [2.0, 0.5]], np.float32)
    np.testing.assert_allclose(losses.hinge(y_true, y_pred),
                               np.mean(np.maximum(1 - y_true * y_pred, 0), -1), rtol=1e-6)
    logits = np.array([[0.3, -2.0], [1.5, 0.1]], np.float32)
    labels = np.array([[0.0, 1.0], [1.0, 1.0]], np.float32)
    from_logits = losses.BinaryFocalCrossentropy(from_logits=True, label_smoothing=0.1)
    from_probs = losses.BinaryFocalCrossentropy(label_smoothing=0.1)
    np.testing.assert_allclose(from_logits.per_example(labels, logits),
                               from_probs.per_example(labels, jax.nn.sigmoid(logits)), rtol=1e-5)


def test_crossentropy_axis_selects_the_class_axis():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(3, 5, 2)).astype(np.float32)
    labels = np.eye(5)[rng.integers(0, 5, size=(3, 2))].transpose(0, 2, 1)  # classes on axis 1
    expected = np_categorical_crossentropy(labels.transpose(0, 2, 1),
                                           np_softmax(logits.transpose(0, 2, 1).astype(float)))
    got = losses.CategoricalCrossentropy(from_logits=True, axis=1).call(labels, logits)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    sparse = losses.SparseCategoricalCrossentropy(from_logits=True, axis=1).call(
        labels.argmax(1), logits)
    np.testing.assert_allclose(sparse, expected, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "mean", None, "none",
                                       "mean_with_sample_weight"])
@pytest.mark.parametrize("weighted", [False, True])
def test_reduction_matches_keras_reduce_weighted_values(reduction, weighted):
    rng = np.random.default_rng(5)
    y_true, y_pred = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    weight = rng.uniform(0, 2, size=5) if weighted else None
    values = np.mean((y_true - y_pred) ** 2, -1) * (1 if weight is None else weight)
    if reduction in (None, "none"):
        expected = values
    elif reduction == "sum":
        expected = values.sum()
    elif reduction == "mean_with_sample_weight" and weighted:
        expected = values.sum() / weight.sum()
    else:
        expected = values.mean()
    loss = losses.MeanSquaredError(reduction=reduction)
    got = loss(y_true.astype(np.float32), y_pred.astype(np.float32), sample_weight=weight)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_reduction_over_extra_axes_sums_every_element_as_keras():
    y_true, y_pred = np.zeros((2, 3, 4), np.float32), np.ones((2, 3, 4), np.float32)
    assert float(losses.MeanAbsoluteError(reduction="sum")(y_true, y_pred)) == 6.0
    assert float(losses.MeanAbsoluteError()(y_true, y_pred)) == 1.0


def test_bad_reduction_raises_value_error_naming_it():
    with pytest.raises(ValueError, match=r"reduction must be one of.*Received: reduction='avg'"):
        losses.Huber(reduction="avg")


@pytest.mark.parametrize("cls", [
    losses.BinaryCrossentropy, losses.BinaryFocalCrossentropy, losses.CategoricalCrossentropy,
    losses.CategoricalFocalCrossentropy, losses.SparseCategoricalCrossentropy,
    losses.MeanSquaredError, losses.MeanAbsoluteError, losses.MeanAbsolutePercentageError,
    losses.MeanSquaredLogarithmicError, losses.CosineSimilarity, losses.Huber, losses.LogCosh,
    losses.Hinge, losses.SquaredHinge, losses.CategoricalHinge, losses.KLDivergence,
    losses.Poisson])
def test_get_config_round_trips_and_serializes(cls):
    loss = cls(reduction="sum", name="custom_name")
    config = loss.get_config()
    assert config["reduction"] == "sum" and config["name"] == "custom_name"
    rebuilt = cls.from_config(config)
    assert rebuilt == loss and rebuilt.get_config() == config
    assert losses.deserialize(losses.serialize(loss)) == loss
    assert losses.get(losses.serialize(loss)).loss == loss


def test_crossentropy_alias_serializes():
    loss = losses.InferredCrossentropy(reduction="sum")
    assert losses.deserialize(losses.serialize(loss)) == loss


def test_config_holds_keras_arguments():
    config = losses.BinaryFocalCrossentropy(alpha=0.5, gamma=1.0, from_logits=True).get_config()
    assert config == {"name": "binary_focal_crossentropy", "reduction": "sum_over_batch_size",
                      "apply_class_balancing": False, "alpha": 0.5, "gamma": 1.0,
                      "from_logits": True, "label_smoothing": 0.0, "axis": -1}
    assert losses.Huber(delta=2.0).delta == 2.0 and losses.Huber().name == "huber_loss"


@pytest.mark.parametrize("name,cls", [
    ("huber", losses.Huber), ("Huber", losses.Huber), ("log_cosh", losses.LogCosh),
    ("logcosh", losses.LogCosh), ("kld", losses.KLDivergence),
    ("kl_divergence", losses.KLDivergence), ("KLDivergence", losses.KLDivergence),
    ("mape", losses.MeanAbsolutePercentageError), ("msle", losses.MeanSquaredLogarithmicError),
    ("poisson", losses.Poisson), ("cosine_similarity", losses.CosineSimilarity),
    ("hinge", losses.Hinge), ("squared_hinge", losses.SquaredHinge),
    ("categorical_hinge", losses.CategoricalHinge), ("bce", losses.BinaryCrossentropy),
    ("binary_focal_crossentropy", losses.BinaryFocalCrossentropy),
    ("categorical_focal_crossentropy", losses.CategoricalFocalCrossentropy)])
def test_get_resolves_keras_aliases(name, cls):
    assert type(losses.get(name).loss) is cls


def test_function_forms_equal_loss_call():
    rng = np.random.default_rng(6)
    y_true, y_pred = rng.uniform(0.1, 1, size=(4, 3)), rng.uniform(0.1, 1, size=(4, 3))
    for fn, cls in [(losses.huber, losses.Huber), (losses.log_cosh, losses.LogCosh),
                    (losses.poisson, losses.Poisson), (losses.kl_divergence, losses.KLDivergence),
                    (losses.binary_focal_crossentropy, losses.BinaryFocalCrossentropy)]:
        np.testing.assert_allclose(fn(y_true, y_pred), cls().call(y_true, y_pred), rtol=1e-6)


@pytest.mark.parametrize("alias", ["crossentropy", "ce", "CE"])
def test_crossentropy_alias_picks_binary_sparse_or_categorical_from_shapes(alias):
    loss = losses.get(alias)
    probs = np_softmax(np.random.default_rng(8).normal(size=(4, 3)))
    labels = np.array([0, 2, 1, 1])
    expected = np_categorical_crossentropy(np.eye(3)[labels], probs)
    np.testing.assert_allclose(loss(labels, probs.astype(np.float32)), expected, rtol=1e-5)
    np.testing.assert_allclose(loss(labels[:, None], probs.astype(np.float32)), expected,
                               rtol=1e-5)
    np.testing.assert_allclose(loss(np.eye(3)[labels], probs.astype(np.float32)), expected,
                               rtol=1e-5)
    binary = np.array([[0.2], [0.9], [0.6], [0.1]], np.float32)
    np.testing.assert_allclose(loss(labels > 0, binary),
                               np_binary_crossentropy((labels > 0)[:, None], binary), rtol=1e-5)
    np.testing.assert_array_equal(loss.not_probabilities(np.array([[1.5], [0.5]])), [True, False])


def test_tf_keras_2_reduction_names_select_the_reduction():
    y_true, y_pred = np.zeros((4, 2), np.float32), np.arange(8, dtype=np.float32).reshape(4, 2)
    per_example = np.mean(y_pred**2, axis=-1)
    R = losses.Reduction
    for reduction, expected in [(R.NONE, per_example), (R.SUM, per_example.sum()),
                                (R.SUM_OVER_BATCH_SIZE, per_example.mean()),
                                (R.AUTO, per_example.mean())]:
        loss = losses.MeanSquaredError(reduction=reduction)
        np.testing.assert_allclose(loss(y_true, y_pred), expected, rtol=1e-6)
    assert set(R.all()) == {"auto", "none", "sum", "sum_over_batch_size"}
    with pytest.raises(ValueError, match="reduction"):
        R.validate("mean_of_everything")
