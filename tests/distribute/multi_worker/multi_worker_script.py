"""A tiny training job for tests/distribute/multi_worker/test_multi_worker.py, run once per process.

    python tests/distribute/multi_worker/multi_worker_script.py OUT_DIR
        [--batch B] [--hidden H] [--kill-rank R]
        [--kill-at-step K] [--backup] [--shard-params]

Under ``python -m mirrorfit.launch`` (``MIRRORFIT_*`` set) it trains with
``mf.MultiWorkerMirroredStrategy()``, otherwise with ``mf.MirroredStrategy()`` on the local
devices: the same MLP on the same global batches (3 epochs of 8 global batches of 16 rows,
shuffled), then evaluates and predicts. Each process writes ``OUT_DIR/result-<rank>.npz``:
the weights, history, evaluate logs, predictions, the global step it started from, and its
strategy's replica and process counts; and, under ``pp_*`` keys, the results of training
on with one grain input pipeline per process (`per_process_inputs`). ``--batch``, ``--hidden`` and ``--data-seed`` (the
seed of x and y) take one value, or one
per rank separated by commas (to start mismatched processes).

``--kill-rank R --kill-at-step K``: process R SIGKILLs itself after global step K.
``--term-rank R --term-at-step K``: on the first run of the job (``MIRRORFIT_RESTART_COUNT``
0), process R sends itself SIGTERM after global step K and then slows each of its steps by
0.25 s (so that the job cannot finish before the processes agree on a step), with
``BackupAndRestore(save_before_preemption=True)``. Each process that stops on the notice
writes ``OUT_DIR/preempted-<rank>.json``: the epoch and step its backup resumes at and the
global step.
``--backup``: train with ``BackupAndRestore(OUT_DIR/backup, save_freq=4)`` and a CSVLogger
(``OUT_DIR/log-<rank>.csv``).
``--shard-params``: the strategy is made with ``shard_params=True`` (the params and the
optimizer state split over every replica of the job).
"""

import argparse
import json
import os
import signal
import time

import flax.linen as nn
import grain
import jax
import numpy as np

import mirrorfit as mf

EPOCHS, ROWS = 3, 128
PP_ROWS = 40  # rows of the per-process inputs (20 per process)


class Killer(mf.callbacks.Callback):
    """Records the step training started from; SIGKILLs the process at ``kill_at``."""

    def __init__(self, kill_at, term_at=None, out=None):
        super().__init__()
        self.kill_at, self.first_step = kill_at, None
        self.term_at, self.out, self.termed = term_at, out, False

    def on_train_batch_begin(self, batch, logs=None):
        if self.first_step is None:
            self.first_step = int(self.model.strategy.fetch(self.model.state.step))
        if self.termed:
            time.sleep(0.25)

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.strategy.fetch(self.model.state.step))
        if step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == self.term_at:
            os.kill(os.getpid(), signal.SIGTERM)
            self.termed = True

    def on_train_error(self, error):
        if isinstance(error, mf.callbacks.Preempted) and self.out is not None:
            record = {"epoch": error.epoch, "step": error.step,
                      "global_step": int(self.model.strategy.fetch(self.model.state.step))}
            path = os.path.join(self.out, f"preempted-{jax.process_index()}.json")
            with open(path, "w") as file:
                json.dump(record, file)


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


