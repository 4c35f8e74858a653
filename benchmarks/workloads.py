"""Benchmark workloads: the Flax modules, their input shapes and the random data sets.

Every case (hand-written, mirrorfit, Keras) trains the same architecture on the same
seeded data, so throughputs within one run are comparable.
"""

from typing import NamedTuple

import flax.linen as nn
import numpy as np


class CNN(nn.Module):
    """Two strided 3x3 convolutions and a dense softmax head.

    Inputs ``[batch, 32, 32, 3]``, outputs class probabilities ``[batch, 10]``.
    """

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3), strides=2)(x))
        x = nn.relu(nn.Conv(32, (3, 3), strides=2)(x))
        x = x.reshape(x.shape[0], -1)
        return nn.softmax(nn.Dense(10)(x))


class Workload(NamedTuple):
    """A model and the shape of one example."""

    module: nn.Module  # maps ``[batch, *input_shape]`` to probabilities ``[batch, 10]``
    input_shape: tuple  # one example's shape, without the batch dim


def get_workload(name: str) -> Workload:
    """Returns the named workload: ``"mlp"`` (784->128 relu->10) or ``"cnn"`` (32x32x3)."""
    if name == "mlp":
        module = nn.Sequential([nn.Dense(128), nn.relu, nn.Dense(10), nn.softmax])
        return Workload(module, (784,))
    if name == "cnn":
        return Workload(CNN(), (32, 32, 3))
    raise ValueError(f"model must be 'mlp' or 'cnn'. Received: model={name!r}")


def make_data(input_shape: tuple, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Returns standard-normal float32 inputs ``[n, *input_shape]`` and int32 labels ``[n]`` in [0, 10)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, *input_shape), dtype=np.float32)
    y = rng.integers(0, 10, size=n, dtype=np.int32)
    return x, y
