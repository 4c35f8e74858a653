"""One process of the 2-process job of tests/callbacks/test_optuna_pruning.py.

    python -m mirrorfit.launch --nproc 2 --cpu-devices 1 tests/callbacks/optuna_worker.py OUT

Every process fits the same tiny model for 4 epochs with an `OptunaPruningCallback`: process 0
on a trial of a study whose pruner prunes from epoch 1 on, the others on an
``optuna.trial.FixedTrial`` that never prunes. Each writes ``OUT/result-<rank>.json``: whether
``fit`` raised ``optuna.TrialPruned``, the History epochs and val_loss, and its trial's
intermediate values (process 0).
"""

import json
import sys
from pathlib import Path

import flax.linen as nn
import jax
import numpy as np
import optuna

import mirrorfit as mf


def main(out: Path) -> None:
    strategy = mf.MultiWorkerMirroredStrategy()  # first: it starts jax.distributed
    rank = jax.process_index()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    if rank == 0:
        study = optuna.create_study(
            pruner=optuna.pruners.ThresholdPruner(upper=0.0, n_warmup_steps=1))
        trial = study.ask()
    else:
        trial = optuna.trial.FixedTrial({})
    with strategy.scope():
        model = mf.Sequential([nn.Dense(4), nn.relu, nn.Dense(2), nn.softmax],
                              input_shape=(4,), seed=0)
        model.compile("sgd", "sparse_categorical_crossentropy")
    pruned = False
    try:
        model.fit(x, y, batch_size=8, epochs=4, validation_data=(x, y), verbose=0,
                  callbacks=[mf.callbacks.OptunaPruningCallback(trial)])
    except optuna.TrialPruned:
        pruned = True
    values = study.trials[0].intermediate_values if rank == 0 else {}
    (out / f"result-{rank}.json").write_text(json.dumps({
        "pruned": pruned, "epochs": model.history.epoch,
        "val_loss": model.history.history["val_loss"], "intermediate_values": values}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
