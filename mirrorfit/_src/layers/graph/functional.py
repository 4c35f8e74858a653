"""The functional API: `Input`, the layer graph, and the Flax module that runs it.

``x = Input(shape)`` gives a `KerasTensor` (shape with ``None`` batch, dtype). Calling a
``mirrorfit.layers`` layer, a ``mirrorfit.ops`` function or a Python operator on symbolic
tensors records a `Node` (`mirrorfit._src.layers.graph.symbolic`). `functional_module(inputs,
outputs)` turns the recorded graph into a `FunctionalModule`: each layer's variables sit
under its ``name`` (Keras' ``"dense"``, ``"dense_1"``, ... when not given), and a layer called
twice shares them.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from mirrorfit._src.layers import flax_bridge
from mirrorfit._src.layers.graph import mask_flow
from mirrorfit._src.layers.graph.symbolic import PROBE_LENGTHS as PROBE_LENGTHS
from mirrorfit._src.layers.graph.symbolic import KerasTensor as KerasTensor
from mirrorfit._src.layers.graph.symbolic import Node as Node
from mirrorfit._src.layers.graph.symbolic import eval_shapes as eval_shapes
from mirrorfit._src.layers.graph.symbolic import is_symbolic as is_symbolic
from mirrorfit._src.layers.graph.symbolic import probe_shape as probe_shape
from mirrorfit._src.layers.graph.symbolic import symbolic_call as symbolic_call
from mirrorfit._src.utils.naming import snake_case


def Input(shape: Sequence[int | None] | None = None, batch_size: int | None = None,
          dtype: Any = None, name: str | None = None,
          batch_shape: Sequence[int | None] | None = None) -> KerasTensor:
    """A symbolic input, as ``keras.Input``.

    Args:
        shape: the feature shape, without the batch axis, e.g. ``(28, 28, 1)``.
        batch_size: an optional fixed batch size (recorded only).
        dtype: the input dtype; default ``"float32"``.
        name: the input's name (also the key for dict inputs).
        batch_shape: the full shape including the batch axis, instead of ``shape``.

    Returns:
        A `KerasTensor` of shape ``(batch_size, *shape)``.

    Raises:
        ValueError: neither or both of ``shape`` and ``batch_shape``; or a string dtype (text
            is host-side work: a Sequential led by ``TextVectorization`` takes strings).
    """
    dtype = _array_dtype(dtype or "float32", name)
    if (shape is None) == (batch_shape is None):
        raise ValueError("Input needs exactly one of shape (without the batch axis) or "
                         f"batch_shape. Received: shape={shape}, batch_shape={batch_shape}")
    if isinstance(shape, int):
        shape = (shape,)
    if batch_shape is not None:
        full = tuple(batch_shape)
    else:
        assert shape is not None  # exactly one of the two is given (checked above)
        full = (batch_size, *tuple(shape))
    return KerasTensor(full, dtype, name=name)


TEXT_INPUT = (
    "Input takes array dtypes (numbers, booleans); a model's inputs are arrays on the "
    "devices, and text is host-side work. Start an "
    "mf.Sequential with TextVectorization (the model applies it to the strings on the host, "
    "in fit and predict), or apply it to the strings first and give the model "
    "Input(shape=(sequence_length,), dtype=\"int32\"). Received: dtype={dtype!r}{named}")


def _array_dtype(dtype: Any, name: str | None) -> np.dtype:
    """``dtype`` as a NumPy dtype (``tf.string`` and ``"string"`` included, to refuse them).

    Raises:
        ValueError: a string, bytes or object dtype (`TEXT_INPUT`), or one NumPy lacks.
    """
    try:
        found = np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    except TypeError:
        found = None
    if found is None or found.kind in "OSU":
        named = f" for Input {name!r}" if name else ""
        raise ValueError(TEXT_INPUT.format(dtype=str(getattr(dtype, "name", dtype)),
                                           named=named))
    return found


# -- the graph ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
    """A validated layer graph: inputs, nodes in run order, outputs, layers and their names."""

    inputs: Any  # the user's input structure of Input tensors
    outputs: Any  # the user's output structure of KerasTensors
    nodes: tuple[Node, ...]  # topological run order
    layers: tuple[nn.Module, ...]  # unique layers, in Keras' model.layers order
    names: tuple[str, ...]  # param-tree key of each layer
    depths: tuple[int, ...]  # each node's distance to the outputs (Keras' node depth)

    def name_of(self, layer: nn.Module) -> str:
        return self.names[next(i for i, l in enumerate(self.layers) if l is layer)]

    def nodes_of(self, layer: nn.Module) -> list[Node]:
        """``layer``'s calls in this graph, in call order (Keras' ``_inbound_nodes``)."""
        return sorted((n for n in self.nodes if n.layer is layer), key=lambda n: n.serial)

    @property
    def sequential_like(self) -> bool:
        """Keras' summary test: one node per depth, one input each, no shared layer."""
        depths = list(self.depths)
        return (len(set(depths)) == len(depths) and len(self.layers) == len(self.nodes)
                and all(len(n.input_tensors) <= 1 for n in self.nodes)
                and len(jax.tree.leaves(self.inputs)) == 1)


