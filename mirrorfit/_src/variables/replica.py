"""The current replica context, held at level 1 so that level-2 objects can reach it.

`mirrorfit._src.distribute.replica_context` defines the replica context (the collectives over
the mesh) and makes one current while ``strategy.run`` or a ``fit`` step traces its
per-replica function. It keeps it in this slot, because the optimizers, on the same level as
``distribute``, cannot import it: ``optimizer.apply_gradients`` (and the functional
``mf.apply_gradients``) inside ``strategy.run`` all-reduces the gradients through the
context found here (its ``num_replicas_in_sync``,
``gradient_reduce_op`` and ``all_reduce``), as a ``tf.distribute`` optimizer does.

This module imports nothing else from mirrorfit.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_LOCAL = threading.local()


def current() -> Any:
    """The replica context of the per-replica function being traced, or ``None`` outside one."""
    return getattr(_LOCAL, "context", None)


@contextlib.contextmanager
def entering(context: Any) -> Iterator[Any]:
    """Makes ``context`` current within the block (the previous one is restored after)."""
    previous = current()
    _LOCAL.context = context
    try:
        yield context
    finally:
        _LOCAL.context = previous
