"""Where ``fit`` loses time against the hand-written loop on one accelerator: a diagnosis tool.

Usage (on the GPU machine, from the checkout)::

    PYTHONPATH=. python benchmarks/gpu_diagnose.py --out DIR     # ResNet-18 and the LM, ~2 min
    python benchmarks/gpu_diagnose.py --quick --out DIR          # tiny models, any backend

For each model of ``gpu.py`` (ResNet-18 at global batch 1024, the GPT-2-small-sized LM at 32,
both bf16 through the dtype policy; ``gpu.short_settings``' data) it separates the loop from
the program:

* **whole loops**, examples/s over ``fit`` calls of several epochs (median of interleaved
  rounds): the hand-written loop; ``fit`` with the data set on the device (the default),
  with ``verbose=0``, and from the host (``device_resident=False``);
* **the step alone**, called in a loop on one batch already on the device with at most two in
  flight: the hand-written ``jit(shard_map)`` step, and ``fit``'s compiled step
  (``model.trainer.train_fn``) on a placed batch. Equal rates here and a gap in the loops
  put the gap in the loop (host work, synchronisation); a gap here puts it in the program;
* **a device profile** (``jax.profiler``) of one epoch of each loop, summarised on the
  machine: per device plane line, the events, their total time, the busy fraction of the
  line's span, and the costliest event names.

It reads mirrorfit internals (``model.trainer``, ``model.state``, ``place_batches``,
``ArrayDataAdapter``), as ``step_costs.py`` does: update it with the trainer. Writes
``diagnose-<device>-<date>.json`` to ``--out`` and prints the tables.
"""

import argparse
import collections
import datetime
import glob
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # the repo's mirrorfit, uninstalled

import jax
import jax.numpy as jnp

import gpu
import handwritten
from frameworks import MirrorfitRunner
from mirrorfit._src.distribute.batch import place_batches
from mirrorfit._src.trainers.data_adapters import ArrayDataAdapter
from synthetic import make_data, make_tokens
from workloads import ResNet18, Workload


def build(model: str, cfg: dict):
    """``(hand-written trainer, MirrorfitRunner, x, y, batch)`` of ``model``."""
    mesh = handwritten.make_mesh(1)
    if model == "resnet18":
        rc = cfg["resnet"]
        workload = Workload(ResNet18(rc["width"], tuple(rc["stage_blocks"])), (32, 32, 3))
        x, y = make_data(workload.input_shape, rc["n"])
        batch = rc["batches"][-1]
        hand = handwritten.BatchNormTrainer(workload, mesh, batch, compute_dtype=jnp.bfloat16)
        metrics = ("accuracy",)
    else:
        lc = cfg["lm"]
        workload = Workload(gpu.lm_module(cfg), (lc["seq"],), jnp.int32)
        x, y = make_tokens(lc["n"], lc["seq"], lc["vocab"])
        batch = lc["batch"]
        hand = handwritten.LMTrainer(workload, mesh, batch, compute_dtype=jnp.bfloat16)
        metrics = ()
    fit = MirrorfitRunner(workload, 1, batch, "fit", from_logits=True,
                          dtype_policy=gpu.POLICY, metrics=metrics)
    rows = len(x) // batch * batch
    return hand, fit, x[:rows], y[:rows], batch


def loop_rates(hand, fit, x, y, rounds: int, target_s: float) -> dict:
    """Median examples/s of each whole loop, over ``rounds`` interleaved rounds."""
    variants = {"handwritten": (hand, {}),
                "fit": (fit, {"verbose": 1, "device_resident": None}),
                "fit_verbose0": (fit, {"verbose": 0, "device_resident": None}),
                "fit_host": (fit, {"verbose": 1, "device_resident": False})}

    def run(name, epochs):
        runner, settings = variants[name]
        for key, value in settings.items():
            setattr(runner, key, value)
        start = time.perf_counter()
        examples = runner.run(x, y, epochs)
        return examples / (time.perf_counter() - start)

    for name in variants:  # compiles (the resident and the host program), places data
        run(name, 1)
    epochs = max(1, round(target_s * run("handwritten", 1) / len(x)))
    rates = collections.defaultdict(list)
    for _ in range(rounds):
        for name in variants:
            rates[name].append(run(name, epochs))
    return {name: {"median": statistics.median(r), "min": min(r), "max": max(r),
                   "epochs": epochs} for name, r in rates.items()}


