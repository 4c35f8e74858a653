"""Finding the `Variable` s an object owns, in Keras' order, by walking its attributes.

Keras tracks what a layer, model, optimizer or metric owns as it is assigned. mirrorfit
walks the same attributes when it needs the list (building a model's training state,
``model.weights``, checkpoints):

* a `Variable` is a leaf;
* lists, tuples and dicts are walked in order (dict keys become path parts);
* an object with ``__mf_variables__()`` returns its own ``(path, variable)`` pairs (layers
  list the weights they created first, as Keras; a Flax layer inside a Keras-style one lists
  the variables standing for its collections);
* any other object is walked through its attributes when its class sets
  ``_mf_trackable = True`` (layers, models, metrics, optimizers).

A variable reached twice (a layer shared by two parents) is listed once, at its first path.

It imports only its own package.
"""

from __future__ import annotations

from typing import Any

from mirrorfit._src.variables.variable import Variable

Path = tuple[str, ...]


def _children(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(value)]
    return []


def is_trackable(value: Any) -> bool:
    """Whether `walk` looks inside ``value``."""
    return (isinstance(value, (Variable, list, tuple, dict))
            or hasattr(value, "__mf_variables__") or getattr(value, "_mf_trackable", False))


def attribute_children(obj: Any) -> list[tuple[str, Any]]:
    """``obj`` 's attributes that may own variables, in assignment order (names starting
    with ``_mf`` are mirrorfit's bookkeeping and skipped)."""
    return [(name, value) for name, value in vars(obj).items()
            if not name.startswith("_mf") and is_trackable(value)]


def walk(root: Any, prefix: Path = ()) -> list[tuple[Path, Variable]]:
    """Every variable under ``root``, once each, as ``(path, variable)`` in Keras' order."""
    seen: set[int] = set()
    found: list[tuple[Path, Variable]] = []
    visiting: set[int] = set()

    def visit(value: Any, path: Path) -> None:
        if isinstance(value, Variable):
            if id(value) not in seen:
                seen.add(id(value))
                found.append((path, value))
            return
        if id(value) in visiting:
            return
        visiting.add(id(value))
        try:
            own = getattr(value, "__mf_variables__", None)
            if own is not None:
                for sub, child in own():
                    visit(child, path + ((sub,) if isinstance(sub, str) else tuple(sub)))
            elif getattr(value, "_mf_trackable", False) and not isinstance(value, type):
                for name, child in attribute_children(value):
                    visit(child, (*path, name))
            else:
                for name, child in _children(value):
                    visit(child, (*path, name))
        finally:
            visiting.discard(id(value))

    visit(root, prefix)
    return found


def variables_of(root: Any) -> list[Variable]:
    """`walk` without the paths."""
    return [v for _, v in walk(root)]
