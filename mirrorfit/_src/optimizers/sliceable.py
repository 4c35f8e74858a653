"""Which optimizers can update blocks of the params (a sharded optimizer state, ZeRO-1/2).

With ``MirroredStrategy(shard_optimizer_state=True)`` each replica updates only its block of
every split leaf (`mirrorfit._src.optimizers.blocks`). That gives the mirrored run's
result for transformations that work element by element, and for the norms that
`blocks` adds over the replicas (``clipnorm``, ``global_clipnorm``). It does not for a
transformation that needs a whole leaf or statistics of the whole tree it cannot see:
``optax.clip_by_global_norm`` passed directly, trust ratios (``optax.lamb``, ``lars``,
``scale_by_trust_ratio``, `mirrorfit.optimizers.Lamb`), Adafactor's factored moments,
``optax.masked`` (its mask may read the shapes), noise. `check_sliceable` refuses those at
``compile``, from an allow-list: `SLICEABLE_OPTIMIZERS` (``mf.optimizers`` classes, every
option included) and `SLICEABLE_OPTAX` (optax functions, found by walking the closures of
a raw optax transformation).
"""

from __future__ import annotations

import types
from typing import Any

import optax

from mirrorfit._src.optimizers import optimizers as mf_optimizers
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer

SLICEABLE_OPTIMIZERS = (
    mf_optimizers.Adam, mf_optimizers.AdamW, mf_optimizers.SGD, mf_optimizers.RMSprop,
    mf_optimizers.Adagrad, mf_optimizers.Adadelta, mf_optimizers.Adamax, mf_optimizers.Nadam,
    mf_optimizers.Lion, mf_optimizers.Ftrl)
"""The ``mf.optimizers`` classes whose update rule is element-wise (all but Adafactor and
Lamb); each of Keras' options works on blocks too (`mirrorfit._src.optimizers.blocks`)."""

SLICEABLE_OPTAX = frozenset({
    # combinators and hyperparameter injection
    "chain", "named_chain", "with_extra_args_support", "inject_hyperparams", "identity",
    "init_empty_state", "stateless", "stateless_with_tree_map",
    # element-wise rules and the aliases built only from them
    "scale", "scale_by_learning_rate", "scale_by_schedule", "scale_by_adam",
    "scale_by_amsgrad", "scale_by_adamax", "scale_by_rms", "scale_by_stddev", "scale_by_rss",
    "scale_by_lion", "scale_by_sign", "scale_by_belief", "scale_by_adadelta", "trace", "ema",
    "clip", "add_decayed_weights", "sgd", "adam", "adamw", "nadam", "nadamw", "adamax",
    "amsgrad", "rmsprop", "adagrad", "adadelta", "lion", "sign_sgd", "adabelief",
})
"""Optax functions (by name) whose transformations work element by element. Optax's
schedules (``optax.schedules``) are allowed as learning rates too."""

NOT_SLICEABLE = (
    "shard_optimizer_state=True needs an optimizer that updates each replica's block of the "
    "params as it would the whole: an element-wise one, such as {allowed} or an optax chain "
    "of {optax_examples}, with Keras' options (clipnorm, global_clipnorm, clipvalue, "
    "weight_decay, use_ema, gradient_accumulation_steps) as arguments of an mf optimizer. "
    "The optimizer part {what} needs whole leaves or statistics of the whole tree. Use one of those, or "
    "MirroredStrategy(shard_optimizer_state=False). Received: optimizer={optimizer!r}")


def check_sliceable(optimizer: optax.GradientTransformation) -> None:
    """Refuses an optimizer that cannot update blocks of the params.

    Args:
        optimizer: ``compile``'s optimizer (a `LossScaleOptimizer` is checked by its inner
            optimizer).

    Raises:
        ValueError: naming what cannot be sliced, the allowed optimizers and the fix.
    """
    inner = optimizer
    while isinstance(inner, LossScaleOptimizer):
        inner = inner.inner_optimizer
    if isinstance(inner, mf_optimizers.Optimizer):
        bad = None if type(inner) in SLICEABLE_OPTIMIZERS else f"{type(inner).__name__}"
    else:
        bad = _unsliceable_optax(inner, set())
    if bad is not None:
        raise ValueError(NOT_SLICEABLE.format(
            allowed=", ".join(f"mf.optimizers.{c.__name__}" for c in SLICEABLE_OPTIMIZERS),
            optax_examples="optax.scale_by_adam, optax.clip, optax.add_decayed_weights (no mask)",
            what=bad, optimizer=optimizer))


def _unsliceable_optax(value: Any, seen: set[int]) -> str | None:
    """The first function reachable from ``value`` (closures, tuples, dicts) that is not on
    the allow-list, described; ``None`` when all are."""
    if id(value) in seen:
        return None
    seen.add(id(value))
    if isinstance(value, (tuple, list)):  # also a GradientTransformation (init, update)
        return next(filter(None, (_unsliceable_optax(v, seen) for v in value)), None)
    if isinstance(value, dict):
        return next(filter(None, (_unsliceable_optax(v, seen) for v in value.values())), None)
    if not isinstance(value, types.FunctionType):
        return None  # numbers, arrays, None
    module = value.__module__ or ""
    if module.startswith("optax.schedules") and "inject" not in module:
        return None
    name = value.__qualname__.split(".<locals>")[0]
    if not module.startswith("optax") or name not in SLICEABLE_OPTAX:
        return f"{module}.{name}"
    cells = value.__closure__ or ()
    return next(filter(None, (_unsliceable_optax(c.cell_contents, seen) for c in cells)), None)
