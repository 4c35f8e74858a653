"""Weight penalties, as ``keras.regularizers``: sow them into ``"losses"`` from a module."""

from mirrorfit._src.regularizers import L1 as L1
from mirrorfit._src.regularizers import L1L2 as L1L2
from mirrorfit._src.regularizers import L2 as L2
from mirrorfit._src.regularizers import Regularizer as Regularizer
from mirrorfit._src.regularizers import get as get
from mirrorfit._src.regularizers import serialize as serialize

__all__ = ["L1", "L1L2", "L2", "Regularizer", "get", "serialize"]
