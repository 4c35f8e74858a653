"""Argument checks shared by every layer: one place for "a positive int" and friends.

Each check names the argument, says what was expected and shows what was received, as the
house style asks. This module imports nothing else from mirrorfit.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def is_int(value: Any) -> bool:
    """Whether ``value`` is a Python or NumPy integer (``bool`` is not)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def positive_int(value: Any, name: str, hint: str = "") -> int:
    """Returns ``value`` as an ``int`` if it is a positive integer.

    Args:
        value: the argument's value.
        name: the argument's name, as the user wrote it.
        hint: what the number means or what to pass, appended after the expectation.

    Raises:
        ValueError: naming the argument, e.g. "epochs must be a positive int. Received:
            epochs=0".
    """
    if not is_int(value) or value < 1:
        hint = f" ({hint})" if hint else ""
        raise ValueError(f"{name} must be a positive int{hint}. Received: {name}={value!r}")
    return int(value)


def verbosity(verbose: Any) -> int:
    """Keras' ``verbose``: ``"auto"`` is 1 (progress bar); else 0, 1 or 2.

    Raises:
        ValueError: for any other value.
    """
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2):
        raise ValueError(f'verbose must be "auto", 0, 1 or 2. Received: verbose={verbose!r}')
    return int(verbose)


class MirrorfitWarning(UserWarning):
    """The category of every warning mirrorfit issues (a ``UserWarning``); public as
    ``mirrorfit.MirrorfitWarning``.

    Filter on it to silence, or to fail on, mirrorfit's warnings and no others: a monitor
    missing from the logs, a damaged backup skipped, an input that ran out of data, labels
    outside the model's classes.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", mf.MirrorfitWarning)  # mirrorfit's only
        ...     history = model.fit(x, y, epochs=1, verbose=0)
    """
