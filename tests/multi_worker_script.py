"""A tiny training job for tests/test_multi_worker.py, run once per process.

    python tests/multi_worker_script.py OUT_DIR [--batch B] [--hidden H] [--kill-rank R]
        [--kill-at-step K] [--backup]

Under ``python -m mirrorfit.launch`` (``MIRRORFIT_*`` set) it trains with
``mf.MultiWorkerMirroredStrategy()``, otherwise with ``mf.MirroredStrategy()`` on the local
devices: the same MLP on the same global batches (3 epochs of 8 global batches of 16 rows,
shuffled), then evaluates and predicts. Each process writes ``OUT_DIR/result-<rank>.npz``:
the weights, history, evaluate logs, predictions, the global step it started from, and its
strategy's replica and process counts. ``--batch``, ``--hidden`` and ``--data-seed`` (the
seed of x and y) take one value, or one
per rank separated by commas (to start mismatched processes).

``--kill-rank R --kill-at-step K``: process R SIGKILLs itself after global step K.
``--backup``: train with ``BackupAndRestore(OUT_DIR/backup, save_freq=4)`` and a CSVLogger
(``OUT_DIR/log-<rank>.csv``).
"""

import argparse
import os
import signal

import flax.linen as nn
import jax
import numpy as np

import mirrorfit as mf

EPOCHS, ROWS = 3, 128


class Killer(mf.callbacks.Callback):
    """Records the step training started from; SIGKILLs the process at ``kill_at``."""

    def __init__(self, kill_at):
        super().__init__()
        self.kill_at, self.first_step = kill_at, None

    def on_train_batch_begin(self, batch, logs=None):
        if self.first_step is None:
            self.first_step = int(self.model.strategy.fetch(self.model.state.step))

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.strategy.fetch(self.model.state.step)) == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


def rows_from_function(strategy, x):
    """Global batches of 12 rows built by one input pipeline per process, gathered back.

    Pipeline ``p`` holds the rows ``p`` contributes to each global batch and yields them as
    per-replica batches of 3; the last global batch (8 rows) is partial and padded.
    """
    global_batch = 12

    def dataset_fn(context):
        per_replica = context.get_per_replica_batch_size(global_batch)
        per_pipeline = global_batch // context.num_input_pipelines
        for start in range(0, len(x), global_batch):
            rows = x[start:start + global_batch]
            mine = rows[context.input_pipeline_id * per_pipeline:
                        (context.input_pipeline_id + 1) * per_pipeline]
            for i in range(0, len(mine), per_replica):
                yield mine[i:i + per_replica]

    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    return np.concatenate([np.asarray(strategy.gather(strategy.run(lambda b: b, args=(b,))))
                           for b in dataset])


def per_rank(text, rank):
    values = [int(v) for v in text.split(",")]
    return values[rank] if len(values) > 1 else values[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--batch", default="16")
    parser.add_argument("--hidden", default="16")
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-at-step", type=int, default=-1)
    parser.add_argument("--backup", action="store_true")
    parser.add_argument("--data-seed", default="0")
    args = parser.parse_args()
    multi = "MIRRORFIT_NUM_PROCESSES" in os.environ
    strategy = mf.MultiWorkerMirroredStrategy() if multi else mf.MirroredStrategy()
    rank = jax.process_index()
    rng = np.random.default_rng(per_rank(args.data_seed, rank))
    x = rng.normal(size=(ROWS, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32) + (x[:, 2] > 1).astype(np.int32)
    with strategy.scope():
        model = mf.Sequential([nn.Dense(per_rank(args.hidden, rank)), nn.relu, nn.Dense(3),
                               nn.softmax], input_shape=(8,), seed=1)
        model.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
    killer = Killer(args.kill_at_step if rank == args.kill_rank else None)
    callbacks = [killer]
    if args.backup:
        callbacks = [mf.callbacks.BackupAndRestore(os.path.join(args.out, "backup"),
                                                   save_freq=4),
                     mf.callbacks.CSVLogger(os.path.join(args.out, f"log-{rank}.csv"))
                     ] + callbacks
    history = model.fit(x, y, batch_size=per_rank(args.batch, rank), epochs=EPOCHS,
                        verbose=2, validation_data=(x[:40], y[:40]), callbacks=callbacks)
    evaluated = model.evaluate(x, y, batch_size=24, verbose=0, return_dict=True)
    predicted = model.predict(x[:50], batch_size=12, verbose=0)  # 50 rows: padded batches
    np.savez(os.path.join(args.out, f"result-{rank}.npz"), *model.get_weights(),
             from_function=rows_from_function(strategy, x[:44]),
             predicted=predicted, first_step=np.asarray(killer.first_step),
             replicas=np.asarray(strategy.num_replicas_in_sync),
             processes=np.asarray(jax.process_count()),
             **{f"history_{k}": np.asarray(v) for k, v in history.history.items()},
             **{f"evaluate_{k}": np.asarray(v) for k, v in evaluated.items()})
    print(f"process {rank} done")


if __name__ == "__main__":
    main()
