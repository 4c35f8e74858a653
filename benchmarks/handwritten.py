"""The zero-overhead references: hand-written ``jit(shard_map)`` train, evaluate and predict loops,
and a plain ``jit`` train loop with no mesh for one device (`JitTrainer`).

This is the loop a JAX expert writes by hand for MirroredStrategy-style data parallelism:

* params and optimizer state replicated with ``NamedSharding(mesh, P())`` and donated;
* each global batch gathered from NumPy with a shuffled index and split along dim 0 with
  ``NamedSharding(mesh, P("batch"))`` via ``jax.make_array_from_process_local_data``;
* gradients all-reduced with ``lax.pmean`` inside ``jax.shard_map`` and applied with optax Adam.
  The shard_maps use ``check_vma=False``: with the default ``check_vma=True``, the gradient of
  replicated params is already ``psum``-ed by the transpose of the implicit broadcast, so an
  explicit ``pmean`` would all-reduce every gradient twice (and sum rather than average);
* at most 2 steps in flight: after dispatching step k, block on step k-1's output. Queuing many
  collective steps on a multi-device CPU backend deadlocks XLA ("Termination timeout for all
  reduce"), and 2 in flight already overlaps input gathering with compute;
* the loss is the crossentropy ``mirrorfit``'s ``fit`` compiles, called as its public function
  (``mf.losses.sparse_categorical_crossentropy``: on probabilities, Keras' formula; on logits,
  the custom-VJP one with no scatter in its gradient), so ``fit`` against a hand-written loop
  compares equal programs (issue 42); the Keras peers keep Keras' own.

Every runner's ``run(x, y, repeats)`` blocks until the device work is done and returns the number
of examples processed.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import mirrorfit as mf
from workloads import Workload

AXIS = "batch"


def _shard_map(fn, *, mesh, in_specs, out_specs):
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def make_mesh(num_devices: int) -> Mesh:
    """Returns a 1-D mesh with axis ``"batch"`` over the first ``num_devices`` devices."""
    return Mesh(np.array(jax.devices()[:num_devices]), (AXIS,))


def sparse_categorical_crossentropy(outputs: jax.Array, labels: jax.Array,
                                    from_logits: bool = False) -> jax.Array:
    """Per-example loss ``[batch, ...]`` from probabilities (or logits) ``[batch, ...,
    classes]`` and int labels ``[batch, ...]``: ``fit``'s, ``mf.losses.
    sparse_categorical_crossentropy``."""
    return mf.losses.sparse_categorical_crossentropy(labels, outputs, from_logits=from_logits)


def init_params(workload: Workload, mesh: Mesh, seed: int = 0):
    """Initializes the module's params on the host and replicates them over ``mesh``."""
    dummy = jnp.zeros((1, *workload.input_shape), jnp.float32)
    params = workload.module.init(jax.random.key(seed), dummy)["params"]
    return jax.device_put(params, NamedSharding(mesh, P()))


