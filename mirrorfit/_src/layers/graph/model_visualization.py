"""`plot_model`: a picture of a model's layer graph, as ``keras.utils.plot_model``, drawn with
matplotlib (Keras draws with pydot and graphviz, which these machines lack).

`model_boxes` reads the graph: one box per layer (a layer called twice is one box, as
Keras), with edges from the layers that feed it; a functional model's `Input` s are boxes of
their own, a Sequential model is a chain, and any other model (subclassed, or a plain Flax
module) is one box, as Keras draws a subclassed model. `model_figure` lays the boxes out in
ranks (a box sits one rank below the lowest box feeding it) and draws them; `plot_model`
writes the figure to a file.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import numpy as np

from mirrorfit._src.activations import activations
from mirrorfit._src.layers.graph import functional, sequential
from mirrorfit._src.layers.graph.functional import KerasTensor

MISSING_MATPLOTLIB = ("plot_model draws with matplotlib, which is not installed: pip install "
                      "matplotlib. Received: ImportError: {error}")
_RANKDIRS = ("TB", "LR")
_FONT_SIZE = 9  # points
_CHAR_WIDTH, _LINE_HEIGHT = 0.075, 0.19  # inches per character and per line at _FONT_SIZE


@dataclasses.dataclass
class Box:
    """One box of the picture: its text lines and the boxes that feed it (indices)."""

    lines: list[str]
    inputs: list[int] = dataclasses.field(default_factory=list)


def _shape_text(shape: Any) -> str:
    if shape is None:  # a Sequential model's shapes before its input shape is known
        return "?"
    leaves = jax.tree.leaves(shape, is_leaf=lambda s: isinstance(s, tuple))
    text = ", ".join(str(tuple(s)) for s in leaves)
    return text if len(leaves) == 1 else f"[{text}]"


def _label(name: str, layer: Any, options: dict[str, bool], in_shape: Any, out_shape: Any,
           dtype: Any) -> list[str]:
    """Keras' label: the name and class, then the rows the ``show_*`` options ask for."""
    class_name = "InputLayer" if layer is None else type(layer).__name__
    lines = [f"{name} ({class_name})" if options["show_layer_names"] else class_name]
    activation = getattr(layer, "activation", None)
    if options["show_layer_activations"] and activation is not None:
        lines.append(f"Activation: {activations.serialize(activation)}")
    if options["show_shapes"]:
        if layer is not None:
            lines.append(f"Input shape: {_shape_text(in_shape)}")
        lines.append(f"Output shape: {_shape_text(out_shape)}")
    if options["show_dtype"]:
        lines.append(f"Output dtype: {np.dtype(dtype).name}")
    if options["show_trainable"] and layer is not None:
        lines.append(f"Trainable: {getattr(layer, 'trainable', True)}")
    return lines


def _compute_dtype(layer: Any) -> Any:
    return getattr(layer, "compute_dtype", None) or "float32"


def _functional_boxes(module: functional.FunctionalModule, options: dict[str, bool]
                      ) -> list[Box]:
    graph = module.graph
    inputs = jax.tree.leaves(graph.inputs)
    names = functional.assign_names([_Named(t.name) for t in inputs])
    boxes = [Box(_label(name, None, options, None, t.shape, t.dtype))
             for t, name in zip(inputs, names)]
    index = {id(t): i for i, t in enumerate(inputs)}
    for layer, name in zip(graph.layers, graph.names):
        nodes = graph.nodes_of(layer)
        last = nodes[-1]  # Keras shows the shapes of the layer's last call
        in_shape = [t.shape for t in last.input_tensors]
        out = last.output_tensors
        box = Box(_label(name, layer, options, in_shape[0] if len(in_shape) == 1 else in_shape,
                         jax.tree.map(lambda t: t.shape, last.outputs), out[0].dtype))
        for node in nodes:
            for t in node.input_tensors:
                source = index[id(t)] if t.node is None else index[id(t.node.layer)]
                if source not in box.inputs:
                    box.inputs.append(source)
        index[id(layer)] = len(boxes)
        boxes.append(box)
    return boxes


