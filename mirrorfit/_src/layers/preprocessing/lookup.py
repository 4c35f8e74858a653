"""`StringLookup` and `IntegerLookup`: tokens to indices (and back), as Keras 3's
``IndexLookup`` layers, in NumPy on the host.

Indices, as Keras: with a ``mask_token`` and ``output_mode="int"``, index 0 is the mask;
then ``num_oov_indices`` OOV indices; then the vocabulary. ``adapt`` orders the vocabulary by
count, most frequent first, ties by the token, highest first (Keras' ``np.lexsort``), and
keeps ``max_tokens`` minus the special indices. ``"multi_hot"``, ``"count"``, ``"one_hot"``
and ``"tf_idf"`` encode the indices of a sample ``[n]`` (or each row of ``[batch, n]``) into
``[vocabulary_size]`` (``[batch, vocabulary_size]``); the mask token is dropped there.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import numpy as np

from mirrorfit._src.layers.base import register
from mirrorfit._src.layers.preprocessing.host_layer import HostLayer

OUTPUT_MODES = ("int", "one_hot", "multi_hot", "count", "tf_idf")


def encode(indices: list[np.ndarray] | np.ndarray, output_mode: str, depth: int,
           idf_weights: np.ndarray | None) -> np.ndarray:
    """Rows of indices (``-1``: dropped) as ``[rows, depth]`` float32 multi-hot, counts,
    one-hot or TF-IDF (counts times ``idf_weights`` ``[depth]``), as Keras' bincount."""
    out = np.zeros((len(indices), depth), np.float32)
    for row, ids in zip(out, indices):
        ids = np.asarray(ids).reshape(-1)
        ids = ids[(ids >= 0) & (ids < depth)]
        np.add.at(row, ids, 1.0)
    if output_mode in ("multi_hot", "one_hot"):
        out = np.minimum(out, 1.0)
    if output_mode == "tf_idf":
        out = out * np.asarray(idf_weights, np.float32)[:depth]
    return out


