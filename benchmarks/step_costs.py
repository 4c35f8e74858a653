"""What one ``fit`` step costs, piece by piece, against the plain-jit and ``shard_map`` loops.

Usage::

    python benchmarks/step_costs.py                 # MLP, one device, batch 32
    python benchmarks/step_costs.py --batch 256 --devices 2

Whole-loop timings are noisy on a shared machine, so this measures each piece of a training
step in one process, in interleaved rounds, and reports the **minimum** over rounds of the mean
per step (background load only ever adds time) with the median beside it, in microseconds, for
wall time and for the CPU time of all the process's threads (``time.process_time``: host Python
plus XLA's CPU compute, which waiting for a shared core does not inflate):

* ``fit`` with ``verbose=1`` and ``verbose=0``, the hand-written ``shard_map`` loop and the
  plain-jit loop (``handwritten.JitTrainer``), per step over a whole epoch; at one device also
  the plain-jit loop fed NumPy batches straight into the step (``jit`` transfers them);
* the train step alone, called in a loop on one already-placed batch with at most 2 in flight:
  mirrorfit's compiled ``jit(shard_map)`` step, the hand-written ``shard_map`` step and the
  plain-jit step;
* batch placement: mirrorfit's ``place_batches`` (``strategy.shard_batch``), against
  ``jax.make_array_from_process_local_data`` and ``jax.device_put``. At one device a batch
  the step's call copies at most 1 MiB of (its aligned gathered leaves cost no copy on the
  CPU) is not placed, so there this piece is only the host batch and that check;
* the host batch: ``ArrayDataAdapter.batches`` (shuffled gather) against ``x[idx]``;
* the callbacks of one step: ``on_train_batch_begin`` and ``on_train_batch_end`` with the
  progress bar (writing to ``os.devnull``) and ``History``.

It reads mirrorfit internals (``Model.trainer``, ``Model.state``, ``mirrorfit._src.distribute.batch``,
``mirrorfit._src.trainers.data_adapters``, ``mirrorfit._src.callbacks.callback``): it is a diagnosis tool,
update it with the trainer.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # the repo's mirrorfit, uninstalled


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--batch", type=int, default=32, help="global batch size")
    p.add_argument("--steps", type=int, default=200, help="steps per timed piece per round")
    p.add_argument("--rounds", type=int, default=15)
    return p.parse_args(argv)


def pieces(args: argparse.Namespace) -> dict:
    """Returns ``{name: fn()}``; each ``fn`` does ``args.steps`` steps' worth of one piece."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    import handwritten
    from frameworks import MirrorfitRunner
    from mirrorfit._src.distribute.batch import place_batches
    from mirrorfit._src.callbacks.callback import CallbackList, History, LazyLogs
    from mirrorfit._src.trainers.data_adapters import ArrayDataAdapter
    from mirrorfit._src.callbacks.progbar import ProgbarLogger
    from synthetic import make_data
    from workloads import get_workload

    b, k, d = args.batch, args.steps, args.devices
    workload = get_workload("mlp")
    x, y = make_data(workload.input_shape, b * k)
    fit1 = MirrorfitRunner(workload, d, b, "fit", verbose=1)
    fit0 = MirrorfitRunner(workload, d, b, "fit", verbose=0)
    mesh = handwritten.make_mesh(d)
    shard_map_loop = handwritten.Trainer(workload, mesh, b)
    jit_loop = handwritten.JitTrainer(workload, b) if d == 1 else None
    numpy_loop = handwritten.NumpyJitTrainer(workload, b) if d == 1 else None
    for runner in (fit1, fit0, shard_map_loop, jit_loop, numpy_loop):
        if runner is not None:
            runner.run(x[:b * 4 + b // 2], y[:b * 4 + b // 2], 1)  # compile, partial batch too

    model, strategy = fit0.model, fit0.model.strategy
    trainer = model.trainer
    data = ArrayDataAdapter(x, y, batch_size=b, num_replicas=d, shuffle=True, seed=0)
    placed = next(place_batches(data.batches(0), strategy))
    statistics = trainer._fresh_statistics(model.state, placed)
    sharding = NamedSharding(mesh, P("batch"))
    xb, yb = x[:b], y[:b]
    perm = np.random.default_rng(0).permutation(len(x))
    devnull = open(os.devnull, "w")

    def loop(call):
        def run():
            previous = None
            for _ in range(k):
                out = call()
                if previous is not None:
                    jax.block_until_ready(previous)
                previous = out
            jax.block_until_ready(previous)
        return run

    def mirrorfit_step():
        nonlocal statistics
        model.state, statistics = trainer.train_fn(model.state, statistics, placed)
        return statistics

    hw_x, hw_y = shard_map_loop._placed(xb, yb)

    def shard_map_step():  # the loop's own state, which its whole-loop piece also advances
        shard_map_loop.state, loss = shard_map_loop.step(shard_map_loop.state, hw_x, hw_y)
        return loss

    def callbacks():
        cbs = CallbackList([History(), ProgbarLogger(1)], model=model,
                           params={"epochs": 1, "steps": k, "verbose": 1})
        cbs.callbacks[-1].file = devnull
        cbs.on_train_begin()
        cbs.on_epoch_begin(0)
        for step in range(k):
            cbs.on_train_batch_begin(step)
            cbs.on_train_batch_end(step, LazyLogs(statistics, trainer._decode))
        cbs.on_epoch_end(0, {})

    out = {
        "fit, verbose=1 (whole loop)": lambda: fit1.run(x, y, 1),
        "fit, verbose=0 (whole loop)": lambda: fit0.run(x, y, 1),
        "hand-written shard_map loop": lambda: shard_map_loop.run(x, y, 1),
        "step: mirrorfit jit(shard_map), placed batch": loop(mirrorfit_step),
        "step: hand-written jit(shard_map), placed batch": loop(shard_map_step),
        "place: mirrorfit place_batches + ArrayDataAdapter.batches": lambda: [
            jax.block_until_ready(p.x) for p in place_batches(data.batches(0), strategy)],
        "place: make_array_from_process_local_data (x, y)": lambda: [
            jax.block_until_ready(jax.make_array_from_process_local_data(sharding, (xb, yb)))
            for _ in range(k)],
        "host batch: ArrayDataAdapter.batches (shuffled gather)": lambda: list(data.batches(0)),
        "host batch: x[idx], y[idx]": lambda: [(x[perm[i * b:(i + 1) * b]],
                                                y[perm[i * b:(i + 1) * b]]) for i in range(k)],
        "callbacks: progress bar + History, per step": callbacks,
    }
    if jit_loop is not None:
        jx, jy = jit_loop._placed(xb, yb)

        def jit_step():
            jit_loop.state, loss = jit_loop.step(jit_loop.state, jx, jy)
            return loss

        out["plain-jit loop"] = lambda: jit_loop.run(x, y, 1)
        out["plain-jit loop, NumPy batches into the step"] = lambda: numpy_loop.run(x, y, 1)
        out["step: plain jit, placed batch"] = loop(jit_step)
        out["place: jax.device_put (x, y)"] = lambda: [
            jax.block_until_ready(jax.device_put((xb, yb), jit_loop.device)) for _ in range(k)]
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={args.devices}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import numpy as np

    fns = pieces(args)
    wall, cpu = ({name: [] for name in fns} for _ in range(2))
    for _ in range(args.rounds):
        for name, fn in fns.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            cpu[name].append((time.process_time() - start_cpu) / args.steps * 1e6)
            wall[name].append((time.perf_counter() - start) / args.steps * 1e6)
    print(f"MLP, D={args.devices}, batch {args.batch}: us per step over {args.rounds} "
          f"interleaved rounds of {args.steps} steps\n")
    print("| piece | wall, min | wall, median | CPU (all threads), min | CPU, median |")
    print("|---|---:|---:|---:|---:|")
    for name in fns:
        print(f"| {name} | {min(wall[name]):.0f} | {np.median(wall[name]):.0f} | "
              f"{min(cpu[name]):.0f} | {np.median(cpu[name]):.0f} |")


if __name__ == "__main__":
    main()
