"""Executes the notebooks in notebooks/ headless (nbclient) and fails if a cell errors.

The notebooks are committed with their outputs (executed top to bottom, no errors), as the
site and the repository page show them: the fast test checks those stored outputs read
clean (no stderr, no absolute path, no page-long logs, the plot shown, contents headings
that render whole); the slow tests run the notebooks again.

Each notebook runs in a fresh ``python3`` kernel without this process's
``XLA_FLAGS``, so it must set up its 8 simulated CPU devices itself.
"""

import os
import pathlib
import re

import nbformat
import pytest
from nbclient import NotebookClient

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
# A path of this machine: a POSIX home, system or temporary folder, site-packages, a drive.
ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:home|root|Users|usr|opt|tmp|var|work)/|site-packages|"
                           r"\b[A-Z]:\\")
MAX_OUTPUT_LINES = 40  # per cell: a summary table fits, a log of every epoch does not


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


@pytest.mark.parametrize("name", sorted(path.name for path in NOTEBOOKS.glob("*.ipynb")))
def test_stored_outputs_read_clean(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    stderr = [cell.source.splitlines()[0] for cell in code for output in cell.outputs
              if output.output_type == "stream" and output.name == "stderr"]
    assert not stderr, f"cells with stderr output (a warning a reader should not see): {stderr}"
    found = ABSOLUTE_PATH.search(nbformat.writes(nb))
    assert not found, f"an absolute path of this machine: ...{found.string[found.start() - 80:][:160]}"
    long = [cell.source.splitlines()[0] for cell in code
            if _cell_text(cell).count("\n") > MAX_OUTPUT_LINES]
    assert not long, f"cells printing more than {MAX_OUTPUT_LINES} lines (trim the log): {long}"
    # mkdocs-jupyter drops inline code from the page's contents ("subclassed ()").
    headings = [line for cell in nb.cells if cell.cell_type == "markdown"
                for line in cell.source.splitlines() if line.startswith("## ") and "`" in line]
    assert not headings, f"contents headings with inline code: {headings}"


def test_quickstart_shows_its_plot():
    code = [cell for cell in nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4).cells
            if cell.cell_type == "code"]
    assert any(
        "image/png" in output.get("data", {}) for cell in code for output in cell.outputs
    ), "the history plot was not shown"


@pytest.mark.slow  # each notebook runs in its own kernel process
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


@pytest.mark.slow
def test_custom_training_loop_notebook_matches_fit():
    code = _execute("custom_training_loop.ipynb")  # the notebook asserts the accuracies
    assert "mf.utils.simulate_cpu_devices(8)" in code[0].source
    outputs = "\n".join(_cell_text(cell) for cell in code)
    assert "replicas: 8" in outputs
    assert "custom loop test accuracy" in outputs and "model.fit   test accuracy" in outputs
