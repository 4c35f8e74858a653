"""Keras-style layers (``tf.keras.layers`` names, arguments and defaults).

A tf.keras model definition ports by renaming ``tf.keras.layers`` to ``mirrorfit.layers``:
the built-in layers are Flax modules (`FlaxLayer`), and layers you write subclass `Layer`,
Keras' object model (``__init__``, ``build``/``add_weight``, ``call``).
"""

from mirrorfit._src.layers.activation_layers import ELU as ELU
from mirrorfit._src.layers.activation_layers import LeakyReLU as LeakyReLU
from mirrorfit._src.layers.activation_layers import PReLU as PReLU
from mirrorfit._src.layers.activation_layers import ReLU as ReLU
from mirrorfit._src.layers.activation_layers import Softmax as Softmax
from mirrorfit._src.layers.attention import MultiHeadAttention as MultiHeadAttention
from mirrorfit._src.layers.base import FlaxLayer as FlaxLayer
from mirrorfit._src.layers.conv_lstm import ConvLSTM2D as ConvLSTM2D
from mirrorfit._src.layers.convolutional import Conv1D as Conv1D
from mirrorfit._src.layers.convolutional import Conv1D as Convolution1D
from mirrorfit._src.layers.convolutional import Conv1DTranspose as Conv1DTranspose
from mirrorfit._src.layers.convolutional import Conv1DTranspose as Convolution1DTranspose
from mirrorfit._src.layers.convolutional import Conv2D as Conv2D
from mirrorfit._src.layers.convolutional import Conv2D as Convolution2D
from mirrorfit._src.layers.convolutional import Conv2DTranspose as Conv2DTranspose
from mirrorfit._src.layers.convolutional import Conv2DTranspose as Convolution2DTranspose
from mirrorfit._src.layers.convolutional import Conv3D as Conv3D
from mirrorfit._src.layers.convolutional import Conv3D as Convolution3D
from mirrorfit._src.layers.convolutional import Conv3DTranspose as Conv3DTranspose
from mirrorfit._src.layers.convolutional import Conv3DTranspose as Convolution3DTranspose
from mirrorfit._src.layers.convolutional import DepthwiseConv2D as DepthwiseConv2D
from mirrorfit._src.layers.convolutional import SeparableConv2D as SeparableConv2D
from mirrorfit._src.layers.convolutional import SeparableConv2D as SeparableConvolution2D
from mirrorfit._src.layers.core import Activation as Activation
from mirrorfit._src.layers.core import ActivityRegularization as ActivityRegularization
from mirrorfit._src.layers.core import Dense as Dense
from mirrorfit._src.layers.core import Dropout as Dropout
from mirrorfit._src.layers.core import Embedding as Embedding
from mirrorfit._src.layers.core import Identity as Identity
from mirrorfit._src.layers.core import Lambda as Lambda
from mirrorfit._src.layers.core import Rescaling as Rescaling
from mirrorfit._src.layers.cropping import Cropping1D as Cropping1D
from mirrorfit._src.layers.cropping import Cropping2D as Cropping2D
from mirrorfit._src.layers.cropping import Cropping3D as Cropping3D
from mirrorfit._src.layers.graph.functional import Input as Input
from mirrorfit._src.layers.graph.functional import KerasTensor as KerasTensor
from mirrorfit._src.layers.graph.input_layer import InputLayer as InputLayer
from mirrorfit._src.layers.layer import Layer as Layer
from mirrorfit._src.layers.masking import Masking as Masking
from mirrorfit._src.layers.merging import Add as Add
from mirrorfit._src.layers.merging import Average as Average
from mirrorfit._src.layers.merging import Concatenate as Concatenate
from mirrorfit._src.layers.merging import Dot as Dot
from mirrorfit._src.layers.merging import Maximum as Maximum
from mirrorfit._src.layers.merging import Minimum as Minimum
from mirrorfit._src.layers.merging import Multiply as Multiply
from mirrorfit._src.layers.merging import Subtract as Subtract
from mirrorfit._src.layers.merging import add as add
from mirrorfit._src.layers.merging import average as average
from mirrorfit._src.layers.merging import concatenate as concatenate
from mirrorfit._src.layers.merging import dot as dot
from mirrorfit._src.layers.merging import maximum as maximum
from mirrorfit._src.layers.merging import minimum as minimum
from mirrorfit._src.layers.merging import multiply as multiply
from mirrorfit._src.layers.merging import subtract as subtract
from mirrorfit._src.layers.noise import AlphaDropout as AlphaDropout
from mirrorfit._src.layers.noise import GaussianDropout as GaussianDropout
from mirrorfit._src.layers.noise import GaussianNoise as GaussianNoise
from mirrorfit._src.layers.noise import SpatialDropout1D as SpatialDropout1D
from mirrorfit._src.layers.noise import SpatialDropout2D as SpatialDropout2D
from mirrorfit._src.layers.noise import SpatialDropout3D as SpatialDropout3D
from mirrorfit._src.layers.normalization import BatchNormalization as BatchNormalization
from mirrorfit._src.layers.normalization import GroupNormalization as GroupNormalization
from mirrorfit._src.layers.normalization import LayerNormalization as LayerNormalization
from mirrorfit._src.layers.normalization import UnitNormalization as UnitNormalization
from mirrorfit._src.layers.pooling import AveragePooling1D as AveragePooling1D

