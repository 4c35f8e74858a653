"""Keras 3's ``keras.ops.image``: ``ops.image.resize(...)`` becomes the same call on
``mirrorfit.ops.image``.

Keras' names, arguments and defaults, on ``jax.image``, ``jax.lax`` and
``jax.scipy.ndimage`` as Keras' JAX backend computes them. Images are ``[batch, height,
width, channels]`` or one image ``[height, width, channels]``; ``data_format=
"channels_first"`` puts the channels before height and width (``None`` means channels
last). On the symbolic tensors of a functional model each records a node, as in Keras.

Left out: ``elastic_transform``, whose ``seed=None`` draws from Keras' global seed
generator (use ``affine_transform`` or ``map_coordinates`` with your own random offsets).

Example:
    >>> from mirrorfit import ops
    >>> images = np.zeros((2, 20, 20, 3), np.float32)
    >>> ops.image.extract_patches(images, (5, 5)).shape
    (2, 4, 4, 75)
    >>> ops.image.resize(images, (10, 8)).shape
    (2, 10, 8, 3)
"""

from mirrorfit._src.layers.preprocessing.image_filters import gaussian_blur as gaussian_blur
from mirrorfit._src.layers.preprocessing.image_filters import hsv_to_rgb as hsv_to_rgb
from mirrorfit._src.layers.preprocessing.image_filters import (
    rgb_to_grayscale as rgb_to_grayscale,
)
from mirrorfit._src.layers.preprocessing.image_filters import rgb_to_hsv as rgb_to_hsv
from mirrorfit._src.layers.preprocessing.image_filters import sobel_edges as sobel_edges
from mirrorfit._src.layers.preprocessing.image_filters import ssim as ssim
from mirrorfit._src.layers.preprocessing.image_ops import affine_transform as affine_transform
from mirrorfit._src.layers.preprocessing.image_ops import crop_images as crop_images
from mirrorfit._src.layers.preprocessing.image_ops import extract_patches as extract_patches
from mirrorfit._src.layers.preprocessing.image_ops import (
    extract_patches_3d as extract_patches_3d,
)
from mirrorfit._src.layers.preprocessing.image_ops import map_coordinates as map_coordinates
from mirrorfit._src.layers.preprocessing.image_ops import pad_images as pad_images
from mirrorfit._src.layers.preprocessing.image_ops import (
    perspective_transform as perspective_transform,
)
from mirrorfit._src.layers.preprocessing.image_ops import resize as resize
from mirrorfit._src.layers.preprocessing.image_ops import (
    scale_and_translate as scale_and_translate,
)

__all__ = ["affine_transform", "crop_images", "extract_patches", "extract_patches_3d",
           "gaussian_blur", "hsv_to_rgb", "map_coordinates", "pad_images",
           "perspective_transform", "resize", "rgb_to_grayscale", "rgb_to_hsv",
           "scale_and_translate", "sobel_edges", "ssim"]
