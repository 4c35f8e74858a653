"""A `Model` in a checkpoint: what ``save_weights``/``save`` write and ``load_weights`` reads.

A model checkpoint is a generic checkpoint (`mirrorfit._src.saving.checkpoint`: orbax,
atomic, checksummed) whose arrays are the model's training state and whose ``info`` describes
the model, so that `mirrorfit._src.models.loading.load_model` can rebuild it:

* ``kind``: ``"weights"`` (params and non-param collections) or ``"model"`` (the whole
  training state: also the optimizer state, step and RNG key);
* ``input_spec`` (per-example shapes and dtypes, containers tagged), ``seed`` and
  ``dtype_policy``;
* ``architecture``: the JSON of a model of ``mirrorfit.layers`` whose layers all have a
  config;
* for ``kind="model"``: ``compile`` and ``module``, the compile arguments and module fields
  as JSON (`mirrorfit._src.saving.saved_config`);
* ``host_layers``, for a model with host layers (`mirrorfit._src.models.host_inputs`): each
  one's config and adapted vocabulary (`serialize_host_layer`).

A path ending in ``.keras`` is one zip file (`mirrorfit._src.saving.keras_archive`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from mirrorfit._src.distribute import zero
from mirrorfit._src.layers.preprocessing.host_layer import serialize_host_layer
from mirrorfit._src.models import keras_models
from mirrorfit._src.saving import background, keras_archive, saved_config
from mirrorfit._src.saving.background import BackgroundWriter
from mirrorfit._src.saving.checkpoint import read_latest, save
from mirrorfit._src.saving.checkpoint_format import LoadedVersion, select, unflatten_like
from mirrorfit._src.saving.directory_lock import DirectoryLock
from mirrorfit._src.trainers.state import require_state
from mirrorfit._src.utils import registry


def _encode_spec(spec: Any) -> Any:
    """A model's input spec (pytree of ``jax.ShapeDtypeStruct``) as JSON, containers tagged."""
    if isinstance(spec, jax.ShapeDtypeStruct):
        return {"shape": list(spec.shape), "dtype": np.dtype(spec.dtype).name}
    if isinstance(spec, dict):
        return {"dict": {str(k): _encode_spec(v) for k, v in spec.items()}}
    kind = "tuple" if isinstance(spec, tuple) else "list"
    return {kind: [_encode_spec(v) for v in spec]}


def decode_input_spec(encoded: Any) -> tuple[Any, np.dtype]:
    """Inverse of the stored input spec: ``(input_shape, input_dtype)`` for `Model`."""
    dtypes = []

    def decode(node):
        if "shape" in node:
            dtypes.append(np.dtype(node["dtype"]))
            return tuple(node["shape"])
        if "dict" in node:
            return {k: decode(v) for k, v in node["dict"].items()}
        values = [decode(v) for v in node.get("tuple", node.get("list", []))]
        return tuple(values) if "tuple" in node else values

    shape = decode(encoded)
    return shape, dtypes[0]


def _model_info(model, kind: str) -> dict[str, Any]:
    require_state(model.state)
    info = {"kind": kind, "input_spec": _encode_spec(model.input_spec), "seed": model.seed,
            "dtype_policy": model.dtype_policy.name}
    architecture = keras_models.architecture(model.module)  # JSON; None for Flax modules
    if architecture is not None:
        info["architecture"] = architecture
    if model.is_subclassed:
        info["subclass"] = subclass_config(model)
    elif kind == "model":
        info["module"] = saved_config.module_config(model.module)
    if kind == "model":
        info["compile"] = saved_config.serialize_compile(model.compile_config)
    if model._host_layers:  # applied to x on the host, outside the module
        info["host_layers"] = [serialize_host_layer(layer) for layer in model._host_layers]
    return info


def subclass_config(model) -> dict[str, Any]:
    """``registry.serialize`` of a subclassed model: its class and ``get_config()``.

    Raises:
        NotImplementedError: its constructor arguments are not JSON-able and ``get_config``
            is not overridden (Keras' requirement for saving a subclassed model).
    """
    try:
        return registry.serialize(model)
    except NotImplementedError as err:
        raise NotImplementedError(
            f"Saving the subclassed model {type(model).__name__} stores its class name and "
            f"get_config() (never code): {err}") from None