@dataclasses.dataclass
class _Named:
    name: str | None  # stands for an InputLayer when numbering the input boxes' names


def _sequential_boxes(module: sequential.SequentialModule, input_spec: Any,
                      options: dict[str, bool]) -> list[Box]:
    stack = module.stack
    first = stack.input
    if first is None and isinstance(input_spec, jax.ShapeDtypeStruct):
        first = KerasTensor((None, *input_spec.shape), input_spec.dtype)
    boxes: list[Box] = []
    shapes: list[Any] = [None] * len(stack.layers)
    if first is not None:
        boxes.append(Box(_label(first.name or "input_layer", None, options, None,
                                first.shape, first.dtype)))
        if options["show_shapes"]:
            shapes = sequential.output_shapes(stack.layers, first.shape, first.dtype)
    previous = first.shape if first is not None else None
    for layer, name, shape in zip(stack.layers, stack.names, shapes):
        label = _label(name, layer, options, previous, shape, _compute_dtype(layer))
        boxes.append(Box(label, [len(boxes) - 1] if boxes else []))
        previous = shape
    return boxes


def model_boxes(model: Any, show_shapes: bool = False, show_dtype: bool = False,
                show_layer_names: bool = True, show_layer_activations: bool = False,
                show_trainable: bool = False) -> list[Box]:
    """The boxes of ``model``'s picture, each after the boxes that feed it.

    Args:
        model: an ``mf.Model`` / ``mf.Sequential`` (its ``module`` is read), or a module.
        show_shapes, show_dtype, show_layer_names, show_layer_activations, show_trainable:
            which rows each label has; see `plot_model`.
    """
    options = {"show_shapes": show_shapes, "show_dtype": show_dtype,
               "show_layer_names": show_layer_names,
               "show_layer_activations": show_layer_activations,
               "show_trainable": show_trainable}
    module = getattr(model, "module", model)
    if isinstance(module, functional.FunctionalModule):
        return _functional_boxes(module, options)
    if isinstance(module, sequential.SequentialModule):
        return _sequential_boxes(module, getattr(model, "input_spec", None), options)
    name = getattr(model, "name", None) or getattr(module, "name", None) or "model"
    return [Box([f"{name} ({type(module).__name__})" if show_layer_names
                 else type(module).__name__])]


def _ranks(boxes: list[Box]) -> list[int]:
    ranks: list[int] = []
    for box in boxes:  # feeders come first, so one pass gives each its longest path
        ranks.append(1 + max((ranks[i] for i in box.inputs), default=-1))
    return ranks


