"""Weight penalties, as ``keras.regularizers``: sow them into ``"losses"`` from a module."""

from mirrorfit._src.regularizers.regularizers import L1 as L1
from mirrorfit._src.regularizers.regularizers import L1L2 as L1L2
from mirrorfit._src.regularizers.regularizers import L2 as L2
from mirrorfit._src.regularizers.regularizers import Regularizer as Regularizer
from mirrorfit._src.regularizers.regularizers import get as get
from mirrorfit._src.regularizers.regularizers import serialize as serialize

# Keras' lower-case aliases (keras.regularizers.l1 is the L1 class).
l1 = L1
"""Keras' lower-case name of `L1` (``keras.regularizers.l1``): ``l1(0.01)`` is ``L1(0.01)``."""
l2 = L2
"""Keras' lower-case name of `L2` (``keras.regularizers.l2``): ``l2(0.01)`` is ``L2(0.01)``."""
l1_l2 = L1L2
"""Keras' lower-case name of `L1L2` (``keras.regularizers.l1_l2``): ``l1_l2(l1=0.01, l2=0.01)``."""

__all__ = ["L1", "L1L2", "L2", "Regularizer", "get", "l1", "l1_l2", "l2", "serialize"]
