"""Symbolic tensors, and calls recorded on them while a functional model is built.

``Input(shape)`` gives a `KerasTensor` (shape with ``None`` batch, dtype). Calling a layer, a
model, a ``mirrorfit.ops`` function or a Python operator (``x + 1``, ``x[:, 0]``, ``x @ w``)
on symbolic tensors records a `Node` (`symbolic_call`, as Keras 3's
``Operation.symbolic_call``) and returns symbolic outputs, with shapes from
``jax.eval_shape``; `mirrorfit._src.layers.graph.functional` turns the recorded graph into a model.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from mirrorfit._src.layers.graph import mask_flow
from mirrorfit._src.variables.stateless_scope import StatelessScope

_PROBE_BATCH = 2  # batch size used to infer output shapes; reported as None
# Lengths standing in for variable (None) non-batch dimensions when inferring shapes or
# building: output dimensions that differ between the two are variable too.
PROBE_LENGTHS = (16, 32)
_NODE_SERIALS = itertools.count()
NOT_AN_ARRAY = (
    "A KerasTensor is symbolic: a placeholder for a shape and a dtype while a functional "
    "model is built, with no values. Compute on it with mirrorfit.ops functions (ops.reshape, "
    "ops.concatenate, ...), Python operators or layers, which record the call in the model; "
    "jax.numpy and NumPy functions cannot take it. Received: {tensor!r}")


class Operation:
    """One call of a function (a ``mirrorfit.ops`` op, a Python operator) in a functional
    graph: a new object per call, so each is its own node named after the function
    (``add``, ``add_1``, ...), as Keras 3 makes an ``Operation`` per op call. It holds no
    weights and is no layer of the model (``model.layers`` leaves it out, as Keras)."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Operation {self.__name__}>"


def _operator(fn: Callable[..., Any], name: str, reflected: bool = False) -> Any:
    """A `KerasTensor` method recording ``fn(self, other)`` (``fn(other, self)`` when
    ``reflected``, or ``fn(self)`` for a unary one) as a node named ``name``."""
    def call(*args: Any) -> Any:
        return fn(*reversed(args)) if reflected else fn(*args)
    call.__name__ = call.__qualname__ = name

    def method(self: KerasTensor, *other: Any) -> Any:
        return symbolic_call(Operation(call), (self, *other), {})
    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


