"""`ExportArchive` (Keras 3's ``keras.export.ExportArchive``) and ``Model.export``.

An archive holds named endpoints: functions of a batch of inputs that may call tracked
models and layers. Each endpoint runs inside a `StatelessScope` that maps every variable it
reads to a value, so it is a pure function of those values (as Keras 3's JAX backend
exports): the values are read to the host once, from one replica of mirrored variables, so
the file holds the single-device program, without the strategy's mesh. `write_out` hands the
pure functions to one format's writer (`FORMATS`).

A layer that cannot run inside a compiled function (host-side preprocessing, such as text
lookups in Python) says so with the class attribute ``exportable = False``; `track` refuses
a model that contains one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from mirrorfit._src.export import onnx, saved_model, signature, stablehlo
from mirrorfit._src.export.signature import Signature
from mirrorfit._src.variables.stateless_scope import StatelessScope

DEFAULT_ENDPOINT = "serve"


class Endpoint(NamedTuple):
    """One exported function, as the writers take it."""

    function: Callable[..., Any]  # (values, *args) -> outputs, pure in the variables' values
    signature: Signature  # per positional argument: pytree of ShapeDtypeStruct of one example


Writer = Callable[[Path, dict[str, Endpoint], list[np.ndarray]], None]
FORMATS: dict[str, Writer] = {
    "tf_saved_model": saved_model.write,
    "stablehlo": stablehlo.write,
    "onnx": onnx.write,
}


def check_format(format: str) -> Writer:
    """The writer of ``format``.

    Raises:
        ValueError: for an unknown format, listing the known ones.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {sorted(FORMATS)}. Received: format={format!r}")
    return FORMATS[format]


def _sublayers(obj: Any) -> list[Any]:
    try:
        return list(getattr(obj, "layers", None) or [])
    except TypeError:  # a model of a plain Flax module has no Keras layer list
        return []


def _check_exportable(resource: Any) -> None:
    stack, seen = [resource], set()
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if getattr(obj, "exportable", True) is False:
            raise ValueError(
                f"{type(obj).__name__} {getattr(obj, 'name', '')!r} cannot be exported: it runs "
                "on the host, outside the compiled program (exportable = False). Export a model "
                "without it and apply that step before calling the exported function. "
                f"Received: a model containing {obj!r}")
        stack += [layer for layer in _sublayers(obj) if layer is not obj]


