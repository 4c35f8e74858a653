"""`Model`'s extension hooks, as Keras 3: ``compute_loss``, ``train_step``, ``test_step``,
``predict_step`` (the metrics they update: `mirrorfit._src.trainers.model_metrics`).

A `Model` subclass overrides one of them and ``fit``/``evaluate``/``predict`` run it inside
their compiled per-replica step, so the all-reduce, padding masks, the one compile,
callbacks and step-exact resume all stay. The hooks run **per replica**, traced, on this
replica's shard of the global batch, with `mirrorfit.get_replica_context` giving the
collectives (its ``mask`` marks the real rows). Each hook has these forms, told apart by
its signature (`keras_steps.hook_form`):

* **Keras 3's**, on objects: ``train_step(self, data)``, ``test_step(self, data)``,
  ``predict_step(self, data)``, returning logs (outputs for ``predict_step``); see
  `mirrorfit._src.trainers.keras_steps`. The one line that differs from a tf.keras
  ``train_step`` is the gradient: ``loss, grads = mf.value_and_grad(fn,
  self.trainable_variables)()`` instead of ``tf.GradientTape``.
* **Keras 3's stateless JAX ones**: ``train_step(self, state, data) -> (logs, state)`` and
  ``test_step(self, state, data)`` on tuples of values (with
  `ModelHooks.stateless_compute_loss`); see `mirrorfit._src.trainers.jax_steps`.
* **mirrorfit's pure ones**, on the `TrainState`: ``train_step(state, batch) -> (state,
  logs)`` replaces the whole update and must all-reduce its gradients itself
  (`mirrorfit.apply_gradients` does it before an optax update); ``logs`` maps names to
  float scalars, and fit shows, per epoch, their mean over real rows.
  ``test_step(state, batch) -> logs`` likewise for ``evaluate`` and validation.

``compute_loss(x, y, y_pred, sample_weight, training)`` returns this replica's loss as a
float32 scalar: the mean over a per-replica batch of ``global real rows / num_replicas``
plus the forward pass's losses (`ModelHooks.losses`). The gradient is averaged over
replicas (``pmean``), so a term that is the same on every replica (an L2 penalty of the
weights) counts once, and the global loss equals the single-device loss. An override
written with Keras 3.0's ``allow_empty=False`` in place of ``training`` works too.

`HookedSteps` is the `StepFamily` of such a model; `step_family_for` chooses a model's
family once, at ``compile``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.distribute.mesh import BATCH_AXIS, DeviceMesh
from mirrorfit._src.distribute.replica_context import (
    compute_average_loss,
    get_replica_context,
)
from mirrorfit._src.distribute.run import compile_per_replica, specs_like
from mirrorfit._src.distribute.values import ReduceOp
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.modules.sown_losses import loss_values
from mirrorfit._src.optimizers.update import apply_update
from mirrorfit._src.trainers import jax_steps, keras_steps
from mirrorfit._src.trainers import statistics as stats_lib
from mirrorfit._src.trainers.keras_steps import JAX, KERAS, PURE, hook_form, masked_context
from mirrorfit._src.trainers.object_step import ObjectStep
from mirrorfit._src.trainers.state import TrainState, step_rng
from mirrorfit._src.trainers.step_family import (
    StepConfig,
    StepFamily,
    mean_non_param_collections,
    non_finite_updates,
)
from mirrorfit._src.trainers.steps import BUILTIN
from mirrorfit._src.variables.autodiff import value_and_grad

_HOOKS = ("compute_loss", "train_step", "test_step")


class ModelHooks:
    """The hooks' default implementations; mixed into `mirrorfit.Model`."""

    _sown: list[Any] | None = None  # values sown into "losses" by the newest forward pass
    _traced_params: Any = None  # the params being differentiated, inside compute_loss
    # Read here, owned by `Model` (the Trainer typed Any: the step family does not import
    # the loops, which build on it):
    _trainer: Any  # the Trainer: its config's loss (compute_loss) and optimizer (_update)
    trainer: Any  # the same Trainer, as the public property
    _adapter: ModuleAdapter  # the module's forward pass (_forward)
    strategy: DeviceMesh  # compiles the hooked statistics step (HookedSteps)
    __call__: Callable[..., Any]  # the forward pass (predict_step)

    @property
    def params(self) -> Any:
        """The Flax ``"params"`` pytree (mirrored ``jax.Array`` s).

        Inside a Flax-module model's ``compute_loss`` it is the params being differentiated
        (traced), as Keras' ``trainable_variables`` in a stateless scope, so a penalty of
        ``self.params`` there gets its gradient (a subclassed model's variables read the
        traced values there themselves).
        """
        if self._traced_params is not None:
            return self._traced_params
        return super().params  # type: ignore[misc]

    @property
    def losses(self) -> list[jax.Array]:
        """Scalars the module sowed into ``"losses"`` in the newest forward pass.

        Inside ``compute_loss`` these are the current step's (traced) values; outside, those
        of the newest ``model(x)``/``predict_on_batch`` call. ``[]`` when nothing was sown.
        """
        return list(self._sown or [])

    @contextlib.contextmanager
    def _forward_losses(self, losses: Any, params: Any = None) -> Iterator[None]:
        previous = self._sown, self._traced_params
        self._sown, self._traced_params = loss_values(losses), params
        try:
            yield
        finally:
            self._sown, self._traced_params = previous

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None,
                     sample_weight: jax.Array | None = None, training: bool = True
                     ) -> jax.Array:
        """This replica's loss (float32 scalar), as ``keras.Model.compute_loss``.

        The default: ``num_replicas * compute_average_loss(loss(y, y_pred), sample_weight)``
        (the weighted loss sum over global real rows per replica) plus ``sum(self.losses)``.

        Args:
            x: this replica's inputs ``[per_replica_batch, ...]``.
            y: targets ``[per_replica_batch, ...]``.
            y_pred: the module's outputs ``[per_replica_batch, ...]``.
            sample_weight: float32 ``[per_replica_batch]``, 0 on padding rows.
            training: ``True`` in fit, ``False`` in evaluate.

        Raises:
            ValueError: without a compiled loss, or without targets (``fit(x)`` with no
                ``y`` needs a ``compute_loss`` or ``train_step`` of your own).
        """
        del x, training
        if self._trainer.config.loss is None:
            raise ValueError("compute_loss needs the loss given to compile (or override "
                             "compute_loss, train_step and test_step). Received: loss=None")
        if y is None:
            raise ValueError("The default compute_loss compares y_pred with the targets: pass "
                             "y to fit/evaluate, or override compute_loss or train_step to "
                             "train without them. Received: y=None")
        context = get_replica_context()
        per_example = self._trainer.config.loss(y, y_pred)
        loss = context.num_replicas_in_sync * compute_average_loss(per_example, sample_weight)
        return sum(self.losses, loss)

    def stateless_compute_loss(self, trainable_variables: Sequence[Any],
                               non_trainable_variables: Sequence[Any],
                               metrics_variables: Sequence[Any], x: Any = None, y: Any = None,
                               y_pred: Any = None, sample_weight: jax.Array | None = None,
                               training: bool = True) -> tuple[jax.Array, tuple[list, ...]]:
        """`compute_loss` as a pure function of the variables' values, as Keras 3's
        ``stateless_compute_loss`` (its JAX custom-step guide's loss).

        Args:
            trainable_variables: values of ``self.trainable_variables``, in order.
            non_trainable_variables: values of ``self.non_trainable_variables``, in order.
            metrics_variables: values of ``self.metrics_variables``, in order.
            x, y, y_pred, sample_weight, training: `compute_loss` 's arguments.

        Returns:
            ``(loss, (trainable_variables, non_trainable_variables, metrics_variables))``:
            the values after `compute_loss` (assignments it made are returned, none is
            stored).

        Raises:
            ValueError: if a list of values does not match its variables in number.
        """
        return jax_steps.stateless_compute_loss(
            self, (trainable_variables, non_trainable_variables, metrics_variables),
            lambda: keras_steps.call_compute_loss(self, x, y, y_pred, sample_weight, training))

    def train_step(self, *args: Any) -> Any:
        """One per-replica update, in either form (see the module docstring).

        ``train_step(data)`` (Keras 3's, what ``super().train_step(data)`` runs in a Keras
        override): ``self(x, training=True)``, `compute_loss`, the gradient of the
        trainable variables, ``self.optimizer.apply``, then `compute_metrics`; returns
        `get_metrics_result`.

        ``train_step(state, batch)`` (mirrorfit's pure one): forward, `compute_loss`,
        gradient all-reduce, optax update; returns ``(new_state, logs)``.

        Args:
            *args: ``data`` (``x``, ``(x, y)`` or ``(x, y, sample_weight)``, this
                replica's rows), or ``state`` (the mirrored `TrainState`) and ``batch``
                (this replica's shard: ``x``/``y`` ``[per_replica_batch, ...]``,
                ``sample_weight`` float32 ``[per_replica_batch]``, 0 on padding rows, and
                ``mask``, True for real rows).

        Returns:
            The logs (Keras form), or ``(new_state, logs)``; fit sets ``new_state.step``
            to ``state.step + 1``.
        """
        if len(args) == 1:
            return keras_steps.default_train_step(self, args[0])
        state, batch = args
        new_state, loss, _ = _update(self, state, batch)
        return new_state, {"loss": get_replica_context().all_reduce(ReduceOp.MEAN, loss)}

    def test_step(self, *args: Any) -> dict[str, Any]:
        """Per-replica evaluation logs: ``test_step(data)`` (Keras 3's: forward,
        `compute_loss`, `compute_metrics`) or ``test_step(state, batch)`` (mirrorfit's:
        ``{"loss": ...}``); see `train_step`."""
        if len(args) == 1:
            return keras_steps.default_test_step(self, args[0])
        state, batch = args
        _, loss, _ = _forward_step(self, state, batch, False)
        return {"loss": get_replica_context().all_reduce(ReduceOp.MEAN, loss)}

    def predict_step(self, data: Any) -> Any:
        """This replica's outputs for ``data`` (``x`` or ``(x,)``), as Keras 3's
        ``predict_step``: ``self(x, training=False)``; override it to change what
        ``predict`` returns (rows ``[per_replica_batch, ...]``, padding dropped after)."""
        x, _, _ = keras_steps.unpack_x_y_sample_weight(data)
        return self(x, training=False)


