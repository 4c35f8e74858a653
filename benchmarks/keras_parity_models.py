"""Keras parity of models built from models, their output names and ``ops`` on KerasTensors
(issue 41): the same construction code run with ``keras`` and with ``mirrorfit``.

Run with a Python that has Keras 3 (jax backend) and sees mirrorfit::

    KERAS_BACKEND=jax PYTHONPATH=.:/path/to/keras/site-packages python \\
        benchmarks/keras_parity_models.py --out benchmarks/results/keras-parity-models-cpu-DATE.md

Sections (nothing here asserts; the table is the record, and the exit status is 1 when a case
differs):

* ``weights``: nested models (a functional model of two models, a Sequential used as a
  layer, Keras-style layers holding Sequentials, three levels of functional models): the
  ``weights`` shapes in order, their ``path`` s, and the predictions of the mirrorfit model
  after ``set_weights(keras_model.get_weights())``;
* ``output names``: ``output_names``, the logs of ``fit`` with ``loss``, ``loss_weights``,
  ``metrics`` and ``y`` keyed by output name, and ``evaluate`` 's values on equal weights;
* ``ops on KerasTensors``: each op (and Python operator) applied to an ``Input``: the symbolic
  shape and dtype, and the built model's predictions;
* ``ops.image``: every image op on the same arrays.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import keras
import numpy as np

import mirrorfit as mf

RNG = np.random.default_rng(0)
TOLERANCE = 1e-5


def _max_diff(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float("nan") if a.shape != b.shape else float(np.max(np.abs(a - b), initial=0.0))


# -- weights of nested models -----------------------------------------------------------------


def autoencoder(K: Any) -> Any:
    """``Model(inputs, decoder(encoder(inputs)))``: a Sequential encoder, a functional decoder
    with BatchNormalization."""
    L = K.layers
    encoder = K.Sequential([K.Input((6,)), L.Dense(4, activation="relu", name="e1"),
                            L.Dense(3, name="e2")], name="encoder")
    code = K.Input((3,))
    decoder = K.Model(code, L.Dense(6, name="d1")(L.BatchNormalization(name="bn")(code)),
                      name="decoder")
    inputs = K.Input((6,))
    return K.Model(inputs, decoder(encoder(inputs)), name="autoencoder")


def sequential_as_layer(K: Any) -> Any:
    L = K.layers
    inner = K.Sequential([L.Dense(5, activation="tanh", name="h1"), L.Dense(4, name="h2")],
                         name="inner")
    return K.Sequential([K.Input((6,)), inner, L.Dense(2, name="head")], name="outer")


def layers_holding_sequentials(K: Any) -> Any:
    """keras-io's MLP-Mixer pattern: Layer subclasses holding Sequentials, in a Sequential."""
    L = K.layers

    class Block(L.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.mlp = K.Sequential([L.Dense(6, activation="gelu", name="m1"),
                                     L.Dense(6, name="m2")], name="mlp")
            self.norm = L.LayerNormalization(epsilon=1e-6, name="norm")

        def build(self, input_shape):
            self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones",
                                         name="scale")

        def call(self, x):
            return x + self.scale * self.mlp(self.norm(x))

    blocks = K.Sequential([Block(name="block_a"), Block(name="block_b")], name="blocks")
    inputs = K.Input((4, 6))
    x = blocks(L.Dense(6, name="embed")(inputs))
    return K.Model(inputs, L.Dense(2, name="head")(L.GlobalAveragePooling1D()(x)), name="mixer")


def three_levels(K: Any) -> Any:
    L = K.layers
    a = K.Input((5,))
    level1 = K.Model(a, L.Dense(4, name="l1")(a), name="level1")
    b = K.Input((5,))
    level2 = K.Model(b, L.Dense(3, name="l2")(level1(b)), name="level2")
    c = K.Input((5,))
    return K.Model(c, L.Dense(2, name="l3")(level2(c)), name="level3")


