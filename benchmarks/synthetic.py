"""The seeded random data sets, with NumPy only, so that peer frameworks' virtualenvs can make them.

Every case (hand-written, mirrorfit, Keras 3, tf.keras) trains on exactly these arrays.
"""

import numpy as np

INPUT_SHAPES = {"mlp": (784,), "cnn": (32, 32, 3)}  # model name -> one example's shape


def input_shape(model: str) -> tuple:
    """Returns one example's shape for ``model`` (``"mlp"`` or ``"cnn"``), without the batch dim.

    Raises:
        ValueError: if ``model`` is not a benchmark model.
    """
    if model not in INPUT_SHAPES:
        raise ValueError(f"model must be one of {sorted(INPUT_SHAPES)}. Received: model={model!r}")
    return INPUT_SHAPES[model]


def make_data(input_shape: tuple, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Returns standard-normal float32 inputs ``[n, *input_shape]`` and int32 labels ``[n]`` in [0, 10)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, *input_shape), dtype=np.float32)
    y = rng.integers(0, 10, size=n, dtype=np.int32)
    return x, y


def make_tokens(n: int, seq: int, vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Returns uniform random int32 token inputs ``[n, seq]`` and their targets ``[n, seq]``.

    The targets are the inputs shifted by one (next-token prediction): both are windows of
    one ``[n, seq + 1]`` array.
    """
    tokens = np.random.default_rng(seed).integers(0, vocab, size=(n, seq + 1), dtype=np.int32)
    return tokens[:, :-1], tokens[:, 1:]
