"""A short job for tests/distribute/multi_worker/test_multi_worker.py whose process
``--fail-rank`` raises.

    python tests/distribute/multi_worker/multi_worker_failure_script.py OUT_DIR
        [--fail-rank R] [--evaluate-after] [--stuck-rank R]

Each process writes ``OUT_DIR/resolver-<rank>`` (its cluster resolver's ``task_type
task_id``), trains one epoch, then follows the TF multi-worker tutorial's save pattern: the
chief writes to ``OUT_DIR``, every other worker to a temporary directory that it then
removes. Process ``R`` removes a directory it never wrote, so ``shutil.rmtree`` raises
FileNotFoundError (uncaught), right after writing the time into ``OUT_DIR/raised-<R>``.
The others then end, as in the tutorial, or with ``--evaluate-after`` run ``evaluate``,
whose collectives wait for process ``R``. Each process that gets to the end writes
``OUT_DIR/done-<rank>``.

With ``--stuck-rank R``, process ``R`` instead hangs in a callback at the end of its second
train step (a 120 s sleep, after writing the time into ``OUT_DIR/stuck-<R>``): the stuck-rank
watchdog (``MIRRORFIT_STEP_TIMEOUT``) must end the job. Its step is compiled before ``fit``
(``train_on_batch``), so a short timeout times steps, not the compiler on a loaded machine.
"""

import argparse
import os
import shutil
import time

import flax.linen as nn
import jax
import numpy as np

import mirrorfit as mf


class _Hang(mf.callbacks.Callback):
    """Hangs (alive, heartbeat going) at the end of the second train step."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def on_train_batch_end(self, batch, logs=None):
        if batch == 1:
            with open(os.path.join(self.out, f"stuck-{jax.process_index()}"), "w") as f:
                f.write(repr(time.time()))
            time.sleep(120)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--evaluate-after", action="store_true")
    parser.add_argument("--stuck-rank", type=int, default=-1)
    args = parser.parse_args()
    strategy = mf.MultiWorkerMirroredStrategy()
    resolver, rank = strategy.cluster_resolver, strategy.process_id
    with open(os.path.join(args.out, f"resolver-{rank}"), "w") as f:
        f.write(f"{resolver.task_type} {resolver.task_id}")
    x = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    with strategy.scope():
        model = mf.Sequential([nn.Dense(2), nn.softmax], input_shape=(4,), seed=0)
        model.compile("sgd", "sparse_categorical_crossentropy")
    if args.stuck_rank >= 0:  # compile the step outside fit: the watchdog times fit's steps
        model.train_on_batch(x[:8], y[:8])
    model.fit(x, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[_Hang(args.out)] if rank == args.stuck_rank else None)
    if strategy.is_chief:  # stands for the chief's model.save(OUT_DIR)
        np.save(os.path.join(args.out, "chief-weights.npy"), model.get_weights()[0])
    temp_dir = os.path.join(args.out, f"workertemp_{resolver.task_id}")
    if rank == args.fail_rank:
        with open(os.path.join(args.out, f"raised-{rank}"), "w") as f:
            f.write(repr(time.time()))
        shutil.rmtree(temp_dir)  # never written: FileNotFoundError
    if args.evaluate_after:
        model.evaluate(x, y, batch_size=8, verbose=0)
    with open(os.path.join(args.out, f"done-{rank}"), "w") as f:
        f.write("done")


if __name__ == "__main__":
    main()
