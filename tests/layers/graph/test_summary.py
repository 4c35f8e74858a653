"""Keras' summary table: per-layer shapes and counts, totals, and the rendered text."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from mirrorfit import layers
from mirrorfit._src.layers.graph import summary
from mirrorfit._src.layers.graph import sequential
from mirrorfit._src.layers.graph import functional


def shapes_of(module, x):
    return jax.eval_shape(module.init, jax.random.key(0), x)


def test_sequential_summary_counts_and_shapes_match_keras():
    module, _ = sequential.sequential_module([
        layers.Input((28, 28, 1)), layers.Conv2D(32, 3, activation="relu"),
        layers.BatchNormalization(), layers.MaxPooling2D(), layers.Flatten(), layers.Dense(10)])
    result = summary.summary_rows(module, shapes_of(module, np.zeros((1, 28, 28, 1))))
    rows = [(r.name, r.class_name, r.output_shape, r.params) for r in result.rows]
    assert rows == [
        ("conv2d", "Conv2D", (None, 26, 26, 32), 3 * 3 * 32 + 32),
        ("batch_normalization", "BatchNormalization", (None, 26, 26, 32), 4 * 32),
        ("max_pooling2d", "MaxPooling2D", (None, 13, 13, 32), 0),
        ("flatten", "Flatten", (None, 13 * 13 * 32), 0),
        ("dense", "Dense", (None, 10), 13 * 13 * 32 * 10 + 10)]
    assert result.non_trainable_params == 64  # moving mean and variance
    assert result.trainable_params == 320 + 64 + 54090
    text = summary.format_summary(result, "sequential")
    lines = text.splitlines()
    assert lines[0] == 'Model: "sequential"'
    assert lines[2].startswith("┃ Layer (type)") and "Output Shape" in lines[2]
    assert lines[2].endswith("Param # ┃") and len(lines[2]) == 88
    assert "│ conv2d (Conv2D)" in text and "(None, 26, 26, 32)" in text
    assert lines[-3:] == [" Total params: 54,538 (213.04 KB)",
                          " Trainable params: 54,474 (212.79 KB)",
                          " Non-trainable params: 64 (256.00 B)"]


def test_functional_summary_lists_inputs_and_frozen_layers_as_non_trainable():
    x = layers.Input((4,))
    frozen = layers.Dense(3, trainable=False)
    shared = layers.Dense(3)
    hidden = frozen(x)
    y = layers.Add()([shared(hidden), shared(layers.Activation("relu")(hidden))])
    module = functional.functional_module(x, y)
    result = summary.summary_rows(module, shapes_of(module, np.zeros((1, 4))))
    assert [(r.name, r.class_name, r.output_shape) for r in result.rows] == [
        ("input_layer", "InputLayer", (None, 4)), ("dense", "Dense", (None, 3)),
        ("activation", "Activation", (None, 3)), ("dense_1", "Dense", (None, 3)),
        ("add", "Add", (None, 3))]
    assert result.non_trainable_params == 15 and result.trainable_params == 12


def test_summary_needs_a_sample_input_without_an_input_layer():
    module, _ = sequential.sequential_module([layers.Dense(2), layers.Dense(1)])
    variables = shapes_of(module, np.zeros((1, 5)))
    with pytest.raises(ValueError, match="sample_input"):
        summary.summary_rows(module, variables)
    rows = summary.summary_rows(module, variables, np.zeros((7, 5), np.float32)).rows
    assert [r.output_shape for r in rows] == [(None, 2), (None, 1)]


def test_summary_of_a_module_without_mirrorfit_layers_raises_type_error():
    module = nn.Dense(2)
    with pytest.raises(TypeError, match="functional_module or sequential_module"):
        summary.summary_rows(module, shapes_of(module, np.zeros((1, 3))), np.zeros((1, 3)))


def test_readable_size_uses_keras_units():
    assert summary.readable_size(0) == "0.00 B"
    assert summary.readable_size(1536) == "1.50 KB"
    assert summary.readable_size(3 * 1024 ** 2) == "3.00 MB"


def branching_graph(m):
    """Two inputs, a shared Dense, a GRU with states and two heads (``m``: a layers module)."""
    a, b = m.Input((4,), name="a"), m.Input((6,), name="b")
    shared = m.Dense(3)
    hidden = m.Dense(3, activation="relu")(a)
    y = m.Add()([shared(hidden), shared(m.Dense(3)(b))])
    seq, state = m.GRU(2, return_state=True)(m.Reshape((3, 1))(y))
    return [a, b], [m.Dense(1)(seq), m.Dense(2, name="head2")(state)]


def our_summary_text(build, name):
    inputs, outputs = build(layers)
    module = functional.functional_module(inputs, outputs, name=name)
    sample = [np.zeros((1, *t.shape[1:]), np.float32) for t in inputs]
    variables = jax.eval_shape(module.init, jax.random.key(0), *sample)
    return summary.format_summary(summary.summary_rows(module, variables), name)


def test_branching_graph_summary_has_keras_connected_to_column():
    text = our_summary_text(branching_graph, "functional")
    lines = text.splitlines()
    assert len(lines[2]) == 108 and lines[2].rstrip("┃ ").endswith("Connected to")
    rows = [line for line in lines if line.startswith("│ ") and "(" in line.split("│")[1]]
    first_cells = [row.split("│")[1].strip() for row in rows]
    assert first_cells == ["a (InputLayer)", "b (InputLayer)", "dense_1 (Dense)",
                           "dense_2 (Dense)", "dense (Dense)", "add (Add)",
                           "reshape (Reshape)", "gru (GRU)", "dense_3 (Dense)",
                           "head2 (Dense)"]
    assert "dense[0][0], dense[1][0]" in text  # the shared layer's two calls
    assert "[(None, 2), (None, 2)]" in text and "gru[0][1]" in text


def test_summary_text_equals_keras_when_installed(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # Keras' console is as wide as the terminal
    keras = pytest.importorskip("keras", reason="Keras is not installed here; the expected "
                                "rows above are written from Keras' summary_utils")
    keras.backend.clear_session()  # Keras numbers default names per session
    inputs, outputs = branching_graph(keras.layers)
    lines = []
    keras.Model(inputs, outputs, name="functional").summary(
        line_length=108, print_fn=lambda line, line_break=None: lines.append(line))
    assert our_summary_text(branching_graph, "functional").rstrip("\n") == \
        "\n".join(lines).rstrip("\n")