def model_figure(boxes: list[Box], rankdir: str = "TB") -> Any:
    """A matplotlib ``Figure`` of ``boxes``: ranks top to bottom (``rankdir="TB"``) or
    left to right (``"LR"``), arrows from each feeding box.

    Raises:
        ValueError: an unknown ``rankdir``.
        ImportError: matplotlib is not installed.
    """
    if rankdir not in _RANKDIRS:
        raise ValueError(f"rankdir must be 'TB' (top to bottom) or 'LR' (left to right). "
                         f"Received: rankdir={rankdir!r}")
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import FancyBboxPatch
    except ImportError as err:
        raise ImportError(MISSING_MATPLOTLIB.format(error=err)) from err
    ranks = _ranks(boxes)
    sizes = [(_CHAR_WIDTH * max(len(line) for line in box.lines) + 0.3,
              _LINE_HEIGHT * len(box.lines) + 0.2) for box in boxes]  # inches
    width = max(w for w, _ in sizes) + 0.5  # the grid, in inches (one data unit)
    height = max(h for _, h in sizes) + 0.6
    by_rank: dict[int, list[int]] = {}
    for i, rank in enumerate(ranks):
        by_rank.setdefault(rank, []).append(i)
    across = max(len(members) for members in by_rank.values())
    centers = {}
    for rank, members in by_rank.items():
        for j, i in enumerate(members):
            offset = j - (len(members) - 1) / 2
            centers[i] = ((offset * width, -rank * height) if rankdir == "TB"
                          else (rank * width, -offset * height))
    span = ((across * width, len(by_rank) * height) if rankdir == "TB"
            else (len(by_rank) * width, across * height))
    fig = Figure(figsize=span)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.axis("off")
    xs, ys = zip(*centers.values())
    ax.set_xlim(min(xs) - width / 2, max(xs) + width / 2)
    ax.set_ylim(min(ys) - height / 2, max(ys) + height / 2)
    for i, box in enumerate(boxes):
        (x, y), (w, h) = centers[i], sizes[i]
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, zorder=2,
                                    boxstyle="round,pad=0,rounding_size=0.06",
                                    facecolor="#eef2fb", edgecolor="#3b5bdb"))
        ax.text(x, y, "\n".join(box.lines), ha="center", va="center", fontsize=_FONT_SIZE,
                zorder=3)
        for source in box.inputs:
            (sx, sy), (sw, sh) = centers[source], sizes[source]
            start, end = (((sx, sy - sh / 2), (x, y + h / 2)) if rankdir == "TB"
                          else ((sx + sw / 2, sy), (x - w / 2, y)))
            ax.annotate("", xy=end, xytext=start, zorder=1,
                        arrowprops={"arrowstyle": "-|>", "color": "0.3", "shrinkA": 0,
                                    "shrinkB": 0})
    return fig


def plot_model(model: Any, to_file: str | os.PathLike[str] = "model.png",
               show_shapes: bool = False, show_dtype: bool = False,
               show_layer_names: bool = False, rankdir: str = "TB", dpi: int = 200,
               show_layer_activations: bool = False, show_trainable: bool = False) -> Any:
    """Draws the model's layer graph to ``to_file``, as ``keras.utils.plot_model``.

    One box per layer, with arrows along the data flow: a functional model's inputs,
    branches and merges; a Sequential model's chain; a subclassed model as one box (as
    Keras). Drawn with matplotlib, so graphviz and pydot are not needed.

    Args:
        model: an ``mf.Model`` or ``mf.Sequential`` (or a module of ``mirrorfit.layers``).
        to_file: the image file; its extension picks the format (``.png``, ``.pdf``,
            ``.svg``, ``.jpg``; none: PNG).
        show_shapes: add each layer's input and output shapes (``None`` batch).
        show_dtype: add each layer's output dtype.
        show_layer_names: label boxes ``"name (ClassName)"`` rather than ``"ClassName"``
            (Keras 3's default, ``False``; tf.keras 2's was ``True``).
        rankdir: ``"TB"``: top to bottom; ``"LR"``: left to right.
        dpi: the image resolution, in dots per inch.
        show_layer_activations: add the activation of layers that have one.
        show_trainable: add whether each layer is trainable.

    Returns:
        An ``IPython.display.Image`` of the file (shown inline in a notebook) for PNG and
        JPEG files when IPython is installed, else ``None``.

    Raises:
        ValueError: an unknown ``rankdir``.
        ImportError: matplotlib is not installed.

    Example:
        >>> inputs = Input((4,))
        >>> m = mf.Model(inputs, Dense(1)(Dense(3)(inputs)))  # doctest: +SKIP
        >>> mf.utils.plot_model(m, "model.png", show_shapes=True)  # doctest: +SKIP
    """
    boxes = model_boxes(model, show_shapes, show_dtype, show_layer_names,
                        show_layer_activations, show_trainable)
    fig = model_figure(boxes, rankdir)
    to_file = os.fspath(to_file)
    extension = os.path.splitext(to_file)[1][1:].lower() or "png"
    fig.savefig(to_file, dpi=dpi, format=extension, bbox_inches="tight")
    if extension not in ("png", "jpg", "jpeg"):
        return None
    try:
        from IPython.core.display import Image
    except ImportError:
        return None
    return Image(filename=to_file)
