"""Export for serving, as ``keras.export``: `ExportArchive` (several named endpoints in one
StableHLO, TensorFlow SavedModel or ONNX artifact) and `load` (a StableHLO artifact, with only
JAX). ``model.export(filepath, format=...)`` writes a model's forward pass as the endpoint
``serve``.
"""

from mirrorfit._src.export.archive import ExportArchive as ExportArchive
from mirrorfit._src.export.stablehlo import LoadedExport as LoadedExport
from mirrorfit._src.export.stablehlo import load as load

__all__ = [
    "ExportArchive",
    "LoadedExport",
    "load",
]