def step_rates(hand, fit, x, y, batch: int, steps: int) -> dict:
    """Steps/s of each compiled step alone on one placed batch, at most two in flight."""
    model = fit.model
    trainer, strategy = model.trainer, model.strategy
    data = ArrayDataAdapter(x[:batch], y[:batch], batch_size=batch, num_replicas=1)
    placed = next(place_batches(data.batches(0), strategy))
    statistics_ = trainer._fresh_statistics(model.state, placed)
    hx, hy = hand._placed(x[:batch], y[:batch])

    def mirrorfit_step():
        nonlocal statistics_
        model.state, statistics_ = trainer.train_fn(model.state, statistics_, placed)
        return statistics_

    def hand_step():
        hand.state, loss = hand.step(hand.state, hx, hy)
        return loss

    def rate(call):
        previous = None
        start = time.perf_counter()
        for _ in range(steps):
            out = call()
            if previous is not None:
                jax.block_until_ready(previous)
            previous = out
        jax.block_until_ready(previous)
        return steps / (time.perf_counter() - start)

    for call in (mirrorfit_step, hand_step):  # compile / warm
        rate(call)
    return {"handwritten_step": rate(hand_step), "mirrorfit_step": rate(mirrorfit_step),
            "handwritten_step_again": rate(hand_step), "mirrorfit_step_again": rate(mirrorfit_step)}


def profile_summary(run, top: int = 8) -> list[dict]:
    """Traces ``run()`` and summarises each device plane's lines (see the module doc)."""
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            run()
        paths = glob.glob(f"{tmp}/**/*.xplane.pb", recursive=True)
        if not paths:
            return [{"error": "no trace written"}]
        data = jax.profiler.ProfileData.from_file(paths[-1])
    lines = []
    for plane in data.planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            events = [(e.name, e.start_ns, e.duration_ns) for e in line.events]
            if not events:
                continue
            busy, end_so_far = 0.0, float("-inf")
            for _, start, duration in sorted(events, key=lambda e: e[1]):
                end = start + duration
                busy += max(0.0, end - max(start, end_so_far))
                end_so_far = max(end_so_far, end)
            span = max(s + d for _, s, d in events) - min(s for _, s, _ in events)
            by_name = collections.Counter()
            for name, _, duration in events:
                by_name[name] += duration
            lines.append({"plane": plane.name, "line": line.name, "events": len(events),
                          "total_ms": sum(d for *_, d in events) / 1e6,
                          "busy_ms": busy / 1e6, "span_ms": span / 1e6,
                          "top_ms": [(n, round(t / 1e6, 3)) for n, t in by_name.most_common(top)]})
    return lines


def diagnose(model: str, cfg: dict, rounds: int, steps: int) -> dict:
    hand, fit, x, y, batch = build(model, cfg)
    report = {"model": model, "batch": batch, "rows": len(x),
              "loops": loop_rates(hand, fit, x, y, rounds, cfg["target_seconds"]),
              "steps": step_rates(hand, fit, x, y, batch, steps)}
    fit.verbose, fit.device_resident = 1, None
    report["profile_fit"] = profile_summary(lambda: fit.run(x, y, 1))
    report["profile_handwritten"] = profile_summary(lambda: hand.run(x, y, 1))
    return report


def print_report(r: dict) -> None:
    hand = r["loops"]["handwritten"]["median"]
    print(f"\n## {r['model']}, global batch {r['batch']}, {r['rows']} rows per epoch\n")
    print("| loop | examples/s | vs hand-written |\n|---|---|---|")
    for name, rate in r["loops"].items():
        print(f"| {name} | {rate['median']:,.0f} ({rate['min']:,.0f}-{rate['max']:,.0f}) | "
              f"{rate['median'] / hand:.3f} |")
    s = r["steps"]
    print(f"\nstep alone, steps/s: hand-written {s['handwritten_step']:.1f} / "
          f"{s['handwritten_step_again']:.1f}, mirrorfit {s['mirrorfit_step']:.1f} / "
          f"{s['mirrorfit_step_again']:.1f}")
    for key in ("profile_fit", "profile_handwritten"):
        print(f"\n{key}:")
        for line in r[key]:
            if "error" in line:
                print("  ", line["error"])
                continue
            print(f"  {line['line']}: {line['events']} events, total {line['total_ms']:.1f} ms, "
                  f"busy {line['busy_ms']:.1f} of span {line['span_ms']:.1f} ms; top "
                  + ", ".join(f"{n[:60]} {t}" for n, t in line["top_ms"][:5]))


def main(argv=None) -> Path:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny models, for smoke tests")
    p.add_argument("--models", nargs="+", default=["lm", "resnet18"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=30, help="steps per step-alone timing")
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    cfg = gpu.settings(True) if args.quick else gpu.short_settings()
    device = jax.devices()[0]
    report = {"device": device.device_kind, "jax": jax.__version__,
              "date": datetime.date.today().isoformat(), "settings": cfg, "models": []}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / (f"diagnose-{device.platform}-{device.device_kind.lower().replace(' ', '-')}"
                       f"-{report['date']}.json")
    for model in args.models:
        result = diagnose(model, cfg, args.rounds, args.steps)
        report["models"].append(result)
        path.write_text(json.dumps(report, indent=1))
        print_report(result)
    return path


if __name__ == "__main__":
    main()
