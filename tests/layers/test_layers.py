"""mirrorfit.layers against NumPy written from Keras' formulas: core, convolution, pooling,
normalization, shapes, regularizers and dtypes."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mirrorfit import layers

RNG = np.random.default_rng(0)


def init_random(layer, *args, **kwargs):
    """Variables of ``layer`` with every leaf replaced by N(0, 1) draws (float32)."""
    shapes = jax.eval_shape(functools.partial(layer.init, **kwargs),
                            {"params": jax.random.key(0), "dropout": jax.random.key(1)}, *args)
    return jax.tree.map(lambda v: RNG.normal(size=v.shape).astype(np.float32), shapes)


def run(layer, variables, *args, **kwargs):
    """``layer.apply`` compiled once (faster than op-by-op on the shared CPU)."""
    return jax.jit(functools.partial(layer.apply, **kwargs))(variables, *args)


def out_shape(layer, x):
    return jax.eval_shape(lambda a: layer.init_with_output(
        {"params": jax.random.key(0), "dropout": jax.random.key(1)}, a)[0], x).shape


def conv2d_reference(x, w, b, stride, padding):
    """Keras Conv2D in NumPy; 'same' pads as TensorFlow (extra pad at the end)."""
    n, h, wd, _ = x.shape
    k = w.shape[0]
    if padding == "same":
        out = math.ceil(h / stride), math.ceil(wd / stride)
        pads = [max((o - 1) * stride + k - d, 0) for o, d in zip(out, (h, wd))]
        x = np.pad(x, ((0, 0), (pads[0] // 2, pads[0] - pads[0] // 2),
                       (pads[1] // 2, pads[1] - pads[1] // 2), (0, 0)))
    oh = (x.shape[1] - k) // stride + 1
    ow = (x.shape[2] - k) // stride + 1
    y = np.zeros((n, oh, ow, w.shape[-1]))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + k, j * stride:j * stride + k, :]
            y[:, i, j] = np.einsum("nhwc,hwcf->nf", patch, w)
    return y + b


def test_dense_matches_keras_formula_with_activation():
    layer = layers.Dense(3, activation="relu")
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    v = init_random(layer, x)
    p = v["params"]
    expected = np.maximum(x @ p["kernel"] + p["bias"], 0)
    np.testing.assert_allclose(run(layer, v, x), expected, rtol=1e-5, atol=1e-6)


def test_dense_defaults_glorot_uniform_kernel_and_zero_bias():
    layer = layers.Dense(50)
    v = layer.init(jax.random.key(0), np.zeros((1, 30), np.float32))["params"]
    limit = math.sqrt(6 / (30 + 50))  # keras.initializers.GlorotUniform
    kernel = np.asarray(v["kernel"])
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.9 * limit
    assert abs(kernel.std() - limit / math.sqrt(3)) < 0.1 * limit  # uniform, not normal
    np.testing.assert_array_equal(v["bias"], 0)


def test_activation_accepts_keras_names_and_callables():
    x = np.linspace(-3, 3, 7, dtype=np.float32)[None]
    gelu = layers.Activation("gelu").apply({}, x)
    exact = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))  # Keras: exact gelu
    np.testing.assert_allclose(gelu, exact, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layers.Activation(jnp.abs).apply({}, x), np.abs(x))
    with pytest.raises(ValueError, match="activation"):
        layers.Activation("nope").apply({}, x)


@pytest.mark.parametrize("padding,stride", [("valid", 1), ("valid", 2), ("same", 2),
                                            ("same", 3)])
def test_conv2d_matches_numpy_with_padding_and_strides(padding, stride):
    layer = layers.Conv2D(3, 3, strides=stride, padding=padding)
    x = RNG.normal(size=(2, 7, 8, 2)).astype(np.float32)
    v = init_random(layer, x)
    expected = conv2d_reference(x, v["params"]["kernel"], v["params"]["bias"], stride, padding)
    np.testing.assert_allclose(run(layer, v, x), expected, rtol=1e-4, atol=1e-4)


def test_grouped_conv2d_convolves_each_channel_group_separately():
    layer = layers.Conv2D(4, 3, groups=2)
    x = RNG.normal(size=(1, 5, 5, 4)).astype(np.float32)
    v = init_random(layer, x)
    w, b = v["params"]["kernel"], v["params"]["bias"]  # w: [3, 3, 4 / groups, filters]
    expected = np.concatenate([conv2d_reference(x[..., 2 * g:2 * g + 2],
                                                w[..., 2 * g:2 * g + 2], 0, 1, "valid")
                               for g in range(2)], axis=-1) + b
    np.testing.assert_allclose(run(layer, v, x), expected, rtol=1e-4, atol=1e-4)


def test_conv2d_default_padding_is_valid():
    assert out_shape(layers.Conv2D(4, 3), np.zeros((1, 8, 8, 1))) == (1, 6, 6, 4)


def test_conv2d_transpose_matches_scatter_formula():
    layer = layers.Conv2DTranspose(2, 3, strides=2, padding="valid")
    x = RNG.normal(size=(1, 3, 3, 2)).astype(np.float32)
    v = init_random(layer, x)
    w, b = v["params"]["kernel"], v["params"]["bias"]  # w: [kh, kw, filters, in]
    full = np.zeros((1, 7, 7, 2))
    for i in range(3):
        for j in range(3):
            full[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += np.einsum("nc,hwfc->nhwf", x[:, i, j], w)
    np.testing.assert_allclose(run(layer, v, x), full + b, rtol=1e-4, atol=1e-5)
    same = layers.Conv2DTranspose(2, 3, strides=2, padding="same")
    assert out_shape(same, x) == (1, 6, 6, 2)


def test_depthwise_and_separable_match_channelwise_numpy():
    x = RNG.normal(size=(1, 5, 5, 2)).astype(np.float32)
    depthwise = layers.DepthwiseConv2D(3, depth_multiplier=2)
    v = init_random(depthwise, x)
    w, b = v["params"]["depthwise_kernel"], v["params"]["bias"]
    expected = np.concatenate([conv2d_reference(x[..., c:c + 1], w[:, :, c:c + 1], 0, 1, "valid")
                               for c in range(2)], axis=-1) + b  # channel c*2 + m
    np.testing.assert_allclose(run(depthwise, v, x), expected, rtol=1e-4, atol=1e-5)
    separable = layers.SeparableConv2D(4, 3, padding="same")
    v = init_random(separable, x)
    p = v["params"]
    mid = np.concatenate([conv2d_reference(x[..., c:c + 1], p["depthwise_kernel"][:, :, c:c + 1],
                                           0, 1, "same") for c in range(2)], axis=-1)
    expected = mid @ p["pointwise_kernel"][0, 0] + p["bias"]
    np.testing.assert_allclose(run(separable, v, x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layer,shape,expected", [
    (layers.Conv1D(4, 3), (2, 10, 3), (2, 8, 4)),
    (layers.Conv1D(4, 3, padding="causal", dilation_rate=2), (2, 10, 3), (2, 10, 4)),
    (layers.Conv3D(2, 2, strides=2), (1, 4, 6, 8, 1), (1, 2, 3, 4, 2)),
    (layers.Conv2D(2, 3, dilation_rate=2), (1, 9, 9, 1), (1, 5, 5, 2)),
    (layers.MaxPooling1D(), (2, 9, 3), (2, 4, 3)),
    (layers.AveragePooling1D(3, strides=1, padding="same"), (2, 9, 3), (2, 9, 3)),
    (layers.GlobalAveragePooling1D(), (2, 9, 3), (2, 3)),
    (layers.GlobalMaxPooling2D(keepdims=True), (2, 4, 4, 3), (2, 1, 1, 3)),
    (layers.Flatten(), (2, 3, 4, 5), (2, 60)),
    (layers.Reshape((4, -1)), (2, 3, 4), (2, 4, 3)),
    (layers.Permute((2, 1)), (2, 3, 4), (2, 4, 3)),
    (layers.ZeroPadding2D(((1, 2), (3, 4))), (1, 5, 5, 2), (1, 8, 12, 2)),
    (layers.UpSampling2D((2, 3)), (1, 2, 2, 1), (1, 4, 6, 1)),
    (layers.UpSampling2D(interpolation="bilinear"), (1, 2, 2, 1), (1, 4, 4, 1)),
    (layers.Embedding(10, 4), (2, 7), (2, 7, 4)),
    (layers.Dropout(0.5), (2, 3), (2, 3)),
])
def test_output_shapes_follow_keras(layer, shape, expected):
    x = np.zeros(shape, np.int32 if isinstance(layer, layers.Embedding) else np.float32)
    assert out_shape(layer, x) == expected


def test_max_and_average_pooling_match_numpy():
    x = RNG.normal(size=(2, 5, 6, 3)).astype(np.float32)
    y = layers.MaxPooling2D().apply({}, x)
    windows = x[:, :4].reshape(2, 2, 2, 3, 2, 3)
    np.testing.assert_allclose(y, windows.max(axis=(2, 4)))
    # 'same' average pooling divides by the real entries only (TensorFlow's count).
    y = layers.AveragePooling2D(padding="same").apply({}, x)
    assert y.shape == (2, 3, 3, 3)
    np.testing.assert_allclose(y[:, 2, 0], x[:, 4, 0:2].mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(layers.GlobalAveragePooling2D().apply({}, x),
                               x.mean(axis=(1, 2)), rtol=1e-6)


def test_batch_normalization_inference_uses_moving_statistics():
    layer = layers.BatchNormalization()
    x = RNG.normal(size=(4, 3, 5)).astype(np.float32)
    v = init_random(layer, x)
    v["batch_stats"] = jax.tree.map(np.abs, v["batch_stats"])
    p, s = v["params"], v["batch_stats"]
    expected = (x - s["moving_mean"]) / np.sqrt(s["moving_variance"] + 1e-3) * p["gamma"] \
        + p["beta"]
    np.testing.assert_allclose(run(layer, v, x), expected, rtol=1e-5, atol=1e-5)


def test_batch_normalization_training_uses_batch_statistics_and_momentum():
    layer = layers.BatchNormalization(momentum=0.9)
    x = RNG.normal(size=(8, 3), loc=2.0).astype(np.float32)
    v = layer.init(jax.random.key(0), x)
    y, updates = run(layer, v, x, training=True, mutable=["batch_stats"])
    mean, var = x.mean(0), x.var(0)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
    stats = updates["batch_stats"]
    np.testing.assert_allclose(stats["moving_mean"], 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(stats["moving_variance"], 0.9 + 0.1 * var, rtol=1e-5)
    frozen = layers.BatchNormalization(trainable=False)  # Keras: frozen BN runs in inference
    np.testing.assert_allclose(run(frozen, v, x, training=True), x / np.sqrt(1 + 1e-3),
                               rtol=1e-5)


def test_synchronized_batch_normalization_uses_global_batch_statistics():
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:2]), ("batch",))
    x = RNG.normal(size=(8, 3)).astype(np.float32)
    x[4:] += 3.0  # replicas see different distributions
    out = {}
    for sync in (False, True):
        layer = layers.BatchNormalization(synchronized=sync)
        v = layer.init(jax.random.key(0), x)

        def step(xs, layer=layer, v=v):
            return run(layer, v, xs, training=True, mutable=["batch_stats"])[0]

        out[sync] = np.asarray(jax.jit(jax.shard_map(step, mesh=mesh, in_specs=P("batch"),
                                                     out_specs=P("batch")))(x))
    global_norm = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3)
    np.testing.assert_allclose(out[True], global_norm, rtol=1e-4, atol=1e-4)
    local = (x[:4] - x[:4].mean(0)) / np.sqrt(x[:4].var(0) + 1e-3)
    np.testing.assert_allclose(out[False][:4], local, rtol=1e-4, atol=1e-4)


def test_layer_and_group_normalization_match_numpy():
    x = RNG.normal(size=(2, 3, 8)).astype(np.float32)
    ln = layers.LayerNormalization()
    v = init_random(ln, x)
    p = v["params"]
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(run(ln, v, x), expected * p["gamma"] + p["beta"], rtol=1e-4,
                               atol=1e-5)
    gn = layers.GroupNormalization(groups=2)
    v = init_random(gn, x)
    p = v["params"]
    g = x.reshape(2, 3, 2, 4)
    norm = (g - g.mean((1, 3), keepdims=True)) / np.sqrt(g.var((1, 3), keepdims=True) + 1e-3)
    np.testing.assert_allclose(run(gn, v, x), norm.reshape(x.shape) * p["gamma"] + p["beta"],
                               rtol=1e-4, atol=1e-5)


def test_merging_rescaling_and_embedding_values():
    a, b = RNG.normal(size=(2, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(layers.Add().apply({}, [a, b]), a + b)
    np.testing.assert_allclose(layers.Multiply().apply({}, [a, b]), a * b)
    np.testing.assert_allclose(layers.Concatenate().apply({}, [a, b]), np.concatenate([a, b], -1))
    np.testing.assert_allclose(layers.Rescaling(1 / 255, offset=-1).apply({}, np.full((1,), 51)),
                               [51 / 255 - 1], rtol=1e-6)
    emb = layers.Embedding(5, 2)
    v = emb.init(jax.random.key(0), np.zeros((1,), np.int32))
    table = np.asarray(v["params"]["embeddings"])
    assert np.abs(table).max() <= 0.05  # Keras' "uniform": U(-0.05, 0.05)
    np.testing.assert_array_equal(run(emb, v, np.array([[3, 1]])), table[[[3, 1]]])


def test_dropout_scales_kept_units_in_training_only():
    x = np.ones((200, 50), np.float32)
    layer = layers.Dropout(0.4)
    y = np.asarray(layer.apply({}, x, training=True, rngs={"dropout": jax.random.key(0)}))
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.6)}
    assert abs((y == 0).mean() - 0.4) < 0.02
    np.testing.assert_array_equal(layer.apply({}, x), x)


def test_regularizers_sow_keras_penalties():
    layer = layers.Dense(3, kernel_regularizer=layers.L2(0.1), bias_regularizer="l1",
                         activity_regularizer=layers.L1L2(l1=0.2, l2=0.3))
    x = RNG.normal(size=(4, 2)).astype(np.float32)
    assert "losses" not in layer.init(jax.random.key(0), x)  # never part of the model state
    v = init_random(layer, x)
    y, state = layer.apply({"params": v["params"]}, x, mutable=["losses"])
    losses = jax.tree.map(np.asarray, state["losses"])
    p = v["params"]
    np.testing.assert_allclose(losses["kernel_regularizer"][0], 0.1 * np.sum(p["kernel"] ** 2),
                               rtol=1e-5)
    np.testing.assert_allclose(losses["bias_regularizer"][0], 0.01 * np.abs(p["bias"]).sum(),
                               rtol=1e-5)
    activity = (0.2 * np.abs(y).sum() + 0.3 * np.square(y).sum()) / 4  # / batch, as Keras 3
    np.testing.assert_allclose(losses["activity_regularizer"][0], activity, rtol=1e-5)
    assert layers.L1L2().l1 == 0.0 and layers.L1().l1 == 0.01  # Keras' class defaults


def test_bfloat16_dtype_computes_in_bfloat16_with_float32_params():
    layer = layers.Conv2D(2, 3, dtype="bfloat16")
    y, v = jax.eval_shape(layer.init_with_output, jax.random.key(0),
                          np.ones((1, 5, 5, 1), np.float32))
    assert y.dtype == jnp.bfloat16
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(v))


def test_bad_arguments_raise_readable_errors():
    with pytest.raises(ValueError, match="padding must be"):
        layers.Conv2D(2, 3, padding="full").init(jax.random.key(0), np.ones((1, 5, 5, 1)))
    with pytest.raises(ValueError, match="kernel_size"):
        layers.Conv2D(2, (3, 3, 3)).init(jax.random.key(0), np.ones((1, 5, 5, 1)))
    with pytest.raises(ValueError, match="channels_last"):
        layers.MaxPooling2D(data_format="channels_first").apply({}, np.ones((1, 4, 4, 1)))


@pytest.mark.parametrize("layer", [layers.Add, layers.Multiply])
def test_merging_inputs_of_different_widths_is_a_clear_error(layer):
    # Before: "TypeError: add got incompatible shapes for broadcasting: (1, 4), (1, 5)".
    with pytest.raises(ValueError, match=rf"^{layer.__name__} combines tensors element-wise.*"
                                         r"Received: inputs of shapes \[\(1, 4\), \(1, 5\)\]"):
        layer().apply({}, [np.ones((1, 4)), np.ones((1, 5))])
    np.testing.assert_array_equal(layers.Add().apply({}, [np.ones((2, 4)), np.ones((1, 4))]),
                                  np.full((2, 4), 2.0))  # shapes that broadcast still add


def test_layer_trainable_is_settable_like_keras():
    layer = layers.Dense(2)
    layer.trainable = False
    assert layer.trainable is False and layer.clone().trainable is False


def test_matches_keras_when_installed():
    keras = pytest.importorskip("keras", reason="Keras is not installed here; the NumPy "
                                "formulas above stand in for it")
    x = RNG.normal(size=(2, 6, 6, 2)).astype(np.float32)
    k_layer = keras.layers.Conv2D(3, 3, strides=2, padding="same")
    k_out = np.asarray(k_layer(x))
    kernel, bias = k_layer.get_weights()
    ours = layers.Conv2D(3, 3, strides=2, padding="same")
    out = ours.apply({"params": {"kernel": kernel, "bias": bias}}, x)
    np.testing.assert_allclose(out, k_out, rtol=1e-4, atol=1e-5)
