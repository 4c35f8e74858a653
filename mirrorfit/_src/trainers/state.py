"""The training state: one immutable pytree that the steps take, donate and return.

Everything that changes during training lives here, so a step is a pure function
``(state, statistics, batch) -> (state, statistics)`` and a checkpoint is this one tree.
Every field is mirrored (``P()``) on all replicas.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np


class TrainState(NamedTuple):
    """Params, non-param collections, optimizer state, step counter, RNG key, and the other
    variables a model's own ``train_step`` updates."""

    params: Any  # pytree of float arrays, the Flax "params" collection, shapes per layer
    model_state: Any  # pytree: other collections (e.g. BatchNorm batch_stats), {} when none
    opt_state: Any  # optax state for ``params``
    step: jax.Array  # int32 [], train steps taken (with loss scaling, skipped ones count)
    rng: jax.Array  # uint32 [2], base PRNG key; each step folds in step and replica id
    # Values of the other `Variable` s the model's own train_step reads or assigns, nested
    # by their attribute path: the state of optimizer objects other than compile's (a GAN's
    # ``d_optimizer``: ``{"d_optimizer": {"iteration": int32 [], "slot": {"0": ...}}}``);
    # None for every other model. Found by the first trace (`Trainer.symbolic_build`).
    other_variables: Any = None


def create_state(params: Any, model_state: Any, opt_state: Any, seed: int) -> TrainState:
    """Host-side state with step 0 and the base key ``jax.random.PRNGKey(seed)``."""
    return TrainState(
        params=params,
        model_state=model_state,
        opt_state=opt_state,
        # NumPy on the host until the strategy replicates them (then jax.Array, as typed).
        step=np.zeros((), np.int32),  # pyright: ignore[reportArgumentType]
        rng=np.asarray(jax.random.PRNGKey(seed)),  # pyright: ignore[reportArgumentType]
    )


UNBUILT_MODEL = ("The model has no weights yet: pass input_shape to the constructor or call "
                 "fit/predict first. Received: an unbuilt model")


def require_state(state: TrainState | None) -> TrainState:
    """``state``, or a clear error for a model that has not created its params yet.

    Raises:
        ValueError: if ``state`` is ``None``.
    """
    if state is None:
        raise ValueError(UNBUILT_MODEL)
    return state


def step_rng(state: TrainState, replica_id: jax.Array | int) -> jax.Array:
    """The per-step, per-replica key: ``fold_in(fold_in(rng, step), replica_id)``.

    Deterministic in (seed, step, replica), so a run resumed at any step draws the same
    dropout masks, and each replica draws its own.
    """
    return jax.random.fold_in(jax.random.fold_in(state.rng, state.step), replica_id)
