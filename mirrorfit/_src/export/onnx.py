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
_LOOPS = ("scan", "while")  # lax primitives of recurrent layers (LSTM, GRU, SimpleRNN)

NOT_CONVERTED = (
    "jax2onnx could not convert {what} to ONNX{why}. Export this model with "
    "format='stablehlo' (read by mf.export.load or plain JAX) or format='tf_saved_model' "
    "instead. Received: {error}")
"""Error for a function jax2onnx fails on (its own message is chained)."""


def loop_layers(function: Any, constants: list[Any], args: list[jax.ShapeDtypeStruct]
                ) -> list[str]:
    """The layers (their name-scope paths, e.g. ``"lstm"``) whose computation in
    ``function(constants, *args)`` is a loop (``lax.scan``/``while``), found in its jaxpr."""
    closed = jax.make_jaxpr(function)(constants, *[
        jax.ShapeDtypeStruct((1, *a.shape), a.dtype) for a in args])
    found: list[str] = []

    def visit(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in _LOOPS:
                path = str(eqn.source_info.name_stack).split("/")
                name = "/".join(path[1:] if len(path) > 1 else path) or eqn.primitive.name
                if name not in found:
                    found.append(name)
            for param in eqn.params.values():
                for sub in param if isinstance(param, (list, tuple)) else [param]:
                    inner = getattr(sub, "jaxpr", None)
                    if inner is not None:
                        visit(getattr(inner, "jaxpr", inner))
    visit(closed.jaxpr)
    return found


def write(path: Path, endpoints: dict[str, Any], values: list[np.ndarray]) -> None:
    """Writes the one endpoint of ``endpoints`` as the ONNX file ``path``.

    Raises:
        ValueError: for several endpoints, an argument that is not one array, or a function
            jax2onnx cannot convert (naming the recurrent layers, whose loops it does not
            convert, and the formats that take them).
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
    try:
        jax2onnx.to_onnx(functools.partial(endpoint.function, constants),
                         [jax.ShapeDtypeStruct(("batch", *a.shape), a.dtype) for a in args],
                         model_name=name, input_names=[f"input_{i}" for i in range(len(args))],
                         return_mode="file", output_path=str(path))
    except Exception as err:  # jax2onnx's own errors print its tracer state, not the cause
        loops = loop_layers(endpoint.function, constants, list(args))
        what, why = (f"the endpoint {name!r}", "")
        if loops:
            what = f"the recurrent loop (lax.scan) of the layers {loops}"
            why = (": jax2onnx does not convert the loops of LSTM, GRU and SimpleRNN with a "
                   "symbolic batch size")
        first_line = (str(err).strip().splitlines() or [""])[0][:300]
        summary = f"{type(err).__name__}: {first_line}" if first_line else type(err).__name__
        raise ValueError(NOT_CONVERTED.format(what=what, why=why, error=summary)) from err
