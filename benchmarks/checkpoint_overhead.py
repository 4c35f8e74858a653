"""What saving costs ``fit``: never saving vs a checkpoint every N steps, in the training
thread (``save_on_background=False``) or in the background (the default).

    python benchmarks/checkpoint_overhead.py [--rounds 3] [--every 16] [--out DIR]

An MLP 784-512-512-10 (Adam: about 2.0 M numbers of params and optimizer state, 8 MB per
checkpoint) trains for 2 epochs of 16,384 random rows, global batch 256 (128 steps), on 2
simulated CPU devices, after a compiling warm-up ``fit``. The variants: no callback;
``ModelCheckpoint(save_freq=N)`` (the whole model: params and optimizer state) and
``BackupAndRestore(save_freq=N)``, each synchronous and in the background. Each round runs
one fresh process per variant, interleaved, and times the second ``fit`` and, of it, the
time the training thread spent in the saving callback (its saves, and the wait for the last
write at the end); the report gives the medians and the overhead over no saving. Nothing
here asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ONE_RUN = """
import os, sys, time
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
import jax, numpy as np
import mirrorfit as mf
variant, every, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
x = rng.normal(size=(16384, 784)).astype(np.float32)
y = rng.integers(0, 10, 16384).astype(np.int32)
with mf.MirroredStrategy().scope():
    model = mf.Sequential([mf.layers.Dense(512, activation="relu"),
                           mf.layers.Dense(512, activation="relu"),
                           mf.layers.Dense(10, activation="softmax")], input_shape=(784,))
    model.compile("adam", "sparse_categorical_crossentropy")
model.fit(x, y, batch_size=256, epochs=1, verbose=0)  # compiles
kind, _, mode = variant.partition("-")
background = mode == "background"
callbacks = {
    "none": [],
    "model_checkpoint": [mf.callbacks.ModelCheckpoint(os.path.join(out, "ckpt"),
                                                      save_freq=every,
                                                      save_on_background=background)],
    "backup": [mf.callbacks.BackupAndRestore(os.path.join(out, "backup"), save_freq=every,
                                             save_on_background=background)],
}[kind]
blocked = [0.0]  # seconds the training thread spent in the saving callback's hooks
for callback in callbacks:
    for hook in ("on_train_batch_end", "on_train_end"):
        def timed(*args, _hook=getattr(callback, hook), **kwargs):
            start = time.perf_counter()
            _hook(*args, **kwargs)
            blocked[0] += time.perf_counter() - start
        setattr(callback, hook, timed)
start = time.perf_counter()
model.fit(x, y, batch_size=256, epochs=2, verbose=0, callbacks=callbacks)
print(time.perf_counter() - start, blocked[0])
"""
VARIANTS = ("none", "model_checkpoint-sync", "model_checkpoint-background", "backup-sync",
            "backup-background")


def one_run(variant: str, every: int) -> tuple[float, float]:
    """Seconds of the timed ``fit`` of ``variant`` in a fresh process, and of them, those
    the training thread spent in the saving callback (saves, and the wait at the end)."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, "-c", ONE_RUN, variant, str(every), out],
                              capture_output=True, text=True, env=env, check=True)
    total, blocked = done.stdout.strip().splitlines()[-1].split()
    return float(total), float(blocked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--every", type=int, default=16, help="steps between saves")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    blocked: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for round_ in range(args.rounds):
        for variant in VARIANTS:
            total, in_saves = one_run(variant, args.every)
            seconds[variant].append(total)
            blocked[variant].append(in_saves)
            print(f"round {round_ + 1} {variant}: {total:.2f} s, {in_saves:.2f} s in saves",
                  flush=True)
    base = statistics.median(seconds["none"])
    cores = os.cpu_count()
    lines = [f"# Checkpoint overhead (CPU, {cores} cores, {time.strftime('%Y-%m-%d')})", "",
             (f"`python benchmarks/checkpoint_overhead.py --rounds {args.rounds} --every "
              f"{args.every}`: 128 steps of an MLP 784-512-512-10 (Adam, 8 MB per "
              f"checkpoint) on 2 simulated CPU devices, a save every {args.every} steps "
              f"({128 // args.every} saves). This machine: "
              f"{platform.processor() or platform.machine()}, shared with other jobs, so "
              "the rounds' spread is shown."), "",
             "| variant | fit, median s | min-max s | over no saving | in saves, median s |",
             "| --- | --- | --- | --- | --- |"]
    for variant, values in seconds.items():
        median = statistics.median(values)
        lines.append(f"| {variant} | {median:.2f} | {min(values):.2f}-{max(values):.2f} | "
                     f"{(median / base - 1) * 100:+.0f}% | "
                     f"{statistics.median(blocked[variant]):.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    stem = f"checkpoint-overhead-cpu-{cores}core-{time.strftime('%Y-%m-%d')}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(text)
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"every": args.every, "rounds": args.rounds, "seconds": seconds,
         "seconds_in_saves": blocked}, indent=1) + "\n")


if __name__ == "__main__":
    main()
