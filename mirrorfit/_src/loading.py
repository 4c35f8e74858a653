"""`load_model`: a `Model` rebuilt from a directory written by ``Model.save``.

It sits above the facade: it constructs a `Model` from the stored input spec and seed (and
architecture, for a model of ``mirrorfit.layers``), compiles it with the stored (or given)
compile arguments, and restores the training state through `mirrorfit._src.checkpoint`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from mirrorfit._src import checkpoint as checkpoint_lib
from mirrorfit._src.keras_models import from_architecture
from mirrorfit._src.model import Model
from mirrorfit._src.sequential_model import module_of


def load_model(path: str | os.PathLike, module: Any = None, *, optimizer: Any = None,
               loss: Any = None, metrics: Sequence[Any] | None = None,
               custom_objects: dict[str, Any] | None = None) -> Model:
    """Loads a model saved by `Model.save`, mirrored on the current strategy's devices.

    Args:
        path: the directory given to ``model.save``.
        module: the Flax module the model was built from (or the list of layers of a
            `Sequential`). Optional for a model of ``mirrorfit.layers``: its architecture
            is stored as JSON (layer configs, never pickled code) and rebuilt.
        optimizer, loss, metrics: compile arguments; default to the names stored by ``save``.
            Required when the saved model was compiled with objects instead of names.
        custom_objects: ``{class_name: class}`` of custom layers in a stored architecture.

    Returns:
        A built `Model` (compiled if the saved one was) with the saved weights, optimizer
        state, step and RNG key: training continues exactly where it stopped.

    Raises:
        ValueError: if a needed compile argument was not stored and not given, if no
            ``module`` was given and no architecture was stored, if a stored layer class is
            unknown (pass ``custom_objects``), or if the checkpoint does not match ``module``
            (listing the mismatching paths).

    Example:
        >>> model.save("run/model")
        >>> with mf.MirroredStrategy().scope():
        ...     restored = mf.load_model("run/model", model.module)
        >>> with mf.MirroredStrategy().scope():
        ...     keras_style = mf.Sequential([mf.Input((4,)), mf.layers.Dense(3)])
        ...     keras_style.save("run/keras_style")
        ...     restored = mf.load_model("run/keras_style")  # architecture from the save
    """
    found = checkpoint_lib.read_latest(path)
    input_shape, input_dtype = checkpoint_lib.decode_input_spec(found.info["input_spec"])
    stored = found.info.get("compile")
    if stored is not None:
        given = {"optimizer": optimizer, "loss": loss, "metrics": metrics}
        args = {k: stored[k] if v is None else v for k, v in given.items()}
        for name, value in args.items():
            if value is None:
                raise ValueError(
                    f"The model at {os.fspath(path)!r} was compiled with a {name} object, which "
                    f"is not stored (no pickle). Pass it again: mf.load_model(path, module, "
                    f"{name}=...). Received: {name}=None")
    if module is None:
        if "architecture" not in found.info:
            raise ValueError(
                f"The model at {os.fspath(path)!r} stores no architecture (only models built "
                "from mirrorfit.layers with get_config do); pass the module it was built from:"
                " mf.load_model(path, module). Received: module=None")
        module = from_architecture(found.info["architecture"], custom_objects)
    if isinstance(module, (list, tuple)):
        module = module_of(list(module))
    model = Model(module, input_shape, input_dtype=input_dtype, seed=found.info["seed"])
    if stored is not None:
        model.compile(**args, steps_per_execution=stored["steps_per_execution"])
    # A save_weights checkpoint loads too, with fresh optimizer state, step and RNG key.
    checkpoint_lib.restore_into(model, found, weights_only=found.info.get("kind") != "model")
    return model
