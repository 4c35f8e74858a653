"""Dynamic loss scaling, as ``keras.optimizers.LossScaleOptimizer``.

This module owns `LossScaleOptimizer`, an optax transformation that wraps another one
(registered in `OPTIMIZERS`, so saved configs rebuild it), and its state `LossScaleState`.
float16 gradients of small losses underflow to zero; multiplying the loss by a large scale
(``scale_loss``) lifts them into range, and the optimizer divides the gradients by the same
scale before the inner optimizer sees them. The scale adapts:

* a step with a non-finite gradient is skipped (params and inner state unchanged) and the
  scale halves, but not below `MIN_LOSS_SCALE` (1, tf.keras' floor): a scale of 0 would
  make the unscaled gradients NaN, and overflows that no scale cures are reported, not hidden
  (``fit`` warns when a step is skipped at the floor);
* after ``dynamic_growth_steps`` finite steps in a row, the scale doubles.

The scale and its counter live in the optimizer state, so checkpoints and resumes carry
them like any other optimizer variable. ``fit`` uses `handle_finite_grads` and
`handle_non_finite_grads` directly, with the finite check all-reduced over the replicas
(`mirrorfit._src.trainers.steps`); ``update`` is the same logic for a hand-written loop.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from mirrorfit._src.optimizers import blocks
from mirrorfit._src.optimizers import optimizers as optimizers_lib
from mirrorfit._src.optimizers.update import all_finite
from mirrorfit._src.utils.checks import positive_int

MIN_LOSS_SCALE = 1.0
"""The floor of the dynamic loss scale: halving stops there (as tf.keras' ``maximum(scale /
2, 1)``); a scale that starts below it is never raised to it."""


class LossScaleState(NamedTuple):
    """The state of a `LossScaleOptimizer` (names as Keras' optimizer variables)."""

    dynamic_scale: jax.Array  # float32 [], the factor the loss is multiplied by
    step_counter: jax.Array  # int32 [], finite steps since the scale last changed
    inner_state: Any  # the inner optimizer's state


def _finite_update(inner: optax.GradientTransformationExtraArgs, growth_steps: int, grads: Any,
                   state: LossScaleState, params: Any, extra_args: dict[str, Any]
                   ) -> tuple[Any, LossScaleState]:
    # A multiply by the inverse: exact, since the scale is the initial one times a power of 2
    # (and 1/initial_scale, exact too for Keras' default 2**15).
    inverse = 1.0 / state.dynamic_scale
    unscaled = jax.tree.map(lambda g: g * inverse.astype(g.dtype), grads)
    updates, inner_state = inner.update(unscaled, state.inner_state, params, **extra_args)
    grow = state.step_counter == growth_steps - 1
    return updates, LossScaleState(
        dynamic_scale=jnp.where(grow, state.dynamic_scale * 2.0, state.dynamic_scale),
        step_counter=jnp.where(grow, 0, state.step_counter + 1).astype(jnp.int32),
        inner_state=inner_state)


def at_floor(state: LossScaleState) -> jax.Array:
    """bool ``[]``: whether the scale is at (or, from an initial scale below it, under) its
    floor `MIN_LOSS_SCALE`: a non-finite gradient now is skipped without lowering it."""
    return state.dynamic_scale <= MIN_LOSS_SCALE


def _non_finite_update(state: LossScaleState) -> LossScaleState:
    scale = state.dynamic_scale
    halved = jnp.maximum(scale * 0.5, jnp.minimum(scale, MIN_LOSS_SCALE))
    return state._replace(dynamic_scale=halved,
                          step_counter=jnp.zeros_like(state.step_counter))


@optimizers_lib.OPTIMIZERS.register(name="lossscaleoptimizer")
class LossScaleOptimizer(optax.GradientTransformationExtraArgs):
    """Wraps an optimizer with dynamic loss scaling, as ``keras.optimizers.LossScaleOptimizer``.

    ``Model.compile`` wraps its optimizer in one automatically under the
    ``"mixed_float16"`` policy. ``update(grads, state, params)`` takes the gradients of the
    *scaled* loss (`scale_loss`), divides them by the scale and, if all are finite, applies
    the inner optimizer; otherwise it returns zero updates and halves the scale, down to
    `MIN_LOSS_SCALE` (1.0) at the lowest.

    Args:
        inner_optimizer: the ``optax.GradientTransformation`` (e.g. an ``mf.optimizers``
            optimizer) that receives the unscaled gradients.
        initial_scale: the first loss scale (Keras' default ``2**15``). Better too high than
            too low: a high scale halves after one step, a low one doubles only every
            ``dynamic_growth_steps`` steps.
        dynamic_growth_steps: finite train steps after which the scale doubles.

    Raises:
        TypeError: if ``inner_optimizer`` is not an ``optax.GradientTransformation``.
        ValueError: if ``initial_scale`` is not a positive finite number or
            ``dynamic_growth_steps`` is not a positive int.

    Example:
        >>> opt = mf.optimizers.LossScaleOptimizer(mf.optimizers.SGD(0.1), initial_scale=4.0)
        >>> state = opt.init(jnp.zeros(2))
        >>> scaled = opt.scale_loss(jnp.float32(1.5), state)  # differentiate this
        >>> updates, state = opt.update(jnp.array([4.0, 8.0]), state)  # grads of scaled
        >>> updates
        Array([-0.1, -0.2], dtype=float32)
    """

    inner_optimizer: optax.GradientTransformation
    initial_scale: float
    dynamic_growth_steps: int
    _inner: optax.GradientTransformationExtraArgs  # inner_optimizer, taking extra args

    def __new__(cls, inner_optimizer: optax.GradientTransformation,
                initial_scale: float = 2.0**15, dynamic_growth_steps: int = 2000):
        if not isinstance(inner_optimizer, optax.GradientTransformation):
            raise TypeError(
                "inner_optimizer must be an optax.GradientTransformation, e.g. "
                "mf.optimizers.Adam(). Received: "
                f"inner_optimizer={inner_optimizer!r} of type {type(inner_optimizer).__name__}")
        if isinstance(initial_scale, bool) or not isinstance(initial_scale, (int, float)) \
                or not 0 < initial_scale < float("inf"):
            raise ValueError("initial_scale must be a positive finite number, e.g. 2**15. "
                             f"Received: initial_scale={initial_scale!r}")
        growth = positive_int(dynamic_growth_steps, "dynamic_growth_steps")
        inner = optax.with_extra_args_support(inner_optimizer)

        def init(params):
            return LossScaleState(jnp.asarray(initial_scale, jnp.float32),
                                  jnp.zeros((), jnp.int32), inner.init(params))

        def update(updates, state, params=None, **extra_args):
            def finite(_):
                return _finite_update(inner, growth, updates, state, params, extra_args)

            def non_finite(_):
                return jax.tree.map(jnp.zeros_like, updates), _non_finite_update(state)

            # on blocks (a sharded state), every replica skips if any block is not finite
            finite_everywhere = blocks.on_every_replica(all_finite(updates))
            return lax.cond(finite_everywhere, finite, non_finite, None)

        self = super().__new__(cls, init, update)
        self.inner_optimizer, self.initial_scale = inner_optimizer, float(initial_scale)
        self.dynamic_growth_steps = growth
        self._inner = inner
        return self

    def scale_loss(self, loss: jax.Array, state: LossScaleState) -> jax.Array:
        """``loss * state.dynamic_scale``: the loss to differentiate (Keras' ``scale_loss``)."""
        return loss * state.dynamic_scale

    def handle_finite_grads(self, grads: Any, state: LossScaleState, params: Any = None,
                            **extra_args: Any) -> tuple[Any, LossScaleState]:
        """Updates for finite gradients of the scaled loss, and the new state.

        The gradients are divided by the scale and passed to the inner optimizer; the
        counter advances, and after ``dynamic_growth_steps`` finite steps the scale doubles
        and the counter restarts (as Keras' ``_stateless_handle_finite_grads``).

        Args:
            grads: gradients of the scaled loss, a params-shaped pytree (float32).
            state: this optimizer's state.
            params: the params, for inner optimizers that need them.
            **extra_args: passed on to the inner optimizer.
        """
        return _finite_update(self._inner, self.dynamic_growth_steps, grads, state, params,
                              extra_args)

    def handle_non_finite_grads(self, state: LossScaleState) -> LossScaleState:
        """The state after a skipped step: the scale halves (not below `MIN_LOSS_SCALE`), the
        counter restarts."""
        return _non_finite_update(state)

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, JSON-able, as ``keras.optimizers.LossScaleOptimizer``'s.

        The inner optimizer is stored as `mirrorfit.optimizers.serialize` writes it.

        Raises:
            TypeError: if the inner optimizer has no config (a raw optax transformation, or a
                schedule as learning rate): pass the optimizer object again instead.
        """
        return {"inner_optimizer": optimizers_lib.serialize(self.inner_optimizer),
                "initial_scale": self.initial_scale,
                "dynamic_growth_steps": self.dynamic_growth_steps}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LossScaleOptimizer:
        """Rebuilds a `LossScaleOptimizer` from `get_config`'s output.

        Raises:
            ValueError: for an unknown inner optimizer or invalid arguments in ``config``.
        """
        config = dict(config)
        inner = optimizers_lib.deserialize(config.pop("inner_optimizer"))
        return cls(inner, **config)

    def __reduce__(self):
        # A tuple subclass would be copied as ``cls(init, update)``; rebuild from arguments.
        return type(self), (self.inner_optimizer, self.initial_scale, self.dynamic_growth_steps)

    def __repr__(self) -> str:
        return (f"LossScaleOptimizer({self.inner_optimizer!r}, initial_scale="
                f"{self.initial_scale!r}, dynamic_growth_steps={self.dynamic_growth_steps})")


# A leafless pytree node, as the mf.optimizers optimizers: JAX would otherwise flatten the
# tuple (init, update) and rebuild it as ``LossScaleOptimizer(init, update)``.
jax.tree_util.register_static(LossScaleOptimizer)
