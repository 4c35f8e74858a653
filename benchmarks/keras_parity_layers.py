"""Issue 29's layers in Keras 3 (JAX backend) and in mirrorfit, with equal weights.

    KERAS_BACKEND=jax PYTHONPATH=. /path/to/keras-venv/bin/python \\
        benchmarks/keras_parity_layers.py [--out benchmarks/results/keras-parity-layers-cpu-DATE.md]

Run it with a Python that has ``keras`` (3.x) and mirrorfit's ``jax`` installed. For each
layer it builds the Keras layer and the mirrorfit layer with the same arguments, copies the
Keras weights into the mirrorfit params by name, runs both on the same random input and
prints a Markdown table: the max absolute difference of the outputs, both parameter counts,
whether the weight names and shapes agree, and the Keras constructor arguments (from
``get_config``) that mirrorfit's layer does not take. Random layers (dropout and noise kinds)
are compared at inference, where both are the identity; their training draws come from
different RNGs (their moments are tested in ``tests/layers/test_noise.py``). Nothing here
asserts; the table is the record.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import subprocess
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import keras
import numpy as np

import mirrorfit as mf

L, K = mf.layers, keras.layers
RNG = np.random.default_rng(0)
KERAS_ONLY_ARGS = {"name", "trainable", "dtype"}  # every Keras layer's base arguments


def data(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def fn_double(x):
    return x * 2.0 + 1.0


# (label, Keras layer, mirrorfit layer, inputs): inputs is an array or a list of arrays.
X3, X4, X5 = data(2, 6, 3), data(2, 6, 6, 3), data(2, 4, 4, 4, 3)
CASES = [
    ("Identity", K.Identity(), L.Identity(), X3),
    ("Lambda(x * 2 + 1)", K.Lambda(fn_double), L.Lambda(fn_double), X3),
    ("RepeatVector(3)", K.RepeatVector(3), L.RepeatVector(3), data(2, 5)),
    ("Cropping1D()", K.Cropping1D(), L.Cropping1D(), X3),
    ("Cropping1D((2, 0))", K.Cropping1D((2, 0)), L.Cropping1D((2, 0)), X3),
    ("Cropping2D(((1, 0), (2, 1)))", K.Cropping2D(((1, 0), (2, 1))),
     L.Cropping2D(((1, 0), (2, 1))), X4),
    ("Cropping3D()", K.Cropping3D(), L.Cropping3D(), X5),
    ("ZeroPadding1D((1, 2))", K.ZeroPadding1D((1, 2)), L.ZeroPadding1D((1, 2)), X3),
    ("ZeroPadding3D((1, 0, 2))", K.ZeroPadding3D((1, 0, 2)), L.ZeroPadding3D((1, 0, 2)), X5),
    ("UpSampling1D(3)", K.UpSampling1D(3), L.UpSampling1D(3), X3),
    ("UpSampling3D((1, 2, 3))", K.UpSampling3D((1, 2, 3)), L.UpSampling3D((1, 2, 3)), X5),
    ("Conv1DTranspose(4, 3, strides=2)", K.Conv1DTranspose(4, 3, strides=2),
     L.Conv1DTranspose(4, 3, strides=2), X3),
    ("Conv1DTranspose(4, 3, 2, 'same', relu)",
     K.Conv1DTranspose(4, 3, strides=2, padding="same", activation="relu"),
     L.Conv1DTranspose(4, 3, strides=2, padding="same", activation="relu"), X3),
    ("Conv1DTranspose(2, 4, 3, output_padding=1)",
     K.Conv1DTranspose(2, 4, strides=3, output_padding=1),
     L.Conv1DTranspose(2, 4, strides=3, output_padding=1), X3),
    ("Conv3DTranspose(2, 2, strides=2)", K.Conv3DTranspose(2, 2, strides=2),
     L.Conv3DTranspose(2, 2, strides=2), X5),
    ("Conv3DTranspose(2, 3, 2, 'same')", K.Conv3DTranspose(2, 3, strides=2, padding="same"),
     L.Conv3DTranspose(2, 3, strides=2, padding="same"), X5),
    ("MaxPooling3D()", K.MaxPooling3D(), L.MaxPooling3D(), X5),
    ("MaxPooling3D(3, 2, 'same')", K.MaxPooling3D(3, 2, "same"), L.MaxPooling3D(3, 2, "same"),
     X5),
    ("AveragePooling3D(2)", K.AveragePooling3D(2), L.AveragePooling3D(2), X5),
    ("AveragePooling3D(3, 2, 'same')", K.AveragePooling3D(3, 2, "same"),
     L.AveragePooling3D(3, 2, "same"), X5),
    ("GlobalMaxPooling3D()", K.GlobalMaxPooling3D(), L.GlobalMaxPooling3D(), X5),
    ("GlobalAveragePooling3D(keepdims=True)", K.GlobalAveragePooling3D(keepdims=True),
     L.GlobalAveragePooling3D(keepdims=True), X5),
    ("SpatialDropout1D(0.5) (inference)", K.SpatialDropout1D(0.5), L.SpatialDropout1D(0.5), X3),
    ("SpatialDropout2D(0.5) (inference)", K.SpatialDropout2D(0.5), L.SpatialDropout2D(0.5), X4),
    ("SpatialDropout3D(0.5) (inference)", K.SpatialDropout3D(0.5), L.SpatialDropout3D(0.5), X5),
    ("GaussianNoise(0.3) (inference)", K.GaussianNoise(0.3), L.GaussianNoise(0.3), X3),
    ("GaussianDropout(0.3) (inference)", K.GaussianDropout(0.3), L.GaussianDropout(0.3), X3),
    ("AlphaDropout(0.3) (inference)", K.AlphaDropout(0.3), L.AlphaDropout(0.3), X3),
    ("ActivityRegularization(0.1, 0.01)", K.ActivityRegularization(0.1, 0.01),
     L.ActivityRegularization(0.1, 0.01), X3),
    ("ReLU()", K.ReLU(), L.ReLU(), X3 * 4),
    ("ReLU(6.0, 0.1, 0.5)", K.ReLU(6.0, 0.1, 0.5), L.ReLU(6.0, 0.1, 0.5), X3 * 4),
    ("ReLU(negative_slope=0.2)", K.ReLU(negative_slope=0.2), L.ReLU(negative_slope=0.2), X3),
    ("LeakyReLU()", K.LeakyReLU(), L.LeakyReLU(), X3),
    ("LeakyReLU(0.1)", K.LeakyReLU(0.1), L.LeakyReLU(0.1), X3),
    ("PReLU() (random alpha)", K.PReLU(alpha_initializer="random_normal"), L.PReLU(), X3),
    ("PReLU(shared_axes=[1]) (random alpha)",
     K.PReLU(alpha_initializer="random_normal", shared_axes=[1]), L.PReLU(shared_axes=[1]), X3),
    ("ELU(0.5)", K.ELU(0.5), L.ELU(0.5), X3),
    ("Softmax()", K.Softmax(), L.Softmax(), X3),
    ("Softmax(axis=(1, 2))", K.Softmax(axis=(1, 2)), L.Softmax(axis=(1, 2)), X3),
    ("UnitNormalization()", K.UnitNormalization(), L.UnitNormalization(), X3),
    ("UnitNormalization(axis=(1, 2))", K.UnitNormalization(axis=(1, 2)),
     L.UnitNormalization(axis=(1, 2)), X3),
    ("Average()", K.Average(), L.Average(), [X3, data(2, 6, 3), data(2, 6, 3)]),
    ("Maximum()", K.Maximum(), L.Maximum(), [X3, data(2, 6, 3)]),
    ("Minimum()", K.Minimum(), L.Minimum(), [X3, data(2, 6, 3)]),
    ("Subtract()", K.Subtract(), L.Subtract(), [X3, data(2, 6, 3)]),
    ("Dot(axes=1) [2D, 2D]", K.Dot(axes=1), L.Dot(axes=1), [data(2, 5), data(2, 5)]),
    ("Dot(axes=(1, 2))", K.Dot(axes=(1, 2)), L.Dot(axes=(1, 2)), [X3, data(2, 4, 6)]),
    ("Dot(axes=2, normalize=True)", K.Dot(axes=2, normalize=True),
     L.Dot(axes=2, normalize=True), [X3, data(2, 5, 3)]),
    ("Dot(axes=(1, 1)) [3D, 2D]", K.Dot(axes=(1, 1)), L.Dot(axes=(1, 1)), [X3, data(2, 6)]),
    ("ConvLSTM2D(4, 3)", K.ConvLSTM2D(4, 3), L.ConvLSTM2D(4, 3), data(2, 3, 6, 6, 2)),
    ("ConvLSTM2D(4, 3, 2, 'same', return_sequences, go_backwards)",
     K.ConvLSTM2D(4, 3, strides=2, padding="same", return_sequences=True, go_backwards=True),
     L.ConvLSTM2D(4, 3, strides=2, padding="same", return_sequences=True, go_backwards=True),
     data(2, 3, 6, 6, 2)),
]

HELPERS = ["add", "subtract", "multiply", "average", "maximum", "minimum", "concatenate", "dot"]


def commit() -> str:
    """The checkout's commit (with ``+changes`` when the tree differs from it)."""
    repo = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo,
                          capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                           capture_output=True, text=True, check=False).stdout.strip()
    return f"{head or 'unknown'}{' +changes' if dirty else ''}"


