"""`PerShapeStep`: a compiled step that compiles once per distinct input shape, as Keras 3's
JAX backend does, and warns when it has compiled many.

``jax.jit`` keeps one program per argument shape, so batches of one shape compile once and
sequences of several lengths (``Input(shape=(None,))``) compile once per length. Each compile
costs seconds: past `MANY_SHAPES` shapes the step warns (`mirrorfit.MirrorfitWarning`, once
per ``fit``) that padding to a few bucket lengths bounds them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax

from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.trainers.resident import ResidentBatch
from mirrorfit._src.utils.checks import MirrorfitWarning

MANY_SHAPES = 4  # distinct input shapes of one step past which a fit warns

MANY_SHAPES_WARNING = (
    "The {kind} step has compiled for {count} distinct input shapes (per-example shapes "
    "{shapes}, ...): each new shape compiles the step again, which takes seconds. Pad the "
    "sequences to a few bucket lengths (e.g. mirrorfit.utils.pad_sequences(..., maxlen=L) "
    "for each bucket L) so that few shapes reach the model.")


def _input_shapes(batch: Batch | ResidentBatch) -> tuple[Any, ...]:
    # A resident data set's rows all have the stored arrays' (one) shape.
    x = batch.arrays.x if isinstance(batch, ResidentBatch) else batch.x
    return tuple(getattr(leaf, "shape", None) for leaf in jax.tree.leaves(x))


class PerShapeStep:
    """A compiled step ``fn(*args)`` whose last argument is a `Batch`; it records the input
    shapes it has run on (each one compile of ``fn``).

    Args:
        fn: the compiled (``jax.jit``) step.
        kind: ``"train"``, ``"eval"`` or ``"predict"``, for the warning.
        warned: the trainer's set of warning keys of the running ``fit`` (a warning is
            given once per fit).
    """

    def __init__(self, fn: Callable[..., Any], kind: str,
                 warned: Callable[[], set[str]]) -> None:
        self.fn = fn
        self.kind = kind
        self.shapes: list[tuple[Any, ...]] = []  # the distinct batch input shapes, in order
        self._warned = warned
        self._last: tuple[Any, ...] | None = None

    def __call__(self, *args: Any) -> Any:
        shapes = _input_shapes(args[-1])
        if shapes != self._last:  # cheap on the common path: one shape for every batch
            self._last = shapes
            if shapes not in self.shapes:
                self.shapes.append(shapes)
                self._maybe_warn()
        return self.fn(*args)

    def _maybe_warn(self) -> None:
        key = f"many_shapes_{self.kind}"
        warned = self._warned()
        if len(self.shapes) > MANY_SHAPES and key not in warned:
            warned.add(key)
            examples = [[s[1:] for s in shapes] for shapes in self.shapes[:3]]
            warnings.warn(MANY_SHAPES_WARNING.format(kind=self.kind, count=len(self.shapes),
                                                     shapes=examples),
                          MirrorfitWarning, stacklevel=4)

    def compile_count(self) -> int:
        """How many programs ``fn`` has compiled (``jax.jit`` 's cache entries)."""
        return self.fn._cache_size()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        # The rest of ``jax.jit`` 's surface (``lower``, ``_cache_size``, ...) is ``fn`` 's.
        if name == "fn":  # not set yet (an object being copied): no recursion
            raise AttributeError(name)
        return getattr(self.fn, name)