ARCHITECTURES: list[tuple[str, Callable[[Any], Any], tuple[int, ...]]] = [
    ("Model(x, decoder(encoder(x)))", autoencoder, (6,)),
    ("Sequential used as a layer", sequential_as_layer, (6,)),
    ("Layers holding Sequentials, in a Sequential", layers_holding_sequentials, (4, 6)),
    ("three levels of functional models", three_levels, (5,)),
]


def weight_rows() -> tuple[list[str], int]:
    rows, failures = [], 0
    for label, build, shape in ARCHITECTURES:
        with mf.MirroredStrategy().scope():
            ours = build(mf)
        theirs = build(keras)
        x = RNG.normal(size=(7, *shape)).astype(np.float32)
        theirs(x)  # builds the lazy parts as mirrorfit's construction does
        same_order = [tuple(w.shape) for w in ours.weights] == [
            tuple(w.shape) for w in theirs.weights]
        differing = [f"`{a.path}` vs `{b.path}`" for a, b in zip(ours.weights, theirs.weights)
                     if a.path != b.path]
        ours.set_weights(theirs.get_weights())
        diff = _max_diff(ours.predict(x, verbose=0), theirs.predict(x, verbose=0))
        ok = same_order and not differing and diff <= TOLERANCE
        failures += not ok
        rows.append(f"| {label} | {len(ours.weights)} / {len(theirs.weights)} | "
                    f"{'yes' if same_order else 'NO'} | "
                    f"{'all equal' if not differing else '; '.join(differing[:4])} | "
                    f"{diff:.2e} |")
    return rows, failures


# -- output names -----------------------------------------------------------------------------


def two_heads(K: Any, as_dict: bool) -> Any:
    L = K.layers
    inputs = K.Input((6,), name="features")
    hidden = L.Dense(8, activation="relu", name="hidden")(inputs)
    cls = L.Dense(3, activation="softmax", name="cls")(hidden)
    reg = L.Dense(2, name="reg")(hidden)
    return K.Model(inputs, {"a": cls, "b": reg} if as_dict else [cls, reg], name="heads")


def output_rows() -> tuple[list[str], int]:
    x = RNG.normal(size=(32, 6)).astype(np.float32)
    labels = RNG.integers(0, 3, size=32)
    targets = RNG.normal(size=(32, 2)).astype(np.float32)
    cases = [
        ("list outputs, dicts by output name", False,
         {"loss": {"cls": "sparse_categorical_crossentropy", "reg": "mse"},
          "loss_weights": {"cls": 1.0, "reg": 0.5},
          "metrics": {"cls": ["accuracy"], "reg": ["mae"]}},
         {"cls": labels, "reg": targets}),
        ("list outputs, lists", False,
         {"loss": ["sparse_categorical_crossentropy", "mse"], "metrics": [["accuracy"], []]},
         (labels, targets)),
        ("dict outputs, dicts by key", True,
         {"loss": {"a": "sparse_categorical_crossentropy", "b": "mse"},
          "metrics": {"a": ["accuracy"]}},
         {"a": labels, "b": targets}),
    ]
    rows, failures = [], 0
    for label, as_dict, compile_args, y in cases:
        with mf.MirroredStrategy().scope():
            ours = two_heads(mf, as_dict)
            ours.compile(optimizer="sgd", **compile_args)
        theirs = two_heads(keras, as_dict)
        theirs.compile(optimizer="sgd", **compile_args)
        ours.set_weights(theirs.get_weights())
        names = (ours.output_names, theirs.output_names)
        logs = (sorted(ours.fit(x, y, batch_size=16, epochs=1, verbose=0).history),
                sorted(theirs.fit(x, y, batch_size=16, epochs=1, verbose=0).history))
        ours.set_weights(theirs.get_weights())
        values = (ours.evaluate(x, y, batch_size=16, verbose=0, return_dict=True),
                  theirs.evaluate(x, y, batch_size=16, verbose=0, return_dict=True))
        diff = max((_max_diff(values[0][k], values[1][k]) for k in values[1]
                    if k in values[0]), default=float("nan"))
        ok = names[0] == names[1] and logs[0] == logs[1] and diff <= TOLERANCE
        failures += not ok
        rows.append(f"| {label} | `{names[0]}` / `{names[1]}` | "
                    f"{'equal: ' if logs[0] == logs[1] else 'DIFFER: '}`{logs[0]}`"
                    f"{'' if logs[0] == logs[1] else f' vs `{logs[1]}`'} | {diff:.2e} |")
    return rows, failures


