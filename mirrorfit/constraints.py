"""Weight constraints, as ``keras.constraints``: projections applied after each optimizer
update (``mf.layers.Dense(4, kernel_constraint=mf.constraints.MaxNorm(2.0))``)."""

from mirrorfit._src.constraints.constraints import Constraint as Constraint
from mirrorfit._src.constraints.constraints import MaxNorm as MaxNorm
from mirrorfit._src.constraints.constraints import MinMaxNorm as MinMaxNorm
from mirrorfit._src.constraints.constraints import NonNeg as NonNeg
from mirrorfit._src.constraints.constraints import UnitNorm as UnitNorm
from mirrorfit._src.constraints.constraints import deserialize as deserialize
from mirrorfit._src.constraints.constraints import get as get
from mirrorfit._src.constraints.constraints import serialize as serialize

# Keras' lower-case aliases (keras.constraints.max_norm is the MaxNorm class).
max_norm = MaxNorm
"""Keras' lower-case name of `MaxNorm` (``keras.constraints.max_norm``)."""
non_neg = NonNeg
"""Keras' lower-case name of `NonNeg` (``keras.constraints.non_neg``)."""
unit_norm = UnitNorm
"""Keras' lower-case name of `UnitNorm` (``keras.constraints.unit_norm``)."""
min_max_norm = MinMaxNorm
"""Keras' lower-case name of `MinMaxNorm` (``keras.constraints.min_max_norm``)."""

__all__ = ["Constraint", "MaxNorm", "MinMaxNorm", "NonNeg", "UnitNorm", "deserialize", "get",
           "max_norm", "min_max_norm", "non_neg", "serialize", "unit_norm"]
