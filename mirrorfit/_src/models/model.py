"""`Model`: the tf.keras facade over a Flax module (``mf.Sequential`` is in `sequential_model`).

The model owns its `TrainState` (mirrored on the devices of the strategy that was active when
it was created): `Model.state` is its only write path, and callbacks and checkpoints change it
through `Model.assign_state`. It holds no training logic of its own. As in Keras 3, where
``Model`` inherits ``Trainer``, its other faces are mixins, one module each:
`mirrorfit._src.trainers.training_api.TrainingAPI` (compile/fit/evaluate/predict),
`mirrorfit._src.trainers.model_hooks.ModelHooks` (compute_loss/train_step/test_step/
predict_step and the ``metrics`` they update),
`mirrorfit._src.models.model_calls.ModelCalls` (``model(x)``, ``*_on_batch``, ``optimizer``) and
`mirrorfit._src.models.weights.ModelVariables` (weights, saving, summary), and
`mirrorfit._src.models.host_inputs.HostInputs` (host layers applied to ``x``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.callbacks.callback import History
from mirrorfit._src.distribute import fsdp
from mirrorfit._src.distribute.mesh import DeviceMesh
from mirrorfit._src.distribute.strategy import get_strategy, warn_if_outside_scope
from mirrorfit._src.layers.graph import model_info
from mirrorfit._src.layers.layer import Layer
from mirrorfit._src.models import model_checks
from mirrorfit._src.models.host_inputs import HostInputs
from mirrorfit._src.models.keras_models import ModelLayers, model_module
from mirrorfit._src.models.model_calls import ModelCalls
from mirrorfit._src.models.object_model import ObjectModel, in_object_context
from mirrorfit._src.models.weights import ModelVariables
from mirrorfit._src.modules import input_spec, mixed_precision
from mirrorfit._src.modules.adapters import ModuleAdapter, adapt
from mirrorfit._src.modules.objects import ObjectAdapter, variable_trees
from mirrorfit._src.trainers import keras_steps, sharded_state
from mirrorfit._src.trainers.keras_steps import hook_form
from mirrorfit._src.trainers.model_hooks import ModelHooks
from mirrorfit._src.trainers.state import TrainState, create_state, require_state
from mirrorfit._src.trainers.steps import make_predict_step
from mirrorfit._src.trainers.trainer import Trainer
from mirrorfit._src.trainers.training_api import TrainingAPI
from mirrorfit._src.variables import deferred

NO_CALL = (
    "{name} defines no call(self, inputs): model(x), predict() and evaluate()'s default "
    "test_step run the forward pass. Define call(self, inputs, training=False), or call the "
    "models it holds (e.g. model.generator.predict(z)); fit trains it through its own "
    "train_step. Received: a {name} without call")


class Model(HostInputs, TrainingAPI, ModelHooks, ModelCalls, ModelVariables,
            ModelLayers, ObjectModel, Layer):
    """A Flax module, or a Keras-style subclass, with Keras' ``compile``/``fit``/``evaluate``/
    ``predict``, mirrored.

    Subclass it as ``keras.Model``: ``__init__(self, ..., **kwargs)`` calling
    ``super().__init__(**kwargs)``, layers as attributes, and ``call(self, inputs,
    training=False)``; the model is built on its first batch (or by `build`). Its variables
    are `mirrorfit.Variable` s, trained in a stateless scope and written back when ``fit``
    ends (`mirrorfit._src.models.object_model`).

    Args:
        module: a ``flax.linen.Module`` or ``flax.nnx.Module``; none for a subclass. If its ``__call__`` takes
            ``train`` or ``training``, it gets ``True`` in fit and ``False`` otherwise. A
            tuple input is passed as positional arguments; a dict as one argument.
        input_shape: shape of one example, without the batch dimension (e.g. ``(784,)``),
            or a dict/list of such shapes for several inputs. Given, params are created now;
            otherwise on the first batch.
        input_dtype: dtype of the example input used to create the params.
        seed: seeds param init, dropout (per step and replica) and shuffling.
        dtype_policy: a `mirrorfit.mixed_precision.Policy` or its name (e.g.
            ``"mixed_bfloat16"``); ``None``: the global policy
            (`mirrorfit.mixed_precision.global_policy`) at construction.
        inputs, outputs: instead of ``module``, the functional API (``keras.Model(inputs,
            outputs)``, also positionally): `mirrorfit.layers.Input` tensors and the tensors
            computed from them (one, a list or a dict); built at once from the Inputs.
        name: the model's name.
        **kwargs: `mirrorfit.layers.Layer` 's ``trainable`` and ``dtype``.

    Params are created replicated (``NamedSharding(mesh, P())``) on the devices of the
    strategy active at construction (`mirrorfit.get_strategy`).

    Raises:
        TypeError: if ``module`` is not a Flax module, ``seed`` is not an int, or the
            module's ``__call__`` needs arguments mirrorfit does not pass.
        ValueError: if ``seed`` is negative, for an unknown policy name, or for a
            disconnected functional graph (see `mirrorfit.layers.Input`).

    Example:
        >>> inputs = mf.layers.Input((4,))
        >>> outputs = mf.layers.Dense(3, activation="softmax")(inputs)
        >>> with mf.MirroredStrategy().scope():
        ...     functional = mf.Model(inputs=inputs, outputs=outputs)
    """

    # Owned here (set by __init__ and _set_module) and read by the mixins, each of which
    # declares the ones it reads:
    module: Any  # the Flax module
    _adapter: ModuleAdapter  # its init/apply/tabulate, under dtype_policy
    _strategy: DeviceMesh  # the strategy active at construction: its devices hold _state
    _trainer: Trainer  # the loops; its config is set by compile
    _input_spec: Any  # jax.ShapeDtypeStruct pytree of one example; None until built
    seed: int  # seeds init, dropout and shuffling
    dtype_policy: mixed_precision.Policy

    def __init__(self, module: Any = None, input_shape: Any = None, *, inputs: Any = None,
                 outputs: Any = None, name: str | None = None, input_dtype: Any = jnp.float32,
                 seed: int = 0, dtype_policy: str | mixed_precision.Policy | None = None,
                 **kwargs: Any):
        Layer.__init__(self, name=name, **kwargs)
        self.seed = model_checks.checked_seed(seed)
        self.dtype_policy = mixed_precision.get(dtype_policy)
        if module is None and inputs is None and type(self) is not Model:
            # A Keras-style subclass; one without ``call`` holds models and optimizers only
            # (a GAN), as Keras allows: it trains through its own train_step.
            module, sample = self, None
            adapter = mixed_precision.with_policy(
                ObjectAdapter(self, functools.partial(Layer.__call__, self), self.seed),
                self.dtype_policy)
        else:
            module, sample = model_module(module, input_shape, inputs, outputs, name)
            adapter = self._adapt(module)
        self._strategy = get_strategy()
        warn_if_outside_scope()
        self._input_dtype = input_dtype
        self._compile_config: dict[str, Any] | None = None
        self.stop_training = False
        self.history: History | None = None
        self._set_module(module, adapter, input_shape, sample)

    def _adapt(self, module: Any) -> Any:
        return mixed_precision.with_policy(adapt(module), self.dtype_policy)

    def _set_module(self, module: Any, adapter: Any, input_shape: Any, sample: Any) -> None:
        """(Re)starts the model on ``module``: no state, built if the input is known."""
        self._adapter = adapter
        self.module = module
        self._state = None
        self._input_spec: Any = None
        self._variable_axes: Any = None  # input_spec.variable_axes of _input_spec
        own_predict = hook_form(self, "predict_step", ModelHooks) is not None
        self._trainer = Trainer(self._strategy, self._adapter, keras_steps.predict_step(self)
                                if own_predict else make_predict_step(self._adapter))
        if sample is not None:
            self._build_from(sample)
        elif input_shape is not None:
            self.build(input_shape)

    # -- the training state ---------------------------------------------------------------

    @property
    def strategy(self):
        """The strategy whose devices this model's variables are mirrored on."""
        return self._strategy

    @property
    def trainer(self) -> Trainer:
        """The loops; callbacks read `Trainer.progress` and call `Trainer.resume_from`."""
        return self._trainer

    @property
    def _state(self) -> TrainState | None:
        # Read through here, the state reflects variables assigned since the last sync.
        self._pull()
        return self.__dict__.get("_mf_state")

    @_state.setter
    def _state(self, state: TrainState | None) -> None:
        object.__setattr__(self, "_mf_state", state)

    @property
    def state(self) -> TrainState | None:
        """The whole training state (params, other collections, optimizer state, step, rng).

        Assigning it replaces the state; every leaf must already be mirrored on this model's
        devices (the trainer assigns each step's result). Use `assign_state` for host values.
        """
        return self._state

    @state.setter
    def state(self, state: TrainState) -> None:
        if type(state) is not TrainState:
            raise TypeError(f"state must be a TrainState. Received: {type(state).__name__}")
        self._state = state

    def assign_state(self, **fields: Any) -> None:
        """Replaces fields of the training state with host or device values, mirrored.

        The interface callbacks and checkpoints use, e.g.
        ``model.assign_state(opt_state=new_opt_state)``.

        Args:
            **fields: `TrainState` field names -> pytrees shaped like the current values.

        Raises:
            ValueError: for an unbuilt model, or an unknown field name.
        """
        state = require_state(self._state)
        unknown = sorted(set(fields) - set(TrainState._fields))
        if unknown:
            raise ValueError(f"assign_state takes TrainState fields {TrainState._fields}. "
                             f"Received: {unknown}")
        placed = fsdp.place_fields(self._strategy, {k: v for k, v in fields.items()
                                                    if k != "opt_state"})
        if "opt_state" in fields:  # mirrored, or split (shard_optimizer_state, accumulators)
            placed["opt_state"] = sharded_state.place_opt_state(
                self._strategy, self._trainer.config, fields["opt_state"])
        self._state = state._replace(**placed)
        self._push()

    @property
    def losses(self) -> list[jax.Array]:  # type: ignore[override]
        """This forward pass's losses: inside a custom step or ``strategy.run``, those of the
        newest ``model(x)`` there; else as `ModelHooks.losses`."""
        if in_object_context():
            return self._scope_losses()
        return ModelHooks.losses.fget(self)  # type: ignore[attr-defined]

    @property
    def layers(self) -> list[Any]:  # type: ignore[override]
        """The layers: Keras' order for models of ``mirrorfit.layers``, the attributes'
        for a subclass."""
        if self.is_subclassed:
            return Layer.layers.fget(self)  # type: ignore[attr-defined]
        return ModelLayers.layers.fget(self)  # type: ignore[attr-defined]

    @property
    def has_call(self) -> bool:
        """Whether the model has a forward pass: a Flax module, a graph, or a subclass's
        ``call``. One without holds models and optimizers for its own ``train_step``."""
        return not self.is_subclassed or type(self).call is not Model.call

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """The forward pass of a subclass, as ``keras.Model.call``: define
        ``call(self, inputs, training=False)``.

        A subclass without it holds models and optimizers for its own ``train_step`` (a
        GAN), as Keras allows: ``fit`` trains it, and what needs a forward pass refuses.

        Raises:
            NotImplementedError: naming ``call``, for such a subclass (``model(x)``,
                ``predict``, or ``evaluate`` without a ``test_step`` of its own).
        """
        raise NotImplementedError(NO_CALL.format(name=type(self).__name__))

    @property
    def input_spec(self) -> Any:
        """Per-example input shapes and dtypes (``jax.ShapeDtypeStruct`` pytree), or ``None``."""
        return self._input_spec

    @property
    def built(self) -> bool:  # type: ignore[override]
        """Whether the model's weights exist (its training state is built)."""
        return self._state is not None

    @built.setter
    def built(self, value: bool) -> None:  # a subclass's own build sets it, as in Keras
        self._mf_built = bool(value)

    def build(self, input_shape: Any) -> None:
        """Creates the params for examples of ``input_shape`` (no batch dimension; 8 is (8,)).

        Raises:
            TypeError: if ``input_shape`` is not an int, tuple of ints or dict/list of them.
        """
        shape = model_checks.example_shape(input_shape)
        self._build_from(input_spec.example_batch(shape, self._input_dtype))

    build._mf_default_build = True  # type: ignore[attr-defined]  # not a subclass's build

    def _build_from(self, x: Any) -> None:
        sample = input_spec.first_row(x)
        if not self.has_call:  # its weights are those of the models it holds, built
            self._input_spec = input_spec.spec_of(sample)
            self._variable_axes = input_spec.variable_axes(None, self._input_spec)
            params, model_state = jax.tree.map(jnp.copy, variable_trees(self))
            self._set_placed_state(params, model_state)
            return
        init = self._adapter.init
        rng = jax.random.PRNGKey(self.seed)
        if getattr(self._adapter, "jit_init", True):
            shardings: Any = self._strategy.replicated_sharding
            if self._strategy.shard_params:  # created split: never whole on one device
                shardings = (fsdp.param_shardings(self._strategy,
                                                  jax.eval_shape(init, rng, sample)[0]),
                             shardings)
            init = jax.jit(init, out_shardings=shardings)
        model_checks.check_module_call(self.module, sample)
        params, model_state = init(rng, sample)
        model_checks.check_outputs_per_example(self.module, self._adapter, params,
                                               model_state, sample)
        self._input_spec = input_spec.spec_of(sample)
        declared = (model_info.input_spec(self.module)
                    if model_info.is_layers_model(self.module) else None)
        self._variable_axes = input_spec.variable_axes(declared, self._input_spec)
        self._set_placed_state(params, model_state)
        deferred.built(self)  # a checkpoint restore that waited for the weights (TF's deferral)

    def _set_placed_state(self, params: Any, model_state: Any) -> None:
        """Sets a new state of ``params`` and ``model_state`` placed on the strategy, with the
        optimizer state once compiled. Under ``shard_params`` the params are split (the
        leaves that stay mirrored are logged once) and the model's own variables (a
        subclass's, the Keras-style layers of a graph) get the split values, so no device
        keeps a whole copy of them."""
        placed = fsdp.place_fields(self._strategy, create_state(
            params, model_state, None, self.seed)._asdict())
        fsdp.report_mirrored(self._strategy, placed["params"], self.name)
        self._state = TrainState(**placed)._replace(
            opt_state=None if self._trainer.config is None
            else self._init_opt_state(placed["params"]))
        if self._strategy.shard_params:
            self._push()

    def _init_opt_state(self, params):
        config = self._trainer.config
        assert config is not None  # called once compiled
        return sharded_state.init_opt_state(self._strategy, config, params)

    def _check_input(self, x: Any, name: str = "x") -> None:
        """Builds on first use, or checks per-example shapes against the built model."""
        if self._state is None:
            self._build_from(x)
        else:
            input_spec.check_matches(self._input_spec, x, name, self._variable_axes)


