"""Keras' default names: one ``snake_case`` for losses, metrics and layers.

This module imports nothing else from mirrorfit.
"""

from __future__ import annotations

import re


def snake_case(name: str) -> str:
    """Keras' ``to_snake_case``: ``"MeanIoU"`` -> ``"mean_io_u"``, ``"AUC"`` -> ``"auc"``,
    ``"MaxPooling2D"`` -> ``"max_pooling2d"``."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()
