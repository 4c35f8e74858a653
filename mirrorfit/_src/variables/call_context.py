"""The call context: Keras' ``training`` flag and the random keys of one forward pass.

Keras passes ``training`` down to every nested layer without the user threading it through
``call``: the outermost layer call opens a context holding it, and inner calls that do not
pass ``training`` read it from there. mirrorfit's context also holds where random layers
(Dropout, noise) draw their keys: the compiled step's per-replica key, folded with a counter
so every draw differs; outside any step, a process-wide stream (`restart_stream`).

This module imports nothing else from mirrorfit.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import jax

_LOCAL = threading.local()
_EAGER = {"seed": 0, "draws": itertools.count()}


class CallContext:
    """One forward pass: ``training`` (``None``: not given) and its random keys."""

    def __init__(self, training: bool | None, rng: Any, in_layer: bool = False):
        self.training = training
        self.rng = rng
        self.in_layer = in_layer  # opened by a layer's call (not by a step or strategy.run)
        self._draws = itertools.count()

    def next_rng(self) -> jax.Array:
        """A fresh key: ``fold_in(rng, n)`` for the n-th draw of this pass."""
        if self.rng is None:
            return eager_rng()
        return jax.random.fold_in(self.rng, next(self._draws))


def _stack() -> list[CallContext]:
    if not hasattr(_LOCAL, "contexts"):
        _LOCAL.contexts = []
    return _LOCAL.contexts


def current() -> CallContext | None:
    """The innermost active context, or ``None`` outside any forward pass."""
    stack = _stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def call_context(training: bool | None = None, rng: Any = None, *,
                 in_layer: bool = False) -> Iterator[CallContext]:
    """Opens a context; ``None`` arguments inherit the enclosing context's values.
    ``in_layer``: a layer's call opens it (the outermost layer call of a pass starts the
    pass's ``losses`` afresh)."""
    outer = current()
    if outer is not None:
        training = outer.training if training is None else training
        rng = outer.rng if rng is None else rng
    context = CallContext(training, rng, in_layer)
    _stack().append(context)
    try:
        yield context
    finally:
        _stack().pop()


def next_rng() -> jax.Array:
    """A fresh key from the current context, or from the process-wide stream outside one."""
    context = current()
    return eager_rng() if context is None else context.next_rng()


def eager_rng() -> jax.Array:
    """The next key of the process-wide stream (calls outside a compiled step)."""
    with jax.ensure_compile_time_eval():
        return jax.random.fold_in(jax.random.PRNGKey(_EAGER["seed"]), next(_EAGER["draws"]))


@contextlib.contextmanager
def init_seed(seed: int) -> Iterator[None]:
    """Within the block, `init_rng` draws from a stream of its own seeded by ``seed`` (a
    model builds its weights this way, so they depend on its ``seed`` only)."""
    _init_stack().append((seed, itertools.count()))
    try:
        yield
    finally:
        _init_stack().pop()


def _init_stack() -> list[tuple[int, Any]]:
    if not hasattr(_LOCAL, "init"):
        _LOCAL.init = []
    return _LOCAL.init


def init_rng() -> jax.Array:
    """A key for a weight initializer: from the innermost `init_seed` block, else from the
    process-wide stream."""
    stack = _init_stack()
    if not stack:
        return eager_rng()
    seed, draws = stack[-1]
    with jax.ensure_compile_time_eval():
        return jax.random.fold_in(jax.random.PRNGKey(seed), next(draws))


def stream_seed() -> int:
    """The seed of the process-wide stream (`restart_stream`'s, 0 by default)."""
    return _EAGER["seed"]


def restart_stream(seed: int) -> None:
    """Restarts the process-wide stream at the int ``seed`` (``mf.utils.set_random_seed``,
    which checks it, seeds the rest and is the one public name)."""
    _EAGER["seed"] = seed
    _EAGER["draws"] = itertools.count()
