"""``format="tf_saved_model"``: a TensorFlow SavedModel through ``jax2tf``, for TF Serving.

Each endpoint becomes a method of the saved ``tf.Module`` and a signature of the same name
(``serve`` also as ``serving_default``, the signature TF Serving calls by default), converted
with ``jax2tf.convert`` (native serialization: the StableHLO of the endpoint inside a TF
graph) with a polymorphic batch dimension, lowered for each of the StableHLO format's
platforms (`mirrorfit._src.export.stablehlo.PLATFORMS`). The variables' values are
``tf.Variable`` s of the module (not graph constants), so large models stay under the 2 GiB
graph limit. A signature's outputs are a tensor, a dict, or ``{"output_0": ..., ...}`` for
other structures.

TensorFlow runs that StableHLO in its own XLA, which reads programs of a StableHLO version up
to about 4 weeks older than the exporting jax (jax's forward-compatibility window): TF 2.21
cannot run what jax 0.11.2 writes. `write` runs each endpoint once on a batch of one before
saving, so that mismatch is an error at export time, not at serving time.
"""

from __future__ import annotations

import inspect
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from mirrorfit._src.export import signature
from mirrorfit._src.export.extras import require
from mirrorfit._src.export.stablehlo import PLATFORMS

FORMAT = "tf_saved_model"


def _signature_outputs(tf: Any, outputs: Any) -> Any:
    if isinstance(outputs, dict) or tf.is_tensor(outputs):
        return outputs
    return {f"output_{i}": t for i, t in enumerate(tf.nest.flatten(outputs))}


def _positional(function: Callable[..., Any], count: int) -> Callable[..., Any]:
    """``function(*args)`` with ``count`` named positional parameters ``input_0``, ...: a
    SavedModel signature cannot encode ``*args``."""
    def call(*args: Any) -> Any:
        return function(*args)

    parameter = inspect.Parameter.POSITIONAL_OR_KEYWORD
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f"input_{i}", parameter) for i in range(count)])
    return call


def _check_runs(tf: Any, name: str, method: Any, specs: list[Any]) -> None:
    """Calls ``method`` on zeros shaped like ``specs`` (batch 1) in TensorFlow.

    Raises:
        RuntimeError: if TensorFlow's XLA cannot run the program jax wrote.
    """
    zeros = tf.nest.map_structure(lambda s: tf.zeros([1, *s.shape[1:]], s.dtype), specs)
    try:
        method(*zeros)
    except tf.errors.InvalidArgumentError as err:
        lines = err.message.splitlines() or [""]
        reason = next((line for line in lines if "error: " in line), lines[0])
        raise RuntimeError(
            f"TensorFlow {tf.__version__} cannot run the program jax {jax.__version__} "
            f"exported for endpoint {name!r} (TensorFlow reads StableHLO up to about 4 weeks "
            "older than jax's): install a TensorFlow released after this jax, or an older "
            f"jax, or export with format='stablehlo'. Received: {reason.strip()}") from err


def write(path: Path, endpoints: dict[str, Any], values: list[np.ndarray]) -> None:
    """Writes ``endpoints`` (name -> `mirrorfit._src.export.archive.Endpoint`) as a
    SavedModel directory ``path``.

    Raises:
        ImportError: naming the ``export`` extra, without TensorFlow.
    """
    tf = require("tensorflow", FORMAT)
    jax2tf = require("jax.experimental.jax2tf", FORMAT)
    module = tf.Module()
    module.params = [tf.Variable(v, trainable=False) for v in values]
    signatures = {}
    for name, endpoint in endpoints.items():
        args = endpoint.signature
        converted = jax2tf.convert(endpoint.function, with_gradient=False,
                                   polymorphic_shapes=[None] + ["(batch, ...)"] * len(args),
                                   native_serialization_platforms=PLATFORMS)
        specs = signature.batched(args, None, lambda shape, dtype: tf.TensorSpec(shape, dtype))
        method = tf.function(
            _positional(lambda *x, c=converted: c(module.params, *x), len(args)),
            autograph=False, input_signature=specs)
        _check_runs(tf, name, method, specs)
        setattr(module, name, method)
        signatures[name] = tf.function(
            _positional(lambda *x, m=method: _signature_outputs(tf, m(*x)), len(args)),
            autograph=False, input_signature=specs)
    if "serve" in signatures:
        signatures["serving_default"] = signatures["serve"]
    if path.exists():
        shutil.rmtree(path)
    tf.saved_model.save(module, str(path), signatures=signatures)
