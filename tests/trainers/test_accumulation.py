"""fit with gradient_accumulation_steps: each replica accumulates its own gradients and the
all-reduce of the gradients runs once per applied update. The same weights as the
per-micro-step all-reduce at 1, 3 and 8 replicas with a partial last batch, with and without
loss scaling; the compiled step's gradient all-reduce only inside the update branch;
BackupAndRestore resumes mid-cycle bitwise, and at another replica count by summing the
per-replica accumulators."""

import shutil
import warnings

import flax.linen as nn
import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import mirrorfit as mf
from mirrorfit._src.distribute.batch import place_batches
from mirrorfit._src.optimizers.accumulation import per_replica_accumulators
from mirrorfit._src.trainers import data_adapters, sharded_state
from tests.helpers import (
    Interrupt,
    all_reduce_operands,
    count_step_compiles,
    interrupt_after,
    tree_allclose,
    tree_equal,
)

_RNG = np.random.default_rng(0)
X = _RNG.normal(size=(100, 8)).astype(np.float32)  # 100 rows in batches of 24: last has 4
Y = _RNG.integers(0, 3, 100)


def _optimizer(loss_scale):
    opt = mf.optimizers.Adam(0.01, global_clipnorm=0.5, use_ema=True,
                             gradient_accumulation_steps=3)
    # A scale this high overflows at first: skipped micro-steps, decided by all replicas.
    return mf.optimizers.LossScaleOptimizer(opt, initial_scale=2.0**126) if loss_scale else opt


def _model(replicas, optimizer, steps_per_execution=1):
    with mf.MirroredStrategy(jax.devices()[:replicas]).scope():
        model = mf.Sequential([nn.Dense(16), nn.relu, nn.Dense(3), nn.softmax],
                              input_shape=(8,), seed=0)
        model.compile(optimizer, "sparse_categorical_crossentropy",
                      steps_per_execution=steps_per_execution)
    return model


def _fit(model, callbacks=(), epochs=2):
    return model.fit(X, Y, batch_size=24, epochs=epochs, verbose=0, shuffle=False,
                     callbacks=list(callbacks))


def _accumulators(model):
    leaves = []
    per_replica_accumulators(model.opt_state, lambda acc: leaves.extend(jax.tree.leaves(acc)))
    return leaves


@pytest.mark.parametrize("replicas,loss_scale,steps_per_execution",
                         [(1, True, 1), (3, False, 2), (8, True, 1)])
