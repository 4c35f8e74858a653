"""``format="stablehlo"``: `jax.export` artifacts read by ``mf.export.load`` or plain JAX."""

import zipfile

import jax
import numpy as np
import pytest

import mirrorfit as mf
from tests.export.helpers import mlp_layers, run_python, trained
from tests.helpers import mirrored_strategy

SERVE_WITH_ONLY_JAX = """
import sys, zipfile, jax, numpy as np
data = zipfile.ZipFile(sys.argv[1]).read("serve.jax_exported")
serve = jax.export.deserialize(bytearray(data))
np.save(sys.argv[3], np.asarray(serve.call(np.load(sys.argv[2]))))
assert not [m for m in sys.modules if m.startswith("mirrorfit")], "needs only JAX"
"""


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_load_matches_predict_on_any_batch_size(kind, tmp_path):
    model, x, predicted = trained(kind)
    path = tmp_path / "model.stablehlo"
    model.export(path, format="stablehlo", verbose=False)
    served = mf.export.load(path)
    assert served.endpoint_names == ["serve"]
    for n in (1, 37):  # one program: the batch dimension is symbolic
        np.testing.assert_allclose(served(x[:n]), predicted[:n], rtol=1e-5, atol=1e-6)


def test_artifact_serves_in_a_fresh_process_with_only_jax(tmp_path):
    model, x, predicted = trained("cnn")
    model.export(tmp_path / "model.stablehlo", format="stablehlo", verbose=False)
    np.save(tmp_path / "x.npy", x)
    run_python(SERVE_WITH_ONLY_JAX, tmp_path / "model.stablehlo", tmp_path / "x.npy",
               tmp_path / "y.npy")
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), predicted, rtol=1e-5, atol=1e-6)


def test_eight_replica_model_exports_the_one_replica_program(tmp_path):
    mirrored = trained("mlp", replicas=8)[0]
    with mirrored_strategy(1).scope():
        single = mf.Sequential(mlp_layers())
    single.set_weights(mirrored.get_weights())
    programs = []
    for name, model in (("eight", mirrored), ("one", single)):
        model.export(tmp_path / name, format="stablehlo", verbose=False)
        programs.append(mf.export.load(tmp_path / name).exported["serve"])
    assert [p.nr_devices for p in programs] == [1, 1]  # no mesh in the program
    assert programs[0].platforms == ("cpu", "cuda", "tpu")  # serves on any of them
    assert programs[0].mlir_module() == programs[1].mlir_module()


def test_model_saved_in_one_process_exports_in_another(tmp_path):
    model, x, predicted = trained("mlp")
    model.save(tmp_path / "model.keras")
    run_python("import sys, mirrorfit as mf\n"
               "mf.load_model(sys.argv[1]).export(sys.argv[2], format='stablehlo')",
               tmp_path / "model.keras", tmp_path / "model.stablehlo")
    np.testing.assert_allclose(mf.export.load(tmp_path / "model.stablehlo")(x), predicted,
                               rtol=1e-5, atol=1e-6)


def test_load_rejects_a_file_that_is_not_a_stablehlo_artifact(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="format='stablehlo'.*Received: filepath="):
        mf.export.load(tmp_path / "model.onnx")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("weights.npy", b"")
    with pytest.raises(ValueError, match="holds no"):
        mf.export.load(tmp_path / "other.zip")


def test_loaded_artifact_without_serve_names_its_endpoints(tmp_path):
    model, x, predicted = trained("mlp")
    archive = mf.export.ExportArchive()
    archive.add_endpoint("logits", model, [jax.ShapeDtypeStruct((1, 6), np.float32)])
    archive.write_out(tmp_path / "logits.stablehlo", format="stablehlo", verbose=False)
    served = mf.export.load(tmp_path / "logits.stablehlo")
    np.testing.assert_allclose(served.logits(x), predicted, rtol=1e-5, atol=1e-6)
    with pytest.raises(AttributeError, match=r"no 'serve' endpoint.*\['logits'\]"):
        served(x)