def count(tree):
    return int(sum(np.size(leaf) for leaf in jax.tree.leaves(tree)))


def missing_args(keras_layer, mf_layer):
    """Keras constructor arguments (its get_config keys) that mirrorfit's layer lacks."""
    fields = {f.name for f in dataclasses.fields(mf_layer)}
    return sorted(set(keras_layer.get_config()) - KERAS_ONLY_ARGS - fields)


def compare(keras_layer, mf_layer, inputs):
    """(max abs diff, Keras params, mirrorfit params, weights agree, missing args)."""
    expected = np.asarray(keras_layer(inputs))
    variables = dict(mf_layer.init(jax.random.key(0), inputs))
    params = dict(variables.get("params", {}))
    keras_weights = {w.name: np.asarray(w.numpy()) for w in keras_layer.weights}
    same = sorted((k, v.shape) for k, v in keras_weights.items()) == sorted(
        (k, tuple(v.shape)) for k, v in params.items())
    if same:
        variables["params"] = {k: keras_weights[k] for k in params}
    out = np.asarray(mf_layer.apply(variables, inputs))
    diff = float(np.max(np.abs(out - expected))) if out.shape == expected.shape else float("nan")
    return diff, count(keras_weights), count(params), same, missing_args(keras_layer, mf_layer)


