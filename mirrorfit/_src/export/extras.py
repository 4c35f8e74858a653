"""The converters that are optional dependencies (``pip install 'mirrorfit[export]'``)."""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL = "pip install 'mirrorfit[export]'"


def require(module: str, format: str) -> ModuleType:
    """Imports ``module``, a converter that ``format`` needs.

    Raises:
        ImportError: naming the ``export`` extra that installs it, if it is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"format={format!r} needs {module.split('.')[0]}, which mirrorfit installs as an "
            f"optional extra: run `{INSTALL}`, or export with format='stablehlo', which needs "
            f"only JAX. Received: ImportError({err})") from err