class KerasTensor:
    """A symbolic tensor: ``shape`` (``None`` batch), ``dtype``, and where it comes from.

    Attributes:
        shape: ``(None, *feature_shape)``.
        dtype: a NumPy dtype.
        name: the `Input`'s name, or ``"<layer>/<output index>"`` once built.
        node: the `Node` that produced it; ``None`` for an `Input`.
        index: its position among ``node``'s flattened outputs.
        mask: its Keras mask, a symbolic bool ``[batch, timesteps]``, or ``None``.
    """

    def __init__(self, shape: tuple[int | None, ...], dtype: Any, *, name: str | None = None,
                 node: Node | None = None, index: int = 0, mask: KerasTensor | None = None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.name = name
        self.node = node
        self.index = index
        self.mask = mask

    @property
    def ndim(self) -> int:
        """The number of axes, the batch axis included."""
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<KerasTensor shape={self.shape}, dtype={self.dtype.name}, name={self.name}>"

    def __mf_symbolic_call__(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        """Records ``fn(*args, **kwargs)`` (``mirrorfit.ops`` calls it for an op given a
        KerasTensor, as Keras' ``any_symbolic_tensors`` check)."""
        return symbolic_call(Operation(fn), args, kwargs)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(NOT_AN_ARRAY.format(tensor=self))

    def __jax_array__(self) -> Any:
        raise TypeError(NOT_AN_ARRAY.format(tensor=self))

    def __bool__(self) -> bool:
        raise TypeError("A symbolic KerasTensor has no truth value (it holds no values). "
                        f"Use ops.cond or ops.where inside a layer's call. Received: {self!r}")

    def __iter__(self) -> Any:
        raise TypeError("A symbolic KerasTensor cannot be iterated. Use ops.unstack or "
                        f"slicing (x[:, i]). Received: {self!r}")

    # Python operators record nodes, as Keras 3's KerasTensor's call keras.ops.
    __add__ = _operator(operator.add, "add")
    __radd__ = _operator(operator.add, "add", reflected=True)
    __sub__ = _operator(operator.sub, "subtract")
    __rsub__ = _operator(operator.sub, "subtract", reflected=True)
    __mul__ = _operator(operator.mul, "multiply")
    __rmul__ = _operator(operator.mul, "multiply", reflected=True)
    __matmul__ = _operator(operator.matmul, "matmul")
    __rmatmul__ = _operator(operator.matmul, "matmul", reflected=True)
    __truediv__ = _operator(operator.truediv, "divide")
    __rtruediv__ = _operator(operator.truediv, "divide", reflected=True)
    __floordiv__ = _operator(operator.floordiv, "floor_divide")
    __rfloordiv__ = _operator(operator.floordiv, "floor_divide", reflected=True)
    __mod__ = _operator(operator.mod, "mod")
    __rmod__ = _operator(operator.mod, "mod", reflected=True)
    __pow__ = _operator(operator.pow, "power")
    __rpow__ = _operator(operator.pow, "power", reflected=True)
    __neg__ = _operator(operator.neg, "negative")
    __pos__ = _operator(operator.pos, "positive")
    __abs__ = _operator(operator.abs, "absolute")
    __invert__ = _operator(operator.invert, "invert")
    __lt__ = _operator(operator.lt, "less")
    __le__ = _operator(operator.le, "less_equal")
    __gt__ = _operator(operator.gt, "greater")
    __ge__ = _operator(operator.ge, "greater_equal")
    __and__ = _operator(operator.and_, "logical_and")
    __rand__ = _operator(operator.and_, "logical_and", reflected=True)
    __or__ = _operator(operator.or_, "logical_or")
    __ror__ = _operator(operator.or_, "logical_or", reflected=True)
    __xor__ = _operator(operator.xor, "logical_xor")
    __rxor__ = _operator(operator.xor, "logical_xor", reflected=True)
    __getitem__ = _operator(operator.getitem, "get_item")


@dataclasses.dataclass(eq=False)
class Node:
    """One call of ``layer`` on symbolic tensors: ``outputs = layer(*args, **kwargs)``."""

    layer: nn.Module
    args: Any  # (args, kwargs) with KerasTensors as leaves
    outputs: Any  # the call's outputs, KerasTensors as leaves
    serial: int = dataclasses.field(default_factory=lambda: next(_NODE_SERIALS))  # call order

    @property
    def input_tensors(self) -> list[KerasTensor]:
        return [t for t in jax.tree.leaves(self.args) if isinstance(t, KerasTensor)]

    @property
    def output_tensors(self) -> list[KerasTensor]:
        return jax.tree.leaves(self.outputs)


def is_symbolic(tree: Any) -> bool:
    """Whether ``tree`` holds a `KerasTensor`."""
    return any(isinstance(t, KerasTensor) for t in jax.tree.leaves(tree))


def probe_shape(shape: Sequence[int | None], length: int = PROBE_LENGTHS[0]
                ) -> tuple[int, ...]:
    """``shape`` with a ``None`` batch as `_PROBE_BATCH` and other ``None`` dimensions (a
    variable length) as ``length``."""
    batch = _PROBE_BATCH if shape[0] is None else shape[0]
    return (batch, *(length if d is None else d for d in shape[1:]))


def eval_shapes(fn: Any, shapes: Sequence[tuple[int | None, ...]], dtypes: Sequence[Any]
                ) -> Any:
    """The output shapes of ``fn(*arrays)`` for arrays of ``shapes`` (``None`` dimensions
    allowed), with ``None`` batch and ``None`` where an output dimension follows a variable
    input length: ``fn`` is traced at the `PROBE_LENGTHS` and the dimensions that differ are
    ``None``.

    Returns:
        ``fn``'s output structure with leaves holding ``shape`` and ``dtype``.
    """
    variable = any(d is None for shape in shapes for d in shape[1:])
    probes = PROBE_LENGTHS if variable else PROBE_LENGTHS[:1]
    results = [jax.eval_shape(fn, *[jax.ShapeDtypeStruct(probe_shape(s, n), d)
                                    for s, d in zip(shapes, dtypes)]) for n in probes]

    def merge(*leaves: jax.ShapeDtypeStruct) -> _Shape:
        dims = [None if len({leaf.shape[i] for leaf in leaves}) > 1 else leaves[0].shape[i]
                for i in range(1, len(leaves[0].shape))]
        return _Shape((None, *dims), leaves[0].dtype)
    return jax.tree.map(merge, *results)


@dataclasses.dataclass(frozen=True)
class _Shape:
    """An output's shape (``None`` for unknown dimensions) and dtype."""

    shape: tuple[int | None, ...]
    dtype: Any


def symbolic_call(layer: Any, args: tuple, kwargs: dict) -> Any:
    """Records ``layer(*args, **kwargs)`` on symbolic tensors and returns symbolic outputs.

    Keras masks flow symbolically too: the call gets the symbolic masks of its inputs (as a
    model run gives it theirs, `mask_flow`), and each output's ``mask`` is the symbolic
    mask the layer computes for it (``None`` when it has none).
    """
    leaves, treedef = jax.tree.flatten((args, kwargs))
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, KerasTensor)]
    unbound = layer.clone(parent=None, name=None) if isinstance(layer, nn.Module) else None

    def mask_of(t: Any) -> Any:
        return t.mask if isinstance(t, KerasTensor) else None

    extra_leaves, extra_def = jax.tree.flatten(mask_flow.mask_kwargs(
        layer, args, kwargs, mask_of, lambda x: isinstance(x, KerasTensor)))
    first = mask_flow.first_argument(args, kwargs)
    first_masks, first_def = jax.tree.flatten(jax.tree.map(mask_of, first))
    symbolic = [leaves[i] for i in slots] + extra_leaves + first_masks

    def init_outputs(*arrays):
        filled = list(leaves)
        for i, a in zip(slots, arrays):
            filled[i] = a
        a, kw = jax.tree.unflatten(treedef, filled)
        rest = arrays[len(slots):]
        kw = {**kw, **jax.tree.unflatten(extra_def, rest[:len(extra_leaves)])}
        if unbound is None:  # a Keras-style layer: builds its weights, changes nothing else
            with StatelessScope():
                out = layer(*a, **kw)
        else:
            rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
            out = unbound.init_with_output(rngs, *a, **kw)[0]
        mask = jax.tree.unflatten(first_def, rest[len(extra_leaves):])
        return out, mask_flow.output_masks(layer, mask_flow.first_argument(a, kw), out, mask)

    shapes, masks = eval_shapes(init_outputs, [t.shape for t in symbolic],
                                [t.dtype for t in symbolic])
    node = Node(layer, (args, kwargs), None)
    flat, out_def = jax.tree.flatten(shapes, is_leaf=lambda x: isinstance(x, _Shape))
    node.outputs = jax.tree.unflatten(out_def, [
        KerasTensor(s.shape, s.dtype, node=node, index=i,
                    mask=None if m is None else KerasTensor(m.shape, m.dtype))
        for i, (s, m) in enumerate(zip(flat, masks))])
    return node.outputs
