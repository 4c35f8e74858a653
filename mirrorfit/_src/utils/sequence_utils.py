"""`pad_sequences`: lists of variable-length sequences as one padded NumPy array, on the host,
as ``keras.utils.pad_sequences`` (keras/src/utils/sequence_utils.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def pad_sequences(sequences: Sequence[Any], maxlen: int | None = None, dtype: Any = "int32",
                  padding: str = "pre", truncating: str = "pre",
                  value: Any = 0.0) -> np.ndarray:
    """Pads (and truncates) sequences to one length, as ``keras.utils.pad_sequences``.

    Sequences shorter than the length get ``value`` before them (``padding="pre"``) or after
    them (``"post"``); longer ones lose their first (``truncating="pre"``) or last
    (``"post"``) steps. Runs in NumPy on the host, before the data enters ``fit``.

    Args:
        sequences: ``num_samples`` sequences (lists or arrays), each ``[length, *sample_shape]``
            with the same ``sample_shape`` (usually ``()``: token ids).
        maxlen: the output length in steps; ``None`` is the longest sequence's length.
        dtype: the output dtype; ``object`` for variable-length strings.
        padding: ``"pre"`` or ``"post"``: where the padding goes.
        truncating: ``"pre"`` or ``"post"``: which end of a longer sequence is dropped.
        value: the padding value (a float, or a string with ``dtype=object`` or a string
            dtype).

    Returns:
        An array ``[num_samples, maxlen, *sample_shape]`` of ``dtype``.

    Raises:
        ValueError: ``sequences`` is not a list of sequences, samples of different shapes,
            a string ``value`` with a numeric ``dtype``, or an unknown ``padding`` /
            ``truncating``.

    Example:
        >>> mf.utils.pad_sequences([[1], [2, 3], [4, 5, 6]])
        array([[0, 0, 1],
               [0, 2, 3],
               [4, 5, 6]], dtype=int32)
        >>> mf.utils.pad_sequences([[1], [2, 3], [4, 5, 6]], maxlen=2, padding="post")
        array([[1, 0],
               [2, 3],
               [5, 6]], dtype=int32)
    """
    if not hasattr(sequences, "__len__"):
        raise ValueError("sequences must be a list of sequences (lists or arrays). "
                         f"Received: sequences={sequences!r}")
    lengths = []
    sample_shape: tuple[int, ...] = ()
    found_sample = False
    for x in sequences:  # the sample shape is the first non-empty sequence's
        try:
            lengths.append(len(x))
        except TypeError as err:
            raise ValueError("sequences must be a list of sequences (lists or arrays); "
                             f"wrap single values in a list. Received: element {x!r}") from err
        if not found_sample and len(x):
            sample_shape = np.asarray(x).shape[1:]
            found_sample = True
    if maxlen is None:
        maxlen = int(np.max(lengths)) if lengths else 0
    string_dtype = np.issubdtype(dtype, np.str_) or np.issubdtype(dtype, np.bytes_)
    if isinstance(value, str) and dtype is not object and not string_dtype:
        raise ValueError(f"A string value needs dtype=object (variable-length strings) or a "
                         f"string dtype. Received: dtype={dtype!r}, value={value!r}")
    if padding not in ("pre", "post"):
        raise ValueError(f"padding must be 'pre' or 'post'. Received: padding={padding!r}")
    if truncating not in ("pre", "post"):
        raise ValueError("truncating must be 'pre' or 'post'. "
                         f"Received: truncating={truncating!r}")
    out = np.full((len(sequences), maxlen, *sample_shape), value, dtype=dtype)
    for i, s in enumerate(sequences):
        if not len(s) or not maxlen:
            continue
        kept = np.asarray(s[-maxlen:] if truncating == "pre" else s[:maxlen], dtype=dtype)
        if kept.shape[1:] != sample_shape:
            raise ValueError(f"Every sequence's steps must have the shape {sample_shape} of the "
                             f"first non-empty one. Received: sequence {i} with steps of shape "
                             f"{kept.shape[1:]}")
        if padding == "post":
            out[i, :len(kept)] = kept
        else:
            out[i, -len(kept):] = kept
    return out