def _keras_order(outputs: list[KerasTensor], inputs: list[KerasTensor]):
    """Nodes in run order and layers in Keras' order (``keras/src/ops/function.py map_graph``):
    a depth-first walk from the outputs, then layers by decreasing depth, ties by first visit."""
    input_ids = {id(t) for t in inputs}
    finished: set[int] = set()
    in_progress: set[int] = set()
    run_order: list[Node] = []
    first_visit: dict[int, int] = {}

    def visit(t: KerasTensor) -> None:
        if t.node is None:
            if id(t) not in input_ids:
                raise ValueError(
                    f"Graph disconnected: an output depends on the Input {t.name or t!r}, which "
                    "is not in `inputs`. Add it to `inputs`, or build the output from the given "
                    f"inputs. Received: inputs={[x.name for x in inputs]}")
            return
        node = t.node
        if id(node) in finished:
            return
        if id(node) in in_progress:
            raise ValueError(f"The layer graph has a cycle at {t!r}.")
        first_visit.setdefault(id(node.layer), len(first_visit))
        in_progress.add(id(node))
        for x in node.input_tensors:
            visit(x)
        finished.add(id(node))
        run_order.append(node)

    for t in outputs:
        visit(t)
    node_depth: dict[int, int] = {}
    layer_depth: dict[int, int] = {}
    layers: dict[int, nn.Module] = {}
    for node in reversed(run_order):
        depth = max(node_depth.setdefault(id(node), 0), layer_depth.get(id(node.layer), 0))
        layer_depth[id(node.layer)] = depth
        layers[id(node.layer)] = node.layer
        node_depth[id(node)] = depth
        for x in node.input_tensors:
            if x.node is not None:
                node_depth[id(x.node)] = max(depth + 1, node_depth.get(id(x.node), 0))
    ordered = sorted(layers, key=lambda k: (-layer_depth[k], first_visit[k]))
    return run_order, [layers[k] for k in ordered], [node_depth[id(n)] for n in run_order]


def assign_names(layers: Sequence[Any]) -> tuple[str, ...]:
    """Param-tree keys: each layer's ``name``, else Keras' ``snake_case`` name made unique,
    numbered in construction order as Keras (``dense``, ``dense_1``, ...) but per model. A
    ``mirrorfit.layers`` layer keeps the name it gets (``layer.name``), as Keras layers do.

    Raises:
        ValueError: two layers with the same explicit name.
    """

    explicit: list[Any] = [getattr(l, "name", None) for l in layers]
    taken: set[str | None] = set()
    for name in explicit:
        if name is not None and name in taken:
            raise ValueError(f"Layer names must be unique within a model; {name!r} is used "
                             "twice. Give each layer its own `name=`.")
        taken.add(name)
    names = list(explicit)
    unnamed = [i for i, name in enumerate(explicit) if name is None]
    for i in sorted(unnamed, key=lambda i: (getattr(layers[i], "construction_index", i), i)):
        layer = layers[i]
        base = snake_case(type(layer).__name__ if isinstance(layer, nn.Module)
                          else getattr(layer, "__name__", type(layer).__name__))
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        names[i] = name
        if hasattr(layer, "construction_index"):  # a mirrorfit Layer keeps it, as in Keras
            object.__setattr__(layer, "name", name)
    return tuple(names)


def build_graph(inputs: Any, outputs: Any) -> Graph:
    """Validates a functional graph from ``inputs`` to ``outputs`` (tensors, lists or dicts).

    Raises:
        TypeError: an input that is not an `Input` tensor, or an output that is not symbolic.
        ValueError: a disconnected graph (an output needing an input not given, or an input
            no output uses), a cycle, or duplicate layer names.
    """
    flat_in = jax.tree.leaves(inputs)
    flat_out = jax.tree.leaves(outputs)
    for t in flat_in:
        if not isinstance(t, KerasTensor) or t.node is not None:
            raise TypeError("inputs must be tensors made by mirrorfit.layers.Input (a single "
                            f"one, a list or a dict). Received: inputs={inputs!r}")
    for t in flat_out:
        if not isinstance(t, KerasTensor):
            raise TypeError("outputs must be symbolic tensors from calling layers on Input "
                            f"tensors. Received: outputs={outputs!r}")
    run_order, layers, depths = _keras_order(flat_out, flat_in)
    used = {id(x) for node in run_order for x in node.input_tensors} | {id(t) for t in flat_out}
    unused = [t.name or repr(t) for t in flat_in if id(t) not in used]
    if unused:
        raise ValueError(f"Graph disconnected: the inputs {unused} are not used by any output. "
                         "Remove them from `inputs` or connect them to an output.")
    return Graph(inputs, outputs, tuple(run_order), tuple(layers), assign_names(layers),
                 tuple(depths))


