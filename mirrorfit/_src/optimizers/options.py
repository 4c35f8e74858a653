"""Keras' optimizer options (clipping, weight decay, gradient accumulation, EMA) as optax pieces.

This module owns what ``keras.optimizers.Optimizer`` does around every update rule
(``BaseOptimizer.apply`` with the JAX backend's ``_backend_apply_gradients``), in Keras'
order:

1. ``gradient_accumulation_steps=k``: gradients are summed for ``k - 1`` calls with no
   parameter or rule-state change; on the ``k``-th the rule sees their mean
   ``(g + acc) / k`` (`mirrorfit._src.optimizers.accumulation.accumulate_gradients`);
2. ``clipnorm`` (each variable's gradient to that L2 norm), ``global_clipnorm`` (all
   gradients together), ``clipvalue`` (each element) — at most one (`keras_clipping`);
3. ``weight_decay``: decoupled, ``w -= w * weight_decay * lr`` before the rule, which then
   sees the decayed ``w`` (`decoupled_weight_decay`);
4. the update rule;
5. ``use_ema``: a moving average of the params after every call, and with
   ``ema_overwrite_frequency=N`` the params replaced by it every ``N`` iterations
   (`keras_ema`). `ema_params` reads it; `finalize_variable_values` is what Keras'
   ``fit`` does with it at the end.

`with_options` composes them; `check_options` validates Keras' arguments.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from mirrorfit._src.optimizers import blocks
from mirrorfit._src.optimizers.accumulation import accumulate_gradients
from mirrorfit._src.optimizers.rules import NO_PARAMS


class Options(NamedTuple):
    """Keras' base-optimizer options, validated by `check_options`."""

    weight_decay: float | None = None
    clipnorm: float | None = None
    clipvalue: float | None = None
    global_clipnorm: float | None = None
    use_ema: bool = False
    ema_momentum: float = 0.99
    ema_overwrite_frequency: int | None = None
    gradient_accumulation_steps: int | None = None


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_options(**options: Any) -> Options:
    """Validates Keras' base-optimizer options, as ``BaseOptimizer.__init__``.

    Stricter than Keras where Keras silently ignores a value: a non-positive clip bound
    or a negative ``weight_decay`` is an error here.

    Raises:
        ValueError: naming the argument, for an unknown option, a non-positive clip
            bound, more than one of ``clipnorm``/``clipvalue``/``global_clipnorm``, a
            negative ``weight_decay``, ``ema_momentum`` outside ``[0, 1]``, an
            ``ema_overwrite_frequency`` that is not a positive int, or a
            ``gradient_accumulation_steps`` that is not an int >= 2.
        TypeError: for a ``use_ema`` that is not a bool.
    """
    unknown = sorted(set(options) - set(Options._fields))
    if unknown:
        raise ValueError(
            f"Argument(s) not recognized: {unknown}. Expected Keras optimizer options among "
            f"{list(Options._fields)}. Received: {', '.join(f'{k}={options[k]!r}' for k in unknown)}")
    opts = Options(**options)
    for name in ("clipnorm", "clipvalue", "global_clipnorm"):
        value = getattr(opts, name)
        if value is not None and (not _is_real(value) or value <= 0):
            raise ValueError(f"`{name}` must be a positive float, or None for no clipping. "
                             f"Received: {name}={value!r}")
    if sum(getattr(opts, n) is not None for n in ("clipnorm", "clipvalue", "global_clipnorm")) > 1:
        raise ValueError(
            "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. Received: "
            f"clipnorm={opts.clipnorm}, clipvalue={opts.clipvalue}, "
            f"global_clipnorm={opts.global_clipnorm}")
    if opts.weight_decay is not None and (not _is_real(opts.weight_decay)
                                          or opts.weight_decay < 0):
        raise ValueError("`weight_decay` must be a float >= 0, or None for no weight decay. "
                         f"Received: weight_decay={opts.weight_decay!r}")
    if not isinstance(opts.use_ema, bool):
        raise TypeError(f"`use_ema` must be a bool. Received: use_ema={opts.use_ema!r}")
    if not _is_real(opts.ema_momentum) or not 0 <= opts.ema_momentum <= 1:
        raise ValueError("`ema_momentum` must be in the range [0, 1]. "
                         f"Received: ema_momentum={opts.ema_momentum!r}")
    frequency = opts.ema_overwrite_frequency
    if frequency is not None and (not _is_int(frequency) or frequency < 1):
        raise ValueError("`ema_overwrite_frequency` must be an integer >= 1 or None. "
                         f"Received: ema_overwrite_frequency={frequency!r}")
    steps = opts.gradient_accumulation_steps
    if steps is not None and (not _is_int(steps) or steps < 2):
        raise ValueError("`gradient_accumulation_steps` must be an integer >= 2, or None for no "
                         f"accumulation. Received: gradient_accumulation_steps={steps!r}")
    return opts