# Keras' other names of the same layers (keras.layers.MaxPool2D is MaxPooling2D).
from mirrorfit._src.layers.pooling import AveragePooling1D as AvgPool1D
from mirrorfit._src.layers.pooling import AveragePooling2D as AveragePooling2D
from mirrorfit._src.layers.pooling import AveragePooling2D as AvgPool2D
from mirrorfit._src.layers.pooling import AveragePooling3D as AveragePooling3D
from mirrorfit._src.layers.pooling import AveragePooling3D as AvgPool3D
from mirrorfit._src.layers.pooling import GlobalAveragePooling1D as GlobalAveragePooling1D
from mirrorfit._src.layers.pooling import GlobalAveragePooling1D as GlobalAvgPool1D
from mirrorfit._src.layers.pooling import GlobalAveragePooling2D as GlobalAveragePooling2D
from mirrorfit._src.layers.pooling import GlobalAveragePooling2D as GlobalAvgPool2D
from mirrorfit._src.layers.pooling import GlobalAveragePooling3D as GlobalAveragePooling3D
from mirrorfit._src.layers.pooling import GlobalAveragePooling3D as GlobalAvgPool3D
from mirrorfit._src.layers.pooling import GlobalMaxPooling1D as GlobalMaxPool1D
from mirrorfit._src.layers.pooling import GlobalMaxPooling1D as GlobalMaxPooling1D
from mirrorfit._src.layers.pooling import GlobalMaxPooling2D as GlobalMaxPool2D
from mirrorfit._src.layers.pooling import GlobalMaxPooling2D as GlobalMaxPooling2D
from mirrorfit._src.layers.pooling import GlobalMaxPooling3D as GlobalMaxPool3D
from mirrorfit._src.layers.pooling import GlobalMaxPooling3D as GlobalMaxPooling3D
from mirrorfit._src.layers.pooling import MaxPooling1D as MaxPool1D
from mirrorfit._src.layers.pooling import MaxPooling1D as MaxPooling1D
from mirrorfit._src.layers.pooling import MaxPooling2D as MaxPool2D
from mirrorfit._src.layers.pooling import MaxPooling2D as MaxPooling2D
from mirrorfit._src.layers.pooling import MaxPooling3D as MaxPool3D
from mirrorfit._src.layers.pooling import MaxPooling3D as MaxPooling3D
from mirrorfit._src.layers.preprocessing.image_affine import RandomFlip as RandomFlip
from mirrorfit._src.layers.preprocessing.image_affine import RandomRotation as RandomRotation
from mirrorfit._src.layers.preprocessing.image_affine import RandomTranslation as RandomTranslation
from mirrorfit._src.layers.preprocessing.image_affine import RandomZoom as RandomZoom
from mirrorfit._src.layers.preprocessing.image_color import RandomBrightness as RandomBrightness
from mirrorfit._src.layers.preprocessing.image_color import RandomContrast as RandomContrast
from mirrorfit._src.layers.preprocessing.image_geometry import CenterCrop as CenterCrop
from mirrorfit._src.layers.preprocessing.image_geometry import RandomCrop as RandomCrop
from mirrorfit._src.layers.preprocessing.image_geometry import Resizing as Resizing
from mirrorfit._src.layers.preprocessing.lookup import IntegerLookup as IntegerLookup
from mirrorfit._src.layers.preprocessing.lookup import StringLookup as StringLookup
from mirrorfit._src.layers.preprocessing.normalization import Normalization as Normalization
from mirrorfit._src.layers.preprocessing.text_vectorization import (
    TextVectorization as TextVectorization,
)
from mirrorfit._src.layers.recurrent import GRU as GRU
from mirrorfit._src.layers.recurrent import LSTM as LSTM
from mirrorfit._src.layers.recurrent import SimpleRNN as SimpleRNN
from mirrorfit._src.layers.reshaping import Flatten as Flatten
from mirrorfit._src.layers.reshaping import Permute as Permute
from mirrorfit._src.layers.reshaping import RepeatVector as RepeatVector
from mirrorfit._src.layers.reshaping import Reshape as Reshape
from mirrorfit._src.layers.reshaping import UpSampling1D as UpSampling1D
from mirrorfit._src.layers.reshaping import UpSampling2D as UpSampling2D
from mirrorfit._src.layers.reshaping import UpSampling3D as UpSampling3D
from mirrorfit._src.layers.reshaping import ZeroPadding1D as ZeroPadding1D
from mirrorfit._src.layers.reshaping import ZeroPadding2D as ZeroPadding2D
from mirrorfit._src.layers.reshaping import ZeroPadding3D as ZeroPadding3D
from mirrorfit._src.layers.wrappers import Bidirectional as Bidirectional
from mirrorfit._src.layers.wrappers import TimeDistributed as TimeDistributed
from mirrorfit._src.regularizers.regularizers import L1 as L1
from mirrorfit._src.regularizers.regularizers import L1L2 as L1L2
from mirrorfit._src.regularizers.regularizers import L2 as L2

