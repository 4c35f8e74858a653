"""Test configuration: 8 simulated CPU devices, set before JAX starts a backend."""

import os

os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

from tests.helpers import tree_allclose  # noqa: E402
from tests.trainers.data_adapters.helpers import make_model  # noqa: E402


@pytest.fixture
def allclose():
    """`tests.helpers.tree_allclose`: asserts two pytrees have the same structure and allclose
    leaves, with ``rtol`` (and ``atol``) stated by the test."""
    return tree_allclose


@pytest.fixture(scope="module")
def model_and_initial():
    """The data-adapter tests' 5 -> 3 softmax regression on 3 replicas
    (tests/trainers/data_adapters/helpers.py) and its initial weights, one per test module;
    a test resets the model with ``model.set_weights(initial)``."""
    model = make_model()
    return model, model.get_weights()


def pytest_configure(config):
    # mirrorfit's own warnings, and deprecation warnings raised from mirrorfit's or JAX's code,
    # fail the test that triggers them; a test that expects a warning catches it with
    # pytest.warns.
    for line in ("error::mirrorfit.MirrorfitWarning",
                 "error::DeprecationWarning:mirrorfit.*",
                 "error::DeprecationWarning:jax.*"):
        config.addinivalue_line("filterwarnings", line)
