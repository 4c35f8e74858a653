"""Benchmark workloads: the Flax modules, their input shapes and the random data sets.

Every case (hand-written, mirrorfit, Keras) trains the same architecture on the same
seeded data (``synthetic.make_data``), so throughputs within one run are comparable.
"""

from typing import NamedTuple

import functools

import flax.linen as nn
import jax.numpy as jnp

from synthetic import input_shape


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


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions with BatchNorm and an identity (or 1x1) shortcut."""

    filters: int
    strides: int = 1
    dtype: jnp.dtype = jnp.bfloat16

    @nn.compact
    def __call__(self, x, train: bool):
        conv = functools.partial(nn.Conv, use_bias=False, dtype=self.dtype)
        norm = functools.partial(nn.BatchNorm, use_running_average=not train, momentum=0.9,
                                 dtype=self.dtype)
        y = nn.relu(norm()(conv(self.filters, (3, 3), self.strides)(x)))
        y = norm()(conv(self.filters, (3, 3))(y))
        if x.shape != y.shape:
            x = norm()(conv(self.filters, (1, 1), self.strides)(x))
        return nn.relu(x + y)


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 images (CIFAR variant: 3x3 stem, no max-pool), bf16 compute.

    Inputs ``[batch, 32, 32, 3]`` (any float dtype), outputs float32 logits ``[batch, 10]``.
    Params are float32; convolutions and BatchNorm run in ``dtype``. ``width`` scales the four
    stages' channels (64, 128, 256, 512 at ``width=64``); smaller widths are for smoke tests.
    """

    width: int = 64
    dtype: jnp.dtype = jnp.bfloat16

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = x.astype(self.dtype)
        x = nn.Conv(self.width, (3, 3), use_bias=False, dtype=self.dtype)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, dtype=self.dtype)(x))
        for stage in range(4):
            for block in range(2):
                strides = 2 if stage > 0 and block == 0 else 1
                x = BasicBlock(self.width * 2**stage, strides, self.dtype)(x, train)
        return nn.Dense(10, dtype=jnp.float32)(x.mean(axis=(1, 2)))


class Workload(NamedTuple):
    """A model and the shape of one example."""

    module: nn.Module  # maps ``[batch, *input_shape]`` to probabilities ``[batch, 10]``
    input_shape: tuple  # one example's shape, without the batch dim


def get_workload(name: str) -> Workload:
    """Returns the named workload: ``"mlp"`` (784->128 relu->10) or ``"cnn"`` (32x32x3)."""
    shape = input_shape(name)
    if name == "mlp":
        return Workload(nn.Sequential([nn.Dense(128), nn.relu, nn.Dense(10), nn.softmax]), shape)
    return Workload(CNN(), shape)

