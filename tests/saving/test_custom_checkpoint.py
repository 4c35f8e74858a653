"""mf.Checkpoint / CheckpointManager / latest_checkpoint for custom loops: round trips,
numbering and pruning, restore onto another device count, damage detection."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from mirrorfit._src.saving.checkpoint import CheckpointError


def _state(strategy, scale=1.0):
    params = {"dense": {"kernel": jnp.full((3, 2), scale), "bias": jnp.arange(2.0)}}
    opt_state = optax.adam(1e-3).init(params)
    return strategy.replicate(params), strategy.replicate(opt_state)


def test_checkpoint_round_trip_restores_every_pytree_onto_other_device_count(tmp_path, allclose):
    on_8 = mf.MirroredStrategy(jax.devices()[:8])
    params, opt_state = _state(on_8, scale=2.0)
    ckpt = mf.Checkpoint(params=params, opt_state=opt_state, step=7)
    path = ckpt.save(tmp_path / "ckpts")
    assert path.endswith("ckpt-1")

    on_3 = mf.MirroredStrategy(jax.devices()[:3])
    fresh_params, fresh_opt = _state(on_3, scale=0.0)
    restored = mf.Checkpoint(params=fresh_params, opt_state=fresh_opt, step=0)
    restored.restore(path)
    allclose(restored.params, params, rtol=0)
    allclose(restored.opt_state, opt_state, rtol=0)
    assert int(restored.step) == 7
    kernel = restored.params["dense"]["kernel"]
    assert len(kernel.sharding.device_set) == 3  # placed like the value it replaced
    assert isinstance(restored.params["dense"]["kernel"], mf.Mirrored)


def test_checkpoint_manager_numbers_prunes_and_finds_latest(tmp_path):
    ckpt = mf.Checkpoint(w=np.zeros(2, np.float32))
    manager = mf.CheckpointManager(ckpt, tmp_path, max_to_keep=2)
    assert manager.latest_checkpoint is None and mf.latest_checkpoint(tmp_path) is None
    for value in (1.0, 2.0, 3.0):
        ckpt.w = np.full(2, value, np.float32)
        saved = manager.save()
    assert [p.rsplit("/", 1)[1] for p in manager.checkpoints] == ["ckpt-2", "ckpt-3"]
    assert mf.latest_checkpoint(tmp_path) == saved == manager.latest_checkpoint
    ckpt.w = np.zeros(2, np.float32)
    ckpt.restore(manager.checkpoints[0])
    np.testing.assert_array_equal(ckpt.w, [2.0, 2.0])
    ckpt.restore(tmp_path)  # a directory restores its newest version
    np.testing.assert_array_equal(ckpt.w, [3.0, 3.0])


def test_checkpoint_restore_rejects_mismatch_and_damage(tmp_path):
    ckpt = mf.Checkpoint(w=np.ones(3, np.float32))
    path = ckpt.save(tmp_path)
    other = mf.Checkpoint(w=np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"w: expected shape \(4,\), received \(3,\)"):
        other.restore(path)
    np.testing.assert_array_equal(other.w, np.ones(4))  # nothing restored
    with pytest.raises(CheckpointError, match="No checkpoint found"):
        ckpt.restore(tmp_path / "missing")
    with pytest.raises(ValueError, match="max_to_keep must be a positive int"):
        mf.CheckpointManager(ckpt, tmp_path, max_to_keep=0)