def clip_by_norm_per_variable(clipnorm: float) -> optax.GradientTransformation:
    """Clips each gradient leaf to L2 norm ``clipnorm``: ``g * clipnorm / max(|g|, clipnorm)``.

    As ``keras.optimizers.Optimizer(clipnorm=...)`` (``BaseOptimizer._clip_by_norm``);
    an all-zero gradient stays zero. On blocks of a sharded optimizer state, ``|g|`` is the
    whole variable's norm (`blocks.leaf_sums_of_squares`).
    """

    def clip(g, l2sum):
        l2norm = jnp.where(l2sum > 0, jnp.sqrt(jnp.where(l2sum > 0, l2sum, 1.0)), l2sum)
        return g * clipnorm / jnp.maximum(l2norm, clipnorm)

    return optax.stateless(lambda updates, params=None: jax.tree.map(
        clip, updates, blocks.leaf_sums_of_squares(updates)))


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """``optax.clip_by_global_norm(max_norm)``, also on blocks of a sharded optimizer state.

    On blocks (`blocks.block_update`) the global norm adds every replica's blocks
    (`blocks.global_sum_of_squares`), then clips as optax does; elsewhere this is optax's
    transformation itself.
    """
    whole = optax.clip_by_global_norm(max_norm)

    def update(updates, state, params=None):
        if not blocks.active():
            return whole.update(updates, state, params)
        g_norm = jnp.sqrt(blocks.global_sum_of_squares(updates))
        trigger = g_norm < max_norm
        return jax.tree.map(lambda t: lax.select(trigger, t, (t / g_norm.astype(t.dtype))
                                                 * max_norm), updates), state

    return optax.GradientTransformation(whole.init, update)


def keras_clipping(options: Options) -> optax.GradientTransformation | None:
    """The clipping Keras applies for ``options``, or None when none is set.

    ``global_clipnorm`` is ``optax.clip_by_global_norm`` (`clip_by_global_norm`) and
    ``clipvalue`` is ``optax.clip``: both equal Keras' formulas.
    """
    if options.clipnorm is not None:
        return clip_by_norm_per_variable(options.clipnorm)
    if options.global_clipnorm is not None:
        return clip_by_global_norm(options.global_clipnorm)
    if options.clipvalue is not None:
        return optax.clip(options.clipvalue)
    return None


def param_path(path: Sequence[Any]) -> str:
    """A params leaf's path as ``"params/Dense_0/bias"``, what `exclude_from_weight_decay`
    patterns are searched in."""
    return jax.tree_util.keystr(tuple(path), simple=True, separator="/")


def decoupled_weight_decay(rule: optax.GradientTransformation, learning_rate: Any,
                           weight_decay: float, excluded: Callable[[], Sequence[str]]
                           ) -> optax.GradientTransformation:
    """Keras' decoupled weight decay ``w -= w * weight_decay * lr``, before ``rule``.

    ``rule`` sees the decayed params, as in Keras (``_apply_weight_decay`` assigns the
    variables before ``update_step`` reads them); the returned update is the decay plus
    ``rule``'s update.

    Args:
        rule: the update rule (including the learning rate).
        learning_rate: float32 scalar (may be traced).
        weight_decay: the decay factor, ``>= 0``.
        excluded: returns regular expressions; a param whose `param_path` matches any
            (``re.search``) is not decayed, as Keras' ``exclude_from_weight_decay``. Called
            when the update is traced.

    Returns:
        An ``optax.GradientTransformation`` with ``rule``'s state; its update needs
        ``params``.
    """

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS)
        patterns = tuple(excluded())
        pattern = re.compile("|".join(patterns)) if patterns else None

        def decay(path, p):
            if pattern is not None and pattern.search(param_path(path)):
                return jnp.zeros_like(p)
            return -(p * weight_decay * learning_rate).astype(p.dtype)

        decays = jax.tree_util.tree_map_with_path(decay, params)
        decayed = optax.apply_updates(params, decays)
        rule_updates, state = rule.update(updates, state, decayed)
        return jax.tree.map(jnp.add, decays, rule_updates), state

    return optax.GradientTransformation(rule.init, update)


class EmaState(NamedTuple):
    """State of `keras_ema`: the moving average of the params, mirrored like them."""

    count: jax.Array  # int32 [], train steps so far (Keras' optimizer._iterations)
    ema: Any  # params-shaped exponential moving average of the params


