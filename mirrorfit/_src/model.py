"""`Model` and `Sequential`: the tf.keras facade over a Flax module.

The model owns its `TrainState` (mirrored on the devices of the strategy that was active when
it was created), turns user arguments into data adapters, validates them, and hands the loops
to the `Trainer`. It holds no training logic of its own.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from mirrorfit._src import checkpoint as checkpoint_lib
from mirrorfit._src import data as data_lib
from mirrorfit._src import losses as losses_lib
from mirrorfit._src import metrics as metrics_lib
from mirrorfit._src import optimizers as optimizers_lib
from mirrorfit._src import steps as steps_lib
from mirrorfit._src.callbacks import CallbackList, History
from mirrorfit._src.modules import adapt, sequential
from mirrorfit._src.state import TrainState, create_state
from mirrorfit._src.strategy import BATCH_AXIS, get_strategy, in_scope
from mirrorfit._src.trainer import Trainer, predict

OUTSIDE_SCOPE_WARNING = (
    "This model was created outside any strategy.scope() while {n} devices are available, so "
    "it trains on one device only. To mirror it on all of them, create it inside "
    "`with mf.MirroredStrategy().scope():`."
)
_warned_outside_scope = False


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in value
    )


def _verbosity(verbose: Any) -> int:
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2):
        raise ValueError(f'verbose must be "auto", 0, 1 or 2. Received: verbose={verbose!r}')
    return int(verbose)


class Model:
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

    Params are created replicated (``NamedSharding(mesh, P())``) on the devices of the
    strategy active at construction (`mirrorfit.get_strategy`).

    Raises:
        TypeError: if ``module`` is not a Flax module.
    """

    def __init__(self, module: Any, input_shape: Any = None, *, input_dtype: Any = jnp.float32,
                 seed: int = 0):
        self._adapter = adapt(module)
        self.module = module
        self._strategy = get_strategy()
        self._warn_if_outside_scope()
        self._input_dtype = input_dtype
        self._seed = int(seed)
        self._state: TrainState | None = None
        self._input_spec: Any = None
        self._trainer: Trainer | None = None
        self._predict_fn: Callable | None = None
        self.stop_training = False
        self.history: History | None = None
        if input_shape is not None:
            self.build(input_shape)

    def _warn_if_outside_scope(self) -> None:
        global _warned_outside_scope
        n = jax.local_device_count()
        if not in_scope() and n > 1 and not _warned_outside_scope:
            _warned_outside_scope = True
            warnings.warn(OUTSIDE_SCOPE_WARNING.format(n=n), UserWarning, stacklevel=3)

    # -- building -------------------------------------------------------------------------

    @property
    def strategy(self):
        """The strategy whose devices this model's variables are mirrored on."""
        return self._strategy

    @property
    def built(self) -> bool:
        return self._state is not None

    def build(self, input_shape: Any) -> None:
        """Creates the params for examples of ``input_shape`` (no batch dimension).

        Raises:
            TypeError: if ``input_shape`` is not a tuple of ints or a dict/list of them.
        """
        shapes = jax.tree.map(tuple, input_shape, is_leaf=_is_shape)
        leaves = jax.tree.leaves(shapes, is_leaf=_is_shape)
        if not leaves or not all(_is_shape(s) for s in leaves):
            raise TypeError(
                "input_shape must be the shape of one example without the batch dimension, "
                f"e.g. (784,), or a dict/list of such shapes. Received: input_shape={input_shape!r}"
            )
        sample = jax.tree.map(lambda s: np.zeros((1, *s), self._input_dtype), shapes,
                              is_leaf=_is_shape)
        self._build_from(sample)

    def _build_from(self, x: Any) -> None:
        sample = jax.tree.map(lambda a: np.asarray(a)[:1], x)
        init = jax.jit(self._adapter.init, out_shardings=self._strategy.replicated_sharding)
        params, model_state = init(jax.random.PRNGKey(self._seed), sample)
        self._input_spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype),
                                        _lists_to_tuples(sample))
        opt_state = None
        if self._trainer is not None:
            opt_state = self._init_opt_state(params)
        self._state = self._strategy.replicate_arrays(
            create_state(params, model_state, opt_state, self._seed))

    def _init_opt_state(self, params):
        init = jax.jit(self._trainer.config.optimizer.init,
                       out_shardings=self._strategy.replicated_sharding)
        return init(params)

    def _check_input(self, x: Any, name: str = "x") -> None:
        """Builds on first use, or checks per-example shapes against the built model."""
        if self._state is None:
            self._build_from(x)
            return
        received = jax.tree.map(lambda a: np.shape(a)[1:], _lists_to_tuples(x))
        expected = jax.tree.map(lambda spec: spec.shape, self._input_spec)
        if received != expected:
            raise ValueError(
                f"Input {name} does not match the model: expected per-example shape "
                f"{expected} (without the batch dimension), as the model was built with. "
                f"Pass inputs of that shape, or create a new model for the new shape. "
                f"Received: {name} with per-example shape {received}"
            )

    # -- compile / fit / evaluate / predict -------------------------------------------------

    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Sequence[Any] | None
                = None, *, steps_per_execution: int = 1) -> None:
        """Configures training, as ``keras.Model.compile``.

        Args:
            optimizer: an ``optax.GradientTransformation`` or a Keras name (``"adam"``,
                ``"adamw"``, ``"sgd"``, ``"rmsprop"``), with Keras' default learning rates.
            loss: a callable ``(y_true, y_pred) -> per-example loss [batch]``, a
                `mirrorfit.losses` object, or a Keras loss name.
            metrics: list of metric names (``"accuracy"``, ``"mae"``, ...), callables or
                `mirrorfit.metrics.Metric` objects.
            steps_per_execution: train steps fused into one device call (``lax.scan`` over
                ``K`` global batches). Callbacks see the values at the end of each group.

        Raises:
            ValueError: for an unknown name or a non-positive ``steps_per_execution``.
            TypeError: for arguments of the wrong type.
        """
        if loss is None:
            raise ValueError("compile needs a loss, e.g. loss=\"sparse_categorical_crossentropy\"."
                             " Received: loss=None")
        tx = optimizers_lib.get(optimizer)
        loss_fn = losses_lib.get(loss)
        if metrics is not None and (isinstance(metrics, (str, dict)) or not isinstance(
                metrics, Sequence)):
            raise TypeError("metrics must be a list, e.g. metrics=[\"accuracy\"]. "
                            f"Received: metrics={metrics!r}")
        metric_objs = [metrics_lib.get(m) for m in (metrics or [])]
        if isinstance(steps_per_execution, bool) or not isinstance(
                steps_per_execution, (int, np.integer)) or steps_per_execution < 1:
            raise ValueError("steps_per_execution must be a positive int. "
                             f"Received: steps_per_execution={steps_per_execution!r}")
        config = steps_lib.StepConfig(self._adapter, loss_fn, tuple(metric_objs), tx)
        trainer = Trainer(self._strategy, config, int(steps_per_execution))
        self._trainer = trainer
        self._compile_args = {"optimizer": optimizer, "loss": loss, "metrics": metrics,
                              "steps_per_execution": int(steps_per_execution)}
        if self._state is not None:
            self._state = self._state._replace(opt_state=self._init_opt_state(self._state.params))

    @property
    def compiled(self) -> bool:
        return self._trainer is not None

    def _require_compiled(self, method: str) -> Trainer:
        if self._trainer is None:
            raise ValueError(f"You must call model.compile(optimizer, loss) before model.{method}()."
                             " Received: an uncompiled model")
        return self._trainer

    def _array_or_iterable(self, x, y, sample_weight, batch_size, *, shuffle, steps,
                           with_targets=True):
        n = self._strategy.num_replicas_in_sync
        if x is None:
            raise ValueError("x is required: arrays, a dict/tuple of arrays, or an iterable of "
                             "batches. Received: x=None")
        if data_lib.is_array_input(x):
            if with_targets and y is None:
                raise ValueError("y is required when x is an array (targets for the loss). "
                                 "Received: y=None")
            data = data_lib.ArrayData(x, y if with_targets else None, sample_weight,
                                      batch_size=data_lib.check_batch_size(batch_size),
                                      num_replicas=n, shuffle=shuffle, seed=self._seed)
            if steps is not None:
                data.steps = min(data.steps, _positive_int(steps, "steps_per_epoch"))
            self._check_input(data.x)
            return data
        if y is not None:
            raise ValueError("y must be None when x is an iterable of (x, y) batches. "
                             f"Received: y of type {type(y).__name__}")
        try:
            iter(x)
        except TypeError:
            raise TypeError("x must be an array, a dict/tuple of arrays, or an iterable of "
                            f"batches. Received: x of type {type(x).__name__}") from None
        data = data_lib.IterableData(x, steps_per_epoch=None if steps is None else _positive_int(
            steps, "steps_per_epoch"), num_replicas=n, with_targets=with_targets)
        return data

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, sample_weight=None,
            initial_epoch=0, steps_per_epoch=None, validation_freq=1) -> History:
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
            ValueError, TypeError: for invalid arguments (the message names the argument).
        """
        trainer = self._require_compiled("fit")
        verbose = _verbosity(verbose)
        epochs = _positive_int(epochs, "epochs")
        if not 0.0 <= float(validation_split) < 1.0:
            raise ValueError("validation_split must be in [0, 1), the fraction of rows held out "
                             f"for validation. Received: validation_split={validation_split!r}")
        train = self._array_or_iterable(x, y, sample_weight, batch_size, shuffle=bool(shuffle),
                                        steps=steps_per_epoch)
        validation = None
        if validation_split:
            if not isinstance(train, data_lib.ArrayData):
                raise ValueError("validation_split needs array inputs; for an iterable pass "
                                 "validation_data. Received: x of type "
                                 f"{type(x).__name__}")
            train, validation = train.split(validation_split)
            train = train.with_replicas(self._strategy.num_replicas_in_sync)
            validation = validation.with_replicas(self._strategy.num_replicas_in_sync)
            if steps_per_epoch is not None:
                train.steps = min(train.steps, steps_per_epoch)
        elif validation_data is not None:
            validation = self._validation(validation_data, batch_size)
        return trainer.fit(self, train, epochs=epochs, initial_epoch=int(initial_epoch),
                           callbacks=callbacks, verbose=verbose, validation=validation,
                           validation_freq=_positive_int(validation_freq, "validation_freq"))

    def _validation(self, validation_data, batch_size):
        if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
            raise ValueError("validation_data must be a tuple (x_val, y_val) or (x_val, y_val, "
                             f"sample_weight). Received: validation_data of type "
                             f"{type(validation_data).__name__}")
        x_val, y_val, *rest = validation_data
        return self._array_or_iterable(x_val, y_val, rest[0] if rest else None, batch_size,
                                       shuffle=False, steps=None)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 return_dict=False, callbacks=None):
        """Loss and metrics over all examples, exact despite padding (``keras.Model.evaluate``).

        Args:
            x, y: as in `fit`. ``batch_size`` is the global batch, default 32.
            return_dict: return ``{"loss": ..., metric: ...}`` instead of a list.

        Returns:
            The loss (a float) if there are no metrics, else ``[loss, *metrics]``, or a dict.
        """
        trainer = self._require_compiled("evaluate")
        verbose = _verbosity(verbose)
        data = self._array_or_iterable(x, y, sample_weight, batch_size, shuffle=False, steps=None)
        callback_list = self._callback_list(callbacks, verbose, data)
        logs = trainer.evaluate(self, data, callback_list)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=None, verbose="auto", callbacks=None) -> Any:
        """Model outputs for every example, in input order (``keras.Model.predict``).

        Args:
            x: inputs ``[num_examples, ...]`` or an iterable of input batches.
            batch_size: the global batch, default 32.

        Returns:
            NumPy array(s) ``[num_examples, ...]``: exactly ``len(x)`` rows, padding removed.
        """
        verbose = _verbosity(verbose)
        data = self._array_or_iterable(x, None, None, batch_size, shuffle=False, steps=None,
                                       with_targets=False)
        if self._predict_fn is None:
            self._predict_fn = self._strategy.compile_replica_fn(
                steps_lib.make_predict_step(self._adapter), (P(), P(BATCH_AXIS)), P(BATCH_AXIS))
        callback_list = self._callback_list(callbacks, verbose, data)
        return predict(self._strategy, self._predict_fn, self._state, data, callback_list)

    def _callback_list(self, callbacks, verbose, data):
        from mirrorfit._src.callbacks import ProgbarLogger

        cbs = list(callbacks or []) + ([ProgbarLogger(verbose)] if verbose == 1 else [])
        return CallbackList(cbs, model=self, params={"epochs": 1, "steps": data.steps,
                                                     "verbose": verbose})

    # -- weights ----------------------------------------------------------------------------

    @property
    def params(self) -> Any:
        """The Flax ``"params"`` pytree of replicated ``jax.Array`` s."""
        return None if self._state is None else self._state.params

    @property
    def opt_state(self) -> Any:
        """The optax state, replicated like the params (``None`` before compile)."""
        return None if self._state is None else self._state.opt_state

    @property
    def state(self) -> TrainState | None:
        """The whole training state (params, other collections, optimizer state, step, rng)."""
        return self._state

    def _weight_tree(self):
        if self._state is None:
            raise ValueError("The model has no weights yet: pass input_shape or call fit/predict"
                             " first. Received: an unbuilt model")
        return (self._state.params, self._state.model_state)

    def _weight_leaves(self) -> tuple[list[Any], Any, list[int]]:
        """Leaves and treedef of (params, model_state), and the indices that are weights
        (every numeric leaf; RNG key state of nnx modules is not a weight)."""
        leaves, treedef = jax.tree.flatten(self._weight_tree())
        numeric = [i for i, leaf in enumerate(leaves)
                   if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)]
        return leaves, treedef, numeric

    def get_weights(self) -> list[np.ndarray]:
        """Params then other collections as NumPy arrays, in a stable flatten order.

        The order is ``jax.tree.leaves`` of ``(params, model_state)`` (dict keys sorted, so a
        Dense layer gives ``bias`` before ``kernel``), stable across runs and processes.
        """
        leaves, _, numeric = self._weight_leaves()
        return [np.asarray(leaves[i]) for i in numeric]

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Sets weights from a list in `get_weights` order; nothing changes on a mismatch.

        Raises:
            ValueError: if the count or any shape differs, listing the mismatches.
        """
        leaves, treedef, numeric = self._weight_leaves()
        weights = list(weights)
        if len(weights) != len(numeric):
            raise ValueError(f"set_weights expected a list of {len(numeric)} arrays (as returned "
                             f"by get_weights). Received: {len(weights)} arrays")
        bad = [(i, leaves[i].shape, np.shape(w)) for i, w in zip(numeric, weights)
               if tuple(leaves[i].shape) != tuple(np.shape(w))]
        if bad:
            lines = "; ".join(f"#{i}: expected {e}, received {r}" for i, e, r in bad[:5])
            raise ValueError(f"set_weights got arrays of the wrong shape: {lines}")
        new = list(leaves)
        for i, w in zip(numeric, weights):
            new[i] = np.asarray(w, dtype=leaves[i].dtype)
        params, model_state = self._strategy.replicate_arrays(jax.tree.unflatten(treedef, new))
        self._state = self._state._replace(params=params, model_state=model_state)

    # -- saving ---------------------------------------------------------------------------

    def save_weights(self, path: str | os.PathLike) -> None:
        """Saves params and non-param collections to directory ``path`` with orbax.

        Writes a new version and then deletes the previous one, so a crash mid-save leaves
        the previous weights loadable. No pickle is involved.
        """
        checkpoint_lib.save_weights(self, path)

    def load_weights(self, path: str | os.PathLike) -> None:
        """Loads weights saved by `save_weights` or `save`, mirrored on this model's devices.

        The checkpoint may come from any number of devices. An unbuilt model is built with
        the saved input shape first.

        Raises:
            ValueError: if the saved tree or shapes differ from the model's, listing the first
                mismatching paths with expected and received shapes; nothing is loaded.
            mirrorfit._src.checkpoint.CheckpointError: (a ``ValueError``) naming the
                checkpoint if it is missing, truncated or corrupted.
        """
        checkpoint_lib.load_weights(self, path)

    def save(self, path: str | os.PathLike) -> None:
        """Saves the whole model to directory ``path``: weights, optimizer state, step, RNG.

        Compile arguments given as names (``"adam"``, ``"mse"``, ``["accuracy"]``) are stored
        too; objects are not (that would need pickle) and are passed again to `load_model`.
        """
        checkpoint_lib.save_model(self, path)

    def summary(self, print_fn: Callable[[str], Any] = print) -> None:
        """Prints the layer table from Flax's own ``tabulate``."""
        if self._state is None:
            raise ValueError("summary needs a built model: pass input_shape to the constructor "
                             "or call fit/predict first. Received: an unbuilt model")
        sample = jax.tree.map(lambda spec: np.zeros((1, *spec.shape), spec.dtype),
                              self._input_spec)
        print_fn(self._adapter.tabulate(jax.random.PRNGKey(self._seed), sample))


