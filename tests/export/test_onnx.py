"""``format="onnx"``: an ONNX model through jax2onnx, run by ONNX Runtime (needs the
``export`` extra; skipped without jax2onnx and onnxruntime)."""

import numpy as np
import pytest

import mirrorfit as mf
from tests.export.helpers import run_python, trained

pytest.importorskip("jax2onnx")
ort = pytest.importorskip("onnxruntime")

SERVE_WITH_ONLY_ONNXRUNTIME = """
import sys, numpy as np, onnxruntime
session = onnxruntime.InferenceSession(sys.argv[1])
np.save(sys.argv[3], session.run(None, {"input_0": np.load(sys.argv[2])})[0])
assert not [m for m in sys.modules if m.startswith(("mirrorfit", "jax"))], "needs only ORT"
"""


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_onnx_runtime_matches_predict_on_any_batch_size(kind, tmp_path):
    model, x, predicted = trained(kind)
    model.export(tmp_path / "model.onnx", format="onnx", verbose=False)
    session = ort.InferenceSession(str(tmp_path / "model.onnx"))
    assert [i.name for i in session.get_inputs()] == ["input_0"]
    for n in (1, 37):
        np.testing.assert_allclose(session.run(None, {"input_0": x[:n]})[0], predicted[:n],
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # starts a Python process
def test_onnx_model_serves_in_a_fresh_process_with_only_onnxruntime(tmp_path):
    model, x, predicted = trained("cnn")
    model.export(tmp_path / "model.onnx", format="onnx", verbose=False)
    np.save(tmp_path / "x.npy", x)
    run_python(SERVE_WITH_ONLY_ONNXRUNTIME, tmp_path / "model.onnx", tmp_path / "x.npy",
               tmp_path / "y.npy")
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), predicted, rtol=1e-4, atol=1e-5)


def test_onnx_takes_one_endpoint(tmp_path):
    model, x, _ = trained("mlp")
    archive = mf.export.ExportArchive()
    archive.add_endpoint("serve", model, [x[:1]])
    archive.add_endpoint("serve_again", model, [x[:1]])
    with pytest.raises(ValueError, match="ONNX model holds one function"):
        archive.write_out(tmp_path / "model.onnx", format="onnx")
