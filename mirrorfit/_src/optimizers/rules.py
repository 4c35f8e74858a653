"""Keras 3 update rules that optax does not compute the same way, as optax transformations.

This module owns the per-variable update rules of ``keras.optimizers.Adam``, ``Adamax``,
``Nadam``, ``Adafactor`` and ``Ftrl``. Where optax's own transformation already equals
Keras' formula (Adagrad: ``optax.scale_by_rss``; Adadelta: ``optax.scale_by_adadelta``;
Lion: ``optax.scale_by_lion``; Lamb: ``optax.scale_by_adam`` with
``optax.scale_by_trust_ratio``), the optimizers use optax directly and nothing is here.

How they differ from optax:
- Adam: Keras adds ``epsilon`` to ``sqrt(v)`` before bias correction ("epsilon hat").
- Adamax: Keras adds ``epsilon`` to ``u`` in the denominator; optax adds it to ``|g|``
  inside the max.
- Nadam: Keras uses Dozat's momentum schedule ``u_t = beta_1 (1 - 0.5 * 0.96^t)``;
  optax uses a constant ``beta_1``.
- Adafactor: Keras' relative step ``min(lr, 1/sqrt(t))``, scaled by ``max(epsilon_2,
  rms(w))``, with the factored second moment over the last two axes; optax's factored
  rule differs in decay, clipping and momentum.
- Ftrl: optax has none.

``t`` is the number of applied updates including this one (Keras' ``iterations + 1``;
under gradient accumulation, Keras' ``iterations`` counts applied updates too).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

NO_PARAMS = ("This optimizer's update needs the current params: call "
             "update(updates, opt_state, params). Received: params=None")


def _step_number(count: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The incremented int32 count and ``t`` as float32."""
    # optax annotates safe_increment's result ArrayLike; given an Array it returns one.
    count = optax.safe_increment(count)  # pyright: ignore[reportAssignmentType]
    return count, count.astype(jnp.float32)


def _map_leaves(fn, tree, *rest) -> tuple:
    """``fn`` over matching leaves of trees shaped like ``tree``; one tree per output of ``fn``."""
    treedef = jax.tree.structure(tree)
    columns = zip(*(fn(*leaves) for leaves in zip(*(treedef.flatten_up_to(t) for t in
                                                       (tree, *rest)))))
    return tuple(treedef.unflatten(column) for column in columns)


def scale_by_keras_adam(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """Keras 3's Adam direction ``sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``.

    ``m`` and ``v`` are optax's first and second moments (``optax.scale_by_adam``'s state),
    ``t`` the number of updates including this one. Chain with
    ``optax.scale_by_learning_rate`` for the step ``-lr * direction``.

    Args:
        b1: decay of the first-moment estimate.
        b2: decay of the second-moment estimate.
        eps: Keras' "epsilon hat", added to ``sqrt(v)`` before bias correction.

    Returns:
        An ``optax.GradientTransformation`` with state ``optax.ScaleByAdamState``.

    Example:
        >>> direction = scale_by_keras_adam(0.9, 0.999, 1e-7)
        >>> state = direction.init(jnp.zeros(2))
        >>> direction.update(jnp.ones(2), state)[0]
        Array([0.9999901, 0.9999901], dtype=float32)
    """

    def init(params):
        return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32),
                                      mu=optax.tree.zeros_like(params),
                                      nu=optax.tree.zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count, t = _step_number(state.count)
        alpha = jnp.sqrt(1.0 - jnp.float32(b2) ** t) / (1.0 - jnp.float32(b1) ** t)
        updates = jax.tree.map(lambda m, v: alpha * m / (jnp.sqrt(v) + eps), mu, nu)
        return updates, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def scale_by_keras_adamax(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """Keras 3's Adamax direction ``m / ((1 - b1^t) * (u + eps))``.

    ``m = m + (g - m) * (1 - b1)`` and ``u = max(b2 * u, |g|)``, as
    ``keras.optimizers.Adamax.update_step``. Chain with ``optax.scale_by_learning_rate``.

    Args:
        b1: decay of the first-moment estimate.
        b2: decay of the exponentially weighted infinity norm.
        eps: added to ``u`` in the denominator.

    Returns:
        An ``optax.GradientTransformation`` with state ``optax.ScaleByAdamState``
        (``nu`` holds ``u``).
    """

    def init(params):
        return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32),
                                      mu=optax.tree.zeros_like(params),
                                      nu=optax.tree.zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = jax.tree.map(lambda g, u: jnp.maximum(b2 * u, jnp.abs(g)), updates, state.nu)
        count, t = _step_number(state.count)
        correction = 1.0 - jnp.float32(b1) ** t
        updates = jax.tree.map(lambda m, u: m / (correction * (u + eps)), mu, nu)
        return updates, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


