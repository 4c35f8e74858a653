"""Fingerprint names and comparison: mirrorfit's objects are named ``mirrorfit.<qualname>``
whatever module defines them, names stored with an older module path compare equal, and
real differences are still listed."""

import optax
import pytest

import mirrorfit as mf
from mirrorfit._src.callbacks.fingerprint_check import differences, normalized_name, public_name


def _local():
    def inner(y_true, y_pred):
        return y_pred

    return inner


def test_public_name_of_mirrorfit_objects_has_no_module_path():
    assert public_name(mf.losses.mean_squared_error) == "mirrorfit.mean_squared_error"
    assert public_name(mf.optimizers.Adam) == "mirrorfit.Adam"
    assert public_name(mf.optimizers.Adam()) == "mirrorfit.Adam"  # an instance: its class
    assert public_name(optax.adam) == "optax._src.alias.adam"  # others keep their module
    assert public_name(_local()).endswith("test_fingerprint_check._local.<locals>.inner")


@pytest.mark.parametrize("stored, expected", [
    ("mirrorfit._src.regression_losses.mean_squared_error", "mirrorfit.mean_squared_error"),
    ("mirrorfit._src.losses.regression_losses.mean_squared_error",
     "mirrorfit.mean_squared_error"),
    ("mirrorfit._src.optimizer_base.Optimizer.get_config", "mirrorfit.Optimizer.get_config"),
    ("mirrorfit._src.steps.make_step.<locals>.step", "mirrorfit.make_step.<locals>.step"),
    ("mirrorfit._src.layers.core.<lambda>", "mirrorfit.<lambda>"),
    ("mirrorfit.mean_squared_error", "mirrorfit.mean_squared_error"),  # today's: unchanged
    ("__main__.my_loss", "__main__.my_loss"),
    ("adam", "adam"),
])
def test_normalized_name_drops_mirrorfit_module_paths_only(stored, expected):
    assert normalized_name(stored) == expected


def _fingerprints(loss):
    return {"data": None, "compile": {"optimizer": {"Adam": {"learning_rate": 0.001}},
                                      "loss": loss, "metrics": ["MeanAbsoluteError(mae)"]}}


def test_differences_compare_old_module_paths_equal_to_todays_names():
    current = _fingerprints(public_name(mf.losses.mean_squared_error))
    old = _fingerprints("mirrorfit._src.regression_losses.mean_squared_error")
    wrapped = _fingerprints({"LossFunctionWrapper": {
        "fn": "mirrorfit._src.regression_losses.mean_squared_error"}})
    assert differences(old, current) == []
    assert differences(wrapped, _fingerprints({"LossFunctionWrapper": {
        "fn": "mirrorfit.mean_squared_error"}})) == []


def test_differences_still_list_another_function():
    found = differences(_fingerprints("mirrorfit._src.regression_losses.mean_absolute_error"),
                        _fingerprints("mirrorfit.mean_squared_error"))
    assert found == ["compile loss: 'mirrorfit.mean_absolute_error' in the backup, "
                     "'mirrorfit.mean_squared_error' now"]