# -- ops on KerasTensors ----------------------------------------------------------------------


def op_cases() -> list[tuple[str, tuple[int, ...], Callable[[Any, Any], Any]]]:
    """``(label, input shape, fn(K, x))`` with ``x`` an ``Input`` of that shape."""
    return [
        ("ops.reshape(x, (-1, 4, 12))", (8, 6), lambda K, x: K.ops.reshape(x, (-1, 4, 12))),
        ("ops.transpose(x, (0, 2, 1))", (8, 6), lambda K, x: K.ops.transpose(x, (0, 2, 1))),
        ("x * 2.0 + 1.0 - x / 3.0", (8, 6), lambda K, x: x * 2.0 + 1.0 - x / 3.0),
        ("x ** 2, -x, abs(x)", (8, 6), lambda K, x: (x ** 2) - (-x) + abs(x)),
        ("1.0 - x, 2.0 / (1.0 + x * x)", (8, 6), lambda K, x: (1.0 - x) * (2.0 / (1.0 + x * x))),
        ("x[:, 1:, :3]", (8, 6), lambda K, x: x[:, 1:, :3]),
        ("x[..., 0], x[:, None]", (8, 6), lambda K, x: K.ops.expand_dims(x[..., 0], -1)
         + x[:, None][:, 0, :, :1]),
        ("x @ w (a constant)", (8, 6), lambda K, x: x @ np.linspace(-1, 1, 12,
                                                                    dtype=np.float32).reshape(6, 2)),
        ("ops.concatenate([x, -x], axis=-1)", (8, 6),
         lambda K, x: K.ops.concatenate([x, -x], axis=-1)),
        ("ops.stack([x, x * 2], axis=1)", (8, 6), lambda K, x: K.ops.stack([x, x * 2], axis=1)),
        ("ops.sum(x, axis=1)", (8, 6), lambda K, x: K.ops.sum(x, axis=1)),
        ("ops.mean(x, axis=-1, keepdims=True)", (8, 6),
         lambda K, x: K.ops.mean(x, axis=-1, keepdims=True)),
        ("ops.where(x > 0, x, 0.1 * x)", (8, 6), lambda K, x: K.ops.where(x > 0, x, 0.1 * x)),
        ("x > 0 (bool)", (8, 6), lambda K, x: x > 0),
        ("ops.softmax(x), ops.maximum(x, 0.0)", (8, 6),
         lambda K, x: K.ops.softmax(x) + K.ops.maximum(x, 0.0)),
        ("ops.squeeze(x[:, :1], axis=1)", (8, 6), lambda K, x: K.ops.squeeze(x[:, :1], axis=1)),
        ("ops.reshape(x, (-1, ops.shape(x)[1] * 6))", (8, 6),
         lambda K, x: K.ops.reshape(x, (-1, K.ops.shape(x)[1] * 6))),
        ("ops.image.extract_patches(x, 4)", (8, 8, 3),
         lambda K, x: K.ops.image.extract_patches(x, 4)),
        ("ops.image.resize(x, (4, 5))", (8, 8, 3), lambda K, x: K.ops.image.resize(x, (4, 5))),
    ]


