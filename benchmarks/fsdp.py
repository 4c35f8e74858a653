"""Sharded params (``MirroredStrategy(shard_params=True)``, ZeRO-3/FSDP) against mirrored and
against a sharded optimizer state (``shard_optimizer_state=True``, ZeRO-1/2): device memory,
step time, and the largest Transformer that fits a per-device budget.

Usage::

    python benchmarks/fsdp.py                      # D=2, 4, 8 on the CPU: results/fsdp-<machine>-<date>.*
    python benchmarks/fsdp.py --quick              # a tiny smoke run, not written
    python benchmarks/fsdp.py --budget-mib 8192    # on a machine with 8 GPUs (see below)

Each replica count D and mode (mirrored, zero, fsdp) runs in a fresh process
(``--xla_force_host_platform_device_count=D`` on the CPU; on an accelerator, the first D
devices), on the GPT-2-style ``DecoderLM`` of ``workloads.py`` (float32, Adam):

* **device memory**: the bytes device 0 holds in live arrays at the end of every ``fit``
  batch, the largest (``jax.live_arrays``' addressable shards: the CPU keeps no peak of its
  own), and the compiled train step's own estimate of its peak, from ``memory_analysis()``:
  arguments + outputs - donated (aliased) + temporaries; on an accelerator also
  ``memory_stats()["peak_bytes_in_use"]`` after ``fit`` (the process's peak);
* **step time**: the median over ``--rounds`` timed epochs (after a warm-up epoch, which
  compiles) of an epoch's seconds per step, and its ratio to mirrored's. Simulated CPU devices
  share the same cores and their collectives are memory copies: on the CPU this says what
  the extra all-gathers and reduce-scatters cost in work, not on an interconnect;
* **the largest model that fits**: ``DecoderLM`` layers at a fixed width, grown (doubling,
  then bisection) while the compiled train step's estimate stays within ``--budget-mib`` per
  device; each candidate is built and its step compiled, never run.

The step all-gathers the params per leaf, inside ``jax.checkpoint`` so the backward pass
gathers them again (the guide ``docs/guides/sharded_params.md``). XLA:CPU merges those second
all-gathers into the first ones after dropping ``jax.checkpoint``'s barriers, so on the CPU
the estimate keeps every gathered weight from the forward pass to the backward pass; XLA's
GPU pipeline keeps the barriers until after scheduling. The multi-GPU run is the same
command with ``JAX_PLATFORMS`` unset on a machine with D >= 8 GPUs.
"""

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = {"mirrored": {}, "zero": {"shard_optimizer_state": True},
         "fsdp": {"shard_params": True}}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--devices", type=int, nargs="*", default=[2, 4, 8])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=8, help="train steps per timed epoch")
    p.add_argument("--budget-mib", type=float, default=None,
                   help="per-device budget of the largest-model search (default: 48 MiB on "
                        "the CPU, 8192 MiB on an accelerator, 1 MiB with --quick)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--worker", nargs=2, metavar=("D", "MODE"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _sizes(quick: bool, accelerator: bool) -> dict:
    """The timed model, the search's width, and the rows per replica of a batch."""
    if quick:
        return {"timed": {"vocab": 256, "seq": 16, "layers": 2, "d_model": 64, "heads": 2},
                "search": {"vocab": 256, "seq": 16, "d_model": 64, "heads": 2},
                "rows": 2}
    if accelerator:
        return {"timed": {"vocab": 50_304, "seq": 1024, "layers": 12, "d_model": 768,
                          "heads": 12},
                "search": {"vocab": 50_304, "seq": 1024, "d_model": 1024, "heads": 16},
                "rows": 4}
    return {"timed": {"vocab": 2048, "seq": 64, "layers": 4, "d_model": 256, "heads": 4},
            "search": {"vocab": 2048, "seq": 64, "d_model": 256, "heads": 4},
            "rows": 4}


def _device0_bytes(jax) -> int:
    """Bytes of every live array's block on the first device."""
    gc.collect()
    device = jax.devices()[0]
    return sum(shard.data.nbytes for array in jax.live_arrays()
               for shard in array.addressable_shards if shard.device == device)


def worker(devices: int, mode: str, args) -> dict:
    """One replica count and mode, in this (fresh) process."""
    import jax
    import numpy as np

    sys.path[:0] = [str(HERE), str(HERE.parent)]  # the workloads; the repo's mirrorfit
    import mirrorfit as mf
    from mirrorfit._src.trainers.audit import train_step_program
    from synthetic import make_tokens
    from workloads import DecoderLM

    accelerator = jax.devices()[0].platform != "cpu"
    sizes = _sizes(args.quick, accelerator)
    strategy = mf.MirroredStrategy(jax.devices()[:devices], **MODES[mode])
    batch = sizes["rows"] * devices

    def build(arch):
        with strategy.scope():
            model = mf.Model(DecoderLM(**arch), input_shape=(arch["seq"],),
                             input_dtype=np.int32, seed=0)
            model.compile(mf.optimizers.Adam(1e-3),
                          mf.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    def estimate(model, arch) -> int:
        x, y = make_tokens(batch, arch["seq"], arch["vocab"])
        program = train_step_program(model.trainer, model, x, y, batch_size=batch)
        analysis = program.fn.lower(*program.args).compile().memory_analysis()
        return int(analysis.argument_size_in_bytes + analysis.output_size_in_bytes
                   - analysis.alias_size_in_bytes + analysis.temp_size_in_bytes)

    class Probe(mf.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.most = 0

        def on_train_batch_end(self, step, logs=None):
            self.most = max(self.most, _device0_bytes(jax))

    out = {"devices": devices, "mode": mode, "platform": jax.devices()[0].platform,
           "timed": sizes["timed"], "global_batch": batch}
    arch = sizes["timed"]
    x, y = make_tokens(batch * args.steps, arch["seq"], arch["vocab"])
    before = _device0_bytes(jax)
    model = build(arch)
    out["params"] = sum(leaf.size for leaf in jax.tree.leaves(model.params))
    probe = Probe()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[probe])  # compiles
    out["live_bytes_device0"] = probe.most - before
    out["state_bytes_total"] = sum(leaf.nbytes for leaf in jax.tree.leaves(
        (model.params, model.opt_state)))
    out["step_estimate_bytes"] = estimate(model, arch)
    seconds = []
    for _ in range(1 if args.quick else args.rounds):
        start = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
        seconds.append((time.perf_counter() - start) / args.steps)
    out["step_seconds"] = seconds
    if accelerator:
        out["peak_bytes_in_use"] = jax.devices()[0].memory_stats().get("peak_bytes_in_use")
    del model
    gc.collect()

    budget = (args.budget_mib or (1 if args.quick else 8192 if accelerator else 48)) * 2**20
    out["budget_bytes"] = budget
    tried = {}

    def fits(layers: int) -> bool:
        if layers not in tried:
            arch = {**sizes["search"], "layers": layers}
            try:
                model = build(arch)
                tried[layers] = (estimate(model, arch),
                                 sum(leaf.size for leaf in jax.tree.leaves(model.params)))
            except Exception as error:  # noqa: BLE001 - an accelerator's out-of-memory
                tried[layers] = (None, repr(error)[:200])
            finally:
                model = None
                gc.collect()
        return tried[layers][0] is not None and tried[layers][0] <= budget

    low, high = 0, 1
    while fits(high):  # doubling, then bisection between the last fit and the first miss
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    out["largest_layers"] = low
    out["largest_params"] = tried[low][1] if low else 0
    out["largest_estimate_bytes"] = tried[low][0] if low else None
    out["tried"] = {str(k): v for k, v in sorted(tried.items())}
    return out


def _mib(value) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f}"


def tables(rows: list[dict]) -> str:
    """The two markdown tables: memory and step time per mode, the largest model."""
    order = list(MODES)
    by = {(r["devices"], r["mode"]): r
          for r in sorted(rows, key=lambda r: (r["devices"], order.index(r["mode"])))}
    lines = ["| D | mode | state MiB (whole) | device 0 live MiB at batch ends | ratio to "
             "whole | step estimate MiB | GPU peak MiB | step ms | vs mirrored |",
             "|---" * 9 + "|"]
    for (devices, mode), r in by.items():
        base = by.get((devices, "mirrored"), r)
        step = statistics.median(r["step_seconds"])
        lines.append(
            f"| {devices} | {mode} | {_mib(r['state_bytes_total'])} | "
            f"{_mib(r['live_bytes_device0'])} | "
            f"{r['live_bytes_device0'] / r['state_bytes_total']:.3f} (1/D = {1 / devices:.3f})"
            f" | {_mib(r['step_estimate_bytes'])} | {_mib(r.get('peak_bytes_in_use'))} | "
            f"{step * 1e3:,.1f} | {step / statistics.median(base['step_seconds']):.2f} |")
    lines += ["", "| D | budget MiB | mode | largest layers | params | step estimate MiB |",
              "|---" * 6 + "|"]
    for (devices, mode), r in by.items():
        lines.append(f"| {devices} | {_mib(r['budget_bytes'])} | {mode} | "
                     f"{r['largest_layers']} | {r['largest_params']:,} | "
                     f"{_mib(r['largest_estimate_bytes'])} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(int(args.worker[0]), args.worker[1], args)))
        return
    rows = []
    for devices in args.devices:
        for mode in MODES:
            env = dict(os.environ)
            env.setdefault("JAX_PLATFORMS", "cpu")
            if env["JAX_PLATFORMS"] == "cpu":
                env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "")
                                    + f" --xla_force_host_platform_device_count={devices}")
            command = [sys.executable, __file__, "--worker", str(devices), mode, "--rounds",
                       str(args.rounds), "--steps", str(args.steps)]
            command += ["--quick"] * args.quick + (
                ["--budget-mib", str(args.budget_mib)] if args.budget_mib else [])
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"D={devices} {mode} failed:\n{done.stderr[-3000:]}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"D={devices} {mode}: done", file=sys.stderr)
    table = tables(rows)
    print(table)
    if args.quick:
        return
    machine = f"{rows[0]['platform']}-{os.cpu_count()}core"
    stem = args.out / f"fsdp-{machine}-{time.strftime('%Y-%m-%d')}"
    stem.with_suffix(".json").write_text(json.dumps(
        {"machine": platform.platform(), "python": sys.version, "rows": rows}, indent=1))
    timed = rows[0]["timed"]
    stem.with_suffix(".md").write_text(
        f"# Sharded params (ZeRO-3) vs a sharded optimizer state (ZeRO-1/2) vs mirrored "
        f"({machine})\n\n`python benchmarks/fsdp.py` (DecoderLM {timed}, Adam, "
        f"{rows[0]['global_batch'] // rows[0]['devices']} rows per replica, median of "
        f"{args.rounds} epochs of {args.steps} steps)\n\n{table}\n")


if __name__ == "__main__":
    main()