class ExportArchive:
    """Named inference functions of tracked models, written as one servable artifact, as
    ``keras.export.ExportArchive``.

    `track` the models or layers, `add_endpoint` each function with its input signature,
    then `write_out` in one format. Endpoints run in inference mode unless their function
    passes ``training=True``; the variables they read are captured with their current
    values (one replica's copy of mirrored ones).

    Example:
        >>> archive = mf.export.ExportArchive()
        >>> archive.track(model)
        >>> spec = [jax.ShapeDtypeStruct((1, 4), jnp.float32)]
        >>> archive.add_endpoint("serve", model, spec)
        >>> archive.add_endpoint("serve_argmax", lambda x: jnp.argmax(model(x), -1), spec)
        >>> archive.write_out("model.stablehlo", format="stablehlo",
        ...                   verbose=False)
        >>> served = mf.export.load("model.stablehlo")
        >>> served.serve_argmax(x[:2]).shape
        (2,)
    """

    def __init__(self) -> None:
        self._variables: list[Any] = []  # every variable an endpoint reads, in first-use order
        self._endpoints: dict[str, Endpoint] = {}

    @property
    def endpoint_names(self) -> list[str]:
        """The names of the endpoints added so far."""
        return list(self._endpoints)

    def track(self, resource: Any) -> None:
        """Checks that a model or layer can be exported and captures its variables.

        Variables an endpoint reads are captured by `add_endpoint` anyway; tracking checks
        the resource first.

        Args:
            resource: a built `mirrorfit.Model` or `mirrorfit.layers.Layer`.

        Raises:
            ValueError: for an unbuilt resource, or one that contains a layer with
                ``exportable = False``.
        """
        if getattr(resource, "built", True) is False:
            raise ValueError(
                f"{type(resource).__name__} {getattr(resource, 'name', '')!r} is not built, so "
                "it has no weights to export: call it on a batch, fit it, or call "
                "model.build(input_shape) first. Received: an unbuilt model")
        _check_exportable(resource)
        for variable in [*resource.trainable_variables, *resource.non_trainable_variables]:
            self._add_variable(variable)

    def _add_variable(self, variable: Any) -> None:
        if all(v is not variable for v in self._variables):
            self._variables.append(variable)

    def add_endpoint(self, name: str, fn: Callable[..., Any], input_signature: Any) -> None:
        """Adds the function ``fn`` as the endpoint ``name``.

        ``fn`` is traced once now, on the signature's shapes, to check it and to capture the
        variables it reads (of tracked or untracked objects).

        Args:
            name: the endpoint's name (a Python identifier), e.g. ``"serve"``.
            fn: a function of the batch inputs returning arrays (or a pytree of them),
                e.g. a model, or ``lambda x: jax.nn.softmax(model(x))``.
            input_signature: a list with one entry per positional argument of ``fn``: a
                pytree of ``jax.ShapeDtypeStruct`` (or arrays, ``tf.TensorSpec``) whose
                first dimension is the batch, exported as any size
                (`mirrorfit._src.export.signature`).

        Raises:
            ValueError: for a name that is not an identifier or is already used, or a bad
                input signature.
        """
        if not (isinstance(name, str) and name.isidentifier()) or name in self._endpoints:
            raise ValueError("name must be a Python identifier not used by another endpoint "
                             f"({self.endpoint_names}). Received: name={name!r}")
        example = signature.from_input_signature(input_signature)

        def pure(values: list[Any], *args: Any) -> Any:
            with StatelessScope(zip(self._variables, values)):
                return fn(*args)

        with StatelessScope(record_reads=True) as reads:
            jax.eval_shape(fn, *signature.batched(example, 1, jax.ShapeDtypeStruct))
        for variable in reads.touched:
            self._add_variable(variable)
        self._endpoints[name] = Endpoint(pure, example)

    def track_and_add_endpoint(self, name: str, resource: Any, input_signature: Any) -> None:
        """`track` ``resource``, then `add_endpoint` ``name`` calling it (in inference mode)."""
        self.track(resource)
        self.add_endpoint(name, resource, input_signature)

    def write_out(self, filepath: str | os.PathLike, format: str = "tf_saved_model",
                  verbose: bool = True) -> None:
        """Writes the endpoints to ``filepath`` in ``format``.

        Args:
            filepath: the file (``"stablehlo"``, ``"onnx"``) or directory
                (``"tf_saved_model"``) to write; replaced if it exists.
            format: ``"tf_saved_model"`` (Keras' default; a SavedModel whose endpoints are
                methods and signatures, ``serve`` also as ``serving_default``; needs
                TensorFlow), ``"stablehlo"`` (a zip of serialized ``jax.export.Exported``,
                read by `mirrorfit.export.load` or plain JAX) or ``"onnx"`` (one endpoint;
                needs jax2onnx).
            verbose: print where the artifact was written and its endpoints.

        Raises:
            ValueError: for an unknown format, or an archive without endpoints.
            ImportError: naming the ``export`` extra, if the format's converter is missing.
        """
        writer = check_format(format)
        if not self._endpoints:
            raise ValueError("The archive has no endpoints to write: call add_endpoint first. "
                             "Received: an ExportArchive with no endpoints")
        values = [np.asarray(variable.numpy()) for variable in self._variables]
        writer(Path(filepath), dict(self._endpoints), values)
        if verbose:
            print(f"Saved {format} artifact at '{os.fspath(filepath)}' with endpoints: "
                  f"{', '.join(self._endpoints)}")


def export_model(model: Any, filepath: str | os.PathLike, format: str = "tf_saved_model",
                 input_signature: Any = None, verbose: bool = True) -> None:
    """``Model.export``: writes the model's forward pass as the endpoint ``serve``.

    Raises:
        ValueError: for an unknown format or an unbuilt model.
    """
    check_format(format)
    archive = ExportArchive()
    archive.track(model)
    if input_signature is None:
        example = signature.of_model(model)
        input_signature = signature.batched(example, 1, jax.ShapeDtypeStruct)
    archive.add_endpoint(DEFAULT_ENDPOINT, model, input_signature)
    archive.write_out(filepath, format=format, verbose=verbose)
