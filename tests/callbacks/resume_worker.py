"""A small training run for tests/callbacks/test_resume.py, meant to be killed and run again.

    python tests/callbacks/resume_worker.py OUT_DIR [--no-backup]

Trains an MLP with BatchNorm and Dropout on 2 simulated CPU devices for 3 epochs (13 steps
each, the last one partial) with ``BackupAndRestore(OUT_DIR/backup, save_freq=4)``, then
writes the final weights, step and history to ``OUT_DIR/result.npz``, with ``first_step``:
the global step this process started training from.

Environment:
    KILL_AT_STEP=k: SIGKILL this process after global train step ``k`` (and its backup).
    KILL_IN_SAVE_AT_STEP=k: SIGKILL this process in the middle of writing the backup of
        global step ``k``: the backup's JSON file is half written and the version is not
        renamed into place yet.
    TERM_AT_STEP=k: send SIGTERM to this process while global train step ``k`` runs, with
        ``BackupAndRestore(save_before_preemption=True)``: it saves after step ``k`` and exits
        with code 76.
    DTYPE_POLICY=name: train under this dtype policy with a `LossScaleOptimizer` whose
        scale overflows and grows during the run; its scale and counter are written too.
"""

import os
import signal
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

import mirrorfit as mf  # noqa: E402

EPOCHS, BATCH, SAVE_FREQ = 3, 16, 4
STEPS_PER_EPOCH = 13  # 200 rows in batches of 16, the last one partial


class Killer(mf.callbacks.Callback):
    """Kills the process at a global step (a kill inside the write of the backup of step
    ``kill_in_save_at`` is `main`'s patched JSON writer)."""

    def __init__(self, kill_at: int | None, kill_in_save_at: int | None,
                 term_at: int | None = None):
        super().__init__()
        self.kill_at, self.kill_in_save_at = kill_at, kill_in_save_at
        self.term_at = term_at
        self.first_step: int | None = None  # global step this process started from

    def on_train_batch_begin(self, batch, logs=None):
        done = int(jax.device_get(self.model.state.step))
        if self.first_step is None:
            self.first_step = done
        if done + 1 == self.term_at:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_batch_end(self, batch, logs=None):
        if int(jax.device_get(self.model.state.step)) == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


def main(out_dir: str, backup: bool) -> None:
    kill_at = os.environ.get("KILL_AT_STEP")
    kill_in_save_at = os.environ.get("KILL_IN_SAVE_AT_STEP")
    term_at = os.environ.get("TERM_AT_STEP")
    killer = Killer(kill_at and int(kill_at), kill_in_save_at and int(kill_in_save_at),
                    term_at and int(term_at))
    write_json = ocp.JsonCheckpointHandler._save_fn

    async def half_write_then_die(self, item, directory):
        # The backup's own step, not the step running now: backups are written in the
        # background, so the previous backup's write may still run during step k.
        info = item.get("info", {}) if isinstance(item, dict) else {}
        written_at = info.get("epoch", 0) * STEPS_PER_EPOCH + info.get("step", 0)
        if info.get("kind") == "backup" and written_at == killer.kill_in_save_at:
            text = str(item)
            (directory / "metadata").write_text(text[: len(text) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        await write_json(self, item, directory)

    ocp.JsonCheckpointHandler._save_fn = half_write_then_die

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32) + (x[:, 2] > 1).astype(np.int32)
    policy = os.environ.get("DTYPE_POLICY")
    optimizer = "adam" if policy is None else mf.optimizers.LossScaleOptimizer(
        mf.optimizers.Adam(), initial_scale=2.0**18, dynamic_growth_steps=4)
    with mf.MirroredStrategy().scope():
        model = mf.Sequential([nn.Dense(32), nn.BatchNorm(), nn.relu, nn.Dropout(0.3),
                               nn.Dense(3), nn.softmax], input_shape=(8,), seed=1,
                              dtype_policy=policy)
        model.compile(optimizer, "sparse_categorical_crossentropy", ["accuracy"])
    # The backup callback runs before the killer, so a kill after step k follows k's backup.
    callbacks = [mf.callbacks.BackupAndRestore(os.path.join(out_dir, "backup"),
                                               save_freq=SAVE_FREQ,
                                               save_before_preemption=bool(term_at))
                 ] if backup else []
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0,
                        validation_data=(x[:40], y[:40]), callbacks=callbacks + [killer])
    scaling = {} if policy is None else {
        "loss_scale": np.asarray(model.opt_state.dynamic_scale),
        "step_counter": np.asarray(model.opt_state.step_counter)}
    np.savez(os.path.join(out_dir, "result.npz"), *model.get_weights(), **scaling,
             step=np.asarray(model.state.step), first_step=np.asarray(killer.first_step),
             **{f"history_{k}": np.asarray(v) for k, v in history.history.items()})


if __name__ == "__main__":
    main(sys.argv[1], backup="--no-backup" not in sys.argv[2:])
