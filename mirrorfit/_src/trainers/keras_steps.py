"""Keras 3's ``train_step(self, data)``, ``test_step(self, data)`` and
``predict_step(self, data)`` inside ``fit``/``evaluate``/``predict``'s compiled steps.

A `Model` subclass writes its step as in Keras 3, on objects: ``x, y = data``,
``self(x, training=True)``, ``self.compute_loss(...)``, the one gradient line
``loss, grads = mf.value_and_grad(fn, self.trainable_variables)()``, ``self.optimizer.apply
(grads)``, metric trackers' ``update_state``/``result``, and returns a dict of logs. Which
form a hook has is read from its signature (`hook_form`): one argument (``data``) is Keras
3's; ``state, data`` is Keras 3's stateless JAX form (`mirrorfit._src.trainers.jax_steps`,
run in the same step, its returned values written into the step's variables); ``state,
batch`` is mirrorfit's pure hook (`mirrorfit._src.trainers.model_hooks`).

The hook runs per replica, traced, inside the step's `ObjectStep`
(`mirrorfit._src.trainers.object_step`), so one compile per ``fit``, the all-reduce, padding
masks, callbacks, ``steps_per_execution`` and step-exact resume stay. Its statistics are
``{"logs": ..., "trackers": [...]}`` (flattened in key order: the trackers are the vector's
tail):

* the **trackers** are the variables of ``model.metrics`` and of the model's `Metric`
  attributes: the step reads and writes them there, so they persist across the steps of an
  epoch (and a resumed run restores them) and are reset at its start (Keras'
  ``reset_metrics``), yet are no weights of the model; reading the logs writes their values
  back into the variables, so ``tracker.result()`` after ``fit`` is the last one logged;
* the **logs** are the returned dict averaged over the replicas (a tracker's ``result()`` is
  the same on every replica, and the default ``compute_loss``'s per-replica shares average
  to the global batch's loss), replaced at every step: as Keras, an epoch logs its last
  step's values, the trackers' running results.

``data`` is ``x`` when ``fit`` got no targets, ``(x, y)``, or ``(x, y, sample_weight)`` when
it got sample or class weights, as Keras 3 packs it. This replica's rows include the padding
of a global batch that does not divide by the replica count: the loss helpers
(``self.compute_loss``, `mirrorfit.compute_average_loss`) and metric updates leave padding
rows out (the replica context's mask); a plain ``jnp.mean`` over the batch counts them.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.distribute.replica_context import (
    ReplicaContext,
    get_replica_context,
    replica_context,
)
from mirrorfit._src.distribute.run import compile_per_replica, specs_like
from mirrorfit._src.distribute.values import ReduceOp
from mirrorfit._src.metrics.metric import Metric
from mirrorfit._src.trainers import statistics as stats_lib
from mirrorfit._src.trainers.jax_steps import run_jax_hook
from mirrorfit._src.trainers.object_step import ObjectStep, current_step
from mirrorfit._src.trainers.state import TrainState, step_rng
from mirrorfit._src.trainers.step_family import StepConfig, non_finite_updates
from mirrorfit._src.variables.autodiff import value_and_grad
from mirrorfit._src.variables.variable import Variable

KERAS, JAX, PURE = "keras", "jax", "pure"
KERAS_JAX_PREDICT = (
    "predict_step(self, state, data) is Keras 3's stateless JAX form; mirrorfit runs "
    "train_step and test_step in it, predict_step in the object form: rename it to "
    "`def predict_step(self, data):` and return the outputs, e.g. "
    "`x, _, _ = mf.utils.unpack_x_y_sample_weight(data); return self(x, training=False)`. "
    "Received: predict_step{signature}")


def hook_form(model: Any, name: str, base: Any) -> str | None:
    """Which form ``type(model)`` overrides hook ``name`` in: `KERAS` (``(self, data)``),
    `JAX` (Keras 3's stateless ``(self, state, data)``, `mirrorfit._src.trainers.jax_steps`),
    `PURE` (mirrorfit's ``(self, state, batch)``), or ``None`` (not overridden: ``base`` 's).

    Raises:
        TypeError: for ``predict_step(self, state, data)`` (see `KERAS_JAX_PREDICT`: rename
            it to the object form).
    """
    fn = getattr(type(model), name)
    if fn is getattr(base, name):
        return None
    signature = inspect.signature(fn)
    names = [p.name for p in signature.parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    if names[1:] == ["state", "data"]:
        if name == "predict_step":
            raise TypeError(KERAS_JAX_PREDICT.format(signature=signature))
        return JAX
    return KERAS if len(names) <= 2 else PURE


NO_LOSS = ("{name}.compute_loss returned None: it must return the loss, a float scalar "
           "(e.g. `return loss`, or `return super().compute_loss(x, y, y_pred, "
           "sample_weight)` plus your terms). Received: None")


def call_compute_loss(model: Any, x: Any, y: Any, y_pred: Any, sample_weight: Any,
                      training: bool) -> Any:
    """``model.compute_loss(...)``, with ``training`` only when the override takes it (Keras
    3 before 3.3 had ``allow_empty=False`` in its place, as Keras' ``_compute_loss``).

    Raises:
        TypeError: naming ``compute_loss``, when it returns ``None`` (a missing ``return``).
    """
    parameters = inspect.signature(model.compute_loss).parameters
    if "training" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        loss = model.compute_loss(x, y, y_pred, sample_weight, training=training)
    else:
        loss = model.compute_loss(x, y, y_pred, sample_weight)
    if loss is None:
        raise TypeError(NO_LOSS.format(name=type(model).__name__))
    return loss


def pack_data(batch: Batch, weighted: bool) -> Any:
    """``data`` for a Keras hook, as Keras 3's ``pack_x_y_sample_weight``: ``x`` (``(x,)``
    for nested inputs) without targets, ``(x, y)``, or ``(x, y, sample_weight)``."""
    if batch.y is None:
        return (batch.x,) if isinstance(batch.x, (tuple, list, dict)) else batch.x
    if weighted:
        return batch.x, batch.y, batch.sample_weight
    return batch.x, batch.y


def unpack_x_y_sample_weight(data: Any) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` of a ``train_step``'s ``data``, as
    ``keras.utils.unpack_x_y_sample_weight``.

    Args:
        data: ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)`` (a list works too).

    Returns:
        The three parts; the missing ones are ``None``.

    Raises:
        ValueError: for a tuple of more than three items.

    Example:
        >>> mf.utils.unpack_x_y_sample_weight((1.0, 2.0))
        (1.0, 2.0, None)
    """
    if isinstance(data, list):
        data = tuple(data)
    if not isinstance(data, tuple):
        return data, None, None
    if len(data) == 1:
        return data[0], None, None
    if len(data) == 2:
        return data[0], data[1], None
    if len(data) == 3:
        return data
    raise ValueError("data must be x, (x,), (x, y) or (x, y, sample_weight). Received: a "
                     f"tuple of {len(data)} items")


@contextlib.contextmanager
def masked_context(mask: jax.Array) -> Iterator[ReplicaContext]:
    """The replica context of a hooked step: the step's padding mask for the loss helpers
    and metric updates. An optimizer object's ``apply_gradients`` inside the step
    all-reduces with ``MEAN`` (its ``gradient_reduce_op``): a Keras-style step's loss is a
    per-replica mean, as ``model.optimizer.apply`` assumes."""
    with replica_context(get_replica_context().derived(
            mask=mask, in_run=True, gradient_reduce_op=ReduceOp.MEAN)) as context:
        yield context


# -- the trackers -----------------------------------------------------------------------

def tracker_metrics(model: Any) -> list[Metric]:
    """``model.metrics``, then the model's other `Metric` attributes (each once)."""
    found: list[Metric] = []
    for metric in [*model.metrics, *attribute_metrics(model)]:
        if isinstance(metric, Metric) and all(metric is not m for m in found):
            found.append(metric)
    return found


def attribute_metrics(model: Any) -> list[Metric]:
    """The `Metric` objects held in the model's attributes (also in lists and dicts)."""
    found = []
    stack = [value for name, value in vars(model).items() if not name.startswith("_mf")]
    while stack:
        value = stack.pop(0)
        if isinstance(value, Metric):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            stack[:0] = list(value)
        elif isinstance(value, dict):
            stack[:0] = list(value.values())
    return found


def tracker_variables(model: Any) -> list[Variable]:
    """The variables of `tracker_metrics`, in order: what a Keras step carries."""
    return [v for metric in tracker_metrics(model) for v in getattr(metric, "variables", [])]


# -- the steps ---------------------------------------------------------------------------



def _checked_logs(logs: Any, name: str) -> dict[str, jax.Array]:
    """A hook's returned logs as float32 arrays; a nested dict (a metric whose ``result()``
    is a dict) is merged in, as Keras' ``get_metrics_result``."""
    if not isinstance(logs, dict):
        raise TypeError(f"{name} must return its logs as a dict of metric values, e.g. "
                        f"{{'loss': self.loss_tracker.result()}}. Received: {logs!r}")
    flat: dict[str, jax.Array] = {}
    for key, value in logs.items():
        if isinstance(value, dict):
            flat.update(_checked_logs(value, name))
        else:
            flat[str(key)] = jnp.asarray(value, jnp.float32)
    return flat


def _split(statistics: jax.Array, trackers: list[Variable]) -> list[jax.Array]:
    """The trackers' values, the tail of ``statistics`` (their shapes, float32)."""
    values = []
    start = statistics.shape[0] - sum(int(np.prod(v.shape)) for v in trackers)
    for variable in trackers:
        size = int(np.prod(variable.shape))
        values.append(statistics[start:start + size].reshape(variable.shape))
        start += size
    return values


def predict_step(model: Any) -> Callable:
    """The per-replica prediction step ``(state, batch) -> outputs`` of a model whose
    ``predict_step(self, data)`` is Keras 3's (rows stay sharded)."""
    def step(state: TrainState, batch: Batch):
        objects = ObjectStep(model, state, [], [], None)
        with masked_context(batch.mask), objects.running(state.rng):
            return model.predict_step(pack_data(batch._replace(y=None), False))
    return step


class KerasHooks:
    """The train and evaluation steps of a model's Keras-form ``train_step(self, data)``
    and ``test_step(self, data)``, and how to read their statistics; see the module
    docstring. `mirrorfit._src.trainers.model_hooks.HookedSteps` uses it for the kinds
    whose hook is in Keras' form.

    Args:
        model: the `Model` whose hooks the steps call (traced, per replica).
        forms: the hooks' forms, ``{"train": ..., "eval": ...}`` (`hook_form`): `JAX`
            runs the stateless ``(self, state, data)`` hook (`jax_steps.run_jax_hook`),
            anything else the object form.
    """

    def __init__(self, model: Any, forms: dict[str, str | None] | None = None):
        self._model = model
        self._forms = dict(forms or {})
        self._log_order: dict[str, list[str]] = {}  # the logs' keys as the hook returned them

    def _run(self, cfg: StepConfig, state: TrainState, tracker_values: list[Any],
             batch: Batch, kind: str) -> tuple[TrainState, dict[str, Any]]:
        """One replica's hook (``train_step`` for ``kind="train"``, else ``test_step``) on
        ``batch``: the new state and the step's statistics ``{"logs", "trackers"}``.

        Logs are averaged over the replicas; tracker values are the same on every replica
        (`mirrorfit._src.trainers.object_step.StepScope`).
        """
        model = self._model
        weighted = batch.sample_weight is not None
        batch = batch._replace(sample_weight=stats_lib.example_weights(batch) * batch.mask)
        training = kind == "train"
        step = ObjectStep(model, state, tracker_variables(model), tracker_values,
                          cfg.optimizer if training else None,
                          tracker_source=lambda: tracker_variables(model))
        rng = step_rng(state, get_replica_context().replica_id_in_sync_group)
        name = "train_step" if training else "test_step"
        with masked_context(batch.mask) as context, step.running(rng):
            data = pack_data(batch, weighted)
            if self._forms.get(kind) == JAX:
                logs = run_jax_hook(model, step, data, training)
            else:
                logs = (model.train_step if training else model.test_step)(data)
            logs = _checked_logs(logs, name)
        self._log_order[kind] = list(logs)
        logs = lax.pmean(logs, BATCH_AXIS)  # one all-reduce for all of them
        stats = {"logs": logs, "trackers": step.tracker_values()}
        if training and cfg.check_numerics:
            stats[stats_lib.NON_FINITE] = non_finite_updates(context)
        return step.new_state(), stats

    def train_step(self, cfg: StepConfig) -> Callable:
        """The per-replica train step ``(state, statistics, batch) -> (state, statistics)``;
        ``step`` grows by one."""
        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            values = _split(statistics, tracker_variables(self._model))
            new_state, stats = self._run(cfg, state, values, batch, "train")
            new_state = new_state._replace(step=state.step + 1, rng=state.rng)
            if cfg.check_numerics:  # the epoch's count goes on (the rest is replaced)
                stats[stats_lib.NON_FINITE] = stats[stats_lib.NON_FINITE] + statistics[
                    stats_lib.flat_offset(stats, stats_lib.NON_FINITE)]
            return new_state, stats_lib.flatten(stats)[0]
        return step

    def eval_step(self, cfg: StepConfig) -> Callable:
        """The per-replica evaluation step ``(state, statistics, batch) -> statistics`` (the
        state is not changed)."""
        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            values = _split(statistics, tracker_variables(self._model))
            return stats_lib.flatten(self._run(cfg, state, values, batch, "eval")[1])[0]
        return step

    def statistics_shapes(self, cfg: StepConfig, state: TrainState, batch: Batch,
                          kind: str) -> Any:
        """The shapes of the statistics ``{"logs", "trackers"}``, traced over the mesh (the
        hook may use collectives). A tracker whose variables the first trace created (a
        metric that builds them on its first ``update_state``) is found by tracing again."""
        def shapes():
            trackers = tracker_variables(self._model)

            def per_replica(state, batch):
                values = [jnp.zeros(v.shape, jnp.float32) for v in trackers]
                return self._run(cfg, state, values, batch, kind)[1]
            batch_specs = jax.tree.map(lambda _: P(BATCH_AXIS), batch)
            strategy = self._model.strategy  # the state as placed: split leaves as blocks
            mapped = compile_per_replica(strategy, per_replica,
                                         (specs_like(strategy, (state,))[0], batch_specs), P())
            return trackers, jax.eval_shape(mapped, state, batch)

        before, found = shapes()
        if [id(v) for v in before] != [id(v) for v in tracker_variables(self._model)]:
            before, found = shapes()
        return found

    def initial_statistics(self, layout: stats_lib.StatsLayout) -> np.ndarray:
        """The statistics an epoch (or ``evaluate``) starts from: ``model.metrics`` reset
        (as Keras' ``reset_metrics``), zero logs, the trackers' values."""
        self._model.reset_metrics()
        trackers = [np.ravel(v.numpy()).astype(np.float32)
                    for v in tracker_variables(self._model)]
        logs = layout.size - sum(t.size for t in trackers)
        return np.concatenate([np.zeros(logs, np.float32), *trackers])

    def results(self, stats: dict[str, Any], kind: str) -> dict[str, Any]:
        """The logs of unflattened host statistics, in the order the hook returned them;
        the trackers' values are written back into their variables."""
        for variable, value in zip(tracker_variables(self._model), stats["trackers"]):
            variable.assign(np.asarray(value, variable.dtype))
        logs = stats["logs"]
        return {name: logs[name] for name in self._log_order.get(kind, sorted(logs))}


# -- Keras 3's default hooks, on objects ------------------------------------------------

def default_train_step(model: Any, data: Any) -> dict[str, Any]:
    """Keras 3's ``Model.train_step(data)``: forward, ``compute_loss``, gradient, update,
    ``compute_metrics`` (what ``super().train_step(data)`` runs in a Keras-form override).

    Raises:
        RuntimeError: outside ``fit``'s step.
    """
    _require_step("train_step(data)")
    x, y, sample_weight = unpack_x_y_sample_weight(data)

    def forward():
        y_pred = model(x, training=True)
        loss = call_compute_loss(model, x, y, y_pred, sample_weight, training=True)
        loss = jnp.asarray(loss, jnp.float32)
        return model.optimizer.scale_loss(loss), (loss, y_pred)

    (_, (loss, y_pred)), grads = value_and_grad(forward, model.trainable_variables,
                                                has_aux=True)()
    model.optimizer.apply(grads)
    return _update_metrics(model, loss, x, y, y_pred, sample_weight)


def default_test_step(model: Any, data: Any) -> dict[str, Any]:
    """Keras 3's ``Model.test_step(data)``: forward, ``compute_loss``, ``compute_metrics``.

    Raises:
        RuntimeError: outside ``evaluate``'s step.
    """
    _require_step("test_step(data)")
    x, y, sample_weight = unpack_x_y_sample_weight(data)
    y_pred = model(x, training=False)
    loss = call_compute_loss(model, x, y, y_pred, sample_weight, training=False)
    return _update_metrics(model, jnp.asarray(loss, jnp.float32), x, y, y_pred, sample_weight)


def _update_metrics(model: Any, loss: Any, x: Any, y: Any, y_pred: Any,
                    sample_weight: Any) -> dict[str, Any]:
    tracker = model._mf_loss_tracker
    if tracker is not None:
        # The loss is this replica's share of the global mean (`compute_average_loss`):
        # weighted by the global rows per replica, the tracker's mean is the global one.
        context = get_replica_context()
        assert context.mask is not None  # a hooked step's context holds its mask
        rows = lax.psum(jnp.sum(context.mask, dtype=jnp.float32), BATCH_AXIS)
        tracker.update_state(loss, sample_weight=rows / context.num_replicas_in_sync)
    return model.compute_metrics(x, y, y_pred, sample_weight)


def _require_step(hook: str) -> None:
    if current_step() is None:
        raise RuntimeError(f"super().{hook} runs inside fit/evaluate's compiled step, from "
                           f"your {hook.split('(')[0]} override. Received: a call outside it")
