"""`TextVectorization`: strings to token indices or encoded vectors, as
``keras.layers.TextVectorization``, in NumPy on the host.

Each string is standardized (lowercased and/or stripped of Keras' punctuation set), split
(on whitespace, into characters, or by your function), joined into ngrams, and looked up in a
`StringLookup` whose mask token is ``""`` (index 0, the padding) and OOV token ``"[UNK]"``
(index 1), as Keras.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from mirrorfit._src.layers.base import register
from mirrorfit._src.layers.preprocessing.host_layer import HostLayer
from mirrorfit._src.layers.preprocessing.lookup import StringLookup

STANDARDIZE = ("lower_and_strip_punctuation", "lower", "strip_punctuation")
SPLIT = ("whitespace", "character")
# Keras' DEFAULT_STRIP_REGEX (``,-\.`` is the range from "," to ".").
PUNCTUATION = re.compile(r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']')
ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # tf.strings.lower


NOT_STRINGS = (
    "TextVectorization takes strings (text to split into tokens), but got numbers, which "
    "would become strings of digits and map to '[UNK]' (or a vocabulary of digits in adapt), "
    "as Keras refuses them. Integer token ids are already tokens: pass them to an Embedding "
    "directly (or remap them with IntegerLookup). Received: inputs of dtype {dtype}")


def _strings(inputs: Any) -> np.ndarray:
    """``inputs`` as a NumPy array of Python strings (bytes decoded as UTF-8).

    Raises:
        TypeError: numbers (integer token ids, floats, booleans) instead of strings.
    """
    if hasattr(inputs, "numpy"):  # a TensorFlow tensor (a tf.data batch)
        inputs = inputs.numpy()
    given = np.asarray(inputs)
    if given.size and given.dtype.kind in "biufc":
        raise TypeError(NOT_STRINGS.format(dtype=given.dtype))
    array = np.asarray(inputs, dtype=object)
    return np.vectorize(lambda s: s.decode("utf-8") if isinstance(s, bytes) else str(s),
                        otypes=[object])(array) if array.size else array


@register
class TextVectorization(HostLayer):
    """Strings ``[batch]`` (or ``[batch, 1]``) to token indices ``[batch, length]`` or
    encoded vectors ``[batch, vocabulary_size]``, as ``keras.layers.TextVectorization``.

    Args:
        max_tokens: the most vocabulary indices, the padding ``""`` and ``"[UNK]"`` included.
        standardize: ``"lower_and_strip_punctuation"``, ``"lower"``, ``"strip_punctuation"``,
            ``None``, or a function of a NumPy array of strings returning one. Lowercasing is
            ASCII-only, as Keras' ``tf.strings.lower``.
        split: ``"whitespace"``, ``"character"``, ``None`` (each string is one token), or a
            function of a string returning its tokens.
        ngrams: ``None``, ``n`` (all ngrams up to ``n``) or a tuple of ngram widths.
        output_mode: ``"int"``, ``"multi_hot"``, ``"count"`` or ``"tf_idf"``.
        output_sequence_length: ``"int"`` mode: pad (with 0) or truncate every row to this
            many tokens; ``None`` pads to the batch's longest row.
        pad_to_max_tokens: encode into ``max_tokens`` columns, not the vocabulary size.
        vocabulary: a list of tokens, instead of `adapt`.
        idf_weights: ``[len(vocabulary)]`` floats, for ``"tf_idf"`` with a vocabulary.
        sparse, ragged, encoding: accepted as Keras' (``False``/``"utf-8"`` only).
        name: the layer name.

    Example:
        >>> import mirrorfit as mf
        >>> vectorize = mf.layers.TextVectorization(output_sequence_length=4)
        >>> vectorize.adapt(["The cat sat.", "The dog!"])
        >>> vectorize.get_vocabulary()
        ['', '[UNK]', 'the', 'sat', 'dog', 'cat']
        >>> vectorize(["the cat ran"]).tolist()
        [[2, 5, 1, 0]]
    """

    def __init__(self, max_tokens: int | None = None,
                 standardize: str | Callable[..., Any] | None = "lower_and_strip_punctuation",
                 split: str | Callable[..., Any] | None = "whitespace", ngrams: Any = None,
                 output_mode: str = "int", output_sequence_length: int | None = None,
                 pad_to_max_tokens: bool = False, vocabulary: Any = None,
                 idf_weights: Any = None, sparse: bool = False, ragged: bool = False,
                 encoding: str = "utf-8", name: str | None = None, **kwargs: Any):
        super().__init__(name=name, **kwargs)
        if not (standardize is None or callable(standardize) or standardize in STANDARDIZE):
            raise ValueError(f"standardize must be one of {list(STANDARDIZE)}, None or a "
                             f"function. Received: standardize={standardize!r}")
        if not (split is None or callable(split) or split in SPLIT):
            raise ValueError(f"split must be one of {list(SPLIT)}, None or a function. "
                             f"Received: split={split!r}")
        if not (ngrams is None or isinstance(ngrams, int) or (isinstance(ngrams, (tuple, list))
                                                               and all(isinstance(n, int)
                                                                       for n in ngrams))):
            raise ValueError("ngrams must be None, an int or a tuple of ints. "
                             f"Received: ngrams={ngrams!r}")
        if output_mode == "one_hot" or (output_mode != "int" and output_mode != "tf-idf"
                                        and output_mode not in ("multi_hot", "count",
                                                                "tf_idf")):
            raise ValueError("output_mode must be 'int', 'multi_hot', 'count' or 'tf_idf'. "
                             f"Received: output_mode={output_mode!r}")
        if output_sequence_length is not None and output_mode != "int":
            raise ValueError("output_sequence_length applies to output_mode='int' only. "
                             f"Received: output_mode={output_mode!r}, "
                             f"output_sequence_length={output_sequence_length!r}")
        if ragged:
            raise ValueError("ragged=True needs TensorFlow's ragged tensors; rows are padded "
                             "here (output_sequence_length). Received: ragged=True")
        self.standardize, self.split = standardize, split
        self.ngrams = tuple(ngrams) if isinstance(ngrams, list) else ngrams
        self.output_mode, self.output_sequence_length = output_mode, output_sequence_length
        self.ragged, self.encoding = ragged, encoding
        self._lookup = StringLookup(max_tokens=max_tokens, vocabulary=vocabulary,
                                    idf_weights=idf_weights, mask_token="",
                                    output_mode=output_mode,
                                    pad_to_max_tokens=pad_to_max_tokens, sparse=sparse,
                                    encoding=encoding)

    # -- text to tokens -------------------------------------------------------------
    def _standardize(self, strings: np.ndarray) -> np.ndarray:
        if callable(self.standardize):
            return _strings(self.standardize(strings.astype(str)))  # as Keras off TF
        if self.standardize in ("lower", "lower_and_strip_punctuation"):
            strings = np.vectorize(lambda s: s.translate(ASCII_LOWER), otypes=[object])(strings)
        if self.standardize in ("strip_punctuation", "lower_and_strip_punctuation"):
            strings = np.vectorize(lambda s: PUNCTUATION.sub("", s), otypes=[object])(strings)
        return strings

    def _ngrams(self, tokens: list[str]) -> list[str]:
        ngrams = self.ngrams
        widths = tuple(range(1, ngrams + 1)) if isinstance(ngrams, int) else tuple(ngrams or ())
        return [" ".join(tokens[i:i + n]) for n in widths for i in range(len(tokens) - n + 1)]

    def tokenize(self, inputs: Any) -> list[list[str]]:
        """Each string's tokens: standardized, split and joined into ngrams (with
        ``split=None``, each standardized string is one token).

        Args:
            inputs: strings ``[batch]`` or ``[batch, 1]``.

        Raises:
            ValueError: a rank-2 input whose last dimension is not 1, when splitting.
        """
        strings = self._standardize(_strings(inputs))
        if self.split is None:
            return [[s] for s in strings.reshape(-1)]
        if strings.ndim == 2 and strings.shape[-1] == 1:
            strings = strings[:, 0]
        if strings.ndim > 1:
            raise ValueError("To split strings, TextVectorization takes [batch] or [batch, 1] "
                             f"inputs. Received: inputs of shape {strings.shape}")
        split = self.split
        if callable(split):
            rows = [[str(t) for t in split(s)] for s in strings.reshape(-1)]
        elif split == "whitespace":
            rows = [s.split() for s in strings.reshape(-1)]
        else:
            rows = [list(s) for s in strings.reshape(-1)]
        if self.ngrams is not None:
            rows = [self._ngrams(r) for r in rows]
        return rows

    # -- vocabulary -----------------------------------------------------------------
    def adapt(self, data: Any, batch_size: int | None = None, steps: int | None = None) -> None:
        """Learns the vocabulary (count order, ties by the token, highest first, as Keras)
        and, for ``"tf_idf"``, the IDF weights.

        Args:
            data: strings: a list or array ``[n]``, or an iterable (generator) of batches.
            batch_size: accepted as Keras'; all of ``data`` is read.
            steps: the number of batches to read from an iterable (default: all).
        """
        batches: Iterable[Any] = [data] if isinstance(data, (list, tuple, np.ndarray)) else data
        self._lookup.learn((self.tokenize(batch) for batch in batches), steps)

    def get_vocabulary(self, include_special_tokens: bool = True) -> list[str]:
        """The token of every index: ``""`` (padding, index 0 in ``"int"`` mode), ``"[UNK]"``,
        then the vocabulary."""
        return self._lookup.get_vocabulary(include_special_tokens)

    def vocabulary_size(self) -> int:
        """The number of indices: the special tokens' (padding and OOV) and the
        vocabulary's.
        """
        return self._lookup.vocabulary_size()

    def set_vocabulary(self, vocabulary: Any, idf_weights: Any = None) -> None:
        """Sets the vocabulary (and IDF weights for ``"tf_idf"``), as Keras."""
        self._lookup.set_vocabulary(vocabulary, idf_weights)

    def compute_output_shape(self, input_shape: tuple[int | None, ...]
                             ) -> tuple[int | None, ...]:
        """``(batch, output_sequence_length)`` in ``"int"`` mode, else the lookup's
        ``(batch, depth)``, as Keras'."""
        if self.output_mode == "int":
            return (input_shape[0], self.output_sequence_length)
        return self._lookup.compute_output_shape((input_shape[0], None))

    def get_assets(self) -> dict[str, Any]:
        """What ``adapt`` learned, as JSON: the vocabulary and, for ``"tf_idf"``, the IDF
        weights (``{}`` before).
        """
        return self._lookup.get_assets()

    def set_assets(self, assets: dict[str, Any]) -> None:
        """Restores `get_assets`."""
        self._lookup.set_assets(assets)

    # -- call -----------------------------------------------------------------------
    def call(self, inputs: Any) -> np.ndarray:
        """``int32`` indices ``[batch, length]`` (``split=None``: the input's shape), or
        ``float32`` ``[batch, vocabulary_size]`` (``"multi_hot"``, ``"count"``,
        ``"tf_idf"``)."""
        if self.split is None:  # each string is one token: the input's shape
            return self._lookup(self._standardize(_strings(inputs)))
        tokens = self.tokenize(inputs)
        if self.output_mode != "int":
            encoded = [self._lookup(np.asarray(row, dtype=object)) for row in tokens]
            return np.stack(encoded) if encoded else np.zeros((0, self.vocabulary_size()),
                                                              np.float32)
        ids = [self._lookup(np.asarray(row, dtype=object)) for row in tokens]
        length = self.output_sequence_length
        if length is None:
            length = max((len(r) for r in ids), default=0)
        out = np.zeros((len(ids), length), np.int32)
        for row, r in zip(out, ids):
            row[:min(len(r), length)] = r[:length]
        return out

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments, with the given ``vocabulary`` and
        ``idf_weights`` (not what ``adapt`` learned, which `get_assets` holds).
        """
        lookup = self._lookup.get_config()
        return {**super().get_config(), "max_tokens": lookup["max_tokens"],
                "standardize": self.standardize, "split": self.split, "ngrams": self.ngrams,
                "output_mode": self.output_mode,
                "output_sequence_length": self.output_sequence_length,
                "pad_to_max_tokens": lookup["pad_to_max_tokens"],
                "vocabulary": lookup["vocabulary"], "idf_weights": lookup["idf_weights"],
                "sparse": False, "ragged": self.ragged, "encoding": self.encoding}

