"""What `mirrorfit.Checkpoint` stores of each value it is given, and how it puts values back.

A value given to ``mf.Checkpoint(name=value)`` becomes *slots*: one array each, keyed by its
path under ``name`` (``"model/dense/kernel"``), as ``tf.train.Checkpoint`` keys variables by
the attribute path that reaches them. A value is a pytree whose leaves are:

* a `Variable`: one slot; restored with ``assign``, which keeps its placement (a variable
  mirrored on a strategy's devices is mirrored on them again);
* an object that owns variables (layers, models, optimizers, metrics: an object with
  ``__mf_variables__`` or a class that sets ``_mf_trackable``): one slot per variable that
  `mirrorfit._src.variables.tracking.walk` finds, at its attribute path; assigned;
* an object with a training state, duck-typed as ``mf.Model`` offers it (``state``, a
  NamedTuple of pytrees, or ``None`` before it is built, and ``assign_state(**fields)``):
  its variables as above (a subclassed model's own; a Flax-module model's views of its
  state), and, once built, every leaf of every state field under ``_mf_train_state/``
  (``"model/_mf_train_state/opt_state/..."``; `walk` skips ``_mf`` names, so no variable
  path can collide), so the optimizer state, step and RNG key are saved too. A restore
  assigns the state first (``assign_state`` places it on the model's devices and writes it
  into the model's variables), then the variables, which a Keras-style model's state only
  copies: where the two disagree, the variables win. A checkpoint without the state part
  (saved from a model whose state was not built yet) restores the variables only;
* an array or number (a `Mirrored` is stored as the plain array it holds): one slot; restored
  into a new pytree whose leaves are placed like the ones they replace (a `Mirrored` on its
  devices again, a Python number as the same type), which replaces the checkpoint attribute.

A variable reached twice (one layer under two names) is stored once, at its first path.
Nothing here knows `Model`: saving sits below models (see docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from mirrorfit._src.distribute.values import Mirrored
from mirrorfit._src.saving.checkpoint_format import path_segments
from mirrorfit._src.variables.tracking import walk
from mirrorfit._src.variables.variable import Variable

TRAIN_STATE = "_mf_train_state"
"""Under a model's path: its training-state fields (see the module docstring)."""

UNBUILT = (
    "mf.Checkpoint({name}=...) holds a model with no weights yet, so there is nothing to "
    "{action}. Build it first: pass input_shape to the model, call model.build(input_shape) "
    "or call it on a batch. Received: {name}={value!r}")
"""Error for a model without a training state (its params are created on first use)."""

UNSUPPORTED = (
    "mf.Checkpoint saves Variables, objects that own them (layers, models, optimizers, "
    "metrics), mf.Model instances and pytrees of arrays or numbers, but {what} is of type "
    "{kind}. Pass the object that owns its state instead (a compiled model's optimizer "
    "state, step and RNG key are saved with the model). Received: {name}={value!r}")
"""Error for a value that holds something mirrorfit cannot store."""

_ARRAYS = (jax.Array, np.ndarray, np.generic, int, float, bool)


def owns_state(value: Any) -> bool:
    """Whether ``value`` keeps a training-state pytree with an assign path (``mf.Model``)."""
    return callable(getattr(type(value), "assign_state", None)) and hasattr(value, "state")


def waits_for_build(value: Any) -> bool:
    """Whether ``value`` is a model or an optimizer that has not created its variables yet
    (``built`` is False), into which a restore is deferred until it has (TF's deferred
    restoration, `mirrorfit._src.variables.deferred`)."""
    return getattr(value, "built", True) is False and (
        owns_state(value) or callable(getattr(value, "apply_gradients", None)))


def owns_variables(value: Any) -> bool:
    """Whether ``value`` is an object `walk` looks inside (not a plain container)."""
    return (not isinstance(value, type)
            and (hasattr(value, "__mf_variables__") or getattr(value, "_mf_trackable", False)))


def _is_leaf(value: Any) -> bool:
    return (isinstance(value, (Variable, Mirrored)) or owns_state(value)
            or owns_variables(value))