__all__ = [
    "ELU",
    "GRU",
    "L1",
    "L1L2",
    "L2",
    "LSTM",
    "Activation",
    "ActivityRegularization",
    "Add",
    "AlphaDropout",
    "Average",
    "AveragePooling1D",
    "AveragePooling2D",
    "AveragePooling3D",
    "AvgPool1D",
    "AvgPool2D",
    "AvgPool3D",
    "BatchNormalization",
    "Bidirectional",
    "CenterCrop",
    "Concatenate",
    "Conv1D",
    "Conv1DTranspose",
    "Conv2D",
    "Conv2DTranspose",
    "Conv3D",
    "Conv3DTranspose",
    "ConvLSTM2D",
    "Convolution1D",
    "Convolution1DTranspose",
    "Convolution2D",
    "Convolution2DTranspose",
    "Convolution3D",
    "Convolution3DTranspose",
    "Cropping1D",
    "Cropping2D",
    "Cropping3D",
    "Dense",
    "DepthwiseConv2D",
    "Dot",
    "Dropout",
    "Embedding",
    "Flatten",
    "FlaxLayer",
    "GaussianDropout",
    "GaussianNoise",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalAveragePooling3D",
    "GlobalAvgPool1D",
    "GlobalAvgPool2D",
    "GlobalAvgPool3D",
    "GlobalMaxPool1D",
    "GlobalMaxPool2D",
    "GlobalMaxPool3D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "GlobalMaxPooling3D",
    "GroupNormalization",
    "Identity",
    "Input",
    "InputLayer",
    "IntegerLookup",
    "KerasTensor",
    "Lambda",
    "Layer",
    "LayerNormalization",
    "LeakyReLU",
    "Masking",
    "MaxPool1D",
    "MaxPool2D",
    "MaxPool3D",
    "MaxPooling1D",
    "MaxPooling2D",
    "MaxPooling3D",
    "Maximum",
    "Minimum",
    "MultiHeadAttention",
    "Multiply",
    "Normalization",
    "PReLU",
    "Permute",
    "RandomBrightness",
    "RandomContrast",
    "RandomCrop",
    "RandomFlip",
    "RandomRotation",
    "RandomTranslation",
    "RandomZoom",
    "ReLU",
    "RepeatVector",
    "Rescaling",
    "Reshape",
    "Resizing",
    "SeparableConv2D",
    "SeparableConvolution2D",
    "SimpleRNN",
    "Softmax",
    "SpatialDropout1D",
    "SpatialDropout2D",
    "SpatialDropout3D",
    "StringLookup",
    "Subtract",
    "TextVectorization",
    "TimeDistributed",
    "UnitNormalization",
    "UpSampling1D",
    "UpSampling2D",
    "UpSampling3D",
    "ZeroPadding1D",
    "ZeroPadding2D",
    "ZeroPadding3D",
    "add",
    "average",
    "concatenate",
    "dot",
    "maximum",
    "minimum",
    "multiply",
    "subtract",
]