def keras_ema(momentum: float, overwrite_frequency: int | None, accumulation_steps: int = 1
              ) -> optax.GradientTransformation:
    """Keras' ``use_ema``: ``ema = m * ema + (1 - m) * w_new`` after every train step.

    As ``BaseOptimizer._update_model_variables_moving_average``: ``m`` is 0 while Keras'
    ``iterations`` (train steps // ``accumulation_steps``) is 0, so the average starts at
    the params, then ``momentum``. With ``overwrite_frequency=N``, on the steps where
    ``(iterations + 1) % N == 0`` the update becomes ``ema - w``, so the params become
    the average (as the JAX backend does; under accumulation that is every step of such
    an iteration).

    Args:
        momentum: ``ema_momentum`` in ``[0, 1]``.
        overwrite_frequency: ``N`` in iterations, or None to never overwrite.
        accumulation_steps: the ``gradient_accumulation_steps`` in effect (1 for none).

    Returns:
        An ``optax.GradientTransformation`` with state `EmaState`; chain it after the rule.
        Its update needs ``params``.
    """

    def init(params):
        return EmaState(count=jnp.zeros([], jnp.int32), ema=optax.tree.zeros_like(params))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS)
        new_params = optax.apply_updates(params, updates)
        iterations = state.count // accumulation_steps
        m = jnp.where(iterations != 0, momentum, 0.0)
        ema = jax.tree.map(lambda e, w: (m * e + (1.0 - m) * w).astype(e.dtype),
                           state.ema, new_params)
        if overwrite_frequency is not None:
            overwrite = (iterations + 1) % overwrite_frequency == 0
            updates = jax.tree.map(lambda u, e, w: jnp.where(overwrite, e - w, u).astype(u.dtype),
                                   updates, ema, params)
        count = optax.safe_increment(state.count)  # an Array; optax annotates it ArrayLike
        return updates, EmaState(count=count, ema=ema)  # pyright: ignore[reportArgumentType]

    return optax.GradientTransformation(init, update)


def with_options(rule: optax.GradientTransformation, learning_rate: Any, options: Options,
                 excluded: Callable[[], Sequence[str]]) -> optax.GradientTransformation:
    """``rule`` with Keras' options around it, in Keras' order (see the module docstring).

    Only the options that are set add a transformation (and state): with none, this is
    ``rule`` itself.

    Args:
        rule: the update rule, including the learning rate.
        learning_rate: float32 scalar (may be traced), for the weight decay.
        options: validated options (`check_options`).
        excluded: patterns of params excluded from weight decay (see
            `decoupled_weight_decay`).

    Returns:
        An ``optax.GradientTransformation``.
    """
    tx = rule
    if options.weight_decay:
        tx = decoupled_weight_decay(tx, learning_rate, options.weight_decay, excluded)
    clipping = keras_clipping(options)
    if clipping is not None:
        tx = optax.chain(clipping, tx)
    steps = options.gradient_accumulation_steps
    if steps is not None:
        tx = accumulate_gradients(tx, steps)
    if options.use_ema:
        tx = optax.chain(tx, keras_ema(options.ema_momentum, options.ema_overwrite_frequency,
                                       steps or 1))
    return tx


def _ema_states(opt_state: Any) -> list[EmaState]:
    def is_ema(node):
        return isinstance(node, EmaState)

    return [n for n in jax.tree.leaves(opt_state, is_leaf=is_ema) if is_ema(n)]


def ema_params(opt_state: Any) -> Any:
    """The moving average of the params kept by an optimizer made with ``use_ema=True``.

    Args:
        opt_state: the optimizer state (e.g. ``model.opt_state``).

    Returns:
        A params-shaped pytree (mirrored like the params when ``opt_state`` is).

    Raises:
        ValueError: if ``opt_state`` holds no EMA.

    Example:
        >>> opt = mf.optimizers.SGD(0.1, use_ema=True)
        >>> ema_params(opt.init({"w": jnp.ones(2)}))["w"].shape
        (2,)
    """
    states = _ema_states(opt_state)
    if not states:
        raise ValueError(
            "The optimizer state holds no exponential moving average of the params. Create the "
            "optimizer with use_ema=True, e.g. mf.optimizers.Adam(use_ema=True). Received: an "
            f"optimizer state of type {type(opt_state).__name__}")
    return states[0].ema


def finalize_variable_values(params: Any, opt_state: Any) -> Any:
    """The params at the end of ``fit``: the EMA when the optimizer keeps one, else ``params``.

    As ``keras.optimizers.Optimizer.finalize_variable_values``, which Keras' ``fit``
    calls after the last epoch.

    Args:
        params: the trained params.
        opt_state: the optimizer state for ``params``.

    Returns:
        A params-shaped pytree.
    """
    states = _ema_states(opt_state)
    return states[0].ema if states else params
