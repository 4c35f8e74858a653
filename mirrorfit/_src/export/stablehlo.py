"""``format="stablehlo"``: each endpoint as a serialized ``jax.export.Exported``.

The file is a zip archive with one member ``<endpoint>.jax_exported`` per endpoint, the bytes
of ``jax.export.export(...).serialize()`` of the endpoint with its variables' values inside
the program as constants. Its inputs have one symbolic batch size (any size at serving
time); its program runs on one device, lowered for each of `PLATFORMS` (the artifact of a
model trained on a GPU serves on a CPU, and the other way round). Reading it needs only JAX (and ``flatbuffers``, which
``jax.export`` serialization uses)::

    import zipfile, jax
    serve = jax.export.deserialize(zipfile.ZipFile(path).read("serve.jax_exported"))
    y = serve.call(x)

`load` does the same for every endpoint.
"""

from __future__ import annotations

import functools
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.export import signature

SUFFIX = ".jax_exported"
PLATFORMS = ("cpu", "cuda", "tpu")  # lowered for each, whatever device exports


def write(path: Path, endpoints: dict[str, Any], values: list[np.ndarray]) -> None:
    """Writes ``endpoints`` (name -> `mirrorfit._src.export.archive.Endpoint`) to ``path``."""
    batch, = jax.export.symbolic_shape("batch")
    constants = [jnp.asarray(v) for v in values]
    members = {}
    for name, endpoint in endpoints.items():
        specs = signature.batched(endpoint.signature, batch, jax.ShapeDtypeStruct)
        function = jax.jit(functools.partial(endpoint.function, constants))
        exported = jax.export.export(function, platforms=PLATFORMS)(*specs)
        members[name + SUFFIX] = exported.serialize()
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, bytes(data))


class LoadedExport:
    """The endpoints of a StableHLO artifact, as ``tf.saved_model.load`` 's object: one
    method per endpoint (``loaded.serve(x)``), and calling it calls ``serve``.

    Each endpoint takes the exported function's positional inputs (any batch size) and
    returns its outputs as JAX arrays.
    """

    def __init__(self, exported: dict[str, jax.export.Exported]):
        self.exported = exported  # endpoint name -> jax.export.Exported
        for name, one in exported.items():
            setattr(self, name, one.call)

    @property
    def endpoint_names(self) -> list[str]:
        """The endpoints' names."""
        return list(self.exported)

    def __call__(self, *args: Any) -> Any:
        serve: Callable[..., Any] | None = getattr(self, "serve", None)
        if serve is None:
            raise AttributeError("This artifact has no 'serve' endpoint to call; call one of "
                                 f"its endpoints by name. Received: {self.endpoint_names}")
        return serve(*args)


def load(filepath: str | os.PathLike) -> LoadedExport:
    """Reads a StableHLO artifact written by ``model.export(..., format="stablehlo")`` or
    `mirrorfit.export.ExportArchive`.

    It needs neither the model's code nor mirrorfit's model classes: only JAX.

    Args:
        filepath: the artifact file.

    Returns:
        A `LoadedExport`: ``loaded(x)`` or ``loaded.serve(x)`` for inputs
        ``[batch, ...]`` of any batch size.

    Raises:
        ValueError: if the file is not a StableHLO artifact.

    Example:
        >>> model.export("m.stablehlo", format="stablehlo", verbose=False)
        >>> mf.export.load("m.stablehlo")(x[:5]).shape
        (5, 3)
    """
    if not zipfile.is_zipfile(filepath):
        raise ValueError("filepath must be a file written with format='stablehlo' (a zip of "
                         f"serialized jax.export programs). Received: filepath={filepath!r}")
    with zipfile.ZipFile(filepath) as archive:
        exported = {member.removesuffix(SUFFIX): jax.export.deserialize(
            bytearray(archive.read(member))) for member in archive.namelist()
            if member.endswith(SUFFIX)}
    if not exported:
        raise ValueError(f"{os.fspath(filepath)!r} holds no '*{SUFFIX}' endpoint: write it "
                         f"with format='stablehlo'. Received: filepath={filepath!r}")
    return LoadedExport(exported)
