"""``format="tf_saved_model"``: a SavedModel with ``serve`` for TF Serving (needs the
``export`` extra; skipped without TensorFlow)."""

import jax
import numpy as np
import pytest

import mirrorfit as mf
from tests.export.helpers import run_python, trained

tf = pytest.importorskip("tensorflow")

SERVE_WITH_ONLY_TF = """
import sys, numpy as np, tensorflow as tf
served = tf.saved_model.load(sys.argv[1])
y = served.signatures["serving_default"](tf.constant(np.load(sys.argv[2])))
np.save(sys.argv[3], y["output_0"].numpy())
assert not [m for m in sys.modules if m.startswith("mirrorfit")], "needs only TF"
"""


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_serve_matches_predict_on_any_batch_size(kind, tmp_path):
    model, x, predicted = trained(kind)
    model.export(tmp_path / "saved", verbose=False)  # Keras' default format
    served = tf.saved_model.load(str(tmp_path / "saved"))
    assert {"serve", "serving_default"} <= set(served.signatures)
    for n in (1, 37):
        np.testing.assert_allclose(served.serve(x[:n]).numpy(), predicted[:n],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # starts a Python process
def test_saved_model_serves_in_a_fresh_process_with_only_tensorflow(tmp_path):
    model, x, predicted = trained("cnn")
    model.export(tmp_path / "saved", format="tf_saved_model", verbose=False)
    np.save(tmp_path / "x.npy", x)
    run_python(SERVE_WITH_ONLY_TF, tmp_path / "saved", tmp_path / "x.npy", tmp_path / "y.npy")
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), predicted, rtol=1e-5, atol=1e-6)


def test_archive_writes_each_endpoint_as_a_method_and_signature(tmp_path):
    model, x, predicted = trained("mlp")
    spec = [tf.TensorSpec((None, 6), tf.float32)]
    archive = mf.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", model, spec)
    archive.add_endpoint("serve_probabilities", lambda v: jax.nn.softmax(model(v)), spec)
    archive.write_out(tmp_path / "saved", verbose=False)
    served = tf.saved_model.load(str(tmp_path / "saved"))
    np.testing.assert_allclose(served.serve_probabilities(x).numpy(),
                               jax.nn.softmax(predicted), rtol=1e-5, atol=1e-6)
    by_signature = served.signatures["serve_probabilities"](tf.constant(x))["output_0"]
    np.testing.assert_allclose(by_signature.numpy(), jax.nn.softmax(predicted), rtol=1e-5,
                               atol=1e-6)
