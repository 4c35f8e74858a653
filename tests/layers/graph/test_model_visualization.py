"""`mf.utils.plot_model`: the boxes and arrows of functional, Sequential and subclassed models,
and the PNG written."""

import jax
import pytest

import mirrorfit as mf
from mirrorfit._src.layers.graph.functional import functional_module
from mirrorfit._src.layers.graph.model_visualization import model_boxes, model_figure
from mirrorfit._src.layers.graph.sequential import sequential_module

L = mf.layers
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _branched():
    inputs = L.Input((8,), name="features")
    left = L.Dense(4, activation="relu", name="left")(inputs)
    right = L.Dense(4, name="right")(inputs)
    merged = L.Concatenate(name="merge")([left, right])
    return functional_module(inputs, L.Dense(2, name="head")(merged))


def test_functional_branch_and_merge_draw_as_a_diamond(tmp_path):
    module = _branched()
    boxes = model_boxes(module, show_shapes=True, show_layer_activations=True)
    assert [box.lines[0] for box in boxes] == [
        "features (InputLayer)", "left (Dense)", "right (Dense)", "merge (Concatenate)",
        "head (Dense)"]
    assert [box.inputs for box in boxes] == [[], [0], [0], [1, 2], [3]]
    assert boxes[1].lines[1:] == ["Activation: relu", "Input shape: (None, 8)",
                                  "Output shape: (None, 4)"]
    assert boxes[3].lines[1] == "Input shape: [(None, 4), (None, 4)]"
    figure = model_figure(boxes)
    shown = "\n".join(text.get_text() for text in figure.axes[0].texts)
    assert all(name in shown for name in ("features", "left", "right", "merge", "head"))
    image = mf.utils.plot_model(module, tmp_path / "model.png", dpi=50)
    data = (tmp_path / "model.png").read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000
    assert image is None or image.filename == str(tmp_path / "model.png")


def test_sequential_draws_a_chain_with_shapes_from_the_model_input_spec(tmp_path):
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        model = mf.Sequential([L.Dense(4), L.Dense(2, name="out")], input_shape=(3,))
    boxes = model_boxes(model, show_shapes=True, show_layer_names=False)
    assert [box.lines for box in boxes] == [
        ["InputLayer", "Output shape: (None, 3)"],
        ["Dense", "Input shape: (None, 3)", "Output shape: (None, 4)"],
        ["Dense", "Input shape: (None, 4)", "Output shape: (None, 2)"]]
    assert [box.inputs for box in boxes] == [[], [0], [1]]
    mf.utils.plot_model(model, tmp_path / "seq.png", rankdir="LR", dpi=50)
    assert (tmp_path / "seq.png").read_bytes().startswith(PNG_MAGIC)


def test_a_model_without_a_layer_graph_is_one_box_and_rankdir_is_checked():
    module, _ = sequential_module([L.Dense(2)])
    assert [box.lines for box in model_boxes(module, show_shapes=True)] == [
        ["dense (Dense)", "Input shape: ?", "Output shape: ?"]]
    assert [box.lines for box in model_boxes(L.Dense(3))] == [["model (Dense)"]]
    with pytest.raises(ValueError, match="Received: rankdir='BT'"):
        model_figure(model_boxes(L.Dense(3)), rankdir="BT")