def activity_penalty_case():
    """ActivityRegularization's penalty: Keras' layer.losses vs mirrorfit's sown loss."""
    keras_layer = K.ActivityRegularization(0.1, 0.01)
    keras_layer(X3)
    expected = float(sum(np.asarray(v) for v in keras_layer.losses))
    _, state = L.ActivityRegularization(0.1, 0.01).apply({}, X3, mutable=["losses"])
    return abs(float(sum(jax.tree.leaves(state["losses"]))) - expected)


def input_layer_case():
    """``Sequential([InputLayer(shape=(5,)), Dense(3)])`` in both, with equal weights."""
    kmodel = keras.Sequential([K.InputLayer(shape=(5,)), K.Dense(3)])
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        model = mf.Sequential([L.InputLayer(input_shape=(5,)), L.Dense(3)])
    model.set_weights(kmodel.get_weights())
    x = data(4, 5)
    diff = float(np.max(np.abs(model.predict(x, verbose=0) - np.asarray(kmodel(x)))))
    return diff, kmodel.count_params(), model.count_params(), len(kmodel.layers), len(model.layers)


def helpers_case():
    """The functional merge helpers on two inputs, in one model each."""
    ka, kb = keras.Input((4,)), keras.Input((4,))
    kmodel = keras.Model([ka, kb], K.concatenate(
        [getattr(K, h)([ka, kb]) for h in HELPERS]))
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        a, b = L.Input((4,)), L.Input((4,))
        model = mf.Model([a, b], L.concatenate([getattr(L, h)([a, b]) for h in HELPERS]))
    x = [data(3, 4), data(3, 4)]
    return float(np.max(np.abs(model.predict(x, verbose=0) - np.asarray(kmodel(x)))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the Markdown table here")
    args = parser.parse_args()
    lines = [
        "# Keras 3 parity of issue 29's layers",
        "",
        (f"keras {keras.__version__} (backend {keras.backend.backend()}), jax "
         f"{jax.__version__}, mirrorfit at commit {commit()}; Python "
         f"{platform.python_version()}, {jax.devices()[0].platform.upper()}. Command: "
         "`KERAS_BACKEND=jax PYTHONPATH=. python benchmarks/keras_parity_layers.py` with "
         "a Python that has keras."),
        "",
        ("Each row: the same arguments, the Keras weights copied into mirrorfit by name, the "
         "same float32 input. Random layers at inference (both the identity)."),
        "",
        ("| layer | max abs diff | params Keras | params mirrorfit | weight names/shapes | "
         "Keras args mirrorfit lacks |"),
        "|---|---:|---:|---:|---|---|",
    ]
    for label, keras_layer, mf_layer, inputs in CASES:
        diff, nk, nm, same, missing = compare(keras_layer, mf_layer, inputs)
        lines.append(f"| `{label}` | {diff:.2e} | {nk} | {nm} | {'same' if same else 'DIFFER'}"
                     f" | {', '.join(missing) or '-'} |")
    diff, nk, nm, lk, lm = input_layer_case()
    lines.append(f"| `Sequential([InputLayer(shape=(5,)), Dense(3)])` | {diff:.2e} | {nk} | "
                 f"{nm} | model.layers: {lk} vs {lm} | - |")
    lines.append(f"| `ActivityRegularization(0.1, 0.01)` penalty | "
                 f"{activity_penalty_case():.2e} | 0 | 0 | same | - |")
    lines.append(f"| merge helpers `{', '.join(HELPERS)}` in a model | {helpers_case():.2e} | "
                 "0 | 0 | same | - |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