class Trainer:
    """Hand-written training loop; ``steps_per_call > 1`` fuses steps with ``lax.scan``.

    Args:
        workload: the model to train.
        mesh: 1-D device mesh with axis ``"batch"``.
        batch_size: global batch size (examples per step over all replicas).
        steps_per_call: train steps per device call; > 1 scans over ``[steps_per_call, batch_size, ...]``
            stacked global batches.
        seed: seed for params and for the per-epoch shuffle.
    """

    def __init__(self, workload: Workload, mesh: Mesh, batch_size: int, steps_per_call: int = 1,
                 seed: int = 0):
        self.batch_size = batch_size
        self.steps_per_call = steps_per_call
        self.rng = np.random.default_rng(seed)
        tx = optax.adam(1e-3)
        self.state, one_step = self._init(workload, mesh, tx, seed)
        data_spec = P(AXIS) if steps_per_call == 1 else P(None, AXIS)
        self.data_sharding = NamedSharding(mesh, data_spec)

        def train_step(state, x, y):
            if steps_per_call == 1:
                return one_step(state, (x, y))
            return lax.scan(one_step, state, (x, y))

        step = _shard_map(train_step, mesh=mesh, in_specs=(P(), data_spec, data_spec),
                          out_specs=(P(), P()))
        self.step = jax.jit(step, donate_argnums=0)

    def _init(self, workload: Workload, mesh: Mesh, tx, seed: int):
        """Replicated state ``(params, opt_state)`` and ``one_step(state, (x, y)) -> (state, loss)``."""
        params = init_params(workload, mesh, seed)
        state = (params, jax.device_put(tx.init(params), NamedSharding(mesh, P())))
        return state, functools.partial(_train_one_step, workload.module.apply, tx)

    def _placed(self, x: np.ndarray, y: np.ndarray):
        """One call's rows ``[rows, ...]`` as sharded device arrays, stacked per step if fused."""
        if self.steps_per_call > 1:
            x = x.reshape(self.steps_per_call, self.batch_size, *x.shape[1:])
            y = y.reshape(self.steps_per_call, self.batch_size, *y.shape[1:])
        return (jax.make_array_from_process_local_data(self.data_sharding, x),
                jax.make_array_from_process_local_data(self.data_sharding, y))

    def run(self, x: np.ndarray, y: np.ndarray, epochs: int) -> int:
        """Trains ``epochs`` epochs on ``x`` ``[n, ...]``, ``y`` ``[n]``, dropping the last partial call."""
        group = self.steps_per_call * self.batch_size
        calls = len(x) // group
        pending = None
        for _ in range(epochs):
            perm = self.rng.permutation(len(x))
            for i in range(calls):
                idx = perm[i * group:(i + 1) * group]
                self.state, loss = self.step(self.state, *self._placed(x[idx], y[idx]))
                if pending is not None:
                    pending.block_until_ready()
                pending = loss
        jax.block_until_ready(self.state)
        return epochs * calls * group


class Preplaced:
    """A hand-written loop fed from device memory: the ceiling for a ``fit`` on host input.

    The whole data set is placed on the device once (mirrored over the mesh), outside the
    timed epochs, and each step's shuffled batch is gathered on the device inside the compiled
    call from the epoch's permutation (also on the device), so no host work and no transfer is
    on a step's path. The step is ``trainer``'s own (`Trainer` or `BatchNormTrainer`, one
    step per call), with the same shuffle.

    Args:
        trainer: the per-step loop whose step and state this one drives.
    """

    def __init__(self, trainer: Trainer):
        if trainer.steps_per_call != 1:
            raise ValueError("Preplaced drives one step per call. Received: steps_per_call="
                             f"{trainer.steps_per_call}")
        self.trainer = trainer
        self.mirrored = NamedSharding(trainer.data_sharding.mesh, P())
        step, batch = trainer.step, trainer.batch_size

        def gathered(state, x, y, perm, i):
            idx = lax.dynamic_slice_in_dim(perm, i * batch, batch)
            return step(state, jnp.take(x, idx, axis=0), jnp.take(y, idx, axis=0))

        self.step = jax.jit(gathered, donate_argnums=0)
        self._data = (None, None)  # (host identity, device copies)

    def _on_device(self, x: np.ndarray, y: np.ndarray):
        key = (x.__array_interface__["data"][0], x.shape, y.__array_interface__["data"][0])
        if self._data[0] != key:
            self._data = key, jax.device_put((x, y), self.mirrored)
        return self._data[1]

    def run(self, x: np.ndarray, y: np.ndarray, epochs: int) -> int:
        """Trains ``epochs`` epochs on ``x`` ``[n, ...]``, ``y`` ``[n]`` (placed once, untimed
        when the same arrays come again), dropping the last partial batch."""
        t = self.trainer
        x_dev, y_dev = self._on_device(x, y)
        calls = len(x) // t.batch_size
        pending = None
        for _ in range(epochs):
            perm = jax.device_put(t.rng.permutation(len(x)).astype(np.int32), self.mirrored)
            for i in range(calls):
                t.state, loss = self.step(t.state, x_dev, y_dev, perm, np.int32(i))
                if pending is not None:
                    pending.block_until_ready()
                pending = loss
        jax.block_until_ready(t.state)
        return epochs * calls * t.batch_size


