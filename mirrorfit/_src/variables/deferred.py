"""Work waiting for an object to create its variables, as TensorFlow's deferred restoration.

``tf.train.Checkpoint.restore`` into a model or optimizer that has not created its variables
yet keeps the saved values and assigns them when the object creates them.
`mirrorfit.Checkpoint` does the same through this slot: it registers the restore with
`defer_until_built`, and the objects call `built` at the end of their build (`mf.Model` when
its training state exists, the stateful optimizers at the end of ``build``), which runs it.

It imports nothing from mirrorfit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_KEY = "_mf_deferred"  # on the object: the callables waiting for its build


def defer_until_built(obj: Any, fn: Callable[[], Any]) -> None:
    """Runs ``fn()`` when ``obj`` next calls `built` (after the callables queued before)."""
    obj.__dict__.setdefault(_KEY, []).append(fn)


def is_pending(obj: Any) -> bool:
    """Whether work is waiting for ``obj`` to be built."""
    return bool(getattr(obj, "__dict__", {}).get(_KEY))


def built(obj: Any) -> None:
    """Runs (and forgets) the work waiting for ``obj``; the object calls it once it has
    created its variables. Work that raises is forgotten too: the error reaches the caller
    of the build."""
    waiting = obj.__dict__.pop(_KEY, None)
    for fn in waiting or ():
        fn()