def op_rows() -> tuple[list[str], int]:
    rows, failures = [], 0
    for label, shape, fn in op_cases():
        data = RNG.normal(size=(5, *shape)).astype(np.float32)
        results = []
        for K in (mf, keras):
            x = K.Input(shape)
            y = fn(K, x)
            if K is mf:
                with mf.MirroredStrategy().scope():
                    model = mf.Model(x, y)
            else:
                model = keras.Model(x, y)
            results.append((tuple(y.shape), np.dtype(y.dtype).name,
                            model.predict(data, verbose=0)))
        (ours_shape, ours_dtype, ours), (keras_shape, keras_dtype, theirs) = results
        diff = _max_diff(ours, theirs)
        ok = ours_shape == keras_shape and ours_dtype == keras_dtype and diff <= TOLERANCE
        failures += not ok
        rows.append(f"| `{label}` | `{ours_shape}` {ours_dtype} | `{keras_shape}` "
                    f"{keras_dtype} | {diff:.2e} |")
    return rows, failures


# -- ops.image --------------------------------------------------------------------------------


def image_cases() -> list[tuple[str, Callable[[Any], Any]]]:
    img = RNG.uniform(size=(2, 12, 10, 3)).astype(np.float32)
    big = RNG.uniform(size=(2, 16, 14, 3)).astype(np.float32)
    noisy = np.clip(big + RNG.normal(scale=0.1, size=big.shape), 0, 1).astype(np.float32)
    vol = RNG.uniform(size=(2, 6, 6, 6, 2)).astype(np.float32)
    t = np.array([[1.1, 0.2, -1.0, 0.1, 0.9, 2.0, 0, 0], [0.9, -0.1, 1.5, 0.05, 1.0, -1.0, 0, 0]],
                 np.float32)
    start = np.array([[0, 0], [9, 0], [0, 11], [9, 11]], np.float32)
    end = start + RNG.normal(size=(4, 2)).astype(np.float32)
    coords = RNG.uniform(0, 9, size=(3, 5, 4)).astype(np.float32)
    first = img.transpose(0, 3, 1, 2)
    return [
        ("resize (7, 5)", lambda m: m.resize(img, (7, 5))),
        ("resize crop_to_aspect_ratio", lambda m: m.resize(img, (5, 5), crop_to_aspect_ratio=True)),
        ("resize pad_to_aspect_ratio", lambda m: m.resize(img, (6, 9), pad_to_aspect_ratio=True,
                                                          fill_value=0.5)),
        ("resize nearest, channels_first", lambda m: m.resize(
            first, (7, 5), interpolation="nearest", data_format="channels_first")),
        ("extract_patches 3", lambda m: m.extract_patches(img, 3)),
        ("extract_patches (3, 2), strides (1, 2), same", lambda m: m.extract_patches(
            img, (3, 2), strides=(1, 2), padding="same")),
        ("extract_patches one image", lambda m: m.extract_patches(img[0], (4, 5))),
        ("extract_patches dilation 2", lambda m: m.extract_patches(img, (2, 2), strides=1,
                                                                   dilation_rate=2)),
        ("extract_patches_3d", lambda m: m.extract_patches_3d(vol, (2, 3, 2))),
        ("crop_images", lambda m: m.crop_images(img, top_cropping=2, bottom_cropping=1,
                                                left_cropping=3, target_width=4)),
        ("pad_images", lambda m: m.pad_images(img, top_padding=2, target_height=16,
                                              right_padding=1, left_padding=2)),
        ("affine_transform", lambda m: m.affine_transform(img, t)),
        ("affine_transform nearest, reflect", lambda m: m.affine_transform(
            img, t, interpolation="nearest", fill_mode="reflect")),
        ("affine_transform one image, mirror", lambda m: m.affine_transform(
            img[0], t[0], fill_mode="mirror")),
        ("perspective_transform", lambda m: m.perspective_transform(
            img, np.stack([start, start]), np.stack([end, end + 0.5]))),
        ("map_coordinates", lambda m: m.map_coordinates(img[0], coords, 1, fill_mode="nearest")),
        ("rgb_to_grayscale", lambda m: m.rgb_to_grayscale(img)),
        ("rgb_to_hsv", lambda m: m.rgb_to_hsv(img)),
        ("hsv_to_rgb", lambda m: m.hsv_to_rgb(img)),
        # Keras' eager gaussian_blur reads data_format=None as channels_first: named here.
        ("gaussian_blur", lambda m: m.gaussian_blur(img, (5, 3), (1.5, 0.7),
                                                    data_format="channels_last")),
        ("gaussian_blur channels_first", lambda m: m.gaussian_blur(
            first, (5, 3), (1.5, 0.7), data_format="channels_first")),
        ("sobel_edges", lambda m: m.sobel_edges(img)),
        ("ssim", lambda m: m.ssim(big, noisy)),
        ("ssim one image, filter 5", lambda m: m.ssim(big[0], noisy[0], filter_size=5,
                                                      max_val=2.0)),
        ("scale_and_translate", lambda m: m.scale_and_translate(
            img, (2, 9, 7, 3), np.array([0.8, 0.7], np.float32),
            np.array([0.5, -1.0], np.float32), (1, 2), "bilinear")),
    ]


