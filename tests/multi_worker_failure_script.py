"""A short job for tests/test_multi_worker.py whose worker ``--fail-rank`` raises.

    python tests/multi_worker_failure_script.py OUT_DIR --fail-rank R

The TF multi-worker tutorial's save pattern: after one epoch, the chief writes to
``OUT_DIR`` and every other worker to a temporary directory that it then removes. Process
``R`` removes a directory it never wrote, so ``shutil.rmtree`` raises FileNotFoundError
(uncaught), after it writes the time into ``OUT_DIR/raised-<R>``. The other processes go
on to ``evaluate``, whose collectives wait for process ``R``. With ``--fail-rank -1``
nobody fails and each process writes ``OUT_DIR/done-<rank>`` with its cluster resolver's
``task_type task_id``.
"""

import argparse
import os
import shutil
import time

import flax.linen as nn
import numpy as np

import mirrorfit as mf


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--fail-rank", type=int, default=-1)
    args = parser.parse_args()
    strategy = mf.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    x = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    with strategy.scope():
        model = mf.Sequential([nn.Dense(2), nn.softmax], input_shape=(4,), seed=0)
        model.compile("sgd", "sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    temp_dir = os.path.join(args.out, f"workertemp_{resolver.task_id}")
    if strategy.process_id == args.fail_rank:
        with open(os.path.join(args.out, f"raised-{args.fail_rank}"), "w") as f:
            f.write(repr(time.time()))
        shutil.rmtree(temp_dir)  # never written: FileNotFoundError
    model.evaluate(x, y, batch_size=8, verbose=0)
    with open(os.path.join(args.out, f"done-{strategy.process_id}"), "w") as f:
        f.write(f"{resolver.task_type} {resolver.task_id}")


if __name__ == "__main__":
    main()
