"""Without the ``export`` extra, the formats that need it say how to install it."""

import sys

import pytest

from tests.export.helpers import trained


@pytest.mark.parametrize("format, module", [("tf_saved_model", "tensorflow"),
                                            ("onnx", "jax2onnx")])
def test_missing_converter_names_the_export_extra(format, module, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(ImportError, match=rf"format='{format}' needs {module}.*"
                                          r"pip install 'mirrorfit\[export\]'.*stablehlo"):
        trained("mlp")[0].export(tmp_path / "artifact", format=format)
