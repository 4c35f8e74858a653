"""Parity of mirrorfit's preprocessing layers with Keras 3's: the same inputs through both.

Run in a venv with Keras 3 (JAX backend) and mirrorfit importable::

    KERAS_BACKEND=jax PYTHONPATH=$PWD /work/venvs/keras/bin/python \\
        benchmarks/keras_parity_preprocessing.py > benchmarks/results/keras-parity-preprocessing-cpu-DATE.md

Compared: the deterministic image layers (Resizing, CenterCrop, RandomCrop at inference) and
the random ones with a fixed transform (a factor range of one value, in training); the factor
ranges Keras and mirrorfit derive from a number; Normalization.adapt (array, list of batches,
axes) and its outputs; the text layers when Keras can build them (they need TensorFlow).
Prints a Markdown table of the largest absolute difference per case.
"""

from __future__ import annotations

import os
import platform
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import keras
import numpy as np

import mirrorfit as mf
from mirrorfit._src.layers.preprocessing.image_base import factor_range

NOTES = """
## Notes

* `RandomCrop` at inference: Keras 3.15's code returns the input uncropped (a different shape
  from training's), while its docstring says the image is cropped to the target's aspect
  ratio and resized; mirrorfit does what the docstring says (`Resizing(h, w,
  crop_to_aspect_ratio=True)`), so a model's later layers see one shape. In training mirrorfit
  draws one crop box per image (Keras 3: one per batch) and takes the random crop whenever the
  image is at least the target size (Keras: only when strictly larger in both dimensions,
  else the centered box).
* Random layers draw from a different generator than Keras (the trainer's per-step,
  per-replica `"dropout"` key, not a `SeedGenerator`), so only fixed transforms are compared;
  the per-row draws are tested in tests/layers/preprocessing/.
* `RandomFlip("horizontal_and_vertical")` flips both axes with one draw per image, as Keras 3.
* The text layers need TensorFlow in Keras 3 (`StringLookup`, `IntegerLookup`,
  `TextVectorization` raise ImportError without it, and `Normalization.adapt` of a list checks
  for `tf.data` first); the Keras venv has no TensorFlow, so they are checked against
  hand-computed vocabularies in tests/layers/preprocessing/test_lookup.py and
  test_text_vectorization.py (Keras' ordering: count, then token, both descending).
"""
RNG = np.random.default_rng(0)
IMAGES = RNG.uniform(0, 255, (3, 9, 12, 3)).astype(np.float32)
ROWS: list[tuple[str, str, str]] = []


def ours(layer, x, training):
    return np.asarray(layer.apply({}, x, training=training, rngs={"dropout": jax.random.key(0)}))


def compare(case: str, keras_layer, our_layer, x=IMAGES, training=False, atol=1e-3):
    expected = np.asarray(keras_layer(x, training=training))
    got = ours(our_layer, x, training)
    if expected.shape != got.shape:
        ROWS.append((case, f"shapes differ: Keras {expected.shape}, mirrorfit {got.shape}",
                     "DIFFERENT"))
        return
    diff = float(np.max(np.abs(expected - got))) if expected.size else 0.0
    ROWS.append((case, f"{diff:.2e}", "ok" if diff <= atol else "DIFFERENT"))