def _train_one_step(apply_fn, tx, carry, batch, axis: str | None = AXIS):
    """One Adam step on a batch; with ``axis``, gradients and loss are averaged over replicas.

    ``axis=None`` is the single-device step of `JitTrainer`: no collective at all.
    """
    params, opt_state = carry
    x, y = batch

    def loss_fn(p):
        return sparse_categorical_crossentropy(apply_fn({"params": p}, x), y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    if axis is not None:
        grads, loss = lax.pmean((grads, loss), axis)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss


class JitTrainer(Trainer):
    """The true single-device ceiling: a plain ``jax.jit`` train step, no mesh, no ``shard_map``.

    What a JAX expert writes for one device: params and optimizer state committed to
    ``jax.devices()[0]`` and donated, each shuffled batch placed with ``jax.device_put``, no
    collective, at most 2 steps in flight. Same model, loss, optimizer and shuffle as `Trainer`.

    Args:
        workload: the model to train.
        batch_size: examples per step.
        seed: seed for params and for the per-epoch shuffle.
    """

    def __init__(self, workload: Workload, batch_size: int, seed: int = 0):
        self.batch_size = batch_size
        self.steps_per_call = 1
        self.rng = np.random.default_rng(seed)
        self.device = jax.devices()[0]
        tx = optax.adam(1e-3)
        dummy = jnp.zeros((1, *workload.input_shape), jnp.float32)
        params = workload.module.init(jax.random.key(seed), dummy)["params"]
        self.state = jax.device_put((params, tx.init(params)), self.device)
        step = functools.partial(_train_one_step, workload.module.apply, tx, axis=None)
        self.step = jax.jit(lambda state, x, y: step(state, (x, y)), donate_argnums=0)

    def _placed(self, x: np.ndarray, y: np.ndarray):
        """One batch ``x`` ``[batch, ...]``, ``y`` ``[batch]`` on the device."""
        return jax.device_put((x, y), self.device)


class NumpyJitTrainer(JitTrainer):
    """`JitTrainer` passing its NumPy batches straight into the step, whose call transfers them
    (what many Flax examples do): at one device on the CPU, the fastest hand loop we know."""

    def _placed(self, x: np.ndarray, y: np.ndarray):
        return x, y


class _Inference:
    """Shared batching for evaluate/predict: ordered global batches, the last one padded and masked."""

    def __init__(self, workload: Workload, mesh: Mesh, batch_size: int, seed: int = 0):
        self.apply_fn = workload.module.apply
        self.mesh = mesh
        self.batch_size = batch_size
        self.params = init_params(workload, mesh, seed)
        self.data_sharding = NamedSharding(mesh, P(AXIS))

    def batches(self, arrays: tuple[np.ndarray, ...]):
        """Yields ``(valid_rows, device arrays..., mask [batch_size])`` per global batch."""
        n, b = len(arrays[0]), self.batch_size
        ones = jax.make_array_from_process_local_data(self.data_sharding, np.ones(b, np.float32))
        for start in range(0, n, b):
            valid = min(b, n - start)
            if valid == b:
                parts, mask = [a[start:start + b] for a in arrays], ones
            else:
                idx = np.concatenate([np.arange(start, n), np.zeros(b - valid, np.int64)])
                parts = [a[idx] for a in arrays]
                mask_np = (np.arange(b) < valid).astype(np.float32)
                mask = jax.make_array_from_process_local_data(self.data_sharding, mask_np)
            placed = [jax.make_array_from_process_local_data(self.data_sharding, p) for p in parts]
            yield valid, *placed, mask


class Evaluator(_Inference):
    """Hand-written evaluate: mean loss and accuracy, sums all-reduced with ``lax.psum``."""

    def __init__(self, workload: Workload, mesh: Mesh, batch_size: int, seed: int = 0):
        super().__init__(workload, mesh, batch_size, seed)

        def eval_step(params, x, y, mask):
            probs = self.apply_fn({"params": params}, x)
            loss = sparse_categorical_crossentropy(probs, y) * mask
            correct = (jnp.argmax(probs, -1) == y) * mask
            return lax.psum(jnp.stack([loss.sum(), correct.sum(), mask.sum()]), AXIS)

        spec = P(AXIS)
        self.step = jax.jit(_shard_map(eval_step, mesh=mesh, in_specs=(P(), spec, spec, spec),
                                          out_specs=P()))

    def run(self, x: np.ndarray, y: np.ndarray, passes: int) -> int:
        """Evaluates ``passes`` times over ``x`` ``[n, ...]``, ``y`` ``[n]``; keeps 2 batches in flight."""
        for _ in range(passes):
            sums, pending = [], None
            for _, xb, yb, mask in self.batches((x, y)):
                out = self.step(self.params, xb, yb, mask)
                if pending is not None:
                    sums.append(np.asarray(pending))
                pending = out
            sums.append(np.asarray(pending))
            loss, correct, count = np.sum(sums, axis=0)
            self.result = (loss / count, correct / count)
        return passes * len(x)


class Predictor(_Inference):
    """Hand-written predict: per-replica forward pass, probabilities gathered to NumPy ``[n, 10]``."""

    def __init__(self, workload: Workload, mesh: Mesh, batch_size: int, seed: int = 0):
        super().__init__(workload, mesh, batch_size, seed)

        def predict_step(params, x):
            return self.apply_fn({"params": params}, x)

        self.step = jax.jit(_shard_map(predict_step, mesh=mesh, in_specs=(P(), P(AXIS)),
                                          out_specs=P(AXIS)))

    def run(self, x: np.ndarray, y: np.ndarray, passes: int) -> int:
        """Predicts ``passes`` times over ``x`` ``[n, ...]`` (``y`` unused); keeps 2 batches in flight."""
        del y
        for _ in range(passes):
            outs, pending = [], None
            for valid, xb, _ in self.batches((x,)):
                out = self.step(self.params, xb)
                if pending is not None:
                    outs.append(np.asarray(pending[0])[:pending[1]])
                pending = (out, valid)
            outs.append(np.asarray(pending[0])[:pending[1]])
            self.result = np.concatenate(outs)
        return passes * len(x)


def _cast_floating(tree, dtype):
    return jax.tree.map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a,
                        tree)