def Sequential(layers: Sequence[Callable[..., Any]], input_shape: Any = None, **kwargs) -> Model:
    """A `Model` over ``flax.linen.Sequential(layers)``, as ``keras.Sequential``.

    Each layer gets Keras' training flag: ``train``/``training`` if its ``__call__`` takes
    one, else ``deterministic`` (Dropout) and ``use_running_average`` (BatchNorm).

    Example:
        >>> model = mf.Sequential([nn.Dense(128), nn.relu, nn.Dense(10), nn.softmax],
        ...                       input_shape=(784,))
    """
    return Model(sequential(layers), input_shape, **kwargs)


def load_model(path: str | os.PathLike, module: Any, *, optimizer: Any = None, loss: Any = None,
               metrics: Sequence[Any] | None = None) -> Model:
    """Loads a model saved by `Model.save`, mirrored on the current strategy's devices.

    Args:
        path: the directory given to ``model.save``.
        module: the Flax module the model was built from (or the list of layers of a
            `Sequential`). Only weights are stored, never code.
        optimizer, loss, metrics: compile arguments; default to the names stored by ``save``.
            Required when the saved model was compiled with objects instead of names.

    Returns:
        A built `Model` (compiled if the saved one was) with the saved weights, optimizer
        state, step and RNG key: training continues exactly where it stopped.

    Raises:
        ValueError: if a needed compile argument was not stored and not given, or if the
            checkpoint does not match ``module`` (listing the mismatching paths).

    Example:
        >>> model.save("run/model")
        >>> with mf.MirroredStrategy().scope():
        ...     restored = mf.load_model("run/model", module)
    """
    found = checkpoint_lib.read_latest(path)
    input_shape, input_dtype = checkpoint_lib.decode_input_spec(found.info["input_spec"])
    stored = found.info.get("compile")
    if stored is not None:
        given = {"optimizer": optimizer, "loss": loss, "metrics": metrics}
        args = {k: stored[k] if v is None else v for k, v in given.items()}
        for name, value in args.items():
            if value is None:
                raise ValueError(
                    f"The model at {os.fspath(path)!r} was compiled with a {name} object, which "
                    f"is not stored (no pickle). Pass it again: mf.load_model(path, module, "
                    f"{name}=...). Received: {name}=None")
    if isinstance(module, (list, tuple)):
        module = sequential(module)
    model = Model(module, input_shape, input_dtype=input_dtype, seed=found.info["seed"])
    if stored is not None:
        model.compile(**args, steps_per_execution=stored["steps_per_execution"])
    # A save_weights checkpoint loads too, with fresh optimizer state, step and RNG key.
    checkpoint_lib.restore_into(model, found, weights_only=found.info.get("kind") != "model")
    return model


def _lists_to_tuples(tree: Any) -> Any:
    """Lists of inputs and tuples of inputs mean the same (positional module inputs)."""
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        return tuple(_lists_to_tuples(item) for item in tree)
    if isinstance(tree, dict):
        return {key: _lists_to_tuples(value) for key, value in tree.items()}
    return tree


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int. Received: {name}={value!r}")
    return int(value)

