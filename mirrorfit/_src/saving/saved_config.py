"""What ``Model.save`` stores besides arrays, as JSON: the compile configuration and the module.

Never pickle: an object is stored as the registry writes it (`registry.serialize`:
``{"module", "class_name", "config": obj.get_config(), "registered_name"}``) and rebuilt by
the registry of its compile argument (`LOSSES`, `METRICS`, `OPTIMIZERS`), which finds the
class among mirrorfit's, the classes registered with ``register_serializable``, or
``custom_objects``; a name (``"adam"``, ``"mse"``) is stored as the name. An object without a
JSON-able ``get_config`` (a raw optax transformation, a plain function) is listed under
``"unstored"`` and must be passed again to ``load_model``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from flax import linen as nn

from mirrorfit._src.losses.losses import LOSSES
from mirrorfit._src.metrics.metrics import METRICS
from mirrorfit._src.optimizers import loss_scale  # noqa: F401  (registers LossScaleOptimizer)
from mirrorfit._src.optimizers.optimizers import OPTIMIZERS
from mirrorfit._src.utils import registry

COMPILE_ARGS = ("optimizer", "loss", "metrics", "loss_weights", "weighted_metrics")
_REGISTRIES = {"optimizer": OPTIMIZERS, "loss": LOSSES, "metrics": METRICS,
               "weighted_metrics": METRICS}
"""The registry that rebuilds the objects of each compile argument (loss weights are numbers)."""


def _entry(value: Any) -> Any:
    """A name as is; an object as `registry.serialize` writes it, or None when it has no
    JSON-able config (a class, a function, a raw optax transformation, a schedule)."""
    if value is None or isinstance(value, str):
        return value
    try:
        stored = registry.serialize(value)
        json.dumps(stored)
    except (TypeError, ValueError):
        return None
    return stored


def _encode(value: Any, entry: str, unstored: list) -> Any:
    """A compile argument as JSON: lists as lists, dicts (per-output arguments) as
    ``{"dict": ...}``, numbers (loss weights) as is, objects as their config."""
    if isinstance(value, Mapping):
        return {"dict": {str(k): _encode(v, f"{entry}[{k!r}]", unstored)
                         for k, v in value.items()}}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):  # not an optax
        return [_encode(v, f"{entry}[{i}]", unstored) for i, v in enumerate(value)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    stored = _entry(value)
    if stored is None and value is not None:
        unstored.append({"argument": entry.split("[")[0], "entry": entry,
                         "type": type(value).__name__})
    return stored


def serialize_compile(args: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``Model.compile_config`` as JSON; objects without a config are named in ``unstored``."""
    if args is None:
        return None
    unstored: list = []
    stored = {name: _encode(args.get(name), name, unstored) for name in COMPILE_ARGS}
    stored["steps_per_execution"] = int(args["steps_per_execution"])
    stored["unstored"] = unstored
    return stored


def _decode(stored: Any, kind: registry.Registry | None,
            custom_objects: Mapping[str, Any]) -> Any:
    """Inverse of `_encode`: objects rebuilt by ``kind``'s registry (any registry for None)."""
    if isinstance(stored, dict) and "dict" in stored:
        return {k: _decode(v, kind, custom_objects) for k, v in stored["dict"].items()}
    if isinstance(stored, list):
        return [_decode(v, kind, custom_objects) for v in stored]
    if stored is None or isinstance(stored, (int, float, str)):
        return stored
    if kind is None:
        return registry.deserialize(stored, custom_objects)
    return kind.deserialize(stored, custom_objects)


def deserialize_compile(stored: Mapping[str, Any], given: Mapping[str, Any],
                        custom_objects: Mapping[str, Any], path: str) -> dict[str, Any]:
    """``compile`` keyword arguments from the stored JSON; ``given`` values take precedence.

    Raises:
        ValueError: naming every compile argument that was not stored and not given.
    """
    missing = [e for e in stored.get("unstored", []) if given.get(e["argument"]) is None]
    if missing:
        names = list(dict.fromkeys(e["argument"] for e in missing))
        listed = ", ".join(f"{e['entry']} (a {e['type']} object)" for e in missing)
        raise ValueError(
            f"The model at {path!r} was compiled with objects that have no get_config, which "
            f"were not stored (no pickle): {listed}. Pass them again: mf.load_model(path, "
            f"module, {', '.join(f'{n}=...' for n in names)}), or load the weights only with "
            f"compile=False. Received: {', '.join(f'{n}=None' for n in names)}")
    with registry.custom_object_scope(custom_objects):  # for configs inside configs
        return {name: given[name] if given.get(name) is not None
                else _decode(stored.get(name), _REGISTRIES.get(name), custom_objects)
                for name in COMPILE_ARGS}


def module_config(module: Any) -> dict[str, Any] | None:
    """A linen module's class name and JSON-able dataclass fields, to rebuild it from
    ``custom_objects``; ``None`` for other modules or fields that are not JSON."""
    if not isinstance(module, nn.Module) or not dataclasses.is_dataclass(module):
        return None
    fields = {f.name: getattr(module, f.name) for f in dataclasses.fields(module)
              if f.init and f.name not in ("parent", "name")}
    try:
        json.dumps(fields)
    except (TypeError, ValueError):
        return {"class_name": type(module).__name__, "config": None}
    return {"class_name": type(module).__name__, "config": fields}


def rebuild_module(stored: Mapping[str, Any] | None, custom_objects: Mapping[str, Any],
                   path: str) -> Any:
    """The module from `module_config`'s output and ``custom_objects``.

    Raises:
        ValueError: if its class is not in ``custom_objects`` or its fields were not stored.
    """
    name = None if stored is None else stored["class_name"]
    cls = custom_objects.get(name) if name else None
    if stored is None or cls is None or stored.get("config") is None:
        raise ValueError(
            f"load_model needs the model's Flax module (only weights and JSON are stored, "
            f"never code): pass it, mf.load_model(path, module), or its class in "
            f"custom_objects={{{name!r}: {name}}} when its fields are plain values. "
            f"Received: module=None, custom_objects={sorted(custom_objects)} for {path!r}")
    return cls(**stored["config"])
