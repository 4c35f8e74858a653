"""The model as a function and one batch at a time: ``model(x)``, ``model.apply``,
``predict_on_batch``, ``train_on_batch``, ``test_on_batch``, and ``model.optimizer``.

`ModelCalls` is mixed into `mirrorfit.Model`. ``model(x)`` runs the forward pass on the
mirrored params, jitted (cached per input shape); ``model.apply`` is the same forward pass
as a pure function of explicit params, for user JAX code (``jax.jit``, ``jax.grad``). The
``*_on_batch`` methods take one global batch and run the steps ``fit``/``evaluate``/
``predict`` compile, so repeated calls with the same shapes never recompile, and a batch that
does not divide by the replica count is padded and masked, not rejected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.core

from mirrorfit._src.layers.graph import functional
from mirrorfit._src.models.object_model import TRACED_CALL, in_object_context, is_differentiating
from mirrorfit._src.models.optimizer_handle import OptimizerHandle
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.modules.sown_losses import loss_values
from mirrorfit._src.trainers.state import TrainState, require_state
from mirrorfit._src.trainers.trainer import Trainer
from mirrorfit._src.variables.stateless_scope import StatelessScope


class ModelCalls:
    """``model(x)``, ``apply`` and the ``*_on_batch`` methods; see the module docstring."""

    _jitted_forward: Any = None  # jax.jit of _forward, made on the first model(x)
    # Read here, owned by `Model`:
    _state: TrainState | None  # the params, other collections, step and rng of a call
    _trainer: Trainer  # its config's optimizer; train_on_batch's step
    _adapter: ModuleAdapter  # the module's forward pass
    _check_input: Callable[..., None]  # builds the model from inputs, or checks them
    _pull: Callable[[], None]  # owned by ObjectModel: variables -> state
    trainable_variables: list[Any]  # owned by Layer (a subclass's) or ObjectModel (views)
    non_trainable_variables: list[Any]
    losses: list[Any]  # owned by Model: this forward pass's losses
    _object_call: Callable[..., Any]  # owned by ObjectModel: model(x) inside a scope
    # Owned by `TrainingAPI`: the loops the *_on_batch methods run on one batch.
    predict: Callable[..., Any]
    evaluate: Callable[..., Any]
    _adapter_for: Callable[..., Any]
    _require_compiled: Callable[[str], None]
    _with_targets: Callable[[Any, str], bool]  # whether an adapter of y must have targets
    # Owned by `HostInputs`: the host layers applied to x (on strings only, in model(x)).
    _on_host_if_strings: Callable[[Any], Any]
    _batch_rows: Callable[[Any], int]
    # Owned by `ModelHooks`: model(x) records the losses it sowed there.
    _sown: list[Any] | None

    @property
    def optimizer(self) -> OptimizerHandle | None:
        """The compiled optimizer (`OptimizerHandle`: ``learning_rate``, ``iterations``,
        ``get_config()``), or ``None`` before ``compile``, as ``keras.Model.optimizer``."""
        config = self._trainer.config
        return None if config is None else OptimizerHandle(self, config.optimizer)

    def apply(self, params: Any, x: Any, training: bool = False, *, model_state: Any = None,
              rng: jax.Array | None = None) -> Any:
        """The forward pass as a pure function of ``params``, for ``jax.jit``/``jax.grad``.

        Args:
            params: a pytree shaped like ``model.params``.
            x: inputs ``[batch, ...]`` (or a tuple/dict of them).
            training: the module's training flag (dropout on, BatchNorm batch statistics).
            model_state: other collections (BatchNorm statistics); default the model's.
            rng: dropout key for ``training=True``; default derived from the model's seed.

        Returns:
            The module's outputs ``[batch, ...]``.

        Example:
            >>> grads = jax.grad(lambda p: jnp.sum(model.apply(p, x[:2])))(model.params)
        """
        state = require_state(self._state)
        model_state = state.model_state if model_state is None else model_state
        rng = jax.random.fold_in(state.rng, state.step) if rng is None else rng
        y, _, _ = self._adapter.apply_with_losses(params, model_state, x, train=training,
                                                  rng=rng)
        return y

    def stateless_call(self, trainable_variables: Sequence[Any],
                       non_trainable_variables: Sequence[Any], *args: Any,
                       return_losses: bool = False, **kwargs: Any) -> tuple[Any, ...]:
        """``self(*args, **kwargs)`` as a pure function of the variables' values, as Keras 3's
        ``stateless_call`` (its JAX custom-step guide's forward pass).

        Args:
            trainable_variables: values of ``self.trainable_variables``, in order.
            non_trainable_variables: values of ``self.non_trainable_variables``, in order.
            *args, **kwargs: the call's inputs and ``training=``.
            return_losses: also return the forward pass's ``losses``.

        Returns:
            ``(outputs, new non-trainable values)`` (and the losses with
            ``return_losses``); no variable changes.

        Raises:
            ValueError: if a list of values does not match its variables in number.
        """
        mapping = []
        for name, variables, values in (
                ("trainable_variables", self.trainable_variables, trainable_variables),
                ("non_trainable_variables", self.non_trainable_variables,
                 non_trainable_variables)):
            if len(values) != len(variables):
                raise ValueError(f"stateless_call needs one value per model.{name}, in order "
                                 f"({len(variables)}). Received: {len(values)} values")
            mapping += list(zip(variables, values))
        with StatelessScope(mapping) as scope:
            outputs = self(*args, **kwargs)
            losses = list(self.losses)
        new_values = [scope.get_current_value(v) for v in self.non_trainable_variables]
        return (outputs, new_values, losses) if return_losses else (outputs, new_values)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The outputs for one batch, as ``keras.Model.__call__``: jitted, per input shape.

        ``training=True`` draws dropout from the same per-step key fit uses for replica 0.
        The values sown into ``"losses"`` become `losses`. On symbolic tensors
        (`mirrorfit.layers.Input`) the model is a layer of a functional model, sharing its
        weights; inside a custom step, ``strategy.run`` or `mirrorfit.value_and_grad` it runs
        on that pass's values (`mirrorfit._src.models.object_model`).

        Args:
            x: inputs ``[batch, ...]`` (arrays, or a tuple/dict of them), positionally.
            training: the module's training flag.

        Returns:
            ``jax.Array`` outputs ``[batch, ...]``, replicated.

        Raises:
            RuntimeError: called under ``jax.grad`` outside a stateless scope, where the
                weights would silently be constants (zero gradients).

        Example:
            >>> model(x[:2]).shape
            (2, 3)
        """
        if functional.is_symbolic((args, kwargs)):
            return functional.symbolic_call(self, args, kwargs)
        if in_object_context():
            return self._object_call(args, dict(kwargs))
        if is_differentiating():
            raise RuntimeError(TRACED_CALL)
        training = kwargs.pop("training", False)
        if kwargs or not args:
            raise TypeError("model(x, training=False) takes the inputs positionally. "
                            f"Received: {len(args)} positional arguments and {sorted(kwargs)}")
        x = self._on_host_if_strings(args[0] if len(args) == 1 else tuple(args))
        self._pull()
        self._check_input(x)
        if self._jitted_forward is None:
            self._jitted_forward = jax.jit(self._forward, static_argnames="training")
        state = require_state(self._state)
        y, losses = self._jitted_forward(state.params, state.model_state, state.rng,
                                         state.step, x, training=bool(training))
        if not any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(losses)):
            self._sown = losses
        return y

    def _forward(self, params, model_state, rng, step, x, *, training):
        rng = jax.random.fold_in(jax.random.fold_in(rng, step), 0)
        y, _, losses = self._adapter.apply_with_losses(params, model_state, x, train=training,
                                                       rng=rng)
        return y, loss_values(losses)

    def predict_on_batch(self, x: Any) -> Any:
        """Outputs for one global batch as NumPy, as ``keras.Model.predict_on_batch``.

        Runs ``predict``'s compiled step on all replicas (padding a batch that does not
        divide by the replica count).

        Args:
            x: inputs ``[batch, ...]``.

        Returns:
            NumPy outputs ``[batch, ...]``.
        """
        return self.predict(x, batch_size=self._batch_rows(x), verbose=0)

    def train_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                       class_weight: Mapping[int, float] | None = None,
                       return_dict: bool = False) -> float | list[float] | dict[str, float]:
        """One train step on one global batch, as ``keras.Model.train_on_batch``.

        Args:
            x: inputs ``[batch, ...]``, split across replicas (padded when ``batch`` does not
                divide by the replica count).
            y: targets ``[batch, ...]``.
            sample_weight: per-example weights ``[batch]``.
            class_weight: ``{class index: weight}``, multiplied into the sample weights
                (the class is ``y``, or ``argmax(y)`` for one-hot targets); a class the dict
                lacks weighs 1, as Keras 3 and as in ``fit`` (one rule, in
                `mirrorfit._src.trainers.data_adapters.class_weight`).
            return_dict: return ``{"loss": ..., metric: ...}`` instead of a list.

        Returns:
            This batch's loss (a float) when there are no metrics, else ``[loss, *metrics]``,
            or the dict.

        Raises:
            ValueError: for an uncompiled model.
            TypeError: for a ``class_weight`` that is not ``{int: float}``.
        """
        self._require_compiled("train_on_batch")
        data = self._adapter_for(x, y, sample_weight, self._batch_rows(x),
                                 class_weight=class_weight,
                                 with_targets=self._with_targets(y, "train_step"))
        return _format(self._trainer.train_on_batch(self, data), return_dict)

    def test_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                      return_dict: bool = False) -> float | list[float] | dict[str, float]:
        """Loss and metrics of one global batch, as ``keras.Model.test_on_batch``.

        Returns:
            As `train_on_batch`.
        """
        return self.evaluate(x, y, batch_size=self._batch_rows(x), sample_weight=sample_weight,
                             verbose=0, return_dict=return_dict)


def _format(logs: dict[str, float], return_dict: bool) -> float | list[float] | dict[str, float]:
    if return_dict:
        return logs
    values = list(logs.values())
    return values[0] if len(values) == 1 else values
