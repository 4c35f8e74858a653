"""Level 4: a model's inference functions as files to serve without its code: StableHLO
(`jax.export`), TensorFlow SavedModel (``jax2tf``) and ONNX (``jax2onnx``), written by
`ExportArchive` and ``Model.export``. Knows nothing of `Model`: it calls the objects it
tracks and reads their variables.
"""
