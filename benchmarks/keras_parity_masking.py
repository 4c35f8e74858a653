"""Keras 3 parity of masking, variable-length inputs, Bidirectional and TimeDistributed.

    KERAS_BACKEND=jax PYTHONPATH=. /path/to/keras-venv/bin/python \\
        benchmarks/keras_parity_masking.py [--out benchmarks/results/keras-parity-masking.md]

Each case builds the same model in Keras 3 (jax backend) and in mirrorfit, copies the Keras
weights into the mirrorfit model (``get_weights``/``set_weights``: the same order and shapes
is part of what is checked), runs both on the same inputs (token ids with 0 as padding, in
front or behind, or float sequences) and prints the largest absolute difference of the
outputs. Padded positions are compared too: they hold what Keras gives there (the repeated
last output, or zeros under Bidirectional). Needs a virtualenv with ``keras`` and
``mirrorfit``'s dependencies; nothing here is timed.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import keras
import numpy as np

import mirrorfit as mf

RNG = np.random.default_rng(0)
VOCAB, LENGTH = 20, 7
TOLERANCE = 1e-5  # largest absolute difference counted as equal (float32)


def _tokens(padding: str) -> np.ndarray:
    x = np.zeros((4, LENGTH), np.int32)
    for row, length in enumerate((LENGTH, 4, 2, 1)):
        words = RNG.integers(1, VOCAB, length)
        if padding == "pre":
            x[row, LENGTH - length:] = words
        else:
            x[row, :length] = words
    return x


def _floats() -> np.ndarray:
    x = RNG.normal(size=(3, LENGTH, 3)).astype(np.float32)
    x[1, 4:] = 0.0  # padded steps for Masking
    x[2, 2:] = 0.0
    return x


def _token_model(lib, *tail, mask_zero=True):
    inputs = lib.Input(shape=(None,), dtype="int32")
    x = lib.layers.Embedding(VOCAB, 5, mask_zero=mask_zero)(inputs)
    for make in tail:
        x = make(lib.layers)(x)
    return lib.Model(inputs, x)


def _float_model(lib, *tail):
    inputs = lib.Input(shape=(None, 3))
    x = inputs
    for make in tail:
        x = make(lib.layers)(x)
    return lib.Model(inputs, x)


def _merge_model(lib, merge, mask_both=True):
    """Two float sequences, Masking on the first (and the second), a merge layer, then an
    LSTM that reads the merged mask."""
    a, b = lib.Input(shape=(LENGTH, 3)), lib.Input(shape=(LENGTH, 3))
    masked = [lib.layers.Masking()(a), lib.layers.Masking()(b) if mask_both else b]
    merged = merge(lib.layers)(masked)
    return lib.Model([a, b], lib.layers.LSTM(3, return_sequences=True)(merged))


def _attention_model(lib):
    inputs = lib.Input(shape=(None,), dtype="int32")
    x = lib.layers.Embedding(VOCAB, 4, mask_zero=True)(inputs)
    return lib.Model(inputs, lib.layers.MultiHeadAttention(num_heads=2, key_dim=3)(x, x))


def _imdb_model(lib):  # keras-io bidirectional_lstm_imdb.py, scaled down, mask_zero=True
    inputs = lib.Input(shape=(None,), dtype="int32")
    x = lib.layers.Embedding(VOCAB, 8, mask_zero=True)(inputs)
    x = lib.layers.Bidirectional(lib.layers.LSTM(4, return_sequences=True))(x)
    x = lib.layers.Bidirectional(lib.layers.LSTM(4))(x)
    return lib.Model(inputs, lib.layers.Dense(1, activation="sigmoid")(x))


CASES = {
    "masked LSTM, return_sequences, post-padding": (
        lambda lib: _token_model(lib, lambda L: L.LSTM(3, return_sequences=True)), "post"),
    "masked GRU, go_backwards, pre-padding": (
        lambda lib: _token_model(lib, lambda L: L.GRU(3, go_backwards=True,
                                                      return_sequences=True)), "pre"),
    "masked SimpleRNN, return_state": (
        lambda lib: _token_model(lib, lambda L: L.SimpleRNN(3, return_state=True)), "post"),
    "Bidirectional(LSTM, return_sequences), masked": (
        lambda lib: _token_model(lib, lambda L: L.Bidirectional(
            L.LSTM(3, return_sequences=True))), "post"),
    "Bidirectional(GRU, merge_mode='sum'), masked": (
        lambda lib: _token_model(lib, lambda L: L.Bidirectional(L.GRU(3), merge_mode="sum")),
        "pre"),
    "Bidirectional(LSTM, merge_mode=None, return_state), masked": (
        lambda lib: _token_model(lib, lambda L: L.Bidirectional(
            L.LSTM(2, return_sequences=True, return_state=True), merge_mode=None)), "post"),
    "GlobalAveragePooling1D, masked": (
        lambda lib: _token_model(lib, lambda L: L.Dense(3),
                                 lambda L: L.GlobalAveragePooling1D()), "post"),
    "MultiHeadAttention self-attention, masked": (_attention_model, "post"),
    "TimeDistributed(Dense)": (
        lambda lib: _float_model(lib, lambda L: L.TimeDistributed(L.Dense(4, "relu"))),
        "floats"),
    "BatchNormalization passes the mask to LSTM": (
        lambda lib: _token_model(lib, lambda L: L.BatchNormalization(),
                                 lambda L: L.LSTM(3, return_sequences=True)), "post"),
    "Masking + LSTM": (
        lambda lib: _float_model(lib, lambda L: L.Masking(), lambda L: L.LSTM(3)), "floats"),
    "bidirectional_lstm_imdb (scaled down)": (_imdb_model, "pre"),
    "Masking x2 + Add + LSTM": (lambda lib: _merge_model(lib, lambda L: L.Add()), "two"),
    "Masking x2 + Maximum + LSTM": (
        lambda lib: _merge_model(lib, lambda L: L.Maximum()), "two"),
    "Masking + unmasked, Minimum + LSTM": (
        lambda lib: _merge_model(lib, lambda L: L.Minimum(), mask_both=False), "two"),
    "Masking x2 + Multiply + LSTM": (
        lambda lib: _merge_model(lib, lambda L: L.Multiply()), "two"),
    "Masking + unmasked, Multiply + LSTM": (
        lambda lib: _merge_model(lib, lambda L: L.Multiply(), mask_both=False), "two"),
    "Masking x2 + Concatenate + LSTM": (
        lambda lib: _merge_model(lib, lambda L: L.Concatenate()), "two"),
    "Masking + unmasked, Concatenate(axis=1) + LSTM": (
        lambda lib: _merge_model(lib, lambda L: L.Concatenate(axis=1), mask_both=False),
        "two"),
}


def _inputs(kind: str) -> np.ndarray | list[np.ndarray]:
    if kind == "two":  # two float sequences, zero (masked) steps in different places
        first, second = _floats(), _floats()
        second[0, 5:], second[1, :2], second[1, 4:] = 0.0, 0.0, 1.0
        return [first, second]
    return _floats() if kind == "floats" else _tokens(kind)


def run_case(build, kind: str) -> dict[str, object]:
    keras.utils.set_random_seed(0)
    reference = build(keras)
    model = build(mf)  # one CPU device: no strategy scope needed
    x = _inputs(kind)
    if not model.built:
        model.build(x.shape[1:])
    weights = reference.get_weights()
    ours = model.get_weights()
    shapes_match = [w.shape for w in weights] == [w.shape for w in ours]
    model.set_weights(weights)
    expected = reference.predict(x, verbose=0)
    got = model.predict(x, verbose=0)
    diffs = [float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
             for a, b in zip(_leaves(expected), _leaves(got))]
    return {"params": (reference.count_params(), model.count_params()),
            "weights": shapes_match, "max_abs_diff": max(diffs)}


def run_masked_batch_norm() -> dict[str, object]:
    """``BatchNormalization(momentum=0.9)`` called in training on float steps with a mask:
    outputs and the updated moving statistics (Keras' masked ``_moments``)."""
    x = _floats() * 3.0 + 1.0
    mask = RNG.random(x.shape[:2]) < 0.6
    reference = keras.layers.BatchNormalization(momentum=0.9)
    expected = np.asarray(reference(x, training=True, mask=mask))
    layer = mf.layers.BatchNormalization(momentum=0.9)
    variables = layer.init(jax.random.key(0), x)
    got, state = layer.apply(variables, x, training=True, mask=mask, mutable=["batch_stats"])
    moving = [reference.moving_mean.numpy(), reference.moving_variance.numpy()]
    ours = [state["batch_stats"]["moving_mean"], state["batch_stats"]["moving_variance"]]
    diffs = [float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
             for a, b in zip([expected, *moving], [got, *ours])]
    return {"params": (reference.count_params(), 4 * x.shape[-1]), "weights": True,
            "max_abs_diff": max(diffs)}


def _two_output_model(lib):
    """Per-step tags under the Embedding mask and a per-sequence score (the mask ends at
    GlobalAveragePooling1D), compiled with a loss, loss weight and metric per output."""
    inputs = lib.Input(shape=(None,), dtype="int32")
    h = lib.layers.Embedding(VOCAB, 4, mask_zero=True)(inputs)
    h = lib.layers.LSTM(5, return_sequences=True)(h)
    tags = lib.layers.TimeDistributed(lib.layers.Dense(3))(h)
    score = lib.layers.Dense(1)(lib.layers.GlobalAveragePooling1D()(h))
    model = lib.Model(inputs, {"tags": tags, "score": score})
    model.compile(optimizer="sgd", loss={
        "tags": lib.losses.SparseCategoricalCrossentropy(from_logits=True), "score": "mse"},
        loss_weights={"tags": 1.0, "score": 0.5}, metrics={"tags": ["accuracy"]})
    return model


def run_two_output_loss() -> dict[str, object]:
    """`_two_output_model`'s ``evaluate`` logs on one batch (loss, each output's loss, the
    masked accuracy), Keras vs mirrorfit at equal weights."""
    keras.utils.set_random_seed(0)
    reference, model = _two_output_model(keras), _two_output_model(mf)
    x = _tokens("post")
    targets = {"tags": RNG.integers(0, 3, x.shape), "score": RNG.normal(size=(len(x), 1))}
    shapes_match = ([w.shape for w in reference.get_weights()]
                    == [w.shape for w in model.get_weights()])
    model.set_weights(reference.get_weights())
    expected = reference.evaluate(x, targets, batch_size=len(x), verbose=0, return_dict=True)
    got = model.evaluate(x, targets, batch_size=len(x), verbose=0, return_dict=True)
    return {"params": (reference.count_params(), model.count_params()),
            "weights": shapes_match and set(expected) == set(got),
            "max_abs_diff": max(abs(expected[k] - got[k]) for k in expected)}


def _leaves(outputs):
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write the table here too")
    args = parser.parse_args()
    lines = [
        "# Keras 3 parity: masking, variable-length inputs, Bidirectional, TimeDistributed",
        "",
        (f"`benchmarks/keras_parity_masking.py`: Keras {keras.__version__} (jax backend) vs "
        f"mirrorfit at equal weights, CPU, Python {platform.python_version()}. Inputs: 4 "
        f"token sequences of lengths {LENGTH}, 4, 2, 1 (0-padded) or 3 float sequences with "
        "zero (masked) tails (two such inputs, masked in different places, for the merge "
        "layers); every output position is compared, padded ones included."),
        "",
        "| case | params (Keras / mirrorfit) | weight shapes and order | max abs diff | equal |",
        "|---|---|---|---|---|"]
    rows = [(name, run_case(build, kind)) for name, (build, kind) in CASES.items()]
    rows.append(("BatchNormalization in training with a mask: outputs and moving statistics",
                 run_masked_batch_norm()))
    rows.append(("two outputs, each loss under its own mask: evaluate's logs",
                 run_two_output_loss()))
    for name, row in rows:
        keras_params, our_params = row["params"]
        diff = float(row["max_abs_diff"])
        lines.append(f"| {name} | {keras_params} / {our_params} | "
                     f"{'same' if row['weights'] else 'DIFFERENT'} | {diff:.2e} | "
                     f"{'yes' if diff <= TOLERANCE else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
