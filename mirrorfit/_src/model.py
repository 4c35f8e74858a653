"""`Model` and `Sequential`: the tf.keras facade over a Flax module.

The model owns its `TrainState` (mirrored on the devices of the strategy that was active when
it was created): `Model.state` is its only write path, and callbacks and checkpoints change it
through `Model.assign_state`. It holds no training logic of its own. As in Keras 3, where
``Model`` inherits ``Trainer``, its other faces are mixins, one module each:
`mirrorfit._src.training_api.TrainingAPI` (compile/fit/evaluate/predict),
`mirrorfit._src.model_hooks.ModelHooks` (compute_loss/train_step/test_step),
`mirrorfit._src.model_calls.ModelCalls` (``model(x)``, ``*_on_batch``, ``optimizer``) and
`mirrorfit._src.weights.ModelVariables` (weights, saving, summary).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src import input_checks, input_spec
from mirrorfit._src import mixed_precision
from mirrorfit._src.callbacks import History
from mirrorfit._src.model_calls import ModelCalls
from mirrorfit._src.model_hooks import ModelHooks
from mirrorfit._src.modules import adapt, sequential
from mirrorfit._src.state import TrainState, create_state, require_state
from mirrorfit._src.strategy import get_strategy, warn_if_outside_scope
from mirrorfit._src.trainer import Trainer
from mirrorfit._src.training_api import TrainingAPI
from mirrorfit._src.weights import ModelVariables


class Model(TrainingAPI, ModelHooks, ModelCalls, ModelVariables):
    """A Flax module with Keras' ``compile``/``fit``/``evaluate``/``predict``, mirrored.

    Args:
        module: a ``flax.linen.Module`` or ``flax.nnx.Module``. If its ``__call__`` takes
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

    Params are created replicated (``NamedSharding(mesh, P())``) on the devices of the
    strategy active at construction (`mirrorfit.get_strategy`).

    Raises:
        TypeError: if ``module`` is not a Flax module, ``seed`` is not an int, or the
            module's ``__call__`` needs arguments mirrorfit does not pass.
        ValueError: if ``seed`` is negative, or for an unknown policy name.
    """

    def __init__(self, module: Any, input_shape: Any = None, *, input_dtype: Any = jnp.float32,
                 seed: int = 0, dtype_policy: str | mixed_precision.Policy | None = None):
        self.dtype_policy = mixed_precision.get(dtype_policy)
        self._adapter = mixed_precision.with_policy(adapt(module), self.dtype_policy)
        self.module = module
        self._strategy = get_strategy()
        warn_if_outside_scope()
        self._input_dtype = input_dtype
        self.seed = input_checks.checked_seed(seed)
        self._state: TrainState | None = None
        self._input_spec: Any = None
        self._trainer = Trainer(self._strategy, self._adapter)
        self._compile_config: dict[str, Any] | None = None
        self.stop_training = False
        self.history: History | None = None
        if input_shape is not None:
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
        self._state = state._replace(**self._strategy.replicate_arrays(fields))

    @property
    def input_spec(self) -> Any:
        """Per-example input shapes and dtypes (``jax.ShapeDtypeStruct`` pytree), or ``None``."""
        return self._input_spec

    @property
    def built(self) -> bool:
        return self._state is not None

    def build(self, input_shape: Any) -> None:
        """Creates the params for examples of ``input_shape`` (no batch dimension; 8 is (8,)).

        Raises:
            TypeError: if ``input_shape`` is not an int, tuple of ints or dict/list of them.
        """
        shape = input_checks.example_shape(input_shape)
        self._build_from(input_spec.example_batch(shape, self._input_dtype))

    def _build_from(self, x: Any) -> None:
        sample = input_spec.first_row(x)
        init = jax.jit(self._adapter.init, out_shardings=self._strategy.replicated_sharding)
        input_checks.check_module_call(self.module, sample)
        params, model_state = init(jax.random.PRNGKey(self.seed), sample)
        self._input_spec = input_spec.spec_of(sample)
        opt_state = None if self._trainer.config is None else self._init_opt_state(params)
        self._state = self._strategy.replicate_arrays(
            create_state(params, model_state, opt_state, self.seed))

    def _init_opt_state(self, params):
        init = jax.jit(self._trainer.config.optimizer.init,
                       out_shardings=self._strategy.replicated_sharding)
        return init(params)

    def _check_input(self, x: Any, name: str = "x") -> None:
        """Builds on first use, or checks per-example shapes against the built model."""
        if self._state is None:
            self._build_from(x)
        else:
            input_spec.check_matches(self._input_spec, x, name)


def Sequential(layers: Sequence[Callable[..., Any]], input_shape: Any = None,  # noqa: N802
               **kwargs: Any) -> Model:
    """A `Model` over ``flax.linen.Sequential(layers)``, as ``keras.Sequential``.

    Each layer gets Keras' training flag: ``train``/``training`` if its ``__call__`` takes
    one, else ``deterministic`` (Dropout) and ``use_running_average`` (BatchNorm).

    Example:
        >>> with mf.MirroredStrategy().scope():
        ...     model = mf.Sequential([nn.Dense(128), nn.relu, nn.Dense(10), nn.softmax],
        ...                           input_shape=(784,))
    """
    return Model(sequential(layers), input_shape, **kwargs)

