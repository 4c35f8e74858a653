"""Keras parity of mirrorfit's utilities: the same inputs through ``keras`` and ``mirrorfit``.

Run with a Python that has Keras 3 (jax backend) and sees mirrorfit::

    KERAS_BACKEND=jax PYTHONPATH=. /work/venvs/keras/bin/python benchmarks/keras_parity_utils.py \
        --out benchmarks/results/keras-parity-utils-cpu-2026-11-26.md

Sections (each row: the largest absolute difference over the outputs, and whether shapes and
dtypes agree too):

* ``utils``: ``pad_sequences`` (padding/truncating pre and post, maxlen, value, float and
  string dtypes, multi-feature steps), ``to_categorical`` and ``normalize``;
* ``constraints``: ``MaxNorm``, ``NonNeg``, ``UnitNorm``, ``MinMaxNorm`` on the same Dense-
  and Conv2D-shaped arrays, and their ``get_config``;
* ``activations``: every function both libraries name, at default and non-default arguments;
* ``initializers``: one draw of each class, mirrorfit's with key ``PRNGKey(0)`` and Keras'
  with ``seed=0``.
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

import jax
import keras
import numpy as np

import mirrorfit as mf

RNG = np.random.default_rng(0)
SEQUENCES = [[1, 2, 3, 4, 5], [6], [], [7, 8, 9]]
DENSE = RNG.normal(size=(6, 4)).astype(np.float32) * 2
CONV = RNG.normal(size=(3, 3, 2, 5)).astype(np.float32)
X = np.linspace(-6, 6, 48, dtype=np.float32).reshape(6, 8)


def _compare(got: Any, want: Any) -> tuple[float, bool]:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("nan"), False
    if got.dtype == object or want.dtype == object or got.dtype.kind in "USO":
        return 0.0 if got.tolist() == want.tolist() else float("nan"), got.dtype == want.dtype
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
    return diff, got.dtype == want.dtype


def utils_cases() -> list[tuple[str, Callable[[Any], Any]]]:
    cases: list[tuple[str, Callable[[Any], Any]]] = []
    for kwargs in ({}, {"padding": "post"}, {"maxlen": 2}, {"maxlen": 2, "truncating": "post"},
                   {"maxlen": 6, "padding": "post", "value": -1},
                   {"dtype": "float32", "value": 0.5}):
        cases.append((f"pad_sequences({kwargs})",
                      lambda m, kw=kwargs: m.utils.pad_sequences(SEQUENCES, **kw)))
    cases.append(("pad_sequences(strings, dtype=object)", lambda m: m.utils.pad_sequences(
        [["a", "b"], ["c"]], dtype=object, value="<pad>")))
    cases.append(("pad_sequences(steps of 2 features)", lambda m: m.utils.pad_sequences(
        [np.ones((3, 2)), np.full((1, 2), 2.0)], dtype="float32", padding="post")))
    cases.append(("to_categorical([3, 0, 2])", lambda m: m.utils.to_categorical([3, 0, 2])))
    cases.append(("to_categorical([[1], [0]], 4)",
                  lambda m: m.utils.to_categorical([[1], [0]], 4)))
    cases.append(("to_categorical([[1, 2], [0, 1]])",
                  lambda m: m.utils.to_categorical(np.array([[1, 2], [0, 1]]))))
    for axis, order in ((-1, 2), (1, 1), (-1, np.inf), (None, 2)):
        cases.append((f"normalize(axis={axis}, order={order})",
                      lambda m, a=axis, o=order: m.utils.normalize(DENSE, axis=a, order=o)))
    return cases


def constraint_cases() -> list[tuple[str, Callable[[Any], Any]]]:
    specs = [("MaxNorm", {}, DENSE), ("MaxNorm", {"max_value": 1.5, "axis": [0, 1, 2]}, CONV),
             ("NonNeg", {}, CONV), ("UnitNorm", {}, DENSE), ("UnitNorm", {"axis": -1}, CONV),
             ("MinMaxNorm", {}, DENSE),
             ("MinMaxNorm", {"min_value": 1.0, "max_value": 2.0, "rate": 0.3, "axis": 1}, DENSE)]
    cases: list[tuple[str, Callable[[Any], Any]]] = []
    for name, kwargs, w in specs:
        cases.append((f"{name}({kwargs}) on {w.shape}",
                      lambda m, n=name, kw=kwargs, w=w: np.asarray(
                          getattr(m.constraints, n)(**kw)(w))))
    return cases


def activation_cases() -> list[tuple[str, Callable[[Any], Any]]]:
    names = sorted(set(mf.activations.__all__) - {"get", "serialize", "deserialize"})
    names = [n for n in names if hasattr(keras.activations, n)]
    extra = {"relu": [{"negative_slope": 0.3}, {"max_value": 4.0}, {"threshold": 1.0},
                      {"negative_slope": 0.2, "max_value": 5.0, "threshold": 0.5}],
             "leaky_relu": [{"negative_slope": 0.1}], "elu": [{"alpha": 0.5}],
             "gelu": [{"approximate": True}], "softmax": [{"axis": 0}],
             "threshold": [{"threshold": 0.5, "default_value": -2.0}]}
    cases: list[tuple[str, Callable[[Any], Any]]] = []
    for name in names:
        for kwargs in ([{}] if name != "threshold" else []) + extra.get(name, []):
            cases.append((f"{name}({kwargs})", lambda m, n=name, kw=kwargs: np.asarray(
                getattr(m.activations, n)(X, **kw))))
    return cases


def initializer_rows() -> list[str]:
    """One ``[300, 200]`` draw (fan-in 300, fan-out 200) of each random class: mirrorfit's
    with key ``PRNGKey(0)``, Keras' with ``seed=0`` (its jax backend draws from
    ``PRNGKey(seed)``, so equal formulas give equal values); their statistics and largest
    difference."""
    rows = []
    for name in ("GlorotUniform", "GlorotNormal", "HeUniform", "HeNormal", "LecunUniform",
                 "LecunNormal", "RandomNormal", "RandomUniform", "TruncatedNormal",
                 "Orthogonal"):
        ours = np.asarray(getattr(mf.initializers, name)()(jax.random.PRNGKey(0), (300, 200)))
        theirs = np.asarray(getattr(keras.initializers, name)(seed=0)((300, 200)))
        diff = float(np.max(np.abs(ours - theirs)))
        rows.append(f"| {name} | {ours.std():.5f} | {theirs.std():.5f} | {diff:.2e} | "
                    f"[{ours.min():.4f}, {ours.max():.4f}] | "
                    f"[{theirs.min():.4f}, {theirs.max():.4f}] |")
    for name, kwargs in (("Constant", {"value": 0.3}), ("Identity", {"gain": 2.0}),
                         ("Zeros", {}), ("Ones", {})):
        ours = np.asarray(getattr(mf.initializers, name)(**kwargs)(jax.random.PRNGKey(0),
                                                                   (3, 4)))
        theirs = np.asarray(getattr(keras.initializers, name)(**kwargs)((3, 4)))
        rows.append(f"| {name}({kwargs}) | | | {float(np.max(np.abs(ours - theirs))):.2e} | | |")
    return rows


def known_differences() -> list[str]:
    try:
        keras.utils.normalize(DENSE, axis=0)
        theirs = "returns"
    except ValueError as err:
        theirs = f"raises `{type(err).__name__}` ({str(err)[:60]}...)"
    ours = np.linalg.norm(mf.utils.normalize(DENSE, axis=0), axis=0)
    return [(f"* `normalize(x [6, 4], axis=0)`: Keras {theirs} (it re-inserts the norm axis at "
            f"-1); mirrorfit divides each column by its norm (column norms now "
            f"{np.round(ours, 6).tolist()}).")]


def config_rows() -> list[str]:
    rows = []
    for name, kwargs in (("MaxNorm", {"max_value": 3.0, "axis": 1}), ("NonNeg", {}),
                         ("UnitNorm", {"axis": 2}),
                         ("MinMaxNorm", {"min_value": 0.5, "max_value": 2.0, "rate": 0.5})):
        ours = getattr(mf.constraints, name)(**kwargs).get_config()
        theirs = getattr(keras.constraints, name)(**kwargs).get_config()
        rows.append(f"| {name}({kwargs}).get_config() | {'equal' if ours == theirs else 'DIFFER'}"
                    f" | `{ours}` |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args()
    lines = [(f"# Keras parity of mirrorfit's utilities (keras {keras.__version__}, backend "
             f"{keras.backend.backend()}; mirrorfit {mf.__version__}; {platform.machine()} CPU)"),
             "", ("Generated by `benchmarks/keras_parity_utils.py`: the same inputs through "
             "`keras.<module>.<name>` and `mf.<module>.<name>`; `max |diff|` over all outputs, "
             "and whether shape and dtype agree."), ""]
    failures = 0
    for title, cases in (("utils", utils_cases()), ("constraints", constraint_cases()),
                         ("activations", activation_cases())):
        lines += [f"## {title}", "", "| case | max abs diff | shape and dtype equal |",
                  "| --- | --- | --- |"]
        for label, fn in cases:
            diff, same = _compare(fn(mf), fn(keras))
            ok = same and diff <= 1e-5
            failures += not ok
            lines.append(f"| `{label}` | {diff:.2e} | {'yes' if same else 'NO'} |")
        lines.append("")
    lines += ["## constraint configs", "", "| case | result | config |", "| --- | --- | --- |",
              *config_rows(), ""]
    lines += ["## initializers (one draw: mirrorfit with PRNGKey(0), Keras with seed=0)", "",
              ("| initializer | mirrorfit std | keras std | max abs diff | mirrorfit range | "
              "keras range |"), "| --- | --- | --- | --- | --- | --- |", *initializer_rows(), ""]
    lines += ["## known differences", "", *known_differences(), ""]
    lines.append(f"{failures} case(s) over 1e-5 or with another shape or dtype.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
