"""One compiled step as Keras objects see it: `ObjectStep`.

Keras 3's JAX trainer runs a ``train_step(self, data)`` written on stateful objects inside a
pure function: it maps every variable to its traced value in a stateless scope, calls the
user's Python, and reads the new values back out of the scope. `ObjectStep` does that inside
``fit``'s per-replica step (`mirrorfit._src.trainers.keras_steps`):

* the model's variables (a subclass's `Variable` s, or a Flax-module model's
  `StateVariable` views) read the step's ``params``/``model_state`` leaves, and the metric
  trackers' variables read the values the step carries in its statistics;
* the call context holds the step's random key (per step and replica, as the built-in
  steps), not a training flag: ``self(x, training=True)`` says it, as in Keras;
* ``model.optimizer.apply(grads)`` reaches the step through `current_step`: it all-reduces
  the gradients (``MEAN``: a Keras-style loss is a per-replica mean) and runs the compiled
  optax update on the step's optimizer state;
* an assignment is combined across replicas at once by the variable's ``aggregation``
  (`StepScope`), so a tracker's ``result()`` read later in the same step is the global one
  on every replica, as a ``tf.distribute`` metric's.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util

from mirrorfit._src.distribute.replica_context import get_replica_context
from mirrorfit._src.distribute.run import aggregate
from mirrorfit._src.modules.objects import NON_TRAINABLE
from mirrorfit._src.optimizers.update import apply_update
from mirrorfit._src.trainers.state import TrainState
from mirrorfit._src.variables import call_context, stateless_scope, tracking
from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable

_LOCAL = threading.local()

OUTSIDE_STEP = (
    "model.optimizer.{method} updates the model inside fit's compiled step (a train_step "
    "override). In a custom loop, use an mf.optimizers optimizer object: "
    "`optimizer.apply_gradients(zip(grads, model.trainable_variables))`. Received: a call "
    "outside fit")


class Ref(NamedTuple):
    """Where one model variable's value lives in the `TrainState`."""

    variable: Variable
    field: str  # "params" or "model_state"
    key: tuple[str, ...]  # the leaf's path in that tree


def model_refs(model: Any, state: TrainState) -> list[Ref]:
    """Every variable of ``model`` with the state leaf that holds its value.

    A subclassed model's trainable variables are its ``params`` by attribute path, the
    others ``model_state["non_trainable"]`` (`mirrorfit._src.modules.objects`); a
    Flax-module model's are its `StateVariable` views. Variables the state lacks (created
    after it was built) are left out.
    """
    if model.is_subclassed:
        found = [(v, "params", path) if v.trainable else (v, "model_state", (NON_TRAINABLE, *path))
                 for path, v in tracking.walk(model)]
    else:
        found = [(v, v._mf_field, v._mf_key) for v in model.variables]
    flat = {field: traverse_util.flatten_dict(getattr(state, field) or {})
            for field in ("params", "model_state")}
    return [Ref(v, field, key) for v, field, key in found if key in flat[field]]


def _leaf(tree: Any, key: tuple[str, ...]) -> Any:
    for part in key:
        tree = tree[part]
    return tree


def _with_leaves(tree: Any, leaves: dict[tuple[str, ...], Any]) -> Any:
    """``tree`` (nested dicts) with the leaves at the given paths replaced; its structure,
    empty collections included, is kept (the step's carry must not change)."""
    if not leaves:
        return tree
    flat = traverse_util.flatten_dict(tree, keep_empty_nodes=True)
    flat.update(leaves)
    return traverse_util.unflatten_dict(flat)


class StepScope(StatelessScope):
    """A `StatelessScope` whose assignments are combined across replicas as they happen
    (`aggregate`), so every replica reads the same value afterwards; those made within
    `stateless_scope.agreed_assignments` (an optimizer's ``iterations``) are already.

    Only valid inside a per-replica function over the mesh's ``"batch"`` axis.
    """

    def get_current_value(self, variable: Any) -> Any:
        found = super().get_current_value(variable)
        if found is None and self._touched is not None and not getattr(
                variable, "_mf_not_carried", False):
            # `discovering`: a variable not carried yet is read as a host constant, which
            # mixes with the per-replica trace as its carried value will (a placed array's
            # sharding would not, inside ``shard_map``).
            return np.asarray(variable._value)
        return found

    def add_update(self, variable: Any, value: Any) -> None:
        if variable.aggregation != "none" and not stateless_scope.assignments_agreed():
            old = self.get_current_value(variable)
            value = aggregate(variable, variable.value if old is None else old, value)
        super().add_update(variable, value)