def save_weights(model, path: str | os.PathLike, argument: str = "path",
                 lock: DirectoryLock | None = None,
                 writer: BackgroundWriter | None = None) -> Path | None:
    """Saves ``model`` 's params and non-param collections (see ``Model.save_weights``).

    Args:
        model: a built `Model`.
        path: the checkpoint directory.
        argument: how the caller's user names ``path`` in error messages.
        lock: the caller's held lock of ``path`` (else it is locked for this save).
        writer: write on this `BackgroundWriter` 's thread (after a host copy here).

    Returns:
        The new version directory ``<path>/ckpt-<n>`` (None when written in the background).

    Raises:
        ValueError: for a ``.keras`` path (``save`` writes those), or an unbuilt model.
        CheckpointWriteError: naming ``argument``, if the write fails.
    """
    if keras_archive.is_archive_path(path):
        raise ValueError("save_weights writes a checkpoint directory, not a .keras file: "
                         "use model.save(path) for a .keras file, or a directory name here. "
                         f"Received: path={os.fspath(path)!r}")
    info = _model_info(model, "weights")
    state = model.state
    tree = {"params": state.params, "model_state": state.model_state}
    if writer is not None:
        return background.save(writer, path, zero.host_copy(model.strategy, tree), info,
                               argument=argument, lock=lock)
    return save(path, tree, info, argument=argument, lock=lock)


def save_model(model, path: str | os.PathLike, argument: str = "path",
               lock: DirectoryLock | None = None,
               writer: BackgroundWriter | None = None) -> Path | None:
    """Saves ``model`` 's whole training state and config (see ``Model.save``).

    A path ending in ``.keras`` becomes one zip file (`keras_archive`).

    Args:
        model: a built `Model`.
        path: the checkpoint directory, or a ``.keras`` file.
        argument: how the caller's user names ``path`` in error messages.
        lock: the caller's held lock of a directory ``path`` (else it is locked for this
            save). A ``.keras`` file is not locked: it is replaced whole, atomically.
        writer: write a directory ``path`` on this `BackgroundWriter` 's thread (after a
            host copy here); a ``.keras`` file is written here, after the writer's write.

    Returns:
        The new version directory ``<path>/ckpt-<n>``, or the ``.keras`` file (None when
        written in the background).

    Raises:
        ValueError: for an unbuilt model.
        CheckpointWriteError: naming ``argument``, if the write fails.
    """
    info = _model_info(model, "model")
    state = zero.host_copy(model.strategy, model.state._asdict())  # whole, also when split
    if keras_archive.is_archive_path(path):
        if writer is not None:
            writer.wait()
        return keras_archive.write(path, lambda tmp: (
            save(tmp, state, info, argument=argument), info)[1], argument)
    if writer is not None:
        return background.save(writer, path, state, info, argument=argument, lock=lock)
    return save(path, state, info, argument=argument, lock=lock)


def restore_into(model, found: LoadedVersion, *, weights_only: bool) -> None:
    """Sets ``model`` 's state from a checkpoint, replicated on the model's strategy.

    With ``weights_only``, only params and non-param collections; otherwise also the
    optimizer state (when the model is compiled), step and RNG key. All or nothing.

    Raises:
        ValueError: listing mismatching paths (see `unflatten_like`).
    """
    state = require_state(model.state)
    template = {"params": state.params, "model_state": state.model_state}
    if not weights_only:
        template.update(step=state.step, rng=state.rng)
        if state.opt_state is not None:
            template["opt_state"] = state.opt_state
    tree = unflatten_like(template, select(found.arrays, *template), source=str(found.path))
    model.assign_state(**tree)


def load_weights(model, path: str | os.PathLike) -> None:
    """Loads params and non-param collections into ``model`` (see ``Model.load_weights``).

    ``path`` is a checkpoint directory or a ``.keras`` file (whose weights load, as in Keras).
    """
    found = (keras_archive.read_latest(path) if keras_archive.is_archive_path(path)
             else read_latest(path))
    if not model.built and "input_spec" in found.info:
        model.build(decode_input_spec(found.info["input_spec"])[0])
    restore_into(model, found, weights_only=True)
