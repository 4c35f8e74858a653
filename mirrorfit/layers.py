"""Keras-style layers (``tf.keras.layers`` names, arguments and defaults).

A tf.keras model definition ports by renaming ``tf.keras.layers`` to ``mirrorfit.layers``:
the built-in layers are Flax modules (`FlaxLayer`), and layers you write subclass `Layer`,
Keras' object model (``__init__``, ``build``/``add_weight``, ``call``).
"""

from mirrorfit._src.layers.attention import MultiHeadAttention as MultiHeadAttention
from mirrorfit._src.layers.base import FlaxLayer as FlaxLayer
from mirrorfit._src.layers.convolutional import Conv1D as Conv1D
from mirrorfit._src.layers.convolutional import Conv2D as Conv2D
from mirrorfit._src.layers.convolutional import Conv2DTranspose as Conv2DTranspose
from mirrorfit._src.layers.convolutional import Conv3D as Conv3D
from mirrorfit._src.layers.convolutional import DepthwiseConv2D as DepthwiseConv2D
from mirrorfit._src.layers.convolutional import SeparableConv2D as SeparableConv2D
from mirrorfit._src.layers.core import Activation as Activation
from mirrorfit._src.layers.core import Dense as Dense
from mirrorfit._src.layers.core import Dropout as Dropout
from mirrorfit._src.layers.core import Embedding as Embedding
from mirrorfit._src.layers.core import Rescaling as Rescaling
from mirrorfit._src.layers.functional import Input as Input
from mirrorfit._src.layers.functional import KerasTensor as KerasTensor
from mirrorfit._src.layers.layer import Layer as Layer
from mirrorfit._src.layers.masking import Masking as Masking
from mirrorfit._src.layers.merging import Add as Add
from mirrorfit._src.layers.merging import Concatenate as Concatenate
from mirrorfit._src.layers.merging import Multiply as Multiply
from mirrorfit._src.layers.normalization import BatchNormalization as BatchNormalization
from mirrorfit._src.layers.normalization import GroupNormalization as GroupNormalization
from mirrorfit._src.layers.normalization import LayerNormalization as LayerNormalization
from mirrorfit._src.layers.pooling import AveragePooling1D as AveragePooling1D
from mirrorfit._src.layers.pooling import AveragePooling2D as AveragePooling2D
from mirrorfit._src.layers.pooling import GlobalAveragePooling1D as GlobalAveragePooling1D
from mirrorfit._src.layers.pooling import GlobalAveragePooling2D as GlobalAveragePooling2D
from mirrorfit._src.layers.pooling import GlobalMaxPooling1D as GlobalMaxPooling1D
from mirrorfit._src.layers.pooling import GlobalMaxPooling2D as GlobalMaxPooling2D
from mirrorfit._src.layers.pooling import MaxPooling1D as MaxPooling1D
from mirrorfit._src.layers.pooling import MaxPooling2D as MaxPooling2D
from mirrorfit._src.layers.recurrent import GRU as GRU
from mirrorfit._src.layers.recurrent import LSTM as LSTM
from mirrorfit._src.layers.recurrent import SimpleRNN as SimpleRNN
from mirrorfit._src.layers.regularizers import L1 as L1
from mirrorfit._src.layers.regularizers import L1L2 as L1L2
from mirrorfit._src.layers.regularizers import L2 as L2
from mirrorfit._src.layers.reshaping import Flatten as Flatten
from mirrorfit._src.layers.reshaping import Permute as Permute
from mirrorfit._src.layers.reshaping import Reshape as Reshape
from mirrorfit._src.layers.reshaping import UpSampling2D as UpSampling2D
from mirrorfit._src.layers.reshaping import ZeroPadding2D as ZeroPadding2D
from mirrorfit._src.layers.wrappers import Bidirectional as Bidirectional
from mirrorfit._src.layers.wrappers import TimeDistributed as TimeDistributed

__all__ = [
    "GRU",
    "L1",
    "L1L2",
    "L2",
    "LSTM",
    "Activation",
    "Add",
    "AveragePooling1D",
    "AveragePooling2D",
    "BatchNormalization",
    "Bidirectional",
    "Concatenate",
    "Conv1D",
    "Conv2D",
    "Conv2DTranspose",
    "Conv3D",
    "Dense",
    "DepthwiseConv2D",
    "Dropout",
    "Embedding",
    "Flatten",
    "FlaxLayer",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "GroupNormalization",
    "Input",
    "KerasTensor",
    "Layer",
    "LayerNormalization",
    "Masking",
    "MaxPooling1D",
    "MaxPooling2D",
    "MultiHeadAttention",
    "Multiply",
    "Permute",
    "Rescaling",
    "Reshape",
    "SeparableConv2D",
    "SimpleRNN",
    "TimeDistributed",
    "UpSampling2D",
    "ZeroPadding2D",
]
