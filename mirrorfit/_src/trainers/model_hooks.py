"""`Model`'s extension hooks, as Keras 3: ``compute_loss``, ``train_step``, ``test_step``,
``predict_step``, and the metrics they update (``metrics``, ``compute_metrics``, ...).

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

`step_family_for` chooses a model's steps once, at ``compile``: the built-in ones, or
`mirrorfit._src.trainers.hooked_steps.HookedSteps`, which run its own hooks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax

from mirrorfit._src.distribute.mesh import DeviceMesh
from mirrorfit._src.distribute.replica_context import (
    compute_average_loss,
    get_replica_context,
)
from mirrorfit._src.distribute.values import ReduceOp
from mirrorfit._src.metrics.metric import Metric
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.modules.sown_losses import loss_values
from mirrorfit._src.trainers import hooked_steps, jax_steps, keras_steps
from mirrorfit._src.trainers.hooked_steps import HookedSteps
from mirrorfit._src.trainers.keras_steps import hook_form
from mirrorfit._src.trainers.step_family import (
    StepFamily,
)
from mirrorfit._src.trainers.steps import BUILTIN

_HOOKS = ("compute_loss", "train_step", "test_step")


class ModelHooks:
    """The hooks' default implementations; mixed into `mirrorfit.Model`."""

    _sown: list[Any] | None = None  # values sown into "losses" by the newest forward pass
    _traced_params: Any = None  # the params being differentiated, inside compute_loss
    # Read here, owned by `Model` (the Trainer typed Any: the step family does not import
    # the loops, which build on it):
    _trainer: Any  # the Trainer: its config's loss (compute_loss), optimizer and metrics
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
        new_state, loss, _ = hooked_steps.update(self, state, batch)
        return new_state, {"loss": get_replica_context().all_reduce(ReduceOp.MEAN, loss)}

    def test_step(self, *args: Any) -> dict[str, Any]:
        """Per-replica evaluation logs: ``test_step(data)`` (Keras 3's: forward,
        `compute_loss`, `compute_metrics`) or ``test_step(state, batch)`` (mirrorfit's:
        ``{"loss": ...}``); see `train_step`."""
        if len(args) == 1:
            return keras_steps.default_test_step(self, args[0])
        state, batch = args
        _, loss, _ = hooked_steps.forward_step(self, state, batch, False)
        return {"loss": get_replica_context().all_reduce(ReduceOp.MEAN, loss)}

    def predict_step(self, data: Any) -> Any:
        """This replica's outputs for ``data`` (``x`` or ``(x,)``), as Keras 3's
        ``predict_step``: ``self(x, training=False)``; override it to change what
        ``predict`` returns (rows ``[per_replica_batch, ...]``, padding dropped after)."""
        x, _, _ = keras_steps.unpack_x_y_sample_weight(data)
        return self(x, training=False)

    # -- the metrics a Keras-form step updates, as Keras 3's Trainer lists them -----------

    # Keras' loss tracker (a Mean named "loss"), created by compile; ``_mf``: not one of the
    # attributes whose variables are the model's.
    _mf_loss_tracker: Metric | None = None

    @property
    def metrics(self) -> list[Metric]:
        """The metrics a Keras-form step updates, as ``keras.Model.metrics``: once compiled,
        the loss tracker (a `mirrorfit.metrics.Mean` named ``"loss"``) and the compiled
        metrics; then the `Metric` s held in the model's attributes. ``fit`` resets them
        at each epoch's start, ``evaluate`` at its start (`reset_metrics`)."""
        found: list[Metric] = []
        config = self._trainer.config
        if config is not None:
            if self._mf_loss_tracker is not None:
                found.append(self._mf_loss_tracker)
            found += [m for m in (*config.metrics, *config.weighted_metrics)
                      if isinstance(m, Metric)]
        found += [m for m in keras_steps.attribute_metrics(self)
                  if all(m is not f for f in found)]
        return found

    @property
    def metrics_names(self) -> list[str]:
        """The names of `metrics`, in order."""
        return [m.name for m in self.metrics]

    @property
    def metrics_variables(self) -> list[Any]:
        """The variables of `metrics`, in order (not the model's weights)."""
        return [v for m in self.metrics for v in getattr(m, "variables", [])]

    def reset_metrics(self) -> None:
        """Resets every metric of `metrics` (``reset_state``)."""
        for metric in self.metrics:
            metric.reset_state()

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None
                        ) -> dict[str, Any]:
        """Updates the compiled metrics (``weighted_metrics`` with ``sample_weight``) and
        returns `get_metrics_result`, as Keras 3's ``compute_metrics``."""
        del x
        config = self._trainer.config
        if config is not None:
            for metric in config.metrics:
                if isinstance(metric, Metric):
                    metric.update_state(y, y_pred)
            for metric in config.weighted_metrics:
                if isinstance(metric, Metric):
                    metric.update_state(y, y_pred, sample_weight)
        return self.get_metrics_result()

    def get_metrics_result(self) -> dict[str, Any]:
        """``{name: result()}`` of `metrics`; a result that is a dict is merged in."""
        found: dict[str, Any] = {}
        for metric in self.metrics:
            result = metric.result()
            if isinstance(result, dict):
                found.update(result)
            else:
                found[metric.name] = result
        return found


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
        return HookedSteps(model, ModelHooks)
    return BUILTIN
