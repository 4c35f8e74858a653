"""`ExportArchive` and ``Model.export``: endpoints, every kind of model, inference mode, and
the errors."""

import collections

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from tests.export.helpers import trained
from tests.helpers import mirrored_strategy

SPEC = [jax.ShapeDtypeStruct((1, 6), jnp.float32)]
Spec = collections.namedtuple("Spec", "shape dtype")  # as tf.TensorSpec: None for unknown


class HostLookup(mf.layers.Layer):
    """Stands for host-side preprocessing (a Python text lookup): not exportable."""

    exportable = False

    def call(self, inputs):
        return inputs


class Subclassed(mf.Model):
    def __init__(self, lookup=False, **kwargs):
        super().__init__(**kwargs)
        self.lookup = HostLookup() if lookup else None
        self.hidden = mf.layers.Dense(5, activation="tanh")
        self.dropout = mf.layers.Dropout(0.5)
        self.out = mf.layers.Dense(2)

    def call(self, inputs, training=False):
        x = inputs if self.lookup is None else self.lookup(inputs)
        return self.out(self.dropout(self.hidden(x), training=training))


class FlaxMLP(nn.Module):
    @nn.compact
    def __call__(self, x, train=False):
        x = nn.Dropout(0.5, deterministic=not train)(nn.relu(nn.Dense(5)(x)))
        return nn.Dense(2)(nn.BatchNorm(use_running_average=not train)(x))


def test_two_endpoints_serve_the_model_and_its_probabilities(tmp_path):
    model, x, predicted = trained("mlp")
    archive = mf.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", model, SPEC)
    archive.add_endpoint("serve_probabilities", lambda v: jax.nn.softmax(model(v)), SPEC)
    archive.write_out(tmp_path / "model.stablehlo", format="stablehlo", verbose=False)
    served = mf.export.load(tmp_path / "model.stablehlo")
    assert sorted(served.endpoint_names) == ["serve", "serve_probabilities"]
    np.testing.assert_allclose(served.serve(x), predicted, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(served.serve_probabilities(x), jax.nn.softmax(predicted),
                               rtol=1e-5, atol=1e-6)


def _model(kind):
    if kind == "subclassed":
        return Subclassed()
    if kind == "functional_two_inputs":
        a, b = mf.layers.Input((4,)), mf.layers.Input((2,))
        return mf.Model([a, b], mf.layers.Dense(2)(mf.layers.Concatenate()([a, b])))
    policy = "mixed_bfloat16" if kind == "mixed_bfloat16" else None
    return mf.Model(FlaxMLP(), input_shape=(6,), dtype_policy=policy)


@pytest.mark.parametrize("kind", ["subclassed", "flax_module", "mixed_bfloat16",
                                  "functional_two_inputs"])
def test_export_runs_every_kind_of_model_in_inference_mode(kind, tmp_path):
    x = np.random.default_rng(1).normal(size=(5, 6)).astype(np.float32)
    inputs = (x[:, :4], x[:, 4:]) if kind == "functional_two_inputs" else (x,)
    with mirrored_strategy(2).scope():
        model = _model(kind)
    predicted = model.predict(list(inputs) if len(inputs) > 1 else x, verbose=0)  # builds it
    model.export(tmp_path / "model", format="stablehlo", verbose=False)
    loaded = mf.export.load(tmp_path / "model")
    served = loaded(*inputs)  # several inputs: positional arguments
    assert served.dtype == predicted.dtype
    if kind == "mixed_bfloat16":  # the policy's compute dtype is the program's
        program = loaded.exported["serve"].mlir_module()
        assert "dot_general" in program and "tensor<?x6xbf16>, tensor<6x5xbf16>" in program
        # XLA may keep a bfloat16 product in float32 in one program and not the other
        # (excess precision): bfloat16's resolution, 2**-8, is the tolerance.
        np.testing.assert_allclose(served, predicted, rtol=2**-8, atol=2**-8)
    else:
        np.testing.assert_allclose(served, predicted, rtol=1e-5, atol=1e-6)


def test_verbose_export_says_where_and_what(tmp_path, capsys):
    trained("mlp")[0].export(tmp_path / "m", format="stablehlo")
    assert f"Saved stablehlo artifact at '{tmp_path / 'm'}' with endpoints: serve" in (
        capsys.readouterr().out)


def test_unbuilt_model_is_refused_with_how_to_build_it(tmp_path):
    with mirrored_strategy(1).scope():
        model = mf.Sequential([mf.layers.Dense(2)])
    with pytest.raises(ValueError, match="not built.*model.build"):
        model.export(tmp_path / "m", format="stablehlo")


def test_model_with_a_host_side_layer_is_refused(tmp_path):
    # A host layer inside a subclassed model, and TextVectorization leading a Sequential.
    with mirrored_strategy(1).scope():
        model = Subclassed(lookup=True)
    model(np.zeros((2, 6), np.float32))
    with pytest.raises(ValueError, match="HostLookup.*cannot be exported.*exportable = False"):
        model.export(tmp_path / "m", format="stablehlo")
    vectorize = mf.layers.TextVectorization(max_tokens=8, output_sequence_length=3)
    vectorize.adapt(["a b c", "b c d"])
    with mirrored_strategy(1).scope():
        text_model = mf.Sequential([vectorize, mf.layers.Embedding(8, 2),
                                    mf.layers.GlobalAveragePooling1D()])
    text_model.predict(np.array(["a b", "c d"]), verbose=0)
    with pytest.raises(ValueError, match="TextVectorization.*cannot be exported"):
        text_model.export(tmp_path / "t", format="stablehlo")


def test_unknown_format_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"format must be one of \['onnx', 'stablehlo', "
                                         r"'tf_saved_model'\]. Received: format='tflite'"):
        trained("mlp")[0].export(tmp_path / "m", format="tflite")


def test_archive_refuses_bad_endpoints(tmp_path):
    model = trained("mlp")[0]
    archive = mf.export.ExportArchive()
    with pytest.raises(ValueError, match="no endpoints"):
        archive.write_out(tmp_path / "m", format="stablehlo")
    archive.add_endpoint("serve", model, SPEC)
    with pytest.raises(ValueError, match=r"not used by another endpoint \(\['serve'\]\)"):
        archive.add_endpoint("serve", model, SPEC)
    with pytest.raises(TypeError, match="one entry per positional argument"):
        archive.add_endpoint("other", model, SPEC[0])
    with pytest.raises(ValueError, match=r"Only the batch.*Received: shape=\(None, None\)"):
        archive.add_endpoint("other", model, [Spec((None, None), "float32")])