def overridden(model: Any, name: str) -> bool:
    """Whether ``type(model)`` overrides hook ``name`` of `ModelHooks`."""
    return getattr(type(model), name) is not getattr(ModelHooks, name)


def step_family_for(model: Any) -> StepFamily:
    """The steps ``model`` runs: `BUILTIN`, or `HookedSteps` when it overrides a hook.

    ``compile`` calls it once and keeps the answer in `StepConfig.family`.

    Raises:
        TypeError: for ``predict_step`` in Keras 3's stateless JAX form
            (`keras_steps.hook_form`).
    """
    for name in ("train_step", "test_step", "predict_step"):
        hook_form(model, name, ModelHooks)  # refuses a JAX-form predict_step at compile
    if any(overridden(model, name) for name in _HOOKS):
        return HookedSteps(model)
    return BUILTIN


class HookedSteps(StepFamily):
    """The steps of a `Model` subclass that overrides ``compute_loss``, ``train_step`` or
    ``test_step``: each runs the model's hooks inside a replica context that carries the
    step's padding mask.

    A Keras-form ``train_step(self, data)``/``test_step(self, data)`` runs through
    `mirrorfit._src.trainers.keras_steps` (its logs and metric trackers are its
    statistics); a pure one, or the default update around ``compute_loss``, here. A
    subclassed model's default update runs on its objects (`ObjectStep`), so
    ``compute_loss`` may call the model's layers and models (a distiller's teacher).

    Args:
        model: the `Model` whose hooks the steps call (traced, per replica).
    """

    runs_objects = True

    def __init__(self, model: Any):
        self._model = model
        self._forms = {"train": hook_form(model, "train_step", ModelHooks),
                       "eval": hook_form(model, "test_step", ModelHooks)}
        self._keras = keras_steps.KerasHooks(model, self._forms)

    def _local(self, cfg: StepConfig, state: TrainState, batch: Batch, kind: str):
        with masked_context(batch.mask) as context:
            new_state, stats = _local_step(self._model, cfg, state, batch, kind,
                                           self._forms[kind] == PURE)
        if kind == "train" and cfg.check_numerics:
            stats[stats_lib.NON_FINITE] = non_finite_updates(context)
        return new_state, stats

    def train_step(self, cfg: StepConfig) -> Callable:
        """The per-replica train step ``(state, statistics, batch) -> (state, statistics)``.

        It runs the model's ``train_step`` (or the default update around its
        ``compute_loss``), sets ``step`` to ``state.step + 1`` and all-reduces the step's
        statistics.
        """
        if self._forms["train"] in (KERAS, JAX):
            return self._keras.train_step(cfg)

        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            new_state, stats = self._local(cfg, state, batch, "train")
            assert new_state is not None  # a train step returns its new state
            new_state = new_state._replace(step=state.step + 1, rng=state.rng)
            return new_state, statistics + lax.psum(stats_lib.flatten(stats)[0], BATCH_AXIS)
        return step

    def eval_step(self, cfg: StepConfig) -> Callable:
        """The per-replica evaluation step ``(state, statistics, batch) -> statistics``."""
        if self._forms["eval"] in (KERAS, JAX):
            return self._keras.eval_step(cfg)

        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            stats = self._local(cfg, state, batch, "eval")[1]
            return statistics + lax.psum(stats_lib.flatten(stats)[0], BATCH_AXIS)
        return step

    def statistics_shapes(self, cfg: StepConfig, state: TrainState, batch: Batch,
                          kind: str) -> Any:
        """The shapes of the hooked step's statistics, traced over the mesh (the hooks may
        use collectives): a Keras step's trackers and logs, a pure step's logs, else the
        compiled loss and metrics."""
        if self._forms[kind] in (KERAS, JAX):
            return self._keras.statistics_shapes(cfg, state, batch, kind)

        def per_replica(state, batch):
            return self._local(cfg, state, batch, kind)[1]
        batch_specs = jax.tree.map(lambda _: P(BATCH_AXIS), batch)
        strategy = self._model.strategy  # the state as placed: split leaves as blocks
        mapped = compile_per_replica(strategy, per_replica,
                                     (specs_like(strategy, (state,))[0], batch_specs), P())
        return jax.eval_shape(mapped, state, batch)

    def initial_statistics(self, cfg: StepConfig, layout: stats_lib.StatsLayout,
                           kind: str) -> np.ndarray:
        """A Keras step's first statistics (its trackers reset); zeros otherwise."""
        if self._forms[kind] in (KERAS, JAX):
            return self._keras.initial_statistics(layout)
        return super().initial_statistics(cfg, layout, kind)

    def results(self, cfg: StepConfig, stats: Any, kind: str) -> dict[str, Any]:
        """A Keras step's newest logs; a pure step's logs averaged over real rows; else the
        compiled loss and metrics."""
        if self._forms[kind] in (KERAS, JAX):
            return self._keras.results(stats, kind)
        if self._forms[kind] == PURE:
            return {name: s["total"] / max(float(s["count"]), 1.0) for name, s in stats.items()}
        return stats_lib.compiled_results(cfg, stats)