def image_layers() -> None:
    L, M = keras.layers, mf.layers
    for method in ("bilinear", "nearest", "bicubic", "lanczos3"):
        compare(f"Resizing(5, 7, {method})", L.Resizing(5, 7, interpolation=method),
                M.Resizing(5, 7, interpolation=method))
    compare("Resizing(6, 6, crop_to_aspect_ratio)", L.Resizing(6, 6, crop_to_aspect_ratio=True),
            M.Resizing(6, 6, crop_to_aspect_ratio=True))
    compare("Resizing(6, 6, pad_to_aspect_ratio, fill 7)",
            L.Resizing(6, 6, pad_to_aspect_ratio=True, fill_value=7.0),
            M.Resizing(6, 6, pad_to_aspect_ratio=True, fill_value=7.0))
    compare("Resizing(4, 5, antialias)", L.Resizing(4, 5, antialias=True),
            M.Resizing(4, 5, antialias=True))
    compare("Resizing on one image [h, w, c]", L.Resizing(5, 7), M.Resizing(5, 7), x=IMAGES[0])
    compare("CenterCrop(5, 6)", L.CenterCrop(5, 6), M.CenterCrop(5, 6))
    compare("CenterCrop(16, 8) of a smaller image", L.CenterCrop(16, 8), M.CenterCrop(16, 8))
    compare("RandomCrop(5, 6) inference", L.RandomCrop(5, 6), M.RandomCrop(5, 6))
    compare("RandomCrop(9, 12) training, input size", L.RandomCrop(9, 12),
            M.RandomCrop(9, 12), training=True)
    for mode in ("horizontal", "vertical", "horizontal_and_vertical"):
        compare(f"RandomFlip({mode}) inference", L.RandomFlip(mode), M.RandomFlip(mode))
    for fill in ("reflect", "wrap", "constant", "nearest"):
        for interpolation in ("bilinear", "nearest"):
            kw = {"fill_mode": fill, "interpolation": interpolation, "fill_value": 5.0}
            compare(f"RandomRotation((0.1, 0.1), {fill}, {interpolation})",
                    L.RandomRotation((0.1, 0.1), **kw), M.RandomRotation((0.1, 0.1), **kw),
                    training=True)
            compare(f"RandomZoom((-0.3, -0.3), (0.2, 0.2), {fill}, {interpolation})",
                    L.RandomZoom((-0.3, -0.3), (0.2, 0.2), **kw),
                    M.RandomZoom((-0.3, -0.3), (0.2, 0.2), **kw), training=True)
            compare(f"RandomTranslation((0.2, 0.2), (-0.15, -0.15), {fill}, {interpolation})",
                    L.RandomTranslation((0.2, 0.2), (-0.15, -0.15), **kw),
                    M.RandomTranslation((0.2, 0.2), (-0.15, -0.15), **kw), training=True)
    compare("RandomZoom((0.4, 0.4)) (width follows height)", L.RandomZoom((0.4, 0.4)),
            M.RandomZoom((0.4, 0.4)), training=True)
    compare("RandomBrightness((0.1, 0.1))", L.RandomBrightness((0.1, 0.1)),
            M.RandomBrightness((0.1, 0.1)), training=True)
    compare("RandomBrightness((0.3, 0.3), value_range=(0, 1)) clipping",
            L.RandomBrightness((0.3, 0.3), value_range=(0, 1)),
            M.RandomBrightness((0.3, 0.3), value_range=(0, 1)), x=IMAGES / 255.0,
            training=True)
    compare("RandomContrast((0, 0)) clipping to value_range (0, 1)",
            L.RandomContrast((0.0, 0.0), value_range=(0, 1)),
            M.RandomContrast((0.0, 0.0), value_range=(0, 1)), x=IMAGES / 200.0, training=True)
    for name, bounds, factors in (("RandomContrast", (0.0, 1.0), (0.2, (0.1, 0.3))),
                                  ("RandomBrightness", (-1.0, 1.0), (0.2, (-0.1, 0.3))),
                                  ("RandomRotation", (-1.0, 1.0), (0.2, (-0.1, 0.3)))):
        for factor in factors:
            theirs = tuple(float(f) for f in getattr(L, name)(factor).factor)
            mine = factor_range(factor, "factor", bounds)
            ROWS.append((f"{name}({factor}) factor range", f"Keras {theirs}, mirrorfit {mine}",
                         "ok" if np.allclose(theirs, mine) else "DIFFERENT"))