def check_value(name: str, value: Any) -> None:
    """Raises if ``value`` holds a leaf a checkpoint cannot store (see `Entry`).

    Raises:
        TypeError: naming ``name`` and where the leaf is, with what to pass instead.
    """
    for path, leaf in _leaves(value)[0]:
        if not (_is_leaf(leaf) or isinstance(leaf, _ARRAYS)):
            what = f"the leaf {'/'.join(path)!r} of {name}" if path else name
            raise TypeError(UNSUPPORTED.format(name=name, kind=type(leaf).__name__, what=what,
                                               value=value))


def _leaves(tree: Any) -> tuple[list[tuple[tuple[str, ...], Any]], Any]:
    pairs, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_leaf)
    return [(tuple(path_segments(path)), leaf) for path, leaf in pairs], treedef


def _host(value: Any) -> np.ndarray:
    value = value.value if isinstance(value, (Variable, Mirrored)) else value
    return np.asarray(jax.device_get(value))


def _dtype(value: Any) -> np.dtype:
    """The dtype ``value`` is stored with (without copying it to the host)."""
    return np.dtype(value.dtype) if hasattr(value, "dtype") else np.asarray(value).dtype


def _placed_like(array: np.ndarray, like: Any) -> Any:
    """``array`` as a value like ``like``: same dtype, placement and wrapper."""
    if isinstance(like, Mirrored):
        return Mirrored(_placed_like(array, like.value))
    if isinstance(like, (bool, int, float)):
        return type(like)(array.item())
    array = array.astype(_dtype(like))
    sharding = getattr(like, "sharding", None)
    if isinstance(like, jax.Array) and sharding is not None:
        return jax.device_put(array, sharding)
    return array


class Slot(NamedTuple):
    """One stored array: its key, and the value it holds now (for its shape and dtype)."""

    key: str  # "<name>/<path>", e.g. "model/dense/kernel"
    current: Any  # a Variable, array or number; np.shape/dtype give what a restore expects