class ScaleByKerasNadamState(NamedTuple):
    """State of `scale_by_keras_nadam`."""

    count: jax.Array  # int32 [], applied updates so far
    mu: Any  # params-shaped first moment
    nu: Any  # params-shaped second moment
    u_product: jax.Array  # float32 [], product of the momentum schedule u_1 ... u_t


def scale_by_keras_nadam(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """Keras 3's Nadam direction with Dozat's momentum schedule.

    With ``u_t = b1 * (1 - 0.5 * 0.96^t)`` and ``P_t = u_1 ... u_t``, the direction is
    ``m_hat / (sqrt(v / (1 - b2^t)) + eps)`` where
    ``m_hat = u_{t+1} m / (1 - P_t u_{t+1}) + (1 - u_t) g / (1 - P_t)``, as
    ``keras.optimizers.Nadam``. Chain with ``optax.scale_by_learning_rate``.

    Args:
        b1: decay of the first-moment estimate (scaled by the schedule).
        b2: decay of the second-moment estimate.
        eps: added to the bias-corrected ``sqrt(v)``.

    Returns:
        An ``optax.GradientTransformation`` with state `ScaleByKerasNadamState`.
    """

    def init(params):
        return ScaleByKerasNadamState(count=jnp.zeros([], jnp.int32),
                                      mu=optax.tree.zeros_like(params),
                                      nu=optax.tree.zeros_like(params),
                                      u_product=jnp.ones([], jnp.float32))

    def update(updates, state, params=None):
        del params
        count, t = _step_number(state.count)
        u_t = b1 * (1.0 - 0.5 * jnp.float32(0.96) ** t)
        u_next = b1 * (1.0 - 0.5 * jnp.float32(0.96) ** (t + 1.0))
        u_product = state.u_product * u_t
        u_product_next = u_product * u_next
        v_correction = 1.0 - jnp.float32(b2) ** t
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)

        def direction(g, m, v):
            m_hat = u_next * m / (1.0 - u_product_next) + (1.0 - u_t) * g / (1.0 - u_product)
            return m_hat / (jnp.sqrt(v / v_correction) + eps)

        updates = jax.tree.map(direction, updates, mu, nu)
        return updates, ScaleByKerasNadamState(count, mu, nu, u_product)

    return optax.GradientTransformation(init, update)


class KerasAdafactorState(NamedTuple):
    """State of `keras_adafactor`. Variables of rank < 2 keep ``r`` and ``c`` as 0-d zeros."""

    count: jax.Array  # int32 [], applied updates so far
    r: Any  # per variable: row statistics, shape[:-1] (float32 [] for rank < 2)
    c: Any  # per variable: column statistics, shape[:-2] + shape[-1:] (float32 [] for rank < 2)
    v: Any  # params-shaped second-moment estimate


def _rms(x: jax.Array) -> jax.Array:
    return jnp.sqrt(jnp.mean(jnp.square(x)))