def normalization() -> None:
    data = RNG.normal(4.0, 3.0, (40, 5)).astype(np.float32)
    cases = {"array, axis=-1": (data, -1), "list of 3 batches, axis=-1":
             (list(np.array_split(data, 3)), -1), "array, axis=None": (data, None),
             "images, axis=(1, 2)": (IMAGES, (1, 2)), "images, axis=-1": (IMAGES, -1)}
    for case, (adapt_data, axis) in cases.items():
        theirs, mine = keras.layers.Normalization(axis=axis), mf.layers.Normalization(axis=axis)
        # Keras' adapt of a list checks for tf.data first (needs TensorFlow): it adapts on
        # the whole array, mirrorfit on the batches (the running mean/variance update).
        theirs.adapt(np.concatenate(adapt_data) if isinstance(adapt_data, list) else adapt_data)
        mine.adapt(adapt_data)
        x = adapt_data[0] if isinstance(adapt_data, list) else adapt_data
        diff = max(_relative(theirs.adapt_mean, mine.statistics.mean),
                   _relative(theirs.adapt_variance, mine.statistics.variance))
        out = float(np.max(np.abs(np.asarray(theirs(x)) - np.asarray(mine(x)))))
        ROWS.append((f"Normalization.adapt({case}) mean/variance (relative)", f"{diff:.2e}",
                     "ok" if diff < 1e-5 else "DIFFERENT"))
        ROWS.append((f"Normalization({case}) outputs", f"{out:.2e}",
                     "ok" if out < 1e-4 else "DIFFERENT"))
    theirs = keras.layers.Normalization(mean=[1.0, 2.0], variance=[4.0, 0.0], invert=True)
    mine = mf.layers.Normalization(mean=[1.0, 2.0], variance=[4.0, 0.0], invert=True)
    x = data[:, :2]
    out = float(np.max(np.abs(np.asarray(theirs(x)) - np.asarray(mine(x)))))
    ROWS.append(("Normalization(mean, variance, invert=True)", f"{out:.2e}",
                 "ok" if out < 1e-5 else "DIFFERENT"))
    ROWS.append(("Normalization weight names", (f"Keras {[w.name for w in _built_keras()]}, "
                 f"mirrorfit {[w.name for w in _built_ours()]}"), "ok"))


def _relative(expected, got) -> float:
    """The largest ``|expected - got| / max(|expected|, 1)`` (Keras' float32 NumPy statistics
    against mirrorfit's float64 ones, stored as float32)."""
    expected = np.asarray(expected, np.float64)
    return float(np.max(np.abs(expected - got) / np.maximum(np.abs(expected), 1.0)))


def _built_keras():
    layer = keras.layers.Normalization()
    layer.build((None, 3))
    return layer.weights


def _built_ours():
    layer = mf.layers.Normalization()
    layer(np.zeros((1, 3), np.float32))
    return layer.weights


def text_layers() -> None:
    try:
        keras.layers.StringLookup(vocabulary=["a"])
    except ImportError as err:
        ROWS.append(("TextVectorization, StringLookup, IntegerLookup",
                     f"not compared: Keras needs TensorFlow for them ({err})", "skipped"))
        return
    texts = ["The cat sat.", "The cat ran!", "A dog", "dog dog, cat"]
    for kwargs in ({}, {"max_tokens": 6, "ngrams": 2}, {"output_mode": "tf_idf"},
                   {"output_mode": "multi_hot", "split": "character"},
                   {"output_sequence_length": 3}):
        theirs, mine = keras.layers.TextVectorization(**kwargs), mf.layers.TextVectorization(
            **kwargs)
        theirs.adapt(texts)
        mine.adapt(texts)
        same_vocab = theirs.get_vocabulary() == mine.get_vocabulary()
        out = float(np.max(np.abs(np.asarray(theirs(texts)) - mine(texts))))
        ROWS.append((f"TextVectorization({kwargs})", (f"vocabulary equal: {same_vocab}, "
                     f"outputs {out:.2e}"), "ok" if same_vocab and out < 1e-5 else "DIFFERENT"))


def main() -> None:
    image_layers()
    normalization()
    text_layers()
    print("# Keras parity: preprocessing layers\n")
    print(f"Keras {keras.__version__} (backend {keras.backend.backend()}), mirrorfit from "
          f"{os.path.dirname(mf.__file__)}, JAX {jax.__version__}, Python "
          f"{platform.python_version()}, {jax.devices()[0].platform.upper()}.\n")
    print("Random layers use a factor range of one value in training, so the transform is "
          "fixed; `DIFFERENT` rows are discussed below the table.\n")
    print("| case | max abs difference | result |\n|---|---|---|")
    for row in ROWS:
        print(f"| {row[0]} | {row[1]} | {row[2]} |")
    print(NOTES)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