def per_process_inputs(model, strategy, x, y):
    """More training, evaluate and predict of ``model`` on one grain pipeline per process.

    With several processes (``model.fit(strategy.distribute_datasets_from_function(fn))``),
    process ``p`` reads rows ``[20p, 20p + 20)`` (``ShardByJaxProcess``) as per-replica
    batches and contributes half of each global batch; each epoch ends with a partial batch.
    In one process, the same global batches are given as arrays, in the same row order. The
    global batches (16 for fit, 24 for evaluate, 12 for predict) are those of ``main``, so no
    step compiles again. Returns the ``pp_*`` results, with the error of a fit that omits
    ``steps_per_epoch``.
    """
    x, y = x[:PP_ROWS], y[:PP_ROWS]
    half = PP_ROWS // 2

    def order(global_batch):  # the rows of each global batch: process 0's, then process 1's
        part = global_batch // 2
        return np.concatenate([np.arange(p * half + k, p * half + min(k + part, half))
                               for k in range(0, half, part) for p in range(2)])

    if jax.process_count() == 1:  # the reference
        history = model.fit(x[order(16)], y[order(16)], batch_size=16, epochs=2, shuffle=False,
                            verbose=0)
        evaluated = model.evaluate(x[order(24)], y[order(24)], batch_size=24, verbose=0,
                                   return_dict=True)
        predicted = model.predict(x[order(12)], batch_size=12, verbose=0)
        error = ""
    else:
        def pipeline(records, global_batch):
            def dataset_fn(context):
                sampler = grain.samplers.IndexSampler(
                    len(records), shard_options=grain.sharding.ShardByJaxProcess(),
                    shuffle=False, num_epochs=1)
                batch = context.get_per_replica_batch_size(global_batch)
                return grain.DataLoader(data_source=records, sampler=sampler, worker_count=0,
                                        operations=[grain.transforms.Batch(batch)])
            return strategy.distribute_datasets_from_function(dataset_fn)

        pairs = [(x[i], y[i]) for i in range(PP_ROWS)]
        try:  # a DataLoader has no len(): the processes must be told the steps per epoch
            model.fit(pipeline(pairs, 16), verbose=0)
            error = ""
        except ValueError as e:
            error = str(e)
        history = model.fit(pipeline(pairs, 16), epochs=2, steps_per_epoch=3, verbose=0)
        evaluated = model.evaluate(pipeline(pairs, 24), steps=2, verbose=0, return_dict=True)
        predicted = model.predict(pipeline(list(x), 12), steps=4, verbose=0)
    return {"pp_weights": np.concatenate([w.ravel() for w in model.get_weights()]),
            "pp_predicted": predicted, "pp_steps_error": np.asarray(error),
            **{f"pp_history_{k}": np.asarray(v) for k, v in history.history.items()},
            **{f"pp_evaluate_{k}": np.asarray(v) for k, v in evaluated.items()}}


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
    parser.add_argument("--term-rank", type=int, default=-1)
    parser.add_argument("--term-at-step", type=int, default=-1)
    parser.add_argument("--backup", action="store_true")
    parser.add_argument("--data-seed", default="0")
    parser.add_argument("--shard-params", action="store_true")
    args = parser.parse_args()
    multi = "MIRRORFIT_NUM_PROCESSES" in os.environ
    strategy = (mf.MultiWorkerMirroredStrategy(shard_params=args.shard_params) if multi
                else mf.MirroredStrategy(shard_params=args.shard_params))
    rank = jax.process_index()
    rng = np.random.default_rng(per_rank(args.data_seed, rank))
    x = rng.normal(size=(ROWS, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32) + (x[:, 2] > 1).astype(np.int32)
    with strategy.scope():
        model = mf.Sequential([nn.Dense(per_rank(args.hidden, rank)), nn.relu, nn.Dense(3),
                               nn.softmax], input_shape=(8,), seed=1)
        model.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
    first_run = os.environ.get("MIRRORFIT_RESTART_COUNT", "0") == "0"
    term = rank == args.term_rank and first_run
    killer = Killer(args.kill_at_step if rank == args.kill_rank else None,
                    args.term_at_step if term else None, args.out)
    callbacks = [killer]
    if args.backup:
        callbacks = [mf.callbacks.BackupAndRestore(os.path.join(args.out, "backup"),
                                                   save_freq=4,
                                                   save_before_preemption=args.term_rank >= 0),
                     mf.callbacks.CSVLogger(os.path.join(args.out, f"log-{rank}.csv"))
                     ] + callbacks
    history = model.fit(x, y, batch_size=per_rank(args.batch, rank), epochs=EPOCHS,
                        verbose=2, validation_data=(x[:40], y[:40]), callbacks=callbacks)
    evaluated = model.evaluate(x, y, batch_size=24, verbose=0, return_dict=True)
    predicted = model.predict(x[:50], batch_size=12, verbose=0)  # 50 rows: padded batches
    weights = model.get_weights()
    np.savez(os.path.join(args.out, f"result-{rank}.npz"), *weights,
             from_function=rows_from_function(strategy, x[:44]),
             predicted=predicted, first_step=np.asarray(killer.first_step),
             replicas=np.asarray(strategy.num_replicas_in_sync),
             processes=np.asarray(jax.process_count()),
             **per_process_inputs(model, strategy, x, y),
             **{f"history_{k}": np.asarray(v) for k, v in history.history.items()},
             **{f"evaluate_{k}": np.asarray(v) for k, v in evaluated.items()})
    print(f"process {rank} done")


if __name__ == "__main__":
    main()
