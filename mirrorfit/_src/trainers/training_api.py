"""``compile``, ``fit``, ``evaluate`` and ``predict``: the Keras training API of `Model`.

`TrainingAPI` is mixed into `mirrorfit.Model` (as Keras 3's ``Model`` inherits its
``Trainer``). It validates the arguments, asks the input layer
(`mirrorfit._src.trainers.data_adapters`) for data adapters and hands the loops to the model's
`mirrorfit._src.trainers.trainer.Trainer`. It reads the model's state through ``Model.state`` and
builds the model through ``Model._check_input``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

from mirrorfit._src.callbacks.callback import Callback, History
from mirrorfit._src.distribute.mesh import DeviceMesh
from mirrorfit._src.metrics.reduction_metrics import Mean
from mirrorfit._src.modules import input_spec
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.modules.mixed_precision import Policy
from mirrorfit._src.trainers import data_adapters, resident
from mirrorfit._src.trainers.compile_utils import step_config
from mirrorfit._src.trainers.model_hooks import overridden, step_family_for
from mirrorfit._src.trainers.multi_output import MultiOutputLoss
from mirrorfit._src.trainers.state import TrainState
from mirrorfit._src.trainers.trainer import Trainer
from mirrorfit._src.utils.checks import positive_int, verbosity


class VariableSync(Callback):
    """Writes the trained state into the model's variables at each epoch end, before the
    user's callbacks run, so they read the current weights (e.g. ``self.model.generator``)."""

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.model._push()


