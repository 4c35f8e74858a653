"""Keras' summary table: per-layer shapes and counts, totals, and the rendered text."""

import jax
import numpy as np
import pytest

from mirrorfit import layers
from mirrorfit._src import functional
from mirrorfit._src.layers import summary


def shapes_of(module, x):
    return jax.eval_shape(module.init, jax.random.key(0), x)


def test_sequential_summary_counts_and_shapes_match_keras():
    module, _ = functional.sequential_module([
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
    module, _ = functional.sequential_module([layers.Dense(2), layers.Dense(1)])
    variables = shapes_of(module, np.zeros((1, 5)))
    with pytest.raises(ValueError, match="sample_input"):
        summary.summary_rows(module, variables)
    rows = summary.summary_rows(module, variables, np.zeros((7, 5), np.float32)).rows
    assert [r.output_shape for r in rows] == [(None, 2), (None, 1)]


def test_readable_size_uses_keras_units():
    assert summary.readable_size(0) == "0.00 B"
    assert summary.readable_size(1536) == "1.50 KB"
    assert summary.readable_size(3 * 1024 ** 2) == "3.00 MB"
