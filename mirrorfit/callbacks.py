"""Keras-style callbacks (public re-exports)."""

from mirrorfit._src.callbacks import Callback as Callback
from mirrorfit._src.callbacks import History as History
from mirrorfit._src.callbacks import ProgbarLogger as ProgbarLogger

__all__ = ["Callback", "History", "ProgbarLogger"]