def _local_step(model, cfg, state: TrainState, batch: Batch, kind: str, custom: bool):
    """One hooked step on this replica: ``(new_state or None, local statistics)``.

    Statistics are not yet all-reduced. The default steps report the loss as
    ``loss * global_real_rows / num_replicas`` per replica (its sum is the global loss sum)
    next to the compiled metrics; custom steps report their logs (`_logs_statistics`).
    """
    count = jnp.sum(batch.mask, dtype=jnp.float32)
    batch = batch._replace(sample_weight=stats_lib.example_weights(batch) * batch.mask)
    if custom and kind == "train":
        new_state, logs = model.train_step(state, batch)
        if type(new_state) is not TrainState:
            raise TypeError("train_step must return (state, logs) with state a TrainState, "
                            "e.g. state._replace(params=..., opt_state=...). Received: state "
                            f"of type {type(new_state).__name__}")
        return new_state, _logs_statistics(logs, count)
    if custom:
        return None, _logs_statistics(model.test_step(state, batch), count)
    new_state, loss, y_pred = _forward_step(model, state, batch, kind == "train")
    # Never a filler (no real rows, a 0/0 loss): `multi_train_step` runs none.
    share = loss * lax.psum(count, BATCH_AXIS) / get_replica_context().num_replicas_in_sync
    return new_state, stats_lib.compiled_statistics(
        cfg, batch.y, y_pred, jnp.zeros_like(batch.sample_weight), batch, share)


