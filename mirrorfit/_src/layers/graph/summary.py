"""Keras' ``model.summary()`` table for models of ``mirrorfit.layers``.

`summary_rows` collects, per layer in ``model.layers`` order, its name, type, output shape
(``None`` batch) and parameter count, with the trainable / non-trainable totals;
`format_summary` renders them as Keras 3 prints them (a rich table; a "Connected to" column
for graphs that are not a chain; sizes in B/KB/MB as ``keras.src.utils.summary_utils``).
"""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Any, cast

import flax.linen as nn
import jax
import numpy as np
import rich.console
import rich.table

from mirrorfit._src.layers.flax_bridge import SOWN_LOSSES
from mirrorfit._src.layers.graph import functional, model_info, sequential
from mirrorfit._src.utils.naming import snake_case

# Keras' layouts: (line length, column positions) without and with "Connected to".
_LAYOUTS = {True: (88, (0.45, 0.80, 1.0)), False: (108, (0.3, 0.56, 0.74, 1.0))}


@dataclasses.dataclass(frozen=True)
class LayerRow:
    """One line of the table."""

    name: str
    class_name: str
    output_shape: Any  # a shape tuple with None batch, or a structure of them
    trainable_params: int
    non_trainable_params: int
    connected_to: str = "-"  # Keras' "Connected to": ``layer[node_index][tensor_index], ...``

    @property
    def params(self) -> int:
        return self.trainable_params + self.non_trainable_params


@dataclasses.dataclass
class InputLayer:
    """Stands in for Keras' InputLayer when naming input rows (``input_layer``, ...)."""

    name: str | None


@dataclasses.dataclass(frozen=True)
class Summary:
    """The table rows and totals (counts of scalars; sizes in bytes)."""

    rows: list[LayerRow]
    trainable_params: int
    non_trainable_params: int
    trainable_bytes: int
    non_trainable_bytes: int
    sequential_like: bool = True  # False: Keras adds the "Connected to" column


def _count(tree: Any) -> tuple[int, int]:
    leaves = jax.tree.leaves(tree)
    return (sum(math.prod(np.shape(x)) for x in leaves),
            sum(math.prod(np.shape(x)) * np.dtype(x.dtype).itemsize for x in leaves))


def _sequential_shapes(module: sequential.SequentialModule, sample_input: Any) -> list[Any]:
    spec = module.stack.input
    if spec is not None:  # its None (variable) dimensions stay None, as Keras shows them
        shape, dtype = spec.shape, spec.dtype
    elif sample_input is not None:
        shape, dtype = np.shape(sample_input), np.asarray(sample_input).dtype
    else:
        raise ValueError("summary_rows needs sample_input for a Sequential model without an "
                         "Input layer. Received: sample_input=None")
    return sequential.output_shapes(module.stack.layers, shape, dtype)


def _functional_shapes(module: functional.FunctionalModule) -> list[Any]:
    # Keras shows the output of the layer's last call.
    return [jax.tree.map(lambda t: t.shape, module.graph.nodes_of(layer)[-1].outputs)
            for layer in module.graph.layers]


def _connections(graph: functional.Graph, layer: Any, input_names: dict[int, str]) -> str:
    links = []
    for node in graph.nodes_of(layer):
        for t in node.input_tensors:
            if t.node is None:
                links.append(f"{input_names[id(t)]}[0][0]")
            else:
                index = graph.nodes_of(t.node.layer).index(t.node)
                links.append(f"{graph.name_of(t.node.layer)}[{index}][{t.index}]")
    return ", ".join(links) or "-"


