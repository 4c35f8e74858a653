"""Keras 3's ``keras.preprocessing.sequence``: `pad_sequences` (also `mirrorfit.utils.pad_sequences`).
"""

from mirrorfit._src.utils.sequence_utils import pad_sequences as pad_sequences

__all__ = ["pad_sequences"]