def keras_adafactor(learning_rate: Any, beta_2_decay: float, epsilon_1: float,
                    epsilon_2: float, clip_threshold: float) -> optax.GradientTransformation:
    """Keras 3's Adafactor update ``-alpha_t * u_hat`` (the learning rate is inside).

    ``rho_t = min(lr, 1/sqrt(t))``, ``alpha_t = max(epsilon_2, rms(w)) * rho_t``,
    ``beta_2_t = 1 - t^beta_2_decay``. For variables of rank >= 2 the second moment is
    factored over the last two axes (``r``: mean over the last axis, ``c``: over the
    second last) and ``v = r / mean(r) x c``; otherwise ``v`` is a moving average of
    ``g^2 + epsilon_1``. ``u = g / sqrt(v)`` is clipped to ``rms(u) <= clip_threshold``.
    As ``keras.optimizers.Adafactor``, whose ``relative_step`` adds nothing to this:
    Keras takes ``min(lr, 1/sqrt(t))`` for ``rho_t`` either way.

    Args:
        learning_rate: float32 scalar (may be traced).
        beta_2_decay: exponent of the second-moment decay schedule.
        epsilon_1: added to ``g^2``.
        epsilon_2: lower bound of the parameter scale ``rms(w)``.
        clip_threshold: bound on the RMS of the unscaled update.

    Returns:
        An ``optax.GradientTransformation`` with state `KerasAdafactorState`; its update
        needs ``params``.
    """

    def init(params):
        def rows(p):
            return jnp.zeros(p.shape[:-1] if p.ndim >= 2 else (), p.dtype)

        def columns(p):
            return jnp.zeros(p.shape[:-2] + p.shape[-1:] if p.ndim >= 2 else (), p.dtype)

        return KerasAdafactorState(count=jnp.zeros([], jnp.int32),
                                   r=jax.tree.map(rows, params),
                                   c=jax.tree.map(columns, params),
                                   v=optax.tree.zeros_like(params))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS)
        count, t = _step_number(state.count)
        rho = jnp.minimum(learning_rate, 1.0 / jnp.sqrt(t))
        beta = 1.0 - t ** beta_2_decay

        def one(g, w, r, c, v):
            alpha = jnp.maximum(epsilon_2, _rms(w)) * rho
            g2 = jnp.square(g) + epsilon_1
            if w.ndim >= 2:
                r = beta * r + (1.0 - beta) * jnp.mean(g2, axis=-1)
                c = beta * c + (1.0 - beta) * jnp.mean(g2, axis=-2)
                v = (r / jnp.mean(r, axis=-1, keepdims=True))[..., None] * c[..., None, :]
            else:
                v = beta * v + (1.0 - beta) * g2
            u = g / jnp.sqrt(v)
            u_hat = u / jnp.maximum(1.0, _rms(u) / clip_threshold)
            return -alpha * u_hat, r, c, v

        new_updates, r, c, v = _map_leaves(one, updates, params, state.r, state.c, state.v)
        return new_updates, KerasAdafactorState(count, r, c, v)

    return optax.GradientTransformation(init, update)


class KerasFtrlState(NamedTuple):
    """State of `keras_ftrl`."""

    accumulator: Any  # params-shaped sum of squared gradients (starts at initial value)
    linear: Any  # params-shaped FTRL linear term


def keras_ftrl(learning_rate: Any, learning_rate_power: float, initial_accumulator_value: float,
               l1: float, l2: float, l2_shrinkage: float, beta: float
               ) -> optax.GradientTransformation:
    """Keras 3's FTRL-Proximal update (the learning rate is inside).

    With ``n' = n + g^2``, ``p = -learning_rate_power``:
    ``z += (g + 2 l2_shrinkage w) - (n'^p - n^p) / lr * w``,
    ``w_new = (clip(z, -l1, l1) - z) / (n'^p / lr + 2 (l2 + beta / (2 lr)))``,
    as ``keras.optimizers.Ftrl``. The returned update is ``w_new - w``.

    Args:
        learning_rate: float32 scalar (may be traced).
        learning_rate_power: ``<= 0``; ``-0.5`` is Adagrad-like.
        initial_accumulator_value: starting value of ``n``, ``>= 0``.
        l1: L1 regularization strength, ``>= 0``.
        l2: L2 regularization strength, ``>= 0``.
        l2_shrinkage: L2 shrinkage regularization strength, ``>= 0``.
        beta: Keras' ``beta``, added to L2 as ``beta / (2 lr)``.

    Returns:
        An ``optax.GradientTransformation`` with state `KerasFtrlState`; its update needs
        ``params``.
    """

    def init(params):
        return KerasFtrlState(
            accumulator=optax.tree.full_like(params, initial_accumulator_value),
            linear=optax.tree.zeros_like(params))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS)
        power = -learning_rate_power
        l2_total = l2 + beta / (2.0 * learning_rate)

        def one(g, w, n, z):
            n_new = n + jnp.square(g)
            z = z + (g + 2.0 * l2_shrinkage * w) - (n_new ** power - n ** power) / learning_rate * w
            quadratic = n_new ** power / learning_rate + 2.0 * l2_total
            w_new = (jnp.clip(z, -l1, l1) - z) / quadratic
            return w_new - w, n_new, z

        new_updates, accumulator, linear = _map_leaves(one, updates, params, state.accumulator,
                                                       state.linear)
        return new_updates, KerasFtrlState(accumulator, linear)

    return optax.GradientTransformation(init, update)
