"""`InputLayer`: Keras' layer form of `Input`, for the first entry of a ``Sequential`` list.

``InputLayer(shape=(4,))`` holds the symbolic input ``output`` (a `KerasTensor`);
``Sequential([InputLayer(shape=(4,)), Dense(8)])`` is ``Sequential([Input((4,)), Dense(8)])``,
and, as in Keras, it is not one of the model's layers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mirrorfit._src.layers.graph.functional import Input, KerasTensor


class InputLayer:
    """The input of a model, as ``keras.layers.InputLayer``.

    Args:
        shape: the feature shape, without the batch axis, e.g. ``(28, 28, 1)``.
        batch_size: an optional fixed batch size (recorded only).
        dtype: the input dtype; default ``"float32"``.
        sparse: must be ``None`` or ``False`` (no sparse tensors on JAX, as Keras' JAX backend).
        batch_shape: the full shape including the batch axis, instead of ``shape``.
        input_tensor: an existing `KerasTensor` (from `Input`) to use as this layer's output.
        optional: must be ``False`` (optional inputs are not supported).
        name: the input's name (also the key for dict inputs).
        input_shape: tf.keras 2's name for ``shape``.
        batch_input_shape: tf.keras 2's name for ``batch_shape``.

    Attributes:
        output: the `KerasTensor` of shape ``(batch_size, *shape)``.

    Raises:
        ValueError: both ``shape`` and ``batch_shape`` (or neither, without ``input_tensor``);
            ``input_tensor`` that is not a `KerasTensor` or disagrees with the other
            arguments; ``sparse=True`` or ``optional=True``.

    Example:
        >>> mf.layers.InputLayer(input_shape=(4,)).output  # as mf.layers.Input((4,))
        <KerasTensor shape=(None, 4), dtype=float32, name=None>
        >>> layers = [mf.layers.InputLayer(shape=(4,)), mf.layers.Dense(2)]  # a Sequential's
    """

    def __init__(self, shape: Any = None, batch_size: int | None = None, dtype: Any = None,
                 sparse: bool | None = None, batch_shape: Any = None,
                 input_tensor: KerasTensor | None = None, optional: bool = False,
                 name: str | None = None, *, input_shape: Any = None,
                 batch_input_shape: Any = None) -> None:
        if sparse or optional:
            raise ValueError("InputLayer supports dense, required inputs only. "
                             f"Received: sparse={sparse!r}, optional={optional!r}")
        shape = input_shape if shape is None else shape
        batch_shape = batch_input_shape if batch_shape is None else batch_shape
        if input_tensor is not None:
            if not isinstance(input_tensor, KerasTensor):
                raise ValueError("input_tensor must be a KerasTensor (from mf.layers.Input). "
                                 f"Received: input_tensor={input_tensor!r}")
            t = input_tensor
            if ((shape is not None and tuple(shape) != t.shape[1:])
                    or (batch_shape is not None and tuple(batch_shape) != t.shape)
                    or (batch_size is not None and batch_size != t.shape[0])
                    or (dtype is not None and np.dtype(dtype) != t.dtype)):
                raise ValueError(
                    "InputLayer's shape, batch_size, batch_shape and dtype must agree with "
                    f"input_tensor, or be left out. Received: shape={shape!r}, "
                    f"batch_size={batch_size!r}, batch_shape={batch_shape!r}, dtype={dtype!r}, "
                    f"input_tensor={t!r}")
            self.output = input_tensor
        else:
            if shape is not None and batch_shape is not None:
                raise ValueError("InputLayer takes shape (without the batch axis) or "
                                 f"batch_shape, not both. Received: shape={shape!r}, "
                                 f"batch_shape={batch_shape!r}")
            self.output = Input(shape, batch_size, dtype, name, batch_shape)
        self.name = name or self.output.name or "input_layer"

    @property
    def batch_shape(self) -> tuple[int | None, ...]:
        """The input's shape with its batch axis (``None`` unless ``batch_size`` was given)."""
        return self.output.shape

    @property
    def dtype(self) -> str:
        """The input's dtype name (``"float32"``)."""
        return self.output.dtype.name

    def get_config(self) -> dict[str, Any]:
        """Keras' config: ``batch_shape``, ``dtype``, ``sparse``, ``name``."""
        return {"batch_shape": list(self.batch_shape), "dtype": self.dtype, "sparse": False,
                "name": self.name}

    def __repr__(self) -> str:
        return f"<InputLayer batch_shape={self.batch_shape}, dtype={self.dtype}>"
