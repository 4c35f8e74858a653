"""A backup written by mirrorfit before the package layout of issue 27 (commit e65b38e) still
resumes: its fingerprints name mirrorfit's functions by their old private module paths
(``mirrorfit._src.regression_losses.mean_squared_error``), which compare equal to today's
layout-free names, so ``fit`` continues from it without a fingerprint error or warning.

``tests/data/backup_e65b38e`` was written by this script at e65b38e: 2 replicas, the model,
data and compile arguments of `_model` and `_fit`, ``BackupAndRestore(save_freq=2)``, and
training interrupted after global step 7 (epoch 1, step 2), so the newest backup, ``ckpt-3``,
is after global step 6 (epoch 1, step 1); ``ckpt-2`` is after step 4.
"""

import shutil
import warnings
from pathlib import Path

import jax
import numpy as np

import mirrorfit as mf

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "backup_e65b38e"
RTOL, ATOL = 1e-6, 1e-7  # the backup's first 6 steps ran on the old code; the rest here


def _model():
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Sequential([mf.layers.Dense(8, activation="relu"), mf.layers.Dense(1)],
                              input_shape=(4,), seed=3)
        model.compile("adam", mf.losses.mean_squared_error, ["mae"])
    return model


def _fit(model, callbacks):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    y = (x @ np.arange(1, 5, dtype=np.float32))[:, None]
    return model.fit(x, y, batch_size=8, epochs=2, shuffle=True, verbose=0,
                     callbacks=callbacks)


def test_backup_written_before_the_layout_move_resumes_at_its_step(tmp_path):
    uninterrupted = _model()
    expected = _fit(uninterrupted, [])
    backup_dir = tmp_path / "backup"
    shutil.copytree(FIXTURE, backup_dir)  # the backup is deleted after a normal end
    model = _model()
    started = []
    probe = mf.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: started.append(
        int(jax.device_get(model.state.step))) if not started else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = _fit(model, [mf.callbacks.BackupAndRestore(backup_dir, save_freq=2), probe])
    assert [w for w in caught if issubclass(w.category, mf.MirrorfitWarning)] == []
    assert started == [6]  # ckpt-3, the newest backup: no fingerprint error refused it
    assert int(jax.device_get(model.state.step)) == 10
    for got, want in zip(model.get_weights(), uninterrupted.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert history.epoch == expected.epoch == [0, 1]
    for key in ("loss", "mae"):  # epoch 0 restored from the backup, epoch 1 trained here
        np.testing.assert_allclose(history.history[key], expected.history[key], rtol=RTOL)
    assert not backup_dir.exists()  # delete_checkpoint=True: the copy is gone
    assert FIXTURE.joinpath("ckpt-3").is_dir()
