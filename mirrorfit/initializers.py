"""Weight initializers, as ``keras.initializers``: ``(key, shape, dtype) -> array`` objects
for the layers' ``*_initializer`` arguments (``Dense(4, kernel_initializer=HeNormal())``)."""

from mirrorfit._src.initializers.initializers import Constant as Constant
from mirrorfit._src.initializers.initializers import GlorotNormal as GlorotNormal
from mirrorfit._src.initializers.initializers import GlorotUniform as GlorotUniform
from mirrorfit._src.initializers.initializers import HeNormal as HeNormal
from mirrorfit._src.initializers.initializers import HeUniform as HeUniform
from mirrorfit._src.initializers.initializers import Identity as Identity
from mirrorfit._src.initializers.initializers import Initializer as Initializer
from mirrorfit._src.initializers.initializers import LecunNormal as LecunNormal
from mirrorfit._src.initializers.initializers import LecunUniform as LecunUniform
from mirrorfit._src.initializers.initializers import Ones as Ones
from mirrorfit._src.initializers.initializers import Orthogonal as Orthogonal
from mirrorfit._src.initializers.initializers import RandomNormal as RandomNormal
from mirrorfit._src.initializers.initializers import RandomUniform as RandomUniform
from mirrorfit._src.initializers.initializers import TruncatedNormal as TruncatedNormal
from mirrorfit._src.initializers.initializers import VarianceScaling as VarianceScaling
from mirrorfit._src.initializers.initializers import Zeros as Zeros
from mirrorfit._src.initializers.initializers import deserialize as deserialize
from mirrorfit._src.initializers.initializers import get as get
from mirrorfit._src.initializers.initializers import serialize as serialize

# Keras' lower-case aliases of the classes (keras.initializers.he_normal is HeNormal).
constant = Constant
"""Keras' lower-case name of `Constant`."""
zeros = Zeros
"""Keras' lower-case name of `Zeros`."""
ones = Ones
"""Keras' lower-case name of `Ones`."""
identity = Identity
"""Keras' lower-case name of `Identity`."""
random_normal = RandomNormal
"""Keras' lower-case name of `RandomNormal`."""
random_uniform = RandomUniform
"""Keras' lower-case name of `RandomUniform`."""
truncated_normal = TruncatedNormal
"""Keras' lower-case name of `TruncatedNormal`."""
variance_scaling = VarianceScaling
"""Keras' lower-case name of `VarianceScaling`."""
glorot_uniform = GlorotUniform
"""Keras' lower-case name of `GlorotUniform`."""
glorot_normal = GlorotNormal
"""Keras' lower-case name of `GlorotNormal`."""
he_uniform = HeUniform
"""Keras' lower-case name of `HeUniform`."""
he_normal = HeNormal
"""Keras' lower-case name of `HeNormal`."""
lecun_uniform = LecunUniform
"""Keras' lower-case name of `LecunUniform`."""
lecun_normal = LecunNormal
"""Keras' lower-case name of `LecunNormal`."""
orthogonal = Orthogonal
"""Keras' lower-case name of `Orthogonal`."""

__all__ = ["Constant", "GlorotNormal", "GlorotUniform", "HeNormal", "HeUniform", "Identity",
           "Initializer", "LecunNormal", "LecunUniform", "Ones", "Orthogonal", "RandomNormal",
           "RandomUniform", "TruncatedNormal", "VarianceScaling", "Zeros", "constant",
           "deserialize", "get", "glorot_normal", "glorot_uniform", "he_normal", "he_uniform",
           "identity", "lecun_normal", "lecun_uniform", "ones", "orthogonal", "random_normal",
           "random_uniform", "serialize", "truncated_normal", "variance_scaling", "zeros"]
