"""Tests for the main job, ``python -m mirrorfit.examples.digits`` (mirrorfit-digits).

The full job runs in a subprocess, so its ``--cpu-devices`` flag takes effect no
matter how many devices this test process's JAX already runs with.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from mirrorfit.examples import digits

REPO = pathlib.Path(__file__).resolve().parents[1]
# The bar for the main job with its default settings.
ACCURACY_BAR = 0.95


def _run_digits(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, "-m", "mirrorfit.examples.digits", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.slow
def test_digits_main_job_default_settings_reaches_accuracy_bar(tmp_path):
    # Default epochs and global batch (32 * 8 replicas), as `mirrorfit-digits --cpu-devices 8`.
    result = _run_digits("--cpu-devices", "8", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr

    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["num_replicas"] == 8
    assert metrics["global_batch_size"] == 256
    assert metrics["test_accuracy"] >= ACCURACY_BAR, metrics
    assert f"test accuracy {metrics['test_accuracy']:.4f}" in result.stdout

    saved = json.loads((tmp_path / "history.json").read_text())
    epochs = metrics["epochs"]
    assert saved["epoch"] == list(range(epochs))
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert len(saved["history"][key]) == epochs, key
    assert saved["history"]["loss"][-1] < saved["history"]["loss"][0]
    assert (tmp_path / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    with np.load(tmp_path / "weights.npz", allow_pickle=False) as weights:
        shapes = [weights[f"arr_{i}"].shape for i in range(len(weights.files))]
    # Dense(128) on 64 pixels, then Dense(10), in Keras' order: kernel, bias per layer.
    assert shapes == [(64, 128), (128,), (128, 10), (10,)]


@pytest.mark.slow
def test_digits_main_job_keras_style_cnn_reaches_accuracy_bar(tmp_path):
    # 2 replicas at global batch 64: 23 steps per epoch, so 20 epochs are quick.
    result = _run_digits("--model", "cnn", "--cpu-devices", "2", "--epochs", "20",
                         "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["model"] == "cnn" and metrics["num_replicas"] == 2
    assert metrics["test_accuracy"] >= ACCURACY_BAR, metrics
    with np.load(tmp_path / "weights.npz", allow_pickle=False) as weights:
        shapes = [weights[f"arr_{i}"].shape for i in range(len(weights.files))]
    # Conv2D(32, 3) on 1 channel, then Dense(64) on 4*4*32 pooled features, Dense(10).
    assert shapes == [(3, 3, 1, 32), (32,), (512, 64), (64,), (64, 10), (10,)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "mnist", "--data-path", "no/such/mnist.npz"], "nothing is downloaded"),
        (["--dataset", "mnist"], "needs --data-path"),
        (["--epochs", "0"], "--epochs must be a positive int"),
        (["--cpu-devices", "-1"], "--cpu-devices must be a positive int"),
    ],
)
def test_digits_bad_arguments_exit_with_message(args, message, tmp_path, capsys):
    # Argument errors stop the job before it touches JAX, so this runs in-process.
    with pytest.raises(SystemExit) as info:
        digits.main([*args, "--out", str(tmp_path / "run")])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_load_mnist_npz_flattens_and_scales_keras_format(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, 5, dtype=np.uint8),
        "x_test": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, 3, dtype=np.uint8),
    }
    np.savez(tmp_path / "mnist.npz", **arrays)
    x_train, y_train, x_test, y_test = digits.load_mnist_npz(tmp_path / "mnist.npz")
    assert x_train.shape == (5, 784) and x_test.shape == (3, 784)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32
    np.testing.assert_allclose(x_test, arrays["x_test"].reshape(3, 784) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y_test, arrays["y_test"])


def test_load_mnist_npz_missing_arrays_raises(tmp_path):
    np.savez(tmp_path / "mnist.npz", x_train=np.zeros((2, 28, 28), np.uint8))
    with pytest.raises(ValueError, match="y_train, x_test, y_test missing"):
        digits.load_mnist_npz(tmp_path / "mnist.npz")


def test_ci_run_is_exactly_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    command = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert command.startswith('pip install -e ".[test]" && ')
    assert f"```bash\n{command}\n```" in readme