class IndexLookup(HostLayer):
    """The shared vocabulary, ``adapt``, lookup and encoding of `StringLookup` and
    `IntegerLookup`; see the module docstring."""

    token_dtype: Any = str  # NumPy dtype of the tokens ``invert`` returns

    def __init__(self, *, max_tokens: int | None, num_oov_indices: int, mask_token: Any,
                 oov_token: Any, vocabulary: Any, idf_weights: Any, invert: bool,
                 output_mode: str, pad_to_max_tokens: bool, sparse: bool, **kwargs: Any):
        super().__init__(**kwargs)
        if output_mode == "tf-idf":
            output_mode = "tf_idf"
        if output_mode not in OUTPUT_MODES:
            raise ValueError(f"output_mode must be one of {list(OUTPUT_MODES)}. "
                             f"Received: output_mode={output_mode!r}")
        if invert and output_mode != "int":
            raise ValueError("invert=True maps indices back to tokens, so it takes "
                             f"output_mode='int'. Received: output_mode={output_mode!r}")
        if not isinstance(num_oov_indices, int) or num_oov_indices < 0:
            raise ValueError("num_oov_indices must be an int >= 0. "
                             f"Received: num_oov_indices={num_oov_indices!r}")
        if sparse:
            raise ValueError("sparse=True needs TensorFlow's sparse tensors; outputs here are "
                             "dense NumPy arrays. Received: sparse=True")
        if idf_weights is not None and output_mode != "tf_idf":
            raise ValueError("idf_weights is only used with output_mode='tf_idf'. "
                             f"Received: output_mode={output_mode!r}")
        if output_mode == "tf_idf" and vocabulary is not None and idf_weights is None:
            raise ValueError("With a vocabulary and output_mode='tf_idf', pass idf_weights too."
                             " Received: idf_weights=None")
        self.max_tokens, self.num_oov_indices = max_tokens, num_oov_indices
        self.mask_token, self.oov_token = mask_token, oov_token
        self.invert, self.output_mode = invert, output_mode
        self.pad_to_max_tokens, self.sparse = pad_to_max_tokens, sparse
        self.vocabulary: Any = None if vocabulary is None else list(vocabulary)
        self._tokens: list[Any] = []  # the vocabulary without the special tokens
        self._index: dict[Any, int] = {}
        self.idf_weights: np.ndarray | None = None  # [vocabulary_size] float32 (tf_idf)
        if vocabulary is not None:
            self.set_vocabulary(vocabulary, idf_weights)

    # -- vocabulary -----------------------------------------------------------------
    def _key(self, token: Any) -> Any:
        """A token as the vocabulary stores it (str, or int)."""
        raise NotImplementedError

    def _oov_start(self) -> int:
        return 1 if self.mask_token is not None and self.output_mode == "int" else 0

    def _token_start(self) -> int:
        return self._oov_start() + self.num_oov_indices

    def _special_tokens(self) -> list[Any]:
        mask = [self.mask_token] if self._oov_start() else []
        return mask + [self.oov_token] * self.num_oov_indices

    def vocabulary_size(self) -> int:
        """The number of indices: special ones and the vocabulary's."""
        return self._token_start() + len(self._tokens)

    def get_vocabulary(self, include_special_tokens: bool = True) -> list[Any]:
        """The token of every index, in index order (special tokens first, as Keras)."""
        if not include_special_tokens:
            return list(self._tokens)
        return self._special_tokens() + list(self._tokens)

    def set_vocabulary(self, vocabulary: Any, idf_weights: Any = None) -> None:
        """Sets the vocabulary (special tokens at its start are recognised and dropped).

        Raises:
            ValueError: repeated tokens, a special token elsewhere, more than ``max_tokens``,
                or ``idf_weights`` of another length.
        """
        tokens = [self._key(t) for t in np.asarray(vocabulary).reshape(-1).tolist()]
        specials = self._special_tokens()
        if tokens[:len(specials)] == specials:
            tokens = tokens[len(specials):]
        repeated = [t for t, n in collections.Counter(tokens).items() if n > 1]
        if repeated:
            raise ValueError("The vocabulary has repeated tokens; make it unique. "
                             f"Received: repeated tokens {repeated}")
        if self.mask_token is not None and self.mask_token in tokens:
            raise ValueError("The mask token may only come first in the vocabulary (or be left "
                             f"out). Received: mask_token={self.mask_token!r} inside it")
        if self.invert and self.oov_token in tokens:
            raise ValueError("The OOV token may only come among the special tokens at the "
                             f"start. Received: oov_token={self.oov_token!r} inside it")
        size = self._token_start() + len(tokens)
        if self.max_tokens is not None and size > self.max_tokens:
            raise ValueError(f"The vocabulary has {size} indices, more than max_tokens="
                             f"{self.max_tokens}. Received: {len(tokens)} tokens")
        self._set_tokens(tokens)
        if self.output_mode == "tf_idf" and idf_weights is not None:
            weights = np.asarray(idf_weights, np.float32).reshape(-1)
            if len(weights) != len(np.asarray(vocabulary).reshape(-1)):
                raise ValueError("idf_weights must have one weight per vocabulary entry. "
                                 f"Received: {len(weights)} weights")
            if len(weights) == len(tokens):  # Keras pads the special tokens with the mean
                weights = np.concatenate(
                    [np.full(self._token_start(), weights.mean(), np.float32), weights])
            self.idf_weights = weights

    def _set_tokens(self, tokens: list[Any]) -> None:
        self._tokens = tokens
        self._index = {t: i + self._token_start() for i, t in enumerate(tokens)}

    def adapt(self, data: Any, steps: int | None = None) -> None:
        """Learns the vocabulary (and, for ``"tf_idf"``, the IDF weights) from ``data``, as
        Keras' ``IndexLookup.adapt``.

        Args:
            data: tokens: an array or list ``[n]`` (one token per sample) or ``[n, k]``, or
                an iterable of such batches (a generator).
            steps: the number of batches to read from an iterable (default: all).

        Raises:
            ValueError: the layer was given a vocabulary.
        """
        self.learn(self._adapt_rows(data), steps)

    def learn(self, batches: Iterable[list[list[Any]]], steps: int | None = None) -> None:
        """`adapt` on batches of documents (lists of tokens).

        Raises:
            ValueError: the layer was given a vocabulary.
        """
        if self.vocabulary is not None:
            raise ValueError(f"Cannot adapt layer '{self.name}' after setting a vocabulary "
                             "(vocabulary= or set_vocabulary()). Received: data")
        counts: collections.Counter = collections.Counter()
        documents: collections.Counter = collections.Counter()
        num_documents = 0
        for i, rows in enumerate(batches):
            if steps is not None and i >= steps:
                break
            for row in rows:
                row = [self._key(t) for t in row]
                counts.update(row)
                documents.update(set(row))
                num_documents += 1
        for special in (self.mask_token, self.oov_token):
            counts.pop(special, None)
        # By count, most frequent first, ties by the token, highest first (Keras' lexsort).
        tokens = sorted(counts, key=lambda t: (counts[t], t), reverse=True)
        if self.max_tokens:
            tokens = tokens[:self.max_tokens - self._token_start()]
        self._set_tokens(tokens)
        if self.output_mode == "tf_idf":
            idf = np.log(1.0 + num_documents / (1.0 + np.array(
                [documents[t] for t in tokens], np.float64))).astype(np.float32)
            weights = np.concatenate(
                [np.full(self._token_start(), idf.mean() if len(idf) else 0.0), idf])
            if self.pad_to_max_tokens and self.max_tokens is not None:
                weights = np.pad(weights, (0, self.max_tokens - len(weights)))
            self.idf_weights = weights.astype(np.float32)

    def _adapt_rows(self, data: Any) -> Iterable[list[list[Any]]]:
        """Batches of documents (lists of tokens); a 1-D array is one token per document."""
        def rows(batch: Any) -> list[list[Any]]:
            array = np.asarray(batch, dtype=object)
            if array.ndim == 0:
                return [[array.item()]]
            if array.ndim == 1:
                return [[t] for t in array.tolist()]
            return [np.asarray(r, dtype=object).reshape(-1).tolist() for r in array]

        if isinstance(data, (np.ndarray, list, tuple)):
            return [rows(data)]
        return (rows(batch) for batch in data)

    # -- call -----------------------------------------------------------------------
    def _lookup(self, token: Any) -> int:
        key = self._key(token)
        if self.mask_token is not None and key == self.mask_token:
            return 0 if self.output_mode == "int" else -1
        index = self._index.get(key)
        if index is not None:
            return index
        if self.num_oov_indices == 0:
            raise ValueError("With num_oov_indices=0 every input must be in the vocabulary; "
                             f"set num_oov_indices=1. Received: {token!r}")
        return self._oov_start() + self._oov_bucket(key)

    def _oov_bucket(self, key: Any) -> int:
        """Which of the ``num_oov_indices`` OOV indices ``key`` takes."""
        raise NotImplementedError

    def _invert(self, index: Any) -> Any:
        index = int(index)
        if self.mask_token is not None and index == 0:
            return self.mask_token
        if self._token_start() <= index < self.vocabulary_size():
            return self._tokens[index - self._token_start()]
        return self.oov_token

    def call(self, inputs: Any) -> np.ndarray:
        """Indices (``int32``, the input's shape), tokens (``invert``), or encoded samples
        (``float32`` ``[depth]`` or ``[batch, depth]``)."""
        if self.output_mode != "int" and not self._tokens and not self.pad_to_max_tokens:
            raise RuntimeError(f"With output_mode={self.output_mode!r}, set the vocabulary "
                               "(vocabulary= or adapt()) before calling the layer.")
        array = np.asarray(inputs, dtype=object)
        if self.invert:
            return np.vectorize(self._invert, otypes=[object])(array).astype(self.token_dtype)
        indices = np.vectorize(self._lookup, otypes=[np.int64])(array) if array.size else (
            np.zeros(array.shape, np.int64))
        if self.output_mode == "int":
            return indices.astype(np.int32)
        depth = self.max_tokens if self.pad_to_max_tokens and self.max_tokens else (
            self.vocabulary_size())
        if indices.ndim > 2:
            raise ValueError(f"output_mode={self.output_mode!r} encodes samples [n] or batches "
                             f"[batch, n]. Received: inputs of shape {indices.shape}")
        rows = indices.reshape(-1, 1) if (self.output_mode == "one_hot" and indices.ndim == 1
                                          ) else np.atleast_2d(indices)
        out = encode(list(rows), self.output_mode, depth, self.idf_weights)
        return out[0] if indices.ndim <= 1 and self.output_mode != "one_hot" else out

    def compute_output_shape(self, input_shape: tuple[int | None, ...]
                             ) -> tuple[int | None, ...]:
        """``input_shape`` in ``"int"`` mode, else ``(batch, depth)``, as Keras'."""
        if self.output_mode == "int":
            return tuple(input_shape)
        depth = self.max_tokens if self.pad_to_max_tokens else self.vocabulary_size()
        return (input_shape[0], depth)

    def get_assets(self) -> dict[str, Any]:
        """The vocabulary (special tokens first) and, for ``"tf_idf"``, the IDF weights
        ``[vocabulary_size]``; ``{}`` before ``adapt``/``set_vocabulary``."""
        if not self._tokens:
            return {}
        weights = None if self.idf_weights is None else self.idf_weights.tolist()
        return {"vocabulary": self.get_vocabulary(), "idf_weights": weights}

    def set_assets(self, assets: dict[str, Any]) -> None:
        """Restores `get_assets`: the vocabulary and IDF weights (nothing for ``{}``)."""
        if assets:
            self.set_vocabulary(assets["vocabulary"], assets.get("idf_weights"))

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments, with the given ``vocabulary`` and
        ``idf_weights`` (not what ``adapt`` learned, which `get_assets` holds).
        """
        return {**super().get_config(), "max_tokens": self.max_tokens,
                "num_oov_indices": self.num_oov_indices, "mask_token": self.mask_token,
                "oov_token": self.oov_token, "vocabulary": self.vocabulary,
                "idf_weights": None if self.vocabulary is None or self.idf_weights is None
                else self.idf_weights.tolist(),
                "invert": self.invert, "output_mode": self.output_mode,
                "pad_to_max_tokens": self.pad_to_max_tokens, "sparse": self.sparse}


@register
class StringLookup(IndexLookup):
    """Strings to indices (or back, ``invert=True``), as ``keras.layers.StringLookup``.

    Args:
        max_tokens: the most indices (special ones included); ``None``: no limit.
        num_oov_indices: indices for out-of-vocabulary strings: 0 (they raise) or 1 (Keras'
            hashing into several needs TensorFlow's farmhash).
        mask_token: a string meaning padding (index 0 in ``"int"`` mode), or ``None``.
        oov_token: the string ``invert`` gives for OOV indices (``"[UNK]"``).
        vocabulary: a list of strings, instead of `adapt`.
        idf_weights: ``[len(vocabulary)]`` floats for ``output_mode="tf_idf"``.
        invert: map indices to strings.
        output_mode: ``"int"``, ``"one_hot"``, ``"multi_hot"``, ``"count"`` or ``"tf_idf"``.
        pad_to_max_tokens: encode into ``max_tokens`` columns, not the vocabulary size.
        sparse, encoding: accepted as Keras' (``sparse=False`` only).
        name: the layer name.

    Example:
        >>> import mirrorfit as mf
        >>> lookup = mf.layers.StringLookup(vocabulary=["a", "b", "c"])
        >>> lookup([["a", "c"], ["d", "b"]]).tolist()
        [[1, 3], [0, 2]]
    """

    def __init__(self, max_tokens: int | None = None, num_oov_indices: int = 1,
                 mask_token: str | None = None, oov_token: str = "[UNK]",
                 vocabulary: Any = None, idf_weights: Any = None, invert: bool = False,
                 output_mode: str = "int", pad_to_max_tokens: bool = False,
                 sparse: bool = False, encoding: str = "utf-8", name: str | None = None,
                 **kwargs: Any):
        if num_oov_indices > 1:
            raise ValueError("StringLookup hashes OOV strings into several indices with "
                             "TensorFlow's farmhash, which is not available here; use "
                             f"num_oov_indices=1. Received: num_oov_indices={num_oov_indices}")
        self.encoding = encoding
        super().__init__(max_tokens=max_tokens, num_oov_indices=num_oov_indices,
                         mask_token=mask_token, oov_token=oov_token, vocabulary=vocabulary,
                         idf_weights=idf_weights, invert=invert, output_mode=output_mode,
                         pad_to_max_tokens=pad_to_max_tokens, sparse=sparse, name=name,
                         **kwargs)

    def _key(self, token: Any) -> Any:
        return token.decode(self.encoding) if isinstance(token, bytes) else str(token)

    def _oov_bucket(self, key: Any) -> int:
        return 0

    def get_config(self) -> dict[str, Any]:
        """`IndexLookup.get_config` and ``encoding``."""
        return {**super().get_config(), "encoding": self.encoding}


@register
class IntegerLookup(IndexLookup):
    """Integers to indices (or back, ``invert=True``), as ``keras.layers.IntegerLookup``.

    Arguments as `StringLookup`, with integer tokens: ``mask_token`` (e.g. 0) and
    ``oov_token`` (``-1``). Several OOV indices take ``value mod num_oov_indices`` (Keras'
    ``oov_method="floormod"``).

    Example:
        >>> import mirrorfit as mf
        >>> lookup = mf.layers.IntegerLookup()
        >>> lookup.adapt([7, 3, 3, 9, 9, 9])
        >>> lookup.get_vocabulary(), lookup([9, 7, 5]).tolist()
        ([-1, 9, 3, 7], [1, 3, 0])
    """

    def __init__(self, max_tokens: int | None = None, num_oov_indices: int = 1,
                 mask_token: int | None = None, oov_token: int = -1, vocabulary: Any = None,
                 vocabulary_dtype: str = "int64", idf_weights: Any = None,
                 invert: bool = False, output_mode: str = "int", sparse: bool = False,
                 pad_to_max_tokens: bool = False, oov_method: str = "floormod",
                 name: str | None = None, **kwargs: Any):
        if max_tokens is not None and max_tokens <= 1:
            raise ValueError("max_tokens of IntegerLookup must be greater than 1. "
                             f"Received: max_tokens={max_tokens}")
        if oov_method != "floormod":
            raise ValueError("oov_method='farmhash' needs TensorFlow; use 'floormod'. "
                             f"Received: oov_method={oov_method!r}")
        self.vocabulary_dtype = vocabulary_dtype
        super().__init__(max_tokens=max_tokens, num_oov_indices=num_oov_indices,
                         mask_token=mask_token, oov_token=oov_token, vocabulary=vocabulary,
                         idf_weights=idf_weights, invert=invert, output_mode=output_mode,
                         pad_to_max_tokens=pad_to_max_tokens, sparse=sparse, name=name,
                         **kwargs)

    token_dtype = np.int64

    def _key(self, token: Any) -> Any:
        return int(token)

    def _oov_bucket(self, key: Any) -> int:
        return key % self.num_oov_indices

    def get_config(self) -> dict[str, Any]:
        """`IndexLookup.get_config` and ``vocabulary_dtype``."""
        return {**super().get_config(), "vocabulary_dtype": self.vocabulary_dtype}