def image_rows() -> tuple[list[str], int]:
    rows, failures = [], 0
    for label, fn in image_cases():
        ours, theirs = np.asarray(fn(mf.ops.image)), np.asarray(fn(keras.ops.image))
        diff = _max_diff(ours, theirs)
        ok = diff <= TOLERANCE
        failures += not ok
        rows.append(f"| `{label}` | `{ours.shape}` | {diff:.2e} |")
    return rows, failures


KNOWN_DIFFERENCES = [
    ("- A model without an `Input` that is built inside another model's or layer's build "
    "(a Sequential of layers without an `Input`, used as a layer): Keras prefixes its "
    "weights' paths with the scopes open at that moment (`outer/inner/h1/kernel`), "
    "mirrorfit gives the model's own paths (`inner/h1/kernel`). Order, shapes and values "
    "agree, so `set_weights` lists load alike."),
    ("- Default layer names are numbered per model in mirrorfit (`dense`, `dense_1` within each "
    "model), per process in Keras; the architectures above name their layers, so the paths "
    "compare the structure."),
    ("- A functional model's `model.layers` has no `InputLayer` in mirrorfit (Keras lists one "
    "first)."),
    "- `ops.ndim(x)` of a KerasTensor is an int in mirrorfit (a symbolic tensor in Keras).",
    ("- Keras' eager `ops.image.gaussian_blur` with `data_format=None` treats channels_last "
    "images as channels_first (its symbolic path does not); mirrorfit reads `None` as "
    "channels_last in both."),
    ("- `ops.image.elastic_transform` is not in mirrorfit (its `seed=None` draws from Keras' "
    "global seed generator)."),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args()
    lines = [(f"# Keras parity of nested models, output names and ops on KerasTensors (keras "
              f"{keras.__version__}, backend {keras.backend.backend()}; mirrorfit "
              f"{mf.__version__}; {platform.machine()} CPU)"), "",
             ("Generated by `benchmarks/keras_parity_models.py`: the same construction code "
              "run with `keras` and with `mirrorfit`. Max abs diff of predictions or values; "
              f"a case fails over {TOLERANCE:g}."), ""]
    weights, f1 = weight_rows()
    outputs, f2 = output_rows()
    ops, f3 = op_rows()
    images, f4 = image_rows()
    lines += ["## weights of nested models", "",
              ("| model | weights (mirrorfit / keras) | shapes in Keras' order | paths | "
               "predictions after set_weights(keras weights) |"),
              "| --- | --- | --- | --- | --- |", *weights, "",
              "## output names", "",
              "| case | output_names (mirrorfit / keras) | fit's log keys | evaluate |",
              "| --- | --- | --- | --- |", *outputs, "",
              "## ops on KerasTensors (symbolic shape and dtype; the built model's predictions)",
              "", "| op | mirrorfit | keras | predictions |", "| --- | --- | --- | --- |", *ops,
              "", "## ops.image (eager)", "", "| case | shape | max abs diff |",
              "| --- | --- | --- |", *images, "", "## known differences", "",
              *KNOWN_DIFFERENCES, ""]
    failures = f1 + f2 + f3 + f4
    lines.append(f"{failures} case(s) differ.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
