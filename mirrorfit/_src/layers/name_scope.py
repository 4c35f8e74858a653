"""Variable paths: the names of the layers being called or built, outermost first.

As Keras 3's ``backend/common/name_scope.py``: a layer opens ``name_scope(layer.name,
layer)`` while it builds and runs, so a weight created inside gets the path of every layer
around it (``"block/dense/kernel"`` for the Dense inside a custom ``block``; ``"dense/kernel"``
at the top). A layer reopening its own scope (its ``build`` inside its ``__call__``) adds no
second part.

This module imports nothing else from mirrorfit.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_LOCAL = threading.local()


def _stack() -> list[tuple[str, Any]]:
    if not hasattr(_LOCAL, "scopes"):
        _LOCAL.scopes = []
    return _LOCAL.scopes


@contextlib.contextmanager
def name_scope(name: str, caller: Any) -> Iterator[None]:
    """Within the block, `current_path` ends with ``name`` (once, if ``caller`` has the
    innermost scope already)."""
    stack = _stack()
    if stack and stack[-1][1] is caller and stack[-1][0] == name:
        yield
        return
    stack.append((name, caller))
    try:
        yield
    finally:
        stack.pop()


def current_path() -> str:
    """The open scopes' names joined by ``"/"`` (``""`` outside any)."""
    return "/".join(name for name, _ in _stack())


def weight_path(owner: str, owner_object: Any, name: str) -> str:
    """The path of weight ``name`` created by ``owner_object`` (named ``owner``) now."""
    with name_scope(owner, owner_object):
        return f"{current_path()}/{name}"


_NAME_COUNTS: collections.Counter[str] = collections.Counter()


def unique_name(base: str) -> str:
    """Keras' default layer names: ``base``, then ``base_1``, ``base_2``, ... per process."""
    count = _NAME_COUNTS[base]
    _NAME_COUNTS[base] += 1
    return base if count == 0 else f"{base}_{count}"
