"""`load_model`: a `Model` rebuilt from what ``Model.save`` wrote (a directory or a ``.keras``
file).

It sits above the facade: it constructs a `Model` from the stored input spec, seed and dtype
policy (and the module, when it is given, found in ``custom_objects``, or stored as the
architecture of a model of ``mirrorfit.layers``), compiles it with the stored compile
configuration (`mirrorfit._src.saving.saved_config`), and restores the training state through
`mirrorfit._src.models.model_saving`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from mirrorfit._src.layers.preprocessing.host_layer import deserialize_host_layer
from mirrorfit._src.models.keras_models import from_architecture
from mirrorfit._src.models.model import Model
from mirrorfit._src.models.model_saving import decode_input_spec, restore_into
from mirrorfit._src.models.sequential import module_of
from mirrorfit._src.saving import checkpoint as checkpoint_lib
from mirrorfit._src.saving import keras_archive, saved_config
from mirrorfit._src.utils import registry


def load_model(path: str | os.PathLike, module: Any = None, *, optimizer: Any = None,
               loss: Any = None, metrics: Sequence[Any] | None = None, compile: bool = True,
               custom_objects: Mapping[str, Any] | None = None) -> Model:
    """Loads a model saved by `Model.save`, mirrored on the current strategy's devices.

    Args:
        path: the directory or ``.keras`` file given to ``model.save``.
        module: the Flax module the model was built from (or the list of layers of a
            `Sequential`). ``None``: a model of ``mirrorfit.layers`` is rebuilt from its
            stored architecture (layer configs as JSON; custom layers from
            ``custom_objects``); another linen module from ``custom_objects`` by its class
            name, when its fields are plain values. Only weights and JSON are stored,
            never code or pickles.
        optimizer, loss, metrics: override the stored compile configuration. Needed only for
            objects that have no ``get_config`` (e.g. a raw optax transformation).
        compile: ``False`` loads the weights only, into an uncompiled model.
        custom_objects: ``{class name: class}`` for the module, and for your layers,
            losses, metrics, optimizers, regularizers and activations stored by their
            ``get_config`` (or name) that are not registered with
            ``mf.saving.register_serializable``.

    Returns:
        A built `Model`, with the saved dtype policy, compiled as the saved one was
        (optimizer, its state, loss, metrics, ``steps_per_execution``), with the saved
        weights, step and RNG key: training continues exactly where it stopped. A saved
        `Sequential` 's host layers (`TextVectorization`, ...: config and vocabulary) are
        rebuilt and applied to ``x`` again, so the model takes raw strings.

    Raises:
        ValueError: if a compile argument without a config was not passed (listing them), if
            the module is neither given nor in ``custom_objects``, or if the checkpoint does
            not match the module (listing the mismatching paths).

    Example:
        >>> model.save("run/model.keras")
        >>> with mf.MirroredStrategy().scope():
        ...     restored = mf.load_model("run/model.keras", model.module)
        >>> with mf.MirroredStrategy().scope():
        ...     keras_style = mf.Sequential([mf.Input((4,)), mf.layers.Dense(3)])
        ...     keras_style.save("run/keras_style")
        ...     restored = mf.load_model("run/keras_style")  # architecture from the save
    """
    if keras_archive.is_archive_path(path):
        found = keras_archive.read_latest(path)
    else:
        found = checkpoint_lib.read_latest(path)
    custom_objects = dict(custom_objects or {})
    input_shape, input_dtype = decode_input_spec(found.info["input_spec"])
    if module is None and "subclass" in found.info:
        model = _subclassed(found.info["subclass"], custom_objects, os.fspath(path))
        model.build(input_shape)
    else:
        model = _module_model(found.info, module, custom_objects, os.fspath(path), input_shape,
                              input_dtype)
    if "host_layers" in found.info:  # a Sequential's, applied to x on the host
        model._host_layers = [deserialize_host_layer(config, custom_objects)
                              for config in found.info["host_layers"]]
    stored = found.info.get("compile")
    if compile and stored is not None:
        given = {"optimizer": optimizer, "loss": loss, "metrics": metrics}
        args = saved_config.deserialize_compile(stored, given, custom_objects, os.fspath(path))
        model.compile(**args, steps_per_execution=stored["steps_per_execution"])
    # A save_weights checkpoint loads too, with fresh optimizer state, step and RNG key.
    weights_only = not model.compiled or found.info.get("kind") != "model"
    restore_into(model, found, weights_only=weights_only)
    return model


def _module_model(info: dict[str, Any], module: Any, custom_objects: dict[str, Any], path: str,
                  input_shape: Any, input_dtype: Any) -> Model:
    """The Flax-module model of a save: from ``module``, the stored architecture, or the
    stored module config and ``custom_objects``."""
    if module is None and "architecture" in info:
        module = from_architecture(info["architecture"], custom_objects)
    elif module is None:
        module = saved_config.rebuild_module(info.get("module"), custom_objects, path)
    elif isinstance(module, (list, tuple)):
        module = module_of(list(module))
    # Saves from before dtype policies were stored get the global policy, as a new model does.
    return Model(module, input_shape, input_dtype=input_dtype, seed=info["seed"],
                 dtype_policy=info.get("dtype_policy"))


def _subclassed(stored: dict[str, Any], custom_objects: dict[str, Any], path: str) -> Model:
    """A subclassed model from its stored class and config (``cls.from_config``).

    Raises:
        ValueError: the class is neither in ``custom_objects`` nor registered.
    """
    name = stored["class_name"]
    cls = (registry.get_registered_object(stored.get("registered_name") or name, custom_objects)
           or custom_objects.get(name))
    if cls is None:
        raise ValueError(
            f"load_model needs the class of the subclassed model {name!r} (only weights and "
            f"its get_config() are stored, never code): pass custom_objects={{{name!r}: "
            f"{name}}} or register it with @mf.saving.register_serializable(). Received: "
            f"custom_objects={sorted(custom_objects)} for {path!r}")
    with registry.CustomObjectScope(custom_objects):
        return cls.from_config(stored["config"])