class BatchNormTrainer(Trainer):
    """Hand-written training loop for a module with BatchNorm that returns logits (the GPU workload).

    Same loop as `Trainer` (replicated, donated state; ``lax.pmean`` of the gradients; at most 2
    calls in flight; ``steps_per_call > 1`` scans over stacked batches), with the ``batch_stats``
    collection carried and ``pmean``-ed like the gradients, and
    `sparse_categorical_crossentropy` of float32 logits as the loss.

    With ``compute_dtype`` (e.g. ``jnp.bfloat16``) it does by hand what
    ``dtype_policy="mixed_bfloat16"`` does in ``mirrorfit``: inside the step, the float32 params
    (but the top-level modules named in ``uncast``, as the policy leaves ``mf.layers.
    Embedding``'s table) and the floating inputs are cast to ``compute_dtype`` before the
    forward pass, the logits cast back to float32 before the loss, and the ``batch_stats``
    kept float32; the gradients (of the float32 params, through the casts) and the Adam state
    stay float32.

    Args:
        workload, mesh, batch_size, steps_per_call, seed: as `Trainer`.
        compute_dtype: the forward pass's dtype; ``None``: the params' own (float32).
    """

    uncast: tuple[str, ...] = ()  # top-level modules whose params are not cast

    def __init__(self, workload: Workload, mesh: Mesh, batch_size: int, steps_per_call: int = 1,
                 seed: int = 0, compute_dtype=None):
        self.compute_dtype = compute_dtype
        super().__init__(workload, mesh, batch_size, steps_per_call, seed)

    def _forward(self, apply_fn):
        """``apply_fn`` under the policy: params and floating inputs cast in, outputs out."""
        if self.compute_dtype is None:
            return apply_fn

        def cast_params(params):
            return {k: v if k in self.uncast else _cast_floating(v, self.compute_dtype)
                    for k, v in params.items()}

        def forward(variables, x, **kwargs):
            cast = {k: v if k == "batch_stats" else cast_params(v)
                    for k, v in variables.items()}
            out = apply_fn(cast, _cast_floating(x, self.compute_dtype), **kwargs)
            if isinstance(out, tuple):  # (logits, mutated collections)
                logits, updates = out
                return logits.astype(jnp.float32), jax.tree.map(
                    lambda new, old: new.astype(old.dtype), updates,
                    {k: variables[k] for k in updates})
            return out.astype(jnp.float32)

        return forward

    def _init(self, workload: Workload, mesh: Mesh, tx, seed: int):
        """Replicated ``(params, batch_stats, opt_state)`` and the step that carries them."""
        dummy = jnp.zeros((1, *workload.input_shape), workload.input_dtype)
        variables = workload.module.init(jax.random.key(seed), dummy, train=False)
        state = jax.device_put((variables["params"], variables["batch_stats"],
                                tx.init(variables["params"])), NamedSharding(mesh, P()))
        apply_fn = self._forward(workload.module.apply)

        def one_step(state, batch):
            params, batch_stats, opt_state = state
            x, y = batch

            def loss_fn(p):
                logits, updates = apply_fn({"params": p, "batch_stats": batch_stats}, x,
                                           train=True, mutable=["batch_stats"])
                loss = sparse_categorical_crossentropy(logits, y, from_logits=True).mean()
                return loss, updates["batch_stats"]

            (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
            grads, batch_stats, loss = lax.pmean((grads, batch_stats, loss), AXIS)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), batch_stats, opt_state), loss

        return state, one_step