@contextlib.contextmanager
def discovering() -> Iterator[list[Variable]]:
    """Within the block, a traced `ObjectStep` lists the variables it reads or assigns but
    does not carry (in the yielded list, each once) instead of refusing them: the first,
    shape-only trace of a model's own ``train_step`` (`Trainer.symbolic_build`) finds the
    variables ``fit`` must carry in `TrainState.other_variables`, as Keras' symbolic build
    finds what to build."""
    previous = getattr(_LOCAL, "found", None)
    found: list[Variable] = []
    _LOCAL.found = found
    try:
        yield found
    finally:
        _LOCAL.found = previous


def current_step() -> ObjectStep | None:
    """The `ObjectStep` whose hook is being traced, or ``None`` outside one."""
    stack = getattr(_LOCAL, "steps", None)
    return stack[-1] if stack else None


class ObjectStep:
    """A model's variables, trackers and optimizer state inside one traced step.

    Args:
        model: the `mirrorfit.Model`.
        state: this step's (traced) `TrainState`.
        trackers: the metric variables the step carries (`keras_steps.tracker_variables`).
        tracker_values: their traced values, in order.
        optimizer: the compiled ``optax.GradientTransformation`` (``None`` in evaluation).
        tracker_source: lists the trackers anew (a metric may create its variables during
            the first trace); their assignments are not lost.
    """

    def __init__(self, model: Any, state: TrainState, trackers: Sequence[Variable],
                 tracker_values: Sequence[Any], optimizer: optax.GradientTransformation | None,
                 tracker_source: Callable[[], Sequence[Variable]] = list):
        self.model = model
        self.tracker_source = tracker_source
        self.refs = model_refs(model, state)
        self.trackers = list(trackers)
        self.opt_state: Any = state.opt_state  # the optax state, updated by `apply`
        self.step = state.step
        # model.optimizer.iterations inside the step: updates made before this one
        # (`step`), one more after `apply`, as Keras' counter.
        self.iterations = state.step
        self._state = state
        self._optimizer = optimizer
        flat_others = traverse_util.flatten_dict(state.other_variables or {})
        self.others = [(path, v) for path, v in model._carried_variables()
                       if path in flat_others]
        self._mapping = [(r.variable, _leaf(getattr(state, r.field), r.key)) for r in self.refs]
        self._mapping += [(v, jnp.asarray(value, v.dtype))
                          for v, value in zip(self.trackers, tracker_values)]
        self._mapping += [(v, flat_others[path]) for path, v in self.others]
        self._scope: StepScope | None = None

    @contextlib.contextmanager
    def running(self, rng: jax.Array) -> Iterator[ObjectStep]:
        """Within the block, the variables read this step's values and `current_step` is
        this one; the model's forward-pass losses are cleared before and after."""
        stack = _LOCAL.__dict__.setdefault("steps", [])
        self.model._clear_losses()
        discovering_now = getattr(_LOCAL, "found", None) is not None
        with StepScope(self._mapping, record_reads=discovering_now) as scope, \
                call_context.call_context(rng=rng):
            self._scope = scope
            stack.append(self)
            try:
                yield self
            finally:
                stack.pop()
                self.model._clear_losses()
        self._check_carried(scope)

    def _check_carried(self, scope: StepScope) -> None:
        """Lists, while `discovering`, the variables the step reads or assigns that it does
        not carry (neither the model's, a tracker's nor `others`); otherwise refuses
        assignments to such variables, whose new values would be lost."""
        carried = {id(r.variable) for r in self.refs} | {id(v) for v in self.trackers}
        carried |= {id(v) for v in self.tracker_source()}  # built by this trace
        carried |= {id(v) for _, v in self.others}
        found = getattr(_LOCAL, "found", None)
        if found is not None:  # the scope recorded every variable read or assigned
            found.extend(v for v in scope.touched if id(v) not in carried
                         and not getattr(v, "_mf_not_carried", False)
                         and all(v is not f for f in found))
            return
        lost = [getattr(v, "path", "?") for v, _ in scope.updates if id(v) not in carried]
        if lost:
            raise ValueError(
                "The step assigned variables that fit does not carry from step to step, so "
                "their new values would be lost: variables of an object the model does not "
                "hold as an attribute, or created after fit's first trace. Hold the object "
                "(an optimizer, a metric) as an attribute of the model, created before "
                f"fit. Received: assignments to {lost[:5]}")

    def value(self, variable: Variable) -> Any:
        """``variable`` 's current value in this step."""
        assert self._scope is not None  # set by running()
        found = self._scope.get_current_value(variable)
        return variable.value if found is None else found

    def new_state(self) -> TrainState:
        """The state after the hook: the variables' new values, the optimizer state."""
        leaves: dict[str, dict[tuple[str, ...], Any]] = {"params": {}, "model_state": {}}
        for ref in self.refs:
            leaves[ref.field][ref.key] = self.value(ref.variable)
        return self._state._replace(
            params=_with_leaves(self._state.params, leaves["params"]),
            model_state=_with_leaves(self._state.model_state, leaves["model_state"]),
            opt_state=self.opt_state,
            other_variables=_with_leaves(self._state.other_variables,
                                         {path: self.value(v) for path, v in self.others}))

    def tracker_values(self) -> list[Any]:
        """The trackers' values after the hook (float32, in `trackers` order)."""
        return [jnp.asarray(self.value(v), jnp.float32) for v in self.trackers]

    # -- model.optimizer inside the step -----------------------------------------------
    def apply(self, grads: Sequence[Any], variables: Sequence[Variable] | None) -> None:
        """One update of ``variables`` (default: the model's trainable variables) with
        ``grads``, as ``optimizer.apply`` inside a Keras 3 ``train_step``.

        The one optimizer update (`mirrorfit._src.optimizers.update.apply_update`) on all
        the model's params at once, with the step context's reduction (``MEAN``: each
        replica's gradient is of its per-replica mean loss), sharded state, accumulation,
        loss scaling and non-finite check: a param not in ``variables`` gets a zero gradient
        and keeps its value (unless the optimizer decays it). Then each variable's
        ``constraint``, as Keras.

        Raises:
            ValueError: outside a train step, for a variable that is not a trainable
                variable of the model, a ``None`` gradient, or a count mismatch.
        """
        if self._optimizer is None:
            raise ValueError("model.optimizer.apply runs in a train step; evaluate's "
                             "test_step cannot update the model. Received: a call in "
                             "test_step")
        params = {r.key: r for r in self.refs if r.field == "params"}
        by_id = {id(r.variable): r for r in params.values()}
        variables = (list(self.model.trainable_variables) if variables is None
                     else list(variables))
        grads = list(grads)
        if len(grads) != len(variables):
            raise ValueError(f"optimizer.apply needs one gradient per variable. Received: "
                             f"{len(grads)} gradients for {len(variables)} variables")
        unknown = [getattr(v, "path", repr(v)) for v in variables if id(v) not in by_id]
        if unknown:
            raise ValueError("model.optimizer updates the model's trainable variables (the "
                             "params compile built its state for). Received: variables "
                             f"{unknown[:3]} that are not trainable variables of the model")
        missing = [v.path for g, v in zip(grads, variables) if g is None]
        if missing:
            raise ValueError("Every gradient must be an array: a None gradient means the loss "
                             "does not depend on that variable; leave it out of the variables "
                             f"passed. Received: None gradients for {missing[:3]}")
        given = {by_id[id(v)].key: jnp.asarray(g, v.dtype) for g, v in zip(grads, variables)}
        # ``.value``: inside `stateless_apply`, its scope's values come first.
        current = {key: ref.variable.value for key, ref in params.items()}
        grad_tree = traverse_util.unflatten_dict(
            {key: given.get(key, jnp.zeros_like(value)) for key, value in current.items()})
        applied = apply_update(self._optimizer, grad_tree, self.opt_state,
                               traverse_util.unflatten_dict(current),
                               reduce_op=get_replica_context().gradient_reduce_op,
                               constrain=self._constrain)
        self.opt_state = applied.opt_state
        self.iterations = self.iterations + 1
        new = traverse_util.flatten_dict(applied.params)
        for key in given:
            params[key].variable.assign(new[key])

    def _constrain(self, params: Any) -> Any:
        """``params`` (the model's, nested) with each variable's ``constraint`` applied."""
        flat = traverse_util.flatten_dict(params)
        for ref in self.refs:
            if ref.field == "params" and ref.variable.constraint is not None:
                flat[ref.key] = ref.variable.constraint(flat[ref.key])
        return traverse_util.unflatten_dict(flat)

    def stateless_apply(self, optimizer_variables: Sequence[Any], grads: Sequence[Any],
                        trainable_variables: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """`apply` as a pure function of values, as Keras 3's ``optimizer.stateless_apply``.

        Args:
            optimizer_variables: the optimizer state's leaves (``model.optimizer.variables``
                values), in order.
            grads: one gradient per ``model.trainable_variables``.
            trainable_variables: their values, in the same order.

        Returns:
            ``(new_trainable_values, new_optimizer_values)``; the step's state is unchanged.
        """
        treedef = jax.tree.structure(self.opt_state)
        trainable = list(self.model.trainable_variables)
        if len(trainable_variables) != len(trainable):
            raise ValueError(f"stateless_apply needs one value per model.trainable_variables "
                             f"({len(trainable)}). Received: {len(trainable_variables)} values")
        saved = self.opt_state
        self.opt_state = jax.tree.unflatten(treedef, list(optimizer_variables))
        with StatelessScope(zip(trainable, trainable_variables)) as scope:
            self.apply(grads, trainable)
        new_values = [scope.get_current_value(v) for v in trainable]
        new_state, self.opt_state = jax.tree.leaves(self.opt_state), saved
        return new_values, new_state
