"""Tests for mf.utils.simulate_cpu_devices.

The "before JAX starts" cases run in fresh Python processes, since this test
process already runs JAX with the 8 CPU devices set by conftest.py.
"""

import os
import subprocess
import sys

import jax
import pytest

import mirrorfit as mf

_FLAG = "--xla_force_host_platform_device_count"


def _run_python(code: str, xla_flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, XLA_FLAGS=xla_flags, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 3])
def test_simulate_cpu_devices_sets_device_count_before_backends_start(n):
    # mirrorfit is imported first, as in the notebook: importing must not start JAX.
    code = (
        "import os, mirrorfit as mf\n"
        f"mf.utils.simulate_cpu_devices({n})\n"
        "import jax\n"
        "print(jax.device_count(), os.environ['XLA_FLAGS'])\n"
    )
    # An earlier value of the flag is replaced; other flags are kept.
    result = _run_python(code, xla_flags=f"--xla_cpu_enable_fast_math=false {_FLAG}=5")
    assert result.returncode == 0, result.stderr
    count, flags = result.stdout.split(maxsplit=1)
    assert int(count) == n
    assert flags.split() == ["--xla_cpu_enable_fast_math=false", f"{_FLAG}={n}"]


def test_simulate_cpu_devices_raises_after_backends_started(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    current = jax.local_device_count("cpu")  # Starts the backends if needed.
    with pytest.raises(RuntimeError, match="before JAX starts its backends") as info:
        mf.utils.simulate_cpu_devices(current + 1)
    assert f"with {current} CPU devices" in str(info.value)
    assert f"Received: n={current + 1}" in str(info.value)


def test_simulate_cpu_devices_same_count_after_start_is_noop(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    current = jax.local_device_count("cpu")
    mf.utils.simulate_cpu_devices(current)  # e.g. a notebook's first cell run twice
    assert jax.local_device_count("cpu") == current


@pytest.mark.parametrize(
    ("n", "error"),
    [(0, ValueError), (-2, ValueError), (2.0, TypeError), ("8", TypeError), (True, TypeError)],
)
def test_simulate_cpu_devices_bad_n_raises(n, error, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "unchanged")
    with pytest.raises(error, match=f"Received: n={n!r}"):
        mf.utils.simulate_cpu_devices(n)
    assert os.environ["XLA_FLAGS"] == "unchanged"
