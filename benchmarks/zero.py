"""Sharded optimizer state (``MirroredStrategy(shard_optimizer_state=True)``, ZeRO-1/2) vs
mirrored: optimizer-state bytes per device and ``fit`` throughput.

Usage::

    python benchmarks/zero.py                   # D=2 and D=8, writes results/zero-<machine>-<date>.*
    python benchmarks/zero.py --quick           # tiny smoke run, not written

Each replica count runs in a fresh process (``--xla_force_host_platform_device_count=D`` on
the CPU; on an accelerator, the first D devices). For each of mirrored and sharded:

* **optimizer-state bytes per device**: the bytes of device 0's addressable shards of every
  ``model.opt_state`` leaf, against the whole state's bytes (what a mirrored device holds);
  the goal at D=8 is <= 1.05 / D of the mirrored figure;
* **fit throughput**: examples/s of ``fit`` over ``--epochs`` epochs after a warm-up fit
  (compile excluded), mirrored and sharded alternating ``--rounds`` times; the ratio of the
  medians (goal >= 0.95). On simulated CPU devices every "device" shares the same cores, so
  the collectives are memory copies and this ratio says what the extra reduce-scatter and
  all-gather cost in dispatch, not what they cost on a real interconnect. The same ratio
  per CPU-second of the process (``time.process_time``: all its threads) is printed beside
  it: on a shared machine, waiting for a core inflates wall time but not CPU time;
* on a GPU, the peak device memory (``memory_stats()["peak_bytes_in_use"]``) after ``fit``.

The model is an MLP (784 -> 1024 -> 1024 -> 10, 1.86 M params, Adam): its optimizer state
(14.9 MB) is twice its params (7.5 MB).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--devices", type=int, nargs="*", default=[2, 8])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(devices: int, args) -> dict:
    """One replica count, in this (fresh) process."""
    import flax.linen as nn
    import jax
    import numpy as np

    sys.path.insert(1, str(HERE.parent))  # the repo's mirrorfit
    import mirrorfit as mf

    width, rows, batch = (64, 512, 64) if args.quick else (1024, 4096, 256)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 784)).astype(np.float32)
    y = rng.integers(0, 10, rows)
    out = {"devices": devices, "platform": jax.devices()[0].platform}
    models = {}
    for shard in (False, True):
        with mf.MirroredStrategy(jax.devices()[:devices], shard_optimizer_state=shard).scope():
            model = mf.Sequential([nn.Dense(width), nn.relu, nn.Dense(width), nn.relu,
                                   nn.Dense(10)], input_shape=(784,), seed=0)
            model.compile(mf.optimizers.Adam(1e-3),
                          mf.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0)  # compile, warm up
        leaves = jax.tree.leaves(model.opt_state)
        name = "sharded" if shard else "mirrored"
        out[f"{name}_opt_state_bytes_device0"] = sum(
            leaf.addressable_shards[0].data.nbytes for leaf in leaves)
        out["opt_state_bytes_total"] = sum(leaf.nbytes for leaf in leaves)
        out["params"] = sum(leaf.size for leaf in jax.tree.leaves(model.params))
        models[name] = model
    times = {"mirrored": [], "sharded": []}
    cpu = {"mirrored": [], "sharded": []}
    for _ in range(1 if args.quick else args.rounds):
        for name, model in models.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            model.fit(x, y, batch_size=batch, epochs=args.epochs, verbose=0)
            times[name].append(rows * args.epochs / (time.perf_counter() - start))
            cpu[name].append(rows * args.epochs / (time.process_time() - start_cpu))
    for name in times:
        out[f"{name}_examples_per_s"] = times[name]
        out[f"{name}_examples_per_cpu_s"] = cpu[name]
    out["throughput_ratio"] = (statistics.median(times["sharded"])
                               / statistics.median(times["mirrored"]))
    out["cpu_throughput_ratio"] = (statistics.median(cpu["sharded"])
                                   / statistics.median(cpu["mirrored"]))
    out["bytes_ratio"] = (out["sharded_opt_state_bytes_device0"]
                          / out["mirrored_opt_state_bytes_device0"])
    if out["platform"] == "gpu":
        out["peak_bytes_in_use"] = jax.devices()[0].memory_stats().get("peak_bytes_in_use")
    return out


def main(argv=None):
    args = parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args)))
        return
    rows = []
    for devices in args.devices:
        env = dict(os.environ)
        env.setdefault("JAX_PLATFORMS", "cpu")
        if env["JAX_PLATFORMS"] == "cpu":
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "")
                                + f" --xla_force_host_platform_device_count={devices}").strip()
        command = [sys.executable, __file__, "--worker", str(devices), "--rounds",
                   str(args.rounds), "--epochs", str(args.epochs)] + (["--quick"] * args.quick)
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    lines = [("| D | opt-state bytes/device mirrored | sharded | ratio (goal <= 1.05/D) | "
              "fit examples/s mirrored | sharded | ratio (goal >= 0.95) | "
              "ratio per CPU-second |"), "|---" * 8 + "|"]
    for r in rows:
        d = r["devices"]
        lines.append(
            f"| {d} | {r['mirrored_opt_state_bytes_device0']:,} | "
            f"{r['sharded_opt_state_bytes_device0']:,} | {r['bytes_ratio']:.4f} "
            f"(1.05/D = {1.05 / d:.4f}) | {statistics.median(r['mirrored_examples_per_s']):,.0f} | "
            f"{statistics.median(r['sharded_examples_per_s']):,.0f} | "
            f"{r['throughput_ratio']:.3f} | {r['cpu_throughput_ratio']:.3f} |")
    table = "\n".join(lines)
    print(table)
    if args.quick:
        return
    machine = f"{rows[0]['platform']}-{os.cpu_count()}core"
    stem = args.out / f"zero-{machine}-{time.strftime('%Y-%m-%d')}"
    stem.with_suffix(".json").write_text(json.dumps(
        {"machine": platform.platform(), "python": sys.version, "rows": rows}, indent=1))
    stem.with_suffix(".md").write_text(
        f"# Sharded optimizer state vs mirrored ({machine}, simulated devices share the cores)\n\n"
        f"`python benchmarks/zero.py` (MLP 784-1024-1024-10, Adam, batch 256, median of "
        f"{args.rounds} alternating rounds of {args.epochs} epochs)\n\n{table}\n")


if __name__ == "__main__":
    main()
