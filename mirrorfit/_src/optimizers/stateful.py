"""Keras 3's stateful optimizer surface over an optax transformation, for custom loops.

`StatefulOptimizer` is mixed into `mirrorfit.optimizers.Optimizer`, which stays an
``optax.GradientTransformation`` (what ``compile`` and the functional
`mirrorfit.apply_gradients` use). On top, as a Keras optimizer object: ``build(var_list)``
keeps the optax state in `Variable` s, one per state leaf; ``apply_gradients(zip(grads,
variables))`` / ``apply(grads)`` run one ``update`` + ``optax.apply_updates`` and assign the
new values (then each variable's ``constraint``, as Keras); ``variables``, ``iterations``;
and Keras 3's JAX ``stateless_apply``.

Inside ``strategy.run`` (a replica context with several replicas) ``apply`` first
all-reduces the gradients, as ``optimizer.apply_gradients`` under
``tf.distribute.MirroredStrategy`` does, with the context's ``gradient_reduce_op`` (SUM by
default, for losses from `mirrorfit.compute_average_loss`), the context
`mirrorfit._src.distribute.replica_context.current` finds.

Under ``MirroredStrategy(shard_optimizer_state=True)`` (ZeRO-1/2, as ``fit`` does it): a
``build`` inside ``strategy.run`` (the first ``apply_gradients`` there builds) places each
state leaf split over the replicas, so ``run`` gives each replica its block; ``apply``
reduce-scatters the gradients, updates this replica's block of every split param with its
block of the state (`mirrorfit._src.optimizers.blocks`: clipping norms add every block), and
all-gathers the new params, so they stay mirrored. A state built outside ``run`` stays
mirrored: ``apply`` then cuts its blocks and gathers them back (the same results, no memory
saved).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, TypeGuard, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.core import Tracer

from mirrorfit._src.distribute import replica_context
from mirrorfit._src.distribute.replica_context import ReplicaContext
from mirrorfit._src.optimizers.update import apply_update
from mirrorfit._src.variables import deferred, stateless_scope
from mirrorfit._src.variables.lifting import stored_value
from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable

NOT_BUILT = (
    "{what} needs the optimizer to be built on the trainable variables: call "
    "optimizer.build(model.trainable_variables) first, or pass the variables "
    "(optimizer.apply(grads, model.trainable_variables), or apply_gradients(zip(grads, "
    "model.trainable_variables))). Received: an optimizer that was never built"
)

NOT_ELEMENTWISE = (
    "optimizer.apply_gradients inside strategy.run of a strategy with "
    "shard_optimizer_state=True updates each replica's block of the params, which needs an "
    "element-wise optimizer (Adam, AdamW, SGD, RMSprop, Adagrad, Adadelta, Adamax, Nadam, "
    "Lion, Ftrl); {name} needs whole leaves. Use one of those, or "
    "MirroredStrategy(shard_optimizer_state=False). Received: optimizer {name}")


class _Slots:
    """The mutable part of a built optimizer: what it updates and its state `Variable` s."""

    def __init__(self) -> None:
        self.trainable: list[Variable] = []
        self.state: list[Variable] = []
        self.treedef: Any = None  # the optax state's structure
        self.iterations: Variable | None = None
        self.built = False
        self.jitted: Callable | None = None


def _place_like(reference: jax.Array | None) -> Callable[[Any], Any]:
    """Puts new state leaves where the trainable variables are (mirrored, or one device)."""
    sharding = getattr(reference, "sharding", None)
    if sharding is None or not sharding.is_fully_replicated:
        return lambda leaf: leaf
    return lambda leaf: jax.device_put(leaf, sharding)


class StatefulOptimizer:
    """Keras 3's optimizer object API; mixed into `mirrorfit.optimizers.Optimizer`.

    Example:
        >>> w = mf.Variable(jnp.array([1.0, -2.0]), name="w")
        >>> opt = mf.optimizers.SGD(learning_rate=0.5)
        >>> _ = opt.apply_gradients([(jnp.array([1.0, 1.0]), w)])  # returns opt.iterations
        >>> w.numpy(), int(opt.iterations)
        (array([ 0.5, -2.5], dtype=float32), 1)
    """

    __slots__ = ()

    # Whether the update is element-wise, so it can run on blocks of the params
    # (``shard_optimizer_state=True``); the classes listed in
    # `mirrorfit._src.optimizers.sliceable.SLICEABLE_OPTIMIZERS` set it.
    _updates_blocks: ClassVar[bool] = False

    # -- state --------------------------------------------------------------------------

    def _slots(self) -> _Slots:
        slots = self.__dict__.get("_mf_slots")  # pyright: ignore[reportAttributeAccessIssue]
        if slots is None:
            slots = self._mf_slots = _Slots()  # pyright: ignore[reportAttributeAccessIssue]
        return slots

    @property
    def built(self) -> bool:
        """Whether `build` has created the optimizer's state."""
        return self._slots().built

    @property
    def iterations(self) -> Variable:
        """How many updates `apply` has made: an int32 scalar `Variable`."""
        slots = self._slots()
        if slots.iterations is None:
            with jax.ensure_compile_time_eval():
                slots.iterations = Variable(np.int32(0), dtype=jnp.int32, trainable=False,
                                            name="iteration",
                                            aggregation="only_first_replica")
        return slots.iterations

    @property
    def variables(self) -> list[Variable]:
        """The optimizer's state as `Variable` s: ``iterations``, then one per optax state
        leaf (moments, the learning rate in ``hyperparams``, ...), in optax's order."""
        return [self.iterations, *self._slots().state]

    def __mf_variables__(self) -> list[tuple[tuple[str, ...], Variable]]:
        # Keyed by position, not by name: a slot's name holds its variable's path, which
        # holds the model's name, and a fresh model of the same architecture gets another
        # (``cnn_1``), yet must restore this optimizer's checkpoint.
        return [(("iteration",), self.iterations),
                *((("slot", str(i)), v) for i, v in enumerate(self._slots().state))]

    def build(self, var_list: Iterable[Variable]) -> None:
        """Creates the optimizer state for ``var_list``, as Keras' ``optimizer.build``.

        The state is initialized from the variables' stored values (concrete even inside a
        trace: building in ``strategy.run``'s first call works) and placed where they are
        (mirrored when they are). Building again replaces the state.

        Args:
            var_list: the `Variable` s to train, e.g. ``model.trainable_variables``.

        Raises:
            TypeError: if ``var_list`` holds something other than `Variable` s.
        """
        variables = list(var_list)
        bad = [type(v).__name__ for v in variables if not isinstance(v, Variable)]
        if bad:
            raise TypeError("build needs the mf.Variable s to train, e.g. "
                            f"model.trainable_variables. Received: var_list with {bad[0]} items")
        tx = cast(optax.GradientTransformationExtraArgs, self)
        slots = self._slots()
        reference = stored_value(variables[0]) if variables else None
        context = replica_context.current()
        place = (context._place_optimizer_state if _sharded(context)
                 else _place_like(reference))
        with jax.ensure_compile_time_eval():
            state = tx.init(_params(variables, [stored_value(v) for v in variables]))
            leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
            slots.state = [Variable(place(leaf), trainable=False, name=jax.tree_util.keystr(
                path, simple=True, separator="/")) for path, leaf in leaves]
            for variable in slots.state:  # ``run`` passes a split slot as this replica's block
                variable._mf_blocks = True  # pyright: ignore[reportAttributeAccessIssue]
            if slots.iterations is None:
                slots.iterations = Variable(place(np.int32(0)), dtype=jnp.int32,
                                            trainable=False, name="iteration",
                                            aggregation="only_first_replica")
        slots.trainable, slots.treedef, slots.jitted = variables, treedef, None
        slots.built = True
        deferred.built(self)  # a checkpoint restore that waited for the state (TF's deferral)

    # -- updates ------------------------------------------------------------------------

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Variable]]) -> Variable:
        """Applies one update, as ``optimizer.apply_gradients`` (tf.keras and Keras 3).

        Args:
            grads_and_vars: ``(gradient, variable)`` pairs, e.g. ``zip(grads,
                model.trainable_variables)``; each gradient the shape of its variable.

        Returns:
            `iterations`, as tf.keras.

        Raises:
            ValueError: see `apply`.
        """
        pairs = list(grads_and_vars)
        self.apply([g for g, _ in pairs], [v for _, v in pairs])
        return self.iterations

    def apply(self, grads: Sequence[Any], trainable_variables: Iterable[Variable] | None = None
              ) -> None:
        """Applies one update to the variables, as Keras 3's ``optimizer.apply``.

        Inside ``strategy.run`` the gradients are first all-reduced across replicas with the
        replica context's ``gradient_reduce_op`` (SUM unless the caller set MEAN), so every
        replica makes the same update. Then ``update`` + ``optax.apply_updates``, then each
        variable's ``constraint``; `iterations` grows by one.

        Args:
            grads: one gradient per variable (arrays of the variables' shapes). Empty: no-op.
            trainable_variables: the `Variable` s, in any order, all of those the optimizer
                was built with (the first call builds it); ``None``: the ones it was built
                with, in that order.

        Raises:
            ValueError: if the optimizer was never built and no variables are given, if the
                gradients and variables differ in number, if a variable is not one the
                optimizer was built with, if a gradient is ``None``, or inside
                ``strategy.run`` of a strategy with ``shard_optimizer_state=True`` for an
                optimizer that cannot update blocks (`check_sliceable`: Lamb, Adafactor).
        """
        if not grads:
            return
        slots = self._slots()
        if trainable_variables is None:
            if not slots.built:
                raise ValueError(NOT_BUILT.format(what="apply(grads) without variables"))
            variables = slots.trainable
        else:
            variables = list(trainable_variables)
            if not slots.built:
                self.build(variables)
        aligned = _aligned(list(grads), variables, slots.trainable)
        if _sharded(replica_context.current()) and not self._updates_blocks:
            raise ValueError(NOT_ELEMENTWISE.format(name=type(self).__name__))
        inputs = (aligned, [v.value for v in slots.trainable], [v.value for v in slots.state],
                  self.iterations.value)
        if stateless_scope.in_stateless_scope() or any(
                isinstance(x, Tracer) for x in jax.tree.leaves(inputs)):
            new_values, new_state, iterations = self._step(*inputs)
        else:  # eager: one compiled update (a compiled step traces the update inline)
            if slots.jitted is None:
                slots.jitted = jax.jit(self._step)
            new_values, new_state, iterations = slots.jitted(*inputs)
        for variable, value in zip(slots.trainable, new_values):
            variable.assign(value)
        for variable, value in zip(slots.state, new_state):
            if np.shape(value) == variable.shape:
                variable.assign(value)
            else:  # this replica's block of a split slot: ``run`` assembles the whole
                cast(StatelessScope, stateless_scope.get_stateless_scope()).add_update(
                    variable, value)
        with stateless_scope.agreed_assignments():  # every replica counts the same steps
            self.iterations.assign(iterations)

    def _step(self, grads: list[Any], values: list[Any], state: list[Any], iterations: Any
              ) -> tuple[list[Any], list[Any], Any]:
        """One pure update (`mirrorfit._src.optimizers.update.apply_update`, which reduces the
        gradients across the replicas of the current context): ``(new values, new state
        leaves, iterations + 1)``.

        Under a sharded optimizer state (inside ``run``), ``state`` leaves arrive as blocks
        where they are placed split (built in ``run``), whole where mirrored (built outside;
        or the abstract trace in which ``run`` finds the variables): cut here, gathered back
        after, so they return as they arrived.
        """
        slots = self._slots()
        context = replica_context.current()
        split, arrived_state = None, state
        if _sharded(context):
            split = [np.shape(x) != np.shape(stored_value(v))
                     for x, v in zip(state, slots.state)]
            state = [x if arrived else context._blocks_of(x) for x, arrived in zip(state, split)]
        applied = apply_update(
            cast(optax.GradientTransformation, self), _params(slots.trainable, grads),
            jax.tree.unflatten(slots.treedef, state), _params(slots.trainable, values),
            reduce_op=context.gradient_reduce_op if context is not None else "SUM",
            constrain=self._constrained)
        new_values = [next(iter(p.values())) for p in applied.params]
        new_state = jax.tree.leaves(applied.opt_state)
        if split is not None:
            assert context is not None  # split only inside a sharded replica context
            new_state = [x if arrived else context._gather_blocks(x, old)
                         for x, old, arrived in zip(new_state, arrived_state, split)]
        return new_values, new_state, iterations + 1

    def _constrained(self, params: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The `_params` tree with each variable's ``constraint`` applied, as Keras."""
        return [{path: v.constraint(x) if v.constraint is not None else x
                 for path, x in p.items()} for v, p in zip(self._slots().trainable, params)]

    def stateless_apply(self, optimizer_variables: Sequence[Any], grads: Sequence[Any],
                        trainable_variables: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """`apply` as a pure function of values, as Keras 3's JAX ``stateless_apply``.

        Args:
            optimizer_variables: the values of `variables`, in order.
            grads: one gradient per trainable variable the optimizer was built with.
            trainable_variables: the values of those variables, in the build order.

        Returns:
            ``(new_trainable_values, new_optimizer_values)``, lists like the inputs; no
            `Variable` changes.

        Raises:
            ValueError: if the optimizer is not built, or a list has the wrong length.
        """
        slots = self._slots()
        if not slots.built:
            raise ValueError(NOT_BUILT.format(what="stateless_apply"))
        own = self.variables
        for name, given, expected in [("optimizer_variables", optimizer_variables, own),
                                      ("trainable_variables", trainable_variables,
                                       slots.trainable)]:
            if len(given) != len(expected):
                raise ValueError(f"{name} must hold one value per variable, in order: "
                                 f"{len(expected)} values. Received: {len(given)} values")
        mapping = [*zip(slots.trainable, trainable_variables), *zip(own, optimizer_variables)]
        with StatelessScope(mapping) as scope:
            self.apply(grads)
        return ([scope.get_current_value(v) for v in slots.trainable],
                [scope.get_current_value(v) for v in own])


def _sharded(context: ReplicaContext | None) -> TypeGuard[ReplicaContext]:
    """Whether ``context`` (the current replica context, or None) updates blocks: inside
    ``run`` of a strategy with ``shard_optimizer_state=True`` and several replicas."""
    return context is not None and context.shard_optimizer_state


def _params(variables: Sequence[Variable], values: Sequence[Any]) -> list[dict[str, Any]]:
    """The pytree the optax update sees: ``[{path: value}]`` in the variables' order, so
    `exclude_from_weight_decay` patterns match the variables' paths (``"0/dense/bias"``)."""
    return [{v.path: jnp.asarray(x, v.dtype)} for v, x in zip(variables, values)]


def _aligned(grads: list[Any], variables: list[Variable], built: list[Variable]) -> list[Any]:
    """``grads`` (one per ``variables``) reordered to the build order ``built``."""
    if len(grads) != len(variables):
        raise ValueError("apply needs one gradient per variable. Received: "
                         f"{len(grads)} gradients for {len(variables)} variables")
    if any(g is None for g in grads):
        missing = [v.path for g, v in zip(grads, variables) if g is None]
        raise ValueError("Every gradient must be an array: a None gradient means the loss does "
                         "not depend on that variable; leave it out of the variables passed. "
                         f"Received: None gradients for {missing}")
    index = {id(v): i for i, v in enumerate(variables)}
    known = {id(b) for b in built}
    unknown = [v.path for v in variables if id(v) not in known]
    missing = [b.path for b in built if id(b) not in index]
    if unknown or missing:
        raise ValueError(
            "apply updates all the variables the optimizer was built with, in any order (one "
            "optax state holds them together; use one optimizer per group of variables). "
            f"Received: variables it was not built with {unknown}, and without {missing}")
    return [grads[index[id(b)]] for b in built]