class Entry:
    """The slots of one named value, and how a restore writes them back.

    Args:
        name: the checkpoint attribute.
        value: its value (see the module docstring).
        seen: ids of the variables earlier entries store (updated), so that each is
            stored once.
        action: ``"save"`` or ``"restore"``, for error messages.

    Raises:
        ValueError: for a model without weights (unbuilt).
        TypeError: for a leaf that is neither an array, a number, a Variable nor an object
            that owns variables or a training state.
    """

    def __init__(self, name: str, value: Any, seen: set[int], action: str):
        self.name = name
        self.value = value
        self.slots: list[Slot] = []
        self.optional: list[str] = []  # key prefixes whose slots a checkpoint may lack
        self.ignored: list[str] = []  # key prefixes a checkpoint may hold but are not restored
        self._states: list[Callable[[dict[str, np.ndarray]], None]] = []
        self._restorers: list[Callable[[dict[str, np.ndarray]], Any]] = []
        leaves, self._treedef = _leaves(value)
        for path, leaf in leaves:
            self._restorers.append(self._add(name, (name, *path), leaf, seen, action))

    def _add(self, name: str, path: tuple[str, ...], leaf: Any, seen: set[int],
             action: str) -> Callable[[dict[str, np.ndarray]], Any]:
        """Adds ``leaf`` 's slots; returns what gives the leaf's restored value."""
        if isinstance(leaf, Variable):
            return self._add_variables([(path, leaf)], seen, leaf)
        if owns_state(leaf):
            return self._add_model(name, path, leaf, seen, action)
        if owns_variables(leaf):
            return self._add_variables(walk(leaf, path), seen, leaf)
        if not isinstance(leaf, (*_ARRAYS, Mirrored)):
            check_value(name, self.value)  # raises, naming where the leaf is
        key = "/".join(path)
        self.slots.append(Slot(key, leaf))
        return lambda arrays: _placed_like(arrays[key], leaf)

    def _add_variables(self, pairs: list[tuple[tuple[str, ...], Variable]], seen: set[int],
                       leaf: Any) -> Callable[[dict[str, np.ndarray]], Any]:
        mine = [("/".join(p), v) for p, v in pairs if id(v) not in seen]
        seen.update(id(v) for _, v in mine)
        self.slots.extend(Slot(key, v) for key, v in mine)

        def restore(arrays: dict[str, np.ndarray]) -> Any:
            for key, variable in mine:
                variable.assign(arrays[key])
            return leaf

        return restore

    def _add_model(self, name: str, path: tuple[str, ...], model: Any, seen: set[int],
                   action: str) -> Callable[[dict[str, np.ndarray]], Any]:
        pairs = walk(model, path)
        state = model.state
        prefix = "/".join((*path, TRAIN_STATE))
        if state is None:
            if not pairs:
                raise ValueError(UNBUILT.format(name=name, action=action, value=model))
            self.ignored.append(prefix)
            return self._add_variables(pairs, seen, model)
        every = state._asdict() if hasattr(state, "_asdict") else dict(state)
        self.ignored += [f"{prefix}/{field}" for field, tree in every.items()
                         if tree is None]  # e.g. the optimizer state of an uncompiled model
        self.optional.append(prefix)
        rebuilds = {}
        for field, tree in every.items():
            if tree is not None:
                leaves, treedef = _leaves(tree)
                keys = ["/".join((prefix, field, *sub)) for sub, _ in leaves]
                self.slots.extend(Slot(key, leaf) for key, (_, leaf) in zip(keys, leaves))
                rebuilds[field] = (treedef, keys, [leaf for _, leaf in leaves])

        def restore_state(arrays: dict[str, np.ndarray]) -> None:
            if not any(key.startswith(prefix + "/") for key in arrays):
                return  # saved before the model had a state: its variables restore it
            model.assign_state(**{  # host values: assign_state places them on its devices
                field: jax.tree_util.tree_unflatten(treedef, [
                    arrays[key].astype(_dtype(leaf)) for key, leaf in zip(keys, leaves)])
                for field, (treedef, keys, leaves) in rebuilds.items()})

        self._states.append(restore_state)
        return self._add_variables(pairs, seen, model)

    def arrays(self) -> dict[str, np.ndarray]:
        """The slots' current values on the host, by key."""
        return {slot.key: _host(slot.current) for slot in self.slots}

    def restore_states(self, arrays: dict[str, np.ndarray]) -> None:
        """Assigns the models' training states (before any entry's variables: a state
        assignment also writes the model's variables)."""
        for restore in self._states:
            restore(arrays)

    def restore(self, arrays: dict[str, np.ndarray]) -> Any:
        """Writes ``arrays`` (checked by `mismatches`) into the variables and pytree leaves;
        returns the value the checkpoint attribute holds afterwards (the same objects, a new
        pytree)."""
        return jax.tree_util.tree_unflatten(self._treedef,
                                            [restore(arrays) for restore in self._restorers])


def mismatches(entries: list[Entry], arrays: dict[str, np.ndarray]) -> list[str]:
    """What differs between the entries' slots and a checkpoint's arrays, one line each.

    A slot missing from ``arrays`` or of another shape is listed, and so is an array stored
    under one of the entries' names that no slot takes (another architecture). Arrays under
    names the entries do not have are not: a restore may take part of a checkpoint. A model's
    training state may be missing as a whole (``Entry.optional``).
    """
    present = {prefix for entry in entries for prefix in entry.optional
               if any(key.startswith(prefix + "/") for key in arrays)}
    absent = tuple(prefix + "/" for entry in entries for prefix in entry.optional
                   if prefix not in present)
    problems = []
    keys = set()
    for slot in (slot for entry in entries for slot in entry.slots):
        keys.add(slot.key)
        expected = f"shape {tuple(np.shape(slot.current))} {_dtype(slot.current)}"
        found = arrays.get(slot.key)
        if found is None:
            if not slot.key.startswith(absent):
                problems.append(f"{slot.key}: expected {expected}, missing from the checkpoint")
        elif found.shape != tuple(np.shape(slot.current)):
            problems.append(f"{slot.key}: expected {expected}, found shape {found.shape} "
                            f"{found.dtype} in the checkpoint")
    names = {entry.name for entry in entries}
    ignored = tuple(prefix + "/" for entry in entries for prefix in entry.ignored)
    for key in sorted(arrays):
        if key.split("/", 1)[0] in names and key not in keys and not key.startswith(ignored):
            problems.append(f"{key}: found shape {arrays[key].shape} {arrays[key].dtype} in "
                            "the checkpoint, but the object has no such variable")
    return problems
