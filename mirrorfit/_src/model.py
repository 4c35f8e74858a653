"""`Model`: the tf.keras facade over a Flax module (``mf.Sequential`` is in `sequential_model`).

The model owns its `TrainState` (mirrored on the devices of the strategy that was active when
it was created): `Model.state` is its only write path, and callbacks and checkpoints change it
through `Model.assign_state`. It validates user arguments, asks the input layer
(`mirrorfit._src.data_adapters`) for data adapters and hands the loops to its `Trainer`. It
holds no training logic of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src import data_adapters
from mirrorfit._src import input_spec
from mirrorfit._src.callbacks import Callback, History
from mirrorfit._src.checks import is_int, positive_int, verbosity
from mirrorfit._src.compile_utils import step_config
from mirrorfit._src.keras_models import ModelLayers, model_module
from mirrorfit._src.modules import adapt
from mirrorfit._src.state import TrainState, create_state, require_state
from mirrorfit._src.strategy import get_strategy, warn_if_outside_scope
from mirrorfit._src.trainer import Trainer
from mirrorfit._src.weights import ModelVariables


class Model(ModelVariables, ModelLayers):
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
        inputs, outputs: instead of ``module``, the functional API (``keras.Model(inputs,
            outputs)``, also positionally): `mirrorfit.layers.Input` tensors and the tensors
            computed from them (one, a list or a dict); built at once from the Inputs.
        name: the functional model's name.

    Params are created replicated (``NamedSharding(mesh, P())``) on the devices of the
    strategy active at construction (`mirrorfit.get_strategy`).

    Raises:
        TypeError: if ``module`` is not a Flax module, or ``seed`` is not an int.
        ValueError: for a disconnected functional graph (see `mirrorfit.layers.Input`).

    Example:
        >>> inputs = mf.layers.Input((4,))
        >>> outputs = mf.layers.Dense(3, activation="softmax")(inputs)
        >>> with mf.MirroredStrategy().scope():
        ...     functional = mf.Model(inputs=inputs, outputs=outputs)
    """

    def __init__(self, module: Any = None, input_shape: Any = None, *, inputs: Any = None,
                 outputs: Any = None, name: str | None = None, input_dtype: Any = jnp.float32,
                 seed: int = 0):
        if not is_int(seed):
            raise TypeError(f"seed must be an int. Received: seed={seed!r}")
        module, sample = model_module(module, input_shape, inputs, outputs, name)
        adapter = adapt(module)
        self._strategy = get_strategy()
        warn_if_outside_scope()
        self._input_dtype = input_dtype
        self.seed = int(seed)
        self._compile_config: dict[str, Any] | None = None
        self.stop_training = False
        self.history: History | None = None
        self._set_module(module, adapter, input_shape, sample)

    def _set_module(self, module: Any, adapter: Any, input_shape: Any, sample: Any) -> None:
        """(Re)starts the model on ``module``: no state, built if the input is known."""
        self._adapter = adapter
        self.module = module
        self._state: TrainState | None = None
        self._input_spec: Any = None
        self._trainer = Trainer(self._strategy, self._adapter)
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
        """Creates the params for examples of ``input_shape`` (no batch dimension).

        Raises:
            TypeError: if ``input_shape`` is not a tuple of ints or a dict/list of them.
        """
        self._build_from(input_spec.example_batch(input_shape, self._input_dtype))

    def _build_from(self, x: Any) -> None:
        sample = input_spec.first_row(x)
        init = jax.jit(self._adapter.init, out_shardings=self._strategy.replicated_sharding)
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

    # -- compile / fit / evaluate / predict -------------------------------------------------

    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None,
                loss_weights: Any = None, weighted_metrics: Any = None, *,
                steps_per_execution: int = 1) -> None:
        """Configures training, as ``keras.Model.compile``.

        Args:
            optimizer: an ``optax.GradientTransformation`` or a Keras name (``"adam"``,
                ``"adamw"``, ``"sgd"``, ``"rmsprop"``), with Keras' default learning rates.
            loss: a callable ``(y_true, y_pred) -> per-example loss [batch]``, a
                `mirrorfit.losses` object, or a Keras loss name; for a module with several
                outputs, a list (output order) or dict (output name) of them.
            loss_weights: floats scaling each output's loss (list or dict like ``loss``),
                or one float for a single loss. The total is their weighted sum.
            metrics: list of metric names (``"accuracy"``, ``"mae"``, ...), callables or
                `mirrorfit.metrics.Metric` objects, weighted by the padding mask only; for
                several outputs, one list per output (list of lists, or dict), or one list
                for every output. Logged as ``<output>_<metric>``.
            weighted_metrics: as ``metrics``, also weighted by ``sample_weight``.
            steps_per_execution: train steps fused into one device call (``lax.scan`` over
                ``K`` global batches). Callbacks see the values at the end of each group.

        Raises:
            ValueError: for an unknown name or a non-positive ``steps_per_execution``.
            TypeError: for arguments of the wrong type.
        """
        config = step_config(self._adapter, optimizer, loss, metrics,
                             loss_weights=loss_weights, weighted_metrics=weighted_metrics)
        steps_per_execution = positive_int(steps_per_execution, "steps_per_execution")
        self._trainer.configure(config, steps_per_execution)
        self._compile_config = {"optimizer": optimizer, "loss": loss, "metrics": metrics,
                                "loss_weights": loss_weights,
                                "weighted_metrics": weighted_metrics,
                                "steps_per_execution": steps_per_execution}
        if self._state is not None:
            self._state = self._state._replace(opt_state=self._init_opt_state(self._state.params))

    @property
    def compiled(self) -> bool:
        return self._trainer.config is not None

    @property
    def compile_config(self) -> dict[str, Any] | None:
        """The arguments of the last ``compile`` (``None`` before), as given."""
        return self._compile_config

    def _require_compiled(self, method: str) -> None:
        if not self.compiled:
            raise ValueError(f"You must call model.compile(optimizer, loss) before model.{method}()."
                             " Received: an uncompiled model")

    def _adapter_for(self, x, y=None, sample_weight=None, batch_size=None, *, shuffle=False,
                     steps=None, with_targets=True):
        data = data_adapters.get_data_adapter(
            x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, steps=steps,
            num_replicas=self._strategy.num_replicas_in_sync, seed=self.seed,
            with_targets=with_targets)
        if isinstance(data, data_adapters.ArrayDataAdapter):
            self._check_input(data.x)
        return data

    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1,
            verbose: str | int = "auto", callbacks: Sequence[Callback] | None = None,
            validation_split: float = 0.0, validation_data: Any = None, shuffle: bool = True,
            sample_weight: Any = None, initial_epoch: int = 0,
            steps_per_epoch: int | None = None, validation_freq: int = 1) -> History:
        """Trains for ``epochs`` epochs with synchronous data parallelism, as ``keras.Model.fit``.

        Args:
            x: inputs ``[num_examples, ...]`` (array, dict or tuple of arrays), or an iterable
                of global batches ``(x, y)`` / ``(x, y, sample_weight)``.
            y: targets ``[num_examples, ...]``; ``None`` when ``x`` is an iterable.
            batch_size: the **global** batch (rows per step over all replicas); default 32.
                A size that does not divide by the replica count is padded and masked.
            epochs: index of the last epoch (epochs run from ``initial_epoch``).
            verbose: ``"auto"``/1 progress bar, 2 one line per epoch, 0 silent.
            callbacks: list of `mirrorfit.callbacks.Callback`.
            validation_split: fraction in [0, 1) of the rows, taken from the end before
                shuffling, evaluated after each epoch.
            validation_data: ``(x_val, y_val)`` or ``(x_val, y_val, sample_weight)``.
            shuffle: reshuffle the rows every epoch (arrays only).
            sample_weight: per-example weights ``[num_examples]``.
            initial_epoch: epoch to start from (for resuming).
            steps_per_epoch: steps per epoch; required to bound an endless iterable.
            validation_freq: validate every this many epochs.

        Returns:
            `History`: ``history.history[key]`` is a list with one float per epoch for
            ``loss``, every metric and every ``val_*``.

        Raises:
            ValueError: for an uncompiled model or an invalid argument (the message names
                it), e.g. ``epochs=0`` or inputs that do not match the built model.
            TypeError: for an argument of the wrong type, e.g. ``x`` that is not arrays or
                an iterable.
        """
        self._require_compiled("fit")
        verbose = verbosity(verbose)
        epochs = positive_int(epochs, "epochs")
        validation_freq = positive_int(validation_freq, "validation_freq")
        num_replicas = self._strategy.num_replicas_in_sync
        train = self._adapter_for(x, y, sample_weight, batch_size, shuffle=bool(shuffle),
                                  steps=steps_per_epoch)
        train, validation = data_adapters.train_and_validation(
            train, validation_split=validation_split, validation_data=validation_data,
            batch_size=batch_size, num_replicas=num_replicas, steps=steps_per_epoch)
        if isinstance(validation, data_adapters.ArrayDataAdapter):
            self._check_input(validation.x, "validation_data")
        return self._trainer.fit(self, train, epochs=epochs, initial_epoch=int(initial_epoch),
                                 callbacks=callbacks, verbose=verbose, validation=validation,
                                 validation_freq=validation_freq)

    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 verbose: str | int = "auto", sample_weight: Any = None,
                 return_dict: bool = False, callbacks: Sequence[Callback] | None = None
                 ) -> float | list[float] | dict[str, float]:
        """Loss and metrics over all examples, exact despite padding (``keras.Model.evaluate``).

        Args:
            x, y, sample_weight: as in `fit`.
            batch_size: the **global** batch, default 32.
            verbose: ``"auto"``/1 progress bar, 0 silent.
            return_dict: return ``{"loss": ..., metric: ...}`` instead of a list.
            callbacks: list of `mirrorfit.callbacks.Callback` (``on_test_*`` hooks).

        Returns:
            The loss (a float) if there are no metrics, else ``[loss, *metrics]``, or a dict.

        Raises:
            ValueError: for an uncompiled model or an invalid argument (named).
            TypeError: for an argument of the wrong type.
        """
        self._require_compiled("evaluate")
        verbose = verbosity(verbose)
        data = self._adapter_for(x, y, sample_weight, batch_size)
        callback_list = self._trainer.callback_list(self, callbacks, verbose=verbose,
                                                    steps=data.steps)
        logs = self._trainer.evaluate(self, data, callback_list)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x: Any, batch_size: int | None = None, verbose: str | int = "auto",
                callbacks: Sequence[Callback] | None = None) -> Any:
        """Model outputs for every example, in input order (``keras.Model.predict``).

        Args:
            x: inputs ``[num_examples, ...]`` or an iterable of input batches.
            batch_size: the **global** batch, default 32.
            verbose: ``"auto"``/1 progress bar, 0 silent.
            callbacks: list of `mirrorfit.callbacks.Callback` (``on_predict_*`` hooks).

        Returns:
            NumPy array(s) ``[num_examples, ...]``: exactly ``len(x)`` rows, padding removed.

        Raises:
            ValueError: for an invalid argument (named), or inputs that do not match the
                built model.
            TypeError: for an argument of the wrong type.
        """
        verbose = verbosity(verbose)
        data = self._adapter_for(x, batch_size=batch_size, with_targets=False)
        callback_list = self._trainer.callback_list(self, callbacks, verbose=verbose,
                                                    steps=data.steps)
        return self._trainer.predict(self, data, callback_list)