def _logs_statistics(logs: Any, count: jax.Array) -> dict:
    """``{name: {"total": value * count, "count": count}}`` for scalar logs."""
    if not isinstance(logs, dict):
        raise TypeError("train_step/test_step must return logs as a dict of float scalars, "
                        f"e.g. {{'loss': loss}}. Received: logs={logs!r}")
    stats = {}
    for name, value in logs.items():
        value = jnp.asarray(value, jnp.float32)
        if value.ndim != 0:
            raise ValueError(f"Each log of train_step/test_step must be a scalar. Received: "
                             f"logs[{name!r}] with shape {value.shape}")
        stats[name] = {"total": jnp.where(count > 0, value * count, 0.0), "count": count}
    return stats


def _forward_step(model, state: TrainState, batch: Batch, training: bool):
    """The default hooks on one replica's ``batch``: ``(new state or None, loss, y_pred)``.

    Training runs forward, `compute_loss`, the gradient ``pmean`` and one optax update.
    """
    if model.is_subclassed:
        return _object_step(model, state, batch, training)
    if not training:
        loss, (y_pred, _) = _forward(model, state.params, state, batch, False)
        return None, loss, y_pred
    return _update(model, state, batch)


def _object_step(model, state: TrainState, batch: Batch, training: bool):
    """`_forward_step` of a subclassed model, on its objects (`ObjectStep`): ``compute_loss``
    runs in the same scope as the forward pass, so it may call the model's layers."""
    step = ObjectStep(model, state, [], [], model.trainer.config.optimizer if training else None)
    rng = step_rng(state, get_replica_context().replica_id_in_sync_group)
    with step.running(rng):
        def forward():
            y_pred = model(batch.x, training=training)
            loss = keras_steps.call_compute_loss(model, batch.x, batch.y, y_pred,
                                                 batch.sample_weight, training)
            loss = jnp.asarray(loss, jnp.float32)
            return model.optimizer.scale_loss(loss), (loss, y_pred)

        if not training:
            _, (loss, y_pred) = forward()
            return None, loss, y_pred
        (_, (loss, y_pred)), grads = value_and_grad(forward, model.trainable_variables,
                                                    has_aux=True)()
        step.apply(grads, None)
    return step.new_state(), loss, y_pred


def _forward(model, params, state: TrainState, batch: Batch, training: bool):
    rng = step_rng(state, get_replica_context().replica_id_in_sync_group)
    y_pred, model_state, losses = model._adapter.apply_with_losses(
        params, state.model_state, batch.x, train=training, rng=rng)
    with model._forward_losses(losses, params):
        loss = keras_steps.call_compute_loss(model, batch.x, batch.y, y_pred,
                                             batch.sample_weight, training)
    return jnp.asarray(loss, jnp.float32), (y_pred, model_state)


def _update(model, state: TrainState, batch: Batch):
    """Forward, `compute_loss`, gradient ``pmean`` and one optax update: the default step."""
    (loss, (y_pred, model_state)), grads = jax.value_and_grad(
        lambda params: _forward(model, params, state, batch, True), has_aux=True)(state.params)
    config = model.trainer.config
    applied = apply_update(config.optimizer, grads, state.opt_state, state.params,
                           reduce_op=ReduceOp.MEAN, constrain=config.constrain)
    new_state = state._replace(params=applied.params, opt_state=applied.opt_state,
                               model_state=mean_non_param_collections(model_state))
    return new_state, loss, y_pred