class LMTrainer(BatchNormTrainer):
    """Hand-written training loop for a language model (the GPU benchmark's `DecoderLM`).

    The same loop and policy casts as `BatchNormTrainer`, for a module with params only:
    tokens ``[batch, seq]`` in, logits ``[batch, seq, vocab]`` out, and the loss
    `sparse_categorical_crossentropy` of float32 logits, averaged over every token of the
    per-replica batch, then ``lax.pmean``-ed with the gradients. The token embedding's table
    (``wte``, an ``mf.layers.Embedding``) is not cast: it gathers float32 rows, as under the
    policy.
    """

    uncast = ("wte",)

    def _init(self, workload: Workload, mesh: Mesh, tx, seed: int):
        """Replicated ``(params, opt_state)`` and the step that carries them."""
        dummy = jnp.zeros((1, *workload.input_shape), workload.input_dtype)
        params = workload.module.init(jax.random.key(seed), dummy)["params"]
        state = jax.device_put((params, tx.init(params)), NamedSharding(mesh, P()))
        apply_fn = self._forward(workload.module.apply)

        def one_step(state, batch):
            params, opt_state = state
            tokens, targets = batch

            def loss_fn(p):
                logits = apply_fn({"params": p}, tokens)
                return sparse_categorical_crossentropy(logits, targets, from_logits=True).mean()

            loss, grads = jax.value_and_grad(loss_fn)(params)
            grads, loss = lax.pmean((grads, loss), AXIS)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        return state, one_step