def test_accumulated_fit_equals_all_reduce_per_micro_step(monkeypatch, replicas, loss_scale,
                                                          steps_per_execution):
    local = _model(replicas, _optimizer(loss_scale), steps_per_execution)
    with count_step_compiles() as compiles:
        history = _fit(local).history
    assert compiles == [1]
    with monkeypatch.context() as patch:  # the path before: all-reduce, then accumulate
        patch.setattr(sharded_state, "_accumulating", lambda config: config)
        reference = _model(replicas, _optimizer(loss_scale), steps_per_execution)
        expected = _fit(reference).history
    # 2 epochs of 5 steps, 3 micro-steps per update: 3 updates and one micro-step pending
    # (fewer with loss scaling, whose first steps overflow and are skipped).
    # The same sums added in another order (replicas, then micro-steps): float32 rounding.
    tree_allclose(local.get_weights(), reference.get_weights(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-6)
    slots = _accumulators(local)
    assert slots and all(a.shape[0] == replicas and a.sharding.spec == P("batch")
                         for a in slots)
    pending = [np.sum(np.asarray(a), axis=0) for a in slots]
    if not loss_scale:  # the 10th micro-step is held per replica (skipped steps do not count)
        assert any(np.any(p != 0) for p in pending)
    tree_allclose(pending, [np.asarray(a) for a in _accumulators(reference)],
                  rtol=1e-5, atol=1e-7)


def _hlo_computations(hlo):
    """Compiled HLO text -> {computation name: its lines}; the entry's name starts "ENTRY"."""
    computations, name = {}, None
    for line in hlo.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            name = " ".join(line.split()[:2]) if line.startswith("ENTRY") else line.split()[0]
            computations[name] = []
        elif name is not None:
            computations[name].append(line)
    return computations


def test_gradients_are_all_reduced_only_in_the_update_branch():
    model = _model(2, _optimizer(False))
    with pytest.warns(mf.MirrorfitWarning, match="change no weight"):  # compiles the step
        model.fit(X[:24], Y[:24], batch_size=24, epochs=1, verbose=0)
    trainer = model.trainer
    data = data_adapters.get_data_adapter(X, Y, batch_size=24, num_replicas=2)
    batch = next(place_batches(data.batches(0), model.strategy))
    statistics = trainer._fresh_statistics(model.state, batch)
    hlo = trainer.train_fn.lower(model.state, statistics, batch).compile().as_text()
    computations = _hlo_computations(hlo)
    where = {name: all_reduce_operands("\n".join(lines))
             for name, lines in computations.items()}
    entry = next(name for name in computations if name.startswith("ENTRY"))
    # Every micro-step: one all-reduce of the statistics (loss, count) only.
    assert [len(ops) for ops in where[entry]] == [1]
    gradient_leaves = len(jax.tree.leaves(model.params))
    in_branches = [(name, len(ops)) for name, all_ops in where.items() if name != entry
                   for ops in all_ops]
    # Once per update: every gradient leaf in one all-reduce, in a branch of a conditional.
    assert [n for _, n in in_branches] == [gradient_leaves]
    branch = in_branches[0][0]
    assert any("conditional(" in line and branch in line for line in computations[entry])


def test_backup_and_restore_resumes_mid_cycle_bitwise_and_at_another_replica_count(tmp_path):
    model = _model(8, _optimizer(False))
    initial = jax.device_get(model.state)
    _fit(model)
    weights, opt_state = model.get_weights(), jax.device_get(model.opt_state)
    model.assign_state(**initial._asdict())
    backup = mf.callbacks.BackupAndRestore(tmp_path / "backup", save_freq=2)
    with pytest.raises(Interrupt):  # the backup at step 4: one micro-step into a cycle
        _fit(model, [backup, interrupt_after(model, 4)])
    assert any(np.any(np.asarray(a) != 0) for a in _accumulators(model))
    shutil.copytree(tmp_path / "backup", tmp_path / "copy")
    _fit(model, [backup])
    tree_equal(model.get_weights(), weights)
    tree_equal(jax.device_get(model.opt_state), opt_state)
    # At 3 replicas the 8 accumulator slots are summed into one: the same update, to
    # float32 rounding.
    other = _model(3, _optimizer(False))
    _fit(other, [mf.callbacks.BackupAndRestore(tmp_path / "copy", save_freq=2)])
    tree_allclose(other.get_weights(), weights, rtol=1e-5, atol=1e-6)


def test_fit_too_short_for_one_accumulated_update_warns_and_changes_nothing():
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Model(nn.Dense(3), input_shape=(8,), seed=1)
        model.compile(mf.optimizers.SGD(0.1, gradient_accumulation_steps=8),
                      mf.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.get_weights()
    with pytest.warns(mf.MirrorfitWarning, match=r"every gradient_accumulation_steps=8 train "
                      r"steps, but this fit runs 5 \(with 0 accumulated.*at least 8 steps"):
        model.fit(X, Y, batch_size=24, epochs=1, verbose=0)  # 5 steps
    tree_equal(model.get_weights(), before)
    with pytest.warns(mf.MirrorfitWarning, match=r"runs 2 \(with 5 accumulated"):
        model.fit(X[:48], Y[:48], batch_size=24, epochs=1, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", mf.MirrorfitWarning)
        model.fit(X[:24], Y[:24], batch_size=24, epochs=1, verbose=0)  # step 8: an update
    assert not np.array_equal(model.get_weights()[0], before[0])