def as_module(layer: Any, name: str, parent: nn.Module) -> Any:
    """``layer`` bound as a submodule ``name`` of ``parent``: a Flax layer is cloned there; a
    Keras-style layer (or a model used as a layer) runs in a `flax_bridge.LayerNode`."""
    if isinstance(layer, nn.Module):
        return layer.clone(name=name, parent=parent)
    if not hasattr(layer, "__mf_variables__"):  # a plain function
        return layer
    return flax_bridge.LayerNode(layer, name=name, parent=parent)


def mode_kwargs(layer: Any, training: bool) -> dict[str, bool]:
    try:
        params = inspect.signature(layer.__call__ if isinstance(layer, nn.Module) else layer)
    except (TypeError, ValueError):
        return {}
    return {"training": training} if "training" in params.parameters else {}


class FunctionalModule(nn.Module):
    """Runs a `Graph`; ``__call__(*inputs, training=False)`` as the Keras functional model.

    Inputs come as the graph's structure: one array; a list given as one list or as
    positional arrays; or a dict keyed as the ``inputs`` dict (or by `Input` names).
    """

    graph: Graph

    @nn.compact
    def __call__(self, *args: Any, training: bool = False) -> Any:
        graph = self.graph
        values = dict(zip(map(id, jax.tree.leaves(graph.inputs)), self._flat_inputs(args)))
        masks: dict[int, Any] = {}  # Keras masks of the tensors that have one, by tensor id
        bound = {id(l): as_module(l, n, self) for l, n in zip(graph.layers, graph.names)}
        for node in graph.nodes:
            node_args, node_kwargs = node.args
            extra = mask_flow.mask_kwargs(node.layer, node_args, node_kwargs,
                                          lambda t: masks.get(id(t)),
                                          lambda x: isinstance(x, KerasTensor))
            leaves, treedef = jax.tree.flatten(node.args)
            leaves = [values[id(x)] if isinstance(x, KerasTensor) else x for x in leaves]
            call_args, call_kwargs = jax.tree.unflatten(treedef, leaves)
            layer = bound[id(node.layer)]
            out = layer(*call_args, **call_kwargs, **extra, **mode_kwargs(layer, training))
            first = mask_flow.first_argument(node_args, node_kwargs)
            out_masks = mask_flow.output_masks(
                node.layer, mask_flow.first_argument(call_args, call_kwargs), out,
                jax.tree.map(lambda t: masks.get(id(t)), first))
            for t, v, m in zip(node.output_tensors, jax.tree.leaves(out), out_masks):
                values[id(t)] = v
                if m is not None:
                    masks[id(t)] = m
        flat, treedef = jax.tree.flatten(graph.outputs)
        out_masks = [masks.get(id(t)) for t in flat]
        if len(flat) == 1 or all(m is None for m in out_masks):
            mask_flow.sow_output_mask(self, out_masks[0])
        else:  # each output's mask, None where it has none, for its own loss and metrics
            mask_flow.sow_output_mask(self, jax.tree.unflatten(treedef, out_masks))
        return jax.tree.unflatten(treedef, [values[id(t)] for t in flat])

    def _flat_inputs(self, args: tuple) -> list[Any]:
        structure = self.graph.inputs
        flat = jax.tree.leaves(structure)
        if isinstance(structure, KerasTensor):
            return [args[0]]
        given: Any = args[0] if len(args) == 1 else list(args)
        if isinstance(given, dict) and not isinstance(structure, dict):
            missing = [t.name for t in flat if t.name not in given]
            if missing:
                raise ValueError(f"Dict inputs must have a key for every Input name; missing "
                                 f"{missing}. Received keys: {sorted(given)}")
            return [given[t.name] for t in flat]
        if not isinstance(given, (dict, list, tuple)):
            given = [given]
        leaves = jax.tree.leaves(given)
        if len(leaves) != len(flat):
            raise ValueError(f"The model takes {len(flat)} inputs; got {len(leaves)}. Pass "
                             "them in the structure of `inputs`.")
        return leaves


def functional_module(inputs: Any, outputs: Any, name: str | None = None) -> FunctionalModule:
    """The Flax module of a functional model, as ``keras.Model(inputs, outputs)``.

    Args:
        inputs: `Input` tensors: one, a list or a dict.
        outputs: symbolic tensors computed from ``inputs``: one, a list or a dict.
        name: the model's name.

    Returns:
        A `FunctionalModule`; its params are ``{layer_name: layer_params}``.

    Raises:
        TypeError, ValueError: as `build_graph`.

    Example:
        >>> inputs = mf.layers.Input((4,)); outputs = mf.layers.Dense(2)(inputs)
        >>> module = functional_module(inputs, outputs)
    """
    return FunctionalModule(build_graph(inputs, outputs), name=name)
