"""A backup's fingerprints against the resuming run's: what differs, in words.

`mirrorfit.callbacks.BackupAndRestore` stores the trainer's fingerprints
(`mirrorfit._src.callbacks.contract.TrainingLoop.fingerprints`) in every backup and, before
resuming, lists the `differences` from the current run's, so two runs are never silently
mixed into one.

Names of mirrorfit's own functions and classes in a fingerprint do not depend on the module
that defines them: `public_name` writes ``mirrorfit.<qualname>`` (e.g.
``mirrorfit.mean_squared_error``), and names stored by an older mirrorfit with their private
module path (``mirrorfit._src.regression_losses.mean_squared_error``, before the layout of
issue 27) compare in that form too (`normalized_name`), so moving a module never orphans a
backup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_MIRRORFIT_NAME = re.compile(r"mirrorfit(\.[\w<>]+)+")
"""A dotted name of a mirrorfit object, as a fingerprint stores it."""
_MODULE_PART = re.compile(r"[a-z_][a-z0-9_]*")
"""A module name: mirrorfit's modules are all lowercase (PEP 8), its classes CamelCase."""


def public_name(obj: Any) -> str:
    """The name a fingerprint gives ``obj`` (a function or class, else ``obj`` 's class).

    ``module.qualname``, except for mirrorfit's own objects: ``mirrorfit.<qualname>``,
    whichever private module defines them. Never a ``repr`` with a memory address, so the
    same script names alike in every process and every restart.
    """
    named = obj if hasattr(obj, "__qualname__") else type(obj)
    module = getattr(named, "__module__", None) or "?"
    if module == "mirrorfit" or module.startswith("mirrorfit."):
        return f"mirrorfit.{named.__qualname__}"
    return f"{module}.{named.__qualname__}"


def normalized_name(name: str) -> str:
    """``name`` as `public_name` writes it today; other names are returned unchanged.

    A stored ``mirrorfit.<modules>.<qualname>`` loses its module path. The qualified name
    starts at the first part that is not a lowercase module name (a class), or at the
    function before a ``<locals>``; otherwise it is the last part (a module-level function).

    Example:
        >>> normalized_name("mirrorfit._src.regression_losses.mean_squared_error")
        'mirrorfit.mean_squared_error'
        >>> normalized_name("mirrorfit._src.optimizers.base.Optimizer.get_config")
        'mirrorfit.Optimizer.get_config'
        >>> normalized_name("__main__.my_loss")
        '__main__.my_loss'
    """
    if not _MIRRORFIT_NAME.fullmatch(name):
        return name
    parts = name.split(".")[1:]
    start = len(parts) - 1
    for i, part in enumerate(parts):
        if part == "<locals>":
            start = max(i - 1, 0)
            break
        if not _MODULE_PART.fullmatch(part):
            start = i
            break
    return "mirrorfit." + ".".join(parts[start:])


def _normalized(value: Any) -> Any:
    """A JSON fingerprint with every stored mirrorfit name in `normalized_name` form."""
    if isinstance(value, str):
        return normalized_name(value)
    if isinstance(value, Mapping):
        return {key: _normalized(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalized(item) for item in value]
    return value


def _data_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    if saved["rows"] != current["rows"]:
        return [f"{saved['rows']} training rows in the backup, {current['rows']} now"]
    found = []
    for key in sorted(set(saved["arrays"]) | set(current["arrays"])):
        before, now = saved["arrays"].get(key), current["arrays"].get(key)
        if before != now:
            show = lambda spec: ("absent" if spec is None else
                                 f"shape {tuple(spec['shape'])} {spec['dtype']}")
            found.append(f"{key}: {show(before)} in the backup, {show(now)} now")
    if not found and saved["sample_sha256"] != current["sample_sha256"]:
        found.append("the values of the sampled training rows differ (other data of the same "
                      "shape, or the same data in another order)")
    return found


def differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between a backup's fingerprints and the current run's, in words.

    Args:
        saved: ``{"data": ..., "compile": ...}`` as stored in the backup (by this mirrorfit
            or an older one).
        current: the same for the run that would resume.

    Returns:
        One line per difference; ``[]`` when they match. A fingerprint that is ``None`` on
        either side (an iterable input) is not compared.
    """
    found = []
    if saved.get("data") is not None and current.get("data") is not None:
        found += [f"training data: {line}" for line in _data_differences(saved["data"],
                                                                         current["data"])]
    before, now = _normalized(saved.get("compile")), _normalized(current.get("compile"))
    if before is not None and now is not None:
        for key in ("optimizer", "loss", "metrics"):
            if before.get(key) != now.get(key):
                found.append(f"compile {key}: {before.get(key)!r} in the backup, "
                             f"{now.get(key)!r} now")
    return found
