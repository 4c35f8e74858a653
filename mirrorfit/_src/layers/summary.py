"""Keras' ``model.summary()`` table for models of ``mirrorfit.layers``.

`summary_rows` collects, per layer in ``model.layers`` order, its name, type, output shape
(``None`` batch) and parameter count, with the trainable / non-trainable totals;
`format_summary` renders them as Keras 3 prints them (a rich table, 88 columns, columns at
45% and 80%, sizes in B/KB/MB as ``keras.src.utils.summary_utils``).
"""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import rich.console
import rich.table

from mirrorfit._src import functional

_LINE_LENGTH = 88
_POSITIONS = (0.45, 0.80, 1.0)
_PROBE_BATCH = 2


@dataclasses.dataclass(frozen=True)
class LayerRow:
    """One line of the table."""

    name: str
    class_name: str
    output_shape: Any  # a shape tuple with None batch, or a structure of them
    trainable_params: int
    non_trainable_params: int

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


def _count(tree: Any) -> tuple[int, int]:
    leaves = jax.tree.leaves(tree)
    return (sum(math.prod(np.shape(x)) for x in leaves),
            sum(math.prod(np.shape(x)) * np.dtype(x.dtype).itemsize for x in leaves))


def _symbolic_shape(tree: Any) -> Any:
    return jax.tree.map(lambda s: (None, *s.shape[1:]), tree)


def _sequential_shapes(module: functional.SequentialModule, sample_input: Any) -> list[Any]:
    spec = module.stack.input
    if sample_input is None and spec is None:
        raise ValueError("summary_rows needs sample_input for a Sequential model without an "
                         "Input layer. Received: sample_input=None")
    shape, dtype = ((spec.shape, spec.dtype) if sample_input is None
                    else (np.shape(sample_input), np.asarray(sample_input).dtype))
    x: Any = jax.ShapeDtypeStruct((_PROBE_BATCH, *shape[1:]), dtype)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    shapes = []
    for layer in module.stack.layers:
        if isinstance(layer, nn.Module):
            kwargs = functional._mode_kwargs(layer, False)
            unbound = layer.clone(parent=None, name=None)
            x = jax.eval_shape(
                lambda a, u=unbound, kw=kwargs: u.init_with_output(rngs, a, **kw)[0], x)
        else:
            x = jax.eval_shape(layer, x)
        shapes.append(_symbolic_shape(x))
    return shapes


def _functional_shapes(module: functional.FunctionalModule) -> list[Any]:
    graph = module.graph
    shapes = []
    for layer in graph.layers:
        outs = [jax.tree.map(lambda t: t.shape, n.outputs) for n in graph.nodes
                if n.layer is layer]
        shapes.append(outs[0] if all(o == outs[0] for o in outs) else "multiple")
    return shapes


def summary_rows(module: nn.Module, variables: dict[str, Any],
                 sample_input: Any = None) -> Summary:
    """Per-layer rows and totals of Keras' summary.

    Args:
        module: a module from `functional_module` or `sequential_module`.
        variables: its variables (``"params"``, ``"batch_stats"``, ...; ``"losses"`` skipped).
        sample_input: an input batch; needed only for a Sequential without an `Input`.

    Returns:
        A `Summary`. Params of a ``trainable=False`` layer, and every non-``"params"``
        collection (BatchNorm's moving statistics), count as non-trainable, as Keras.

    Raises:
        ValueError: a Sequential without `Input` and no ``sample_input``.
        TypeError: ``module`` is neither a functional nor a Sequential module.
    """
    rows = []
    if isinstance(module, functional.FunctionalModule):
        shapes = _functional_shapes(module)
        names = functional.assign_names([InputLayer(t.name) for t in
                                         jax.tree.leaves(module.graph.inputs)])
        for t, name in zip(jax.tree.leaves(module.graph.inputs), names):
            rows.append(LayerRow(name, "InputLayer", t.shape, 0, 0))
    else:
        shapes = _sequential_shapes(module, sample_input)
    totals = {"trainable": [0, 0], "non_trainable": [0, 0]}
    for (name, layer), shape in zip(functional.model_layers(module), shapes):
        counts = {"trainable": (0, 0), "non_trainable": (0, 0)}
        for collection, tree in variables.items():
            if collection in ("losses", "intermediates") or name not in tree:
                continue
            kind = ("trainable" if collection == "params" and getattr(layer, "trainable", True)
                    else "non_trainable")
            n, size = _count(tree[name])
            counts[kind] = (counts[kind][0] + n, counts[kind][1] + size)
        for kind in totals:
            totals[kind][0] += counts[kind][0]
            totals[kind][1] += counts[kind][1]
        class_name = (type(layer).__name__ if isinstance(layer, nn.Module)
                      else getattr(layer, "__name__", type(layer).__name__))
        rows.append(LayerRow(name, class_name, shape, counts["trainable"][0],
                             counts["non_trainable"][0]))
    return Summary(rows, totals["trainable"][0], totals["non_trainable"][0],
                   totals["trainable"][1], totals["non_trainable"][1])


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
    widths, current = [], 0
    for pos in _POSITIONS:
        widths.append(int(pos * _LINE_LENGTH) - current)
        current += widths[-1]
    columns = [rich.table.Column(header, justify=justify, width=width) for header, justify,
               width in zip(("Layer (type)", "Output Shape", "Param #"),
                            ("left", "left", "right"), widths)]
    table = rich.table.Table(*columns, width=_LINE_LENGTH, show_lines=True)
    for row in summary.rows:
        table.add_row(f"{row.name} ({row.class_name})", _format_shape(row.output_shape),
                      f"{row.params:,}")
    out = io.StringIO()
    console = rich.console.Console(file=out, width=_LINE_LENGTH + 4, force_terminal=False,
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
