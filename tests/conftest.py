"""Test configuration: 8 simulated CPU devices, set before JAX starts a backend."""

import os

os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


def tree_allclose(a, b, *, rtol, atol=0.0):
    """Asserts two pytrees have the same structure and allclose leaves."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb, f"tree structures differ: {ta} vs {tb}"
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


@pytest.fixture
def allclose():
    return tree_allclose


def pytest_configure(config):
    # mirrorfit's own warnings, and deprecation warnings raised from mirrorfit's or JAX's code,
    # fail the test that triggers them; a test that expects a warning catches it with
    # pytest.warns.
    for line in ("error::mirrorfit.MirrorfitWarning",
                 "error::DeprecationWarning:mirrorfit.*",
                 "error::DeprecationWarning:jax.*"):
        config.addinivalue_line("filterwarnings", line)
