"""Conv1DTranspose and Conv3DTranspose: Keras' weight shapes and parameter counts, and the
transposed convolution as the adjoint of the NumPy forward convolution (Conv2DTranspose and
the other convolutions: test_layers.py)."""

import math

import jax
import numpy as np
import pytest

from mirrorfit import layers

RNG = np.random.default_rng(0)


def np_conv(z, w, stride):
    """Keras Conv{1,3}D with "valid" padding, no bias, in NumPy: ``w [*k, in, out]``."""
    k = w.shape[:-2]
    out = [(n - kk) // stride + 1 for n, kk in zip(z.shape[1:-1], k)]
    y = np.zeros((z.shape[0], *out, w.shape[-1]))
    for pos in np.ndindex(*out):
        window = tuple(slice(p * stride, p * stride + kk) for p, kk in zip(pos, k))
        patch = z[(slice(None), *window)]
        y[(slice(None), *pos)] = np.tensordot(patch, w, axes=(list(range(1, z.ndim)),
                                                              list(range(w.ndim - 1))))
    return y


@pytest.mark.parametrize("cls, rank, kernel, stride", [
    (layers.Conv1DTranspose, 1, 3, 2),
    (layers.Conv3DTranspose, 3, 2, 2),
])
def test_conv_transpose_is_the_adjoint_of_the_forward_convolution(cls, rank, kernel, stride):
    in_channels, filters, n = 3, 4, 3
    layer = cls(filters, kernel, strides=stride, use_bias=False)
    y = RNG.normal(size=(2, *(n,) * rank, in_channels)).astype(np.float32)
    w = RNG.normal(size=(*(kernel,) * rank, filters, in_channels)).astype(np.float32)
    out = np.asarray(layer.apply({"params": {"kernel": w}}, y), np.float64)
    length = (n - 1) * stride + max(kernel, stride)  # Keras' "valid" output length
    assert out.shape == (2, *(length,) * rank, filters)
    # <conv(z, w), y> == <z, conv_transpose(y, w)>: w is the forward kernel [*k, filters, in].
    z = RNG.normal(size=out.shape)
    np.testing.assert_allclose(np.sum(np_conv(z, w, stride) * y), np.sum(z * out), rtol=1e-4)

    # Keras' weights and parameter count, and "same" padding's output: n * strides.
    same = cls(5, 3, strides=2, padding="same")
    x = jax.ShapeDtypeStruct((1, *(4,) * rank, 2), np.float32)
    variables, shape = jax.eval_shape(lambda a: same.init_with_output(jax.random.key(0), a)[::-1],
                                      x)
    assert shape.shape == (1, *(8,) * rank, 5)
    assert variables["params"]["kernel"].shape == (*(3,) * rank, 5, 2)  # [*k, filters, in]
    count = sum(math.prod(v.shape) for v in jax.tree.leaves(variables))
    assert count == 3**rank * 5 * 2 + 5  # Keras: prod(kernel_size) * filters * in + filters
