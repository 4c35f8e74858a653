"""Where new `Variable` values live: the placer of the innermost active strategy scope.

``MirroredStrategy.scope()`` pushes its "mirror on my devices" function here, so a variable
created inside it is mirrored (``NamedSharding(mesh, P())``), as variables created in a
``tf.distribute`` scope are. Outside any scope values stay where JAX put them.

This module imports nothing else from mirrorfit.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

_LOCAL = threading.local()


def _stack() -> list[Callable[[Any], Any]]:
    if not hasattr(_LOCAL, "placers"):
        _LOCAL.placers = []
    return _LOCAL.placers


@contextlib.contextmanager
def placing(placer: Callable[[Any], Any]) -> Iterator[None]:
    """Within the block, new variable values go through ``placer`` (array -> placed array)."""
    stack = _stack()
    stack.append(placer)
    try:
        yield
    finally:
        stack.pop()


def place(value: Any) -> Any:
    """``value`` placed by the innermost active placer (unchanged when there is none)."""
    stack = _stack()
    return stack[-1](value) if stack else value
