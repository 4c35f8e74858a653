"""Executes the notebooks in notebooks/ headless (nbclient) and fails if a cell errors.

The notebooks are committed with their outputs (executed top to bottom, no errors); the
test checks that, then runs them again.

Each notebook runs in a fresh ``python3`` kernel without this process's
``XLA_FLAGS``, so it must set up its 8 simulated CPU devices itself.
"""

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # Each notebook runs in its own kernel process.

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"


def _cell_text(cell: nbformat.NotebookNode) -> str:
    return "".join(
        output.get("text", "") + output.get("data", {}).get("text/plain", "")
        for output in cell.get("outputs", [])
    )


def _execute(name: str) -> list[nbformat.NotebookNode]:
    """Runs notebooks/<name> in a fresh kernel; returns its executed code cells."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    # Committed with outputs (visible on the repository page), from a clean run.
    assert all(cell.get("execution_count") for cell in code), "commit the executed notebook"
    assert not any(output.get("output_type") == "error" for cell in code
                   for output in cell.get("outputs", [])), "the committed outputs hold an error"
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    # Import the working tree's mirrorfit, whether or not it is pip-installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=300,  # seconds per cell
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute(env=env)  # Raises CellExecutionError if any cell errors.
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def test_quickstart_notebook_runs_on_8_simulated_devices():
    code = _execute("quickstart.ipynb")
    assert "mf.utils.simulate_cpu_devices(8)" in code[0].source
    outputs = "\n".join(_cell_text(cell) for cell in code)
    assert "replicas: 8" in outputs
    # mf.layers' Keras summary is printed text (a stream), not a rich display
    assert 'Model: "sequential"' in outputs and "dense_1 (Dense)" in outputs
    assert not any(output.output_type == "display_data" and "text/html" in output.data
                   for cell in code for output in cell.outputs)
    assert "Keras-style model test accuracy" in outputs
    # The subclassed model (a Keras-style Layer and mf.Model) trains with fit, its weights
    # mirrored Variables.
    assert "Subclassed model test accuracy" in outputs
    assert 'Model: "digits_classifier"' in outputs and "linear (Linear)" in outputs
    assert "digits_classifier/linear/kernel (64, 128) on 8 devices" in outputs
    assert any(
        "image/png" in output.get("data", {}) for cell in code for output in cell.outputs
    ), "the history plot was not shown"


def test_custom_training_loop_notebook_matches_fit():
    code = _execute("custom_training_loop.ipynb")  # the notebook asserts the accuracies
    assert "mf.utils.simulate_cpu_devices(8)" in code[0].source
    outputs = "\n".join(_cell_text(cell) for cell in code)
    assert "replicas: 8" in outputs
    assert "custom loop test accuracy" in outputs and "model.fit   test accuracy" in outputs