def summary_rows(module: nn.Module, variables: dict[str, Any],
                 sample_input: Any = None) -> Summary:
    """Per-layer rows and totals of Keras' summary.

    Args:
        module: a module from `functional_module` or `sequential_module`.
        variables: its variables (``"params"``, ``"batch_stats"``, ...; ``"losses"`` skipped).
        sample_input: an input batch; needed only for a Sequential without an `Input`.

    Returns:
        A `Summary`. Params of a ``trainable=False`` layer (and a Keras-style layer's
        non-trainable weights), and every non-``"params"`` collection (BatchNorm's moving
        statistics), count as non-trainable, as Keras.

    Raises:
        ValueError: a Sequential without `Input` and no ``sample_input``.
        TypeError: ``module`` is neither a functional nor a Sequential module.

    Example:
        >>> from mirrorfit._src.layers.graph.sequential import sequential_module
        >>> module, _ = sequential_module([Input((3,)), Dense(2)])
        >>> variables = module.init(jax.random.key(0), jnp.zeros((1, 3)))
        >>> print(format_summary(summary_rows(module, variables), name="sequential"))
        Model: "sequential"
        ...
    """
    layers = model_info.model_layers(module)  # raises the TypeError for any other module
    rows = []
    connect = lambda layer: "-"
    sequential_like = True
    if isinstance(module, functional.FunctionalModule):
        graph = module.graph
        shapes = _functional_shapes(module)
        inputs = jax.tree.leaves(graph.inputs)
        names = functional.assign_names([InputLayer(t.name) for t in inputs])
        for t, name in zip(inputs, names):
            rows.append(LayerRow(name, "InputLayer", t.shape, 0, 0))
        input_names = {id(t): name for t, name in zip(inputs, names)}
        connect = lambda layer: _connections(graph, layer, input_names)
        sequential_like = graph.sequential_like
    else:
        shapes = _sequential_shapes(cast(sequential.SequentialModule, module), sample_input)
    totals = {"trainable": [0, 0], "non_trainable": [0, 0]}
    frozen = set(model_info.non_trainable_paths(module))
    for (name, layer), shape in zip(layers, shapes):
        counts = {"trainable": (0, 0), "non_trainable": (0, 0)}
        for collection, tree in variables.items():
            if collection in (SOWN_LOSSES, "intermediates") or name not in tree:
                continue
            marks = (jax.tree.leaves(model_info.frozen_tree({name: tree[name]}, frozen))
                     if collection == "params" else None)
            for i, leaf in enumerate(jax.tree.leaves(tree[name])):
                kind = "non_trainable" if marks is None or marks[i] else "trainable"
                n, size = _count(leaf)
                counts[kind] = (counts[kind][0] + n, counts[kind][1] + size)
        for kind, (n, size) in counts.items():
            totals[kind][0] += n
            totals[kind][1] += size
        class_name = (type(layer).__name__ if isinstance(layer, nn.Module)
                      else getattr(layer, "__name__", type(layer).__name__))
        rows.append(LayerRow(name, class_name, shape, counts["trainable"][0],
                             counts["non_trainable"][0], connect(layer)))
    return Summary(rows, totals["trainable"][0], totals["non_trainable"][0],
                   totals["trainable"][1], totals["non_trainable"][1], sequential_like)


def readable_size(size: float) -> str:
    """Bytes as Keras prints them: ``"9.54 KB"`` (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size / 1024 < 1:
            return f"{size:.2f} {unit}"
        size /= 1024
    return f"{size:.2f} PB"


def _format_shape(shape: Any) -> str:
    if isinstance(shape, tuple) and all(d is None or isinstance(d, int) for d in shape):
        return str(shape)
    if isinstance(shape, (list, tuple)):
        return "[" + ", ".join(_format_shape(s) for s in shape) + "]"
    if isinstance(shape, dict):
        return "{" + ", ".join(f"{k}: {_format_shape(v)}" for k, v in shape.items()) + "}"
    return str(shape)


def format_summary(summary: Summary, name: str | None = None) -> str:
    """Keras 3's summary text for `summary_rows`' result (no colours)."""
    line_length, positions = _LAYOUTS[summary.sequential_like]
    widths, current = [], 0
    for pos in positions:
        widths.append(int(pos * line_length) - current)
        current += widths[-1]
    headers = ("Layer (type)", "Output Shape", "Param #", "Connected to")
    justify = ("left", "left", "right", "left")
    columns = [rich.table.Column(h, justify=j, width=w)
               for h, j, w in zip(headers, justify, widths)]
    table = rich.table.Table(*columns, width=line_length, show_lines=True)
    for row in summary.rows:
        fields = [f"{row.name} ({row.class_name})", _format_shape(row.output_shape),
                  f"{row.params:,}", row.connected_to]
        table.add_row(*fields[:len(columns)])
    out = io.StringIO()
    console = rich.console.Console(file=out, width=line_length + 4, force_terminal=False,
                                   force_jupyter=False,  # into `out`, also in a notebook
                                   color_system=None, highlight=False)
    console.print(f'Model: "{name or "functional"}"', markup=False)
    console.print(table)
    total = summary.trainable_params + summary.non_trainable_params
    total_bytes = summary.trainable_bytes + summary.non_trainable_bytes
    for label, count, size in (("Total", total, total_bytes),
                               ("Trainable", summary.trainable_params, summary.trainable_bytes),
                               ("Non-trainable", summary.non_trainable_params,
                                summary.non_trainable_bytes)):
        console.print(f" {label} params: {count:,} ({readable_size(size)})", markup=False)
    return out.getvalue()


def layer_summary(layer: Any) -> Summary:
    """Keras 3's table of a Keras-style layer or subclassed model: one row per layer held in
    its attributes (``layer.layers``), output shapes ``?`` as Keras prints them for a model
    built without symbolic inputs, totals over every weight (its own included)."""
    def sizes(variables: list[Any]) -> tuple[int, int, int, int]:
        split = ([v for v in variables if v.trainable], [v for v in variables if not v.trainable])
        counts = [sum(math.prod(v.shape) for v in part) for part in split]
        nbytes = [sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in part)
                  for part in split]
        return counts[0], counts[1], nbytes[0], nbytes[1]

    rows, taken = [], set()
    for child in layer.layers:
        trainable, frozen, _, _ = sizes(list(getattr(child, "weights", [])))
        base = getattr(child, "name", None) or snake_case(type(child).__name__)
        name, k = base, 0
        while name in taken:  # unnamed Flax layers numbered as Keras names them
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        rows.append(LayerRow(name, type(child).__name__, "?", trainable, frozen))
    return Summary(rows, *sizes(list(layer.weights)))