class TrainingAPI:
    """Keras' ``compile``/``fit``/``evaluate``/``predict``; mixed into `Model`."""

    # Read here, owned by `Model` (set by its __init__ and _set_module):
    _state: TrainState | None  # the training state; compile writes a new opt_state into it
    _strategy: DeviceMesh  # where the state lives and the steps run
    _trainer: Trainer  # the loops, configured by compile
    _adapter: ModuleAdapter  # the module's forward pass, for the steps' config
    _push: Callable[[], None]  # writes the trained state into the model's variables
    _resplit: Callable[[], None]  # splits a subclassed model's state by trainable flags
    _object_nodes: Callable[[], list[Any]]  # the Keras-style layers of a functional graph
    module: Any  # the Flax module, whose frozen layers compile reads
    _input_spec: Any  # per-example input shapes once built, to check validation data
    _variable_axes: Any  # which of their axes may vary (input_spec.variable_axes)
    seed: int  # base seed of the shuffle order
    dtype_policy: Policy  # "mixed_float16" scales the loss
    _check_input: Callable[..., None]  # builds the model from inputs, or checks them
    _init_opt_state: Callable[[Any], Any]  # params -> mirrored optimizer state
    # Written by compile (``None`` from Model.__init__), read by Sequential.add:
    _compile_config: dict[str, Any] | None
    _mf_loss_tracker: Any  # written by compile: Keras' loss tracker (`ModelHooks.metrics`)
    has_call: bool  # whether the model has a forward pass (`Model.has_call`)
    call: Callable[..., Any]  # the forward pass; raises for a model without one

    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None,
                loss_weights: Any = None, weighted_metrics: Any = None, *,
                steps_per_execution: int = 1, auto_scale_loss: bool = True) -> None:
        """Configures training, as ``keras.Model.compile``.

        Args:
            optimizer: an ``optax.GradientTransformation`` or a Keras name (``"adam"``,
                ``"adamw"``, ``"sgd"``, ``"rmsprop"``), with Keras' default learning rates.
            loss: a callable ``(y_true, y_pred) -> per-example loss [batch]``, a
                `mirrorfit.losses` object, or a Keras loss name; for a module with several
                outputs, a list (output order) or dict (output name) of them. ``None``
                for a model that overrides ``train_step`` or ``compute_loss``.
            loss_weights: floats scaling each output's loss (list or dict like ``loss``),
                or one float for a single loss. The total is their weighted sum.
            metrics: list of metric names (``"accuracy"``, ``"mae"``, ...), callables or
                `mirrorfit.metrics.Metric` objects, weighted by the padding mask only; for
                several outputs, one list per output (list of lists, or dict), or one list
                for every output. Logged as ``<output>_<metric>``.
            weighted_metrics: as ``metrics``, also weighted by ``sample_weight``.
            steps_per_execution: train steps fused into one device call (``lax.scan`` over
                ``K`` global batches). Callbacks see the values at the end of each group.
            auto_scale_loss: under the ``"mixed_float16"`` policy, wrap the optimizer in a
                `mirrorfit.optimizers.LossScaleOptimizer` (as Keras' ``compile``).

        Raises:
            ValueError: for an unknown name or a non-positive ``steps_per_execution``.
            TypeError: for arguments of the wrong type.
        """
        config = step_config(
            self._adapter, optimizer, loss, metrics, family=step_family_for(self),
            loss_weights=loss_weights, weighted_metrics=weighted_metrics,
            require_loss=not self._own_loss("train_step"),
            scale_loss=auto_scale_loss and self.dtype_policy.name == "mixed_float16",
            module=self.module)
        steps_per_execution = positive_int(steps_per_execution, "steps_per_execution")
        self._trainer.configure(config, steps_per_execution)
        self._mf_loss_tracker = Mean(name="loss")  # Keras' loss tracker (`Model.metrics`)
        self._compile_config = {"optimizer": optimizer, "loss": loss, "metrics": metrics,
                                "loss_weights": loss_weights,
                                "weighted_metrics": weighted_metrics,
                                "steps_per_execution": steps_per_execution}
        self._resplit()
        if self._state is not None:
            self._state = self._state._replace(opt_state=self._init_opt_state(self._state.params))

    @property
    def compiled(self) -> bool:
        """Whether ``compile`` has been called: ``fit``, ``evaluate`` and
        ``train_on_batch`` need it.
        """
        return self._trainer.config is not None

    @property
    def compile_config(self) -> dict[str, Any] | None:
        """The arguments of the last ``compile`` (``None`` before), as given."""
        return self._compile_config

    def _require_compiled(self, method: str) -> None:
        if not self.compiled:
            raise ValueError(f"You must call model.compile(optimizer, loss) before model.{method}()."
                             " Received: an uncompiled model")

    def _own_loss(self, step: str) -> bool:
        """Whether the model computes its loss itself (overrides ``step`` or
        ``compute_loss``), so array inputs without targets are accepted, as Keras'
        ``fit(x)`` for an autoencoder or VAE."""
        return overridden(self, step) or overridden(self, "compute_loss")

    def _with_targets(self, y: Any, step: str) -> bool:
        """Whether an adapter must have targets: given ``y``, or a loss the model does not
        compute itself (`_own_loss`)."""
        return y is not None or not self._own_loss(step)

    def _check_targets(self, data: Any, argument: str) -> None:
        """Checks in-memory targets against a multi-output loss before any step runs (the
        steps check every batch's targets too, as they trace, naming ``y``)."""
        loss = self._trainer.config.loss if self._trainer.config is not None else None
        arrays = data.arrays()
        if isinstance(loss, MultiOutputLoss) and arrays is not None and arrays[1] is not None:
            loss.check_targets(arrays[1], argument)

    def _validation_inputs(self, validation_data: Any) -> Any:
        """``validation_data`` as ``fit`` reads it (a model's host layers apply theirs)."""
        return validation_data

    def _adapter_for(self, x, y=None, sample_weight=None, batch_size=None, *,
                     shuffle: bool | None = False,
                     steps=None, with_targets=True, steps_name="steps", check=True,
                     **kwargs):
        data = data_adapters.get_data_adapter(
            x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, steps=steps,
            num_replicas=self._strategy.num_replicas_in_sync, seed=self.seed,
            with_targets=with_targets, steps_name=steps_name, strategy=self._strategy,
            **kwargs)
        if check:  # fit checks them with its other settings, in one all-gather
            self._strategy.check_same_across_processes(data_adapters.input_fingerprint(data))
        self._check_input(data.first_inputs())
        # a source of batches checks its first padded batch with it (DataAdapter.check_input)
        data.check_input = functools.partial(input_spec.check_matches, self._input_spec,
                                             variable=self._variable_axes)
        return data

    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1,
            verbose: str | int = "auto", callbacks: Sequence[Callback] | None = None,
            validation_split: float = 0.0, validation_data: Any = None,
            shuffle: bool | None = None, class_weight: dict[int, float] | None = None,
            sample_weight: Any = None, initial_epoch: int = 0,
            steps_per_epoch: int | None = None, validation_steps: int | None = None,
            validation_batch_size: int | None = None, validation_freq: int = 1, *,
            device_resident: bool | None = None) -> History:
        """Trains for ``epochs`` epochs with synchronous data parallelism, as ``keras.Model.fit``.

        Args:
            x: inputs ``[num_examples, ...]`` (array, pandas, dict or tuple of arrays), or a
                source of global batches ``(x, y)`` / ``(x, y, sample_weight)``: a generator
                or iterable, `mirrorfit.utils.PyDataset`, ``tf.data``, grain or torch
                ``DataLoader`` (guide: "Feeding data").
            y: targets ``[num_examples, ...]``; ``None`` when ``x`` yields batches, or for a
                model that overrides ``train_step`` or ``compute_loss`` (its hooks get
                ``data = x``, or ``y=None``).
            batch_size: the **global** batch (rows per step over all replicas); default 32.
                A size that does not divide by the replica count is padded and masked.
            epochs: index of the last epoch (epochs run from ``initial_epoch``).
            verbose: ``"auto"``/1 progress bar, 2 one line per epoch, 0 silent.
            callbacks: list of `mirrorfit.callbacks.Callback`.
            validation_split: fraction in [0, 1) of the rows, taken from the end before
                shuffling, evaluated after each epoch.
            validation_data: ``(x_val, y_val)``, ``(x_val, y_val, sample_weight)`` or any
                source of batches ``x`` may be.
            shuffle: reshuffle the rows (arrays) or the batch order (`PyDataset`) every
                epoch; ``None``: ``True`` for those, and an error for other sources.
            class_weight: ``{class: weight}`` multiplying each example's weight by its
                class's (the label, or the argmax of a one-hot label), as Keras.
            sample_weight: per-example weights ``[num_examples]``.
            initial_epoch: epoch to start from (for resuming).
            steps_per_epoch: steps per epoch; required to bound an endless source. A
                source that runs dry earlier stops training with Keras' warning.
            validation_steps: steps per validation (default: the whole validation data).
            validation_batch_size: global batch of array validation data (default
                ``batch_size``).
            validation_freq: validate every this many epochs.
            device_resident: for array ``x`` (and array validation data): ``True`` places
                the arrays on every device once and sends each step only its row indices,
                ``False`` gathers and transfers every batch from the host, ``None`` (the
                default) is ``True`` on accelerators while the arrays fit half the free
                device memory, and ``False`` on the CPU backend, where the host path is
                faster. Same results either way (guide: "Device-resident datasets").

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
        resident.check_setting(device_resident)
        verbose = verbosity(verbose)
        epochs = positive_int(epochs, "epochs")
        validation_freq = positive_int(validation_freq, "validation_freq")
        num_replicas = self._strategy.num_replicas_in_sync
        train = self._adapter_for(x, y, sample_weight, batch_size, shuffle=shuffle,
                                  steps=steps_per_epoch, steps_name="steps_per_epoch",
                                  class_weight=class_weight, check=False,
                                  with_targets=self._with_targets(y, "train_step"))
        train, validation = data_adapters.train_and_validation(
            train, validation_split=validation_split,
            validation_data=self._validation_inputs(validation_data),
            batch_size=batch_size, num_replicas=num_replicas, steps=steps_per_epoch,
            validation_steps=validation_steps, validation_batch_size=validation_batch_size,
            strategy=self._strategy)
        resident.choose(device_resident, [train, validation], self._strategy)
        if validation is not None:
            input_spec.check_matches(self._input_spec, validation.first_inputs(),
                                     "validation_data", self._variable_axes)
            self._check_targets(validation, "validation_data")
            _check_validation_repeats(validation, epochs=epochs,
                                      initial_epoch=int(initial_epoch),
                                      validation_freq=validation_freq)
        try:
            if self._object_nodes() or self.module is self:  # variables outside the state
                callbacks = [VariableSync(), *(callbacks or [])]
            return self._trainer.fit(self, train, epochs=epochs,
                                     initial_epoch=int(initial_epoch), callbacks=callbacks,
                                     verbose=verbose, validation=validation,
                                     validation_freq=validation_freq)
        finally:  # a subclassed model's variables get the trained values, also after an error
            self._push()

    @overload
    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 verbose: str | int = "auto", sample_weight: Any = None,
                 steps: int | None = None, *, return_dict: Literal[True],
                 callbacks: Sequence[Callback] | None = None,
                 device_resident: bool | None = None) -> dict[str, float]: ...

    @overload
    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 verbose: str | int = "auto", sample_weight: Any = None,
                 steps: int | None = None, return_dict: bool = False,
                 callbacks: Sequence[Callback] | None = None, *,
                 device_resident: bool | None = None
                 ) -> float | list[float] | dict[str, float]: ...

    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 verbose: str | int = "auto", sample_weight: Any = None,
                 steps: int | None = None, return_dict: bool = False,
                 callbacks: Sequence[Callback] | None = None, *,
                 device_resident: bool | None = None
                 ) -> float | list[float] | dict[str, float]:
        """Loss and metrics over all examples, exact despite padding (``keras.Model.evaluate``).

        Args:
            x, y, sample_weight: as in `fit`.
            batch_size: the **global** batch, default 32.
            verbose: ``"auto"``/1 progress bar, 0 silent.
            steps: batches to evaluate (default: all of ``x``).
            return_dict: return ``{"loss": ..., metric: ...}`` instead of a list.
            callbacks: list of `mirrorfit.callbacks.Callback` (``on_test_*`` hooks).
            device_resident: ``True`` places array ``x``, ``y`` on every device first and
                sends each step only its row indices; ``None``/``False``: the host path
                (one pass moves the same bytes either way).

        Returns:
            The loss (a float) if there are no metrics, else ``[loss, *metrics]``, or a dict.

        Raises:
            ValueError: for an uncompiled model or an invalid argument (named).
            TypeError: for an argument of the wrong type.
        """
        self._require_compiled("evaluate")
        verbose = verbosity(verbose)
        resident.check_setting(device_resident)
        data = self._adapter_for(x, y, sample_weight, batch_size, steps=steps,
                                 with_targets=self._with_targets(y, "test_step"))
        resident.choose(device_resident, [data], self._strategy, automatic=False)
        callback_list = self._trainer.callback_list(self, callbacks, verbose=verbose,
                                                    steps=data.steps)
        logs = self._trainer.evaluate(self, data, callback_list)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x: Any, batch_size: int | None = None, verbose: str | int = "auto",
                steps: int | None = None, callbacks: Sequence[Callback] | None = None, *,
                device_resident: bool | None = None) -> Any:
        """Model outputs for every example, in input order (``keras.Model.predict``).

        Args:
            x: inputs ``[num_examples, ...]`` or an iterable of input batches.
            batch_size: the **global** batch, default 32.
            verbose: ``"auto"``/1 progress bar, 0 silent.
            steps: batches to predict (default: all of ``x``).
            callbacks: list of `mirrorfit.callbacks.Callback` (``on_predict_*`` hooks).
            device_resident: as in `evaluate`.

        Returns:
            NumPy array(s) ``[num_examples, ...]``: exactly ``len(x)`` rows, padding removed.

        Raises:
            ValueError: for an invalid argument (named), or inputs that do not match the
                built model.
            TypeError: for an argument of the wrong type.
            NotImplementedError: for a model without ``call`` (`Model.call`).
        """
        verbose = verbosity(verbose)
        resident.check_setting(device_resident)
        if not (self.has_call or overridden(self, "predict_step")):
            self.call(x)  # raises its error, which names call
        data = self._adapter_for(x, batch_size=batch_size, steps=steps, with_targets=False)
        resident.choose(device_resident, [data], self._strategy, automatic=False)
        callback_list = self._trainer.callback_list(self, callbacks, verbose=verbose,
                                                    steps=data.steps)
        return self._trainer.predict(self, data, callback_list)


ONE_SHOT_VALIDATION = (
    "validation_data is a one-shot {kind} (iter(validation_data) is validation_data): it runs "
    "dry in the first validation, but this fit validates {count} times (epochs={epochs}, "
    "initial_epoch={initial_epoch}, validation_freq={freq}). Pass a re-iterable that starts "
    "over at every validation: a list of (x, y) batches, arrays (x_val, y_val), a "
    "mirrorfit.utils.PyDataset, a tf.data dataset, or an object whose __iter__ returns a new "
    "generator; or give validation_steps to read that many batches on from the same "
    "generator each time, as Keras. Received: validation_data=a one-shot {kind} and "
    "validation_steps=None"
)


def _check_validation_repeats(validation: Any, *, epochs: int, initial_epoch: int,
                              validation_freq: int) -> None:
    """Refuses, at ``fit``'s start, a one-shot validation generator that fit would have to
    read more than once (it would fail at the second validation, epochs into training).

    Raises:
        ValueError: naming ``validation_data``, the validation count and the fixes.
    """
    if not getattr(validation, "one_shot", False) or validation.steps is not None:
        return
    count = sum((epoch + 1 - initial_epoch) % validation_freq == 0
                for epoch in range(initial_epoch, epochs))
    if count > 1:
        raise ValueError(ONE_SHOT_VALIDATION.format(
            kind=validation.kind, count=count, epochs=epochs, initial_epoch=initial_epoch,
            freq=validation_freq))
