"""``format="onnx"``: one endpoint as an ONNX model through ``jax2onnx``, for ONNX Runtime.

``jax2onnx.to_onnx`` converts the endpoint's JAX primitives (``dot_general``, ``conv``,
``reduce_window``, the element-wise arithmetic of normalization and activations, ...) with the
variables' values as initializers and a symbolic batch dimension ``"batch"``. Its inputs are
the endpoint's positional arrays, named ``input_0``, ``input_1``, ...; ONNX graphs take
arrays, so each argument must be one array, not a tuple or dict of them.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.export.extras import require

FORMAT = "onnx"


def write(path: Path, endpoints: dict[str, Any], values: list[np.ndarray]) -> None:
    """Writes the one endpoint of ``endpoints`` as the ONNX file ``path``.

    Raises:
        ValueError: for several endpoints, or an argument that is not one array.
        ImportError: naming the ``export`` extra, without jax2onnx.
    """
    if len(endpoints) != 1:
        raise ValueError("An ONNX model holds one function: write one artifact per endpoint "
                         f"(one ExportArchive each). Received: endpoints {list(endpoints)}")
    (name, endpoint), = endpoints.items()
    args = endpoint.signature
    if not all(isinstance(a, jax.ShapeDtypeStruct) for a in args):
        raise ValueError("ONNX export takes positional array inputs: export an endpoint "
                         "that takes each array of a dict input as its own argument "
                         "(ExportArchive.add_endpoint), or use format='stablehlo' or "
                         f"'tf_saved_model'. Received: input signature {list(args)}")
    jax2onnx = require("jax2onnx", FORMAT)
    constants = [jnp.asarray(v) for v in values]
    path.parent.mkdir(parents=True, exist_ok=True)
    jax2onnx.to_onnx(functools.partial(endpoint.function, constants),
                     [jax.ShapeDtypeStruct(("batch", *a.shape), a.dtype) for a in args], model_name=name,
                     input_names=[f"input_{i}" for i in range(len(args))],
                     return_mode="file", output_path=str(path))
