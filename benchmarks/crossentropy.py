"""The integer-label crossentropy from logits: mirrorfit's custom VJP against optax's, on CPU.

Usage::

    python benchmarks/crossentropy.py            # writes results/crossentropy-<machine>-<date>.*
    python benchmarks/crossentropy.py --quick    # tiny smoke run, not written

``mf.losses.SparseCategoricalCrossentropy(from_logits=True)`` computes
``softmax_crossentropy_with_integer_labels`` (``mirrorfit/_src/losses/crossentropy_losses.py``):
optax's formula, whose gradient is written as ``softmax - one_hot`` elementwise (an iota
compare) instead of autodiff's scatter into a zeroed logits-sized buffer (issue 42). This times
``jax.jit(jax.value_and_grad(mean loss))`` of both on float32 logits ``[tokens, classes]``
with random int labels, for a few shapes up to a GPT-2 vocabulary. The goal: mirrorfit's at
most 1.05x optax's time on the CPU.

Both functions are compiled, warmed up, then timed in ``--rounds`` interleaved rounds (the
order alternates), each round the best of ``--repeats`` batches of ``--calls`` calls; the
ratio is of the medians over rounds. On a shared machine wall time waits for cores, so the
ratio per CPU-second of the process (``time.process_time``) is given beside it. Also recorded
per shape: whether each gradient's CUDA lowering (made here, without a GPU) holds a
``stablehlo.scatter``.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repo's mirrorfit, uninstalled

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mirrorfit._src.losses.crossentropy_losses import (
    softmax_crossentropy_with_integer_labels,
)

SHAPES = ((8192, 1024), (2048, 8192), (512, 50_304))  # (tokens, classes)
QUICK_SHAPES = ((64, 128),)
FUNCTIONS = {"optax": optax.losses.softmax_cross_entropy_with_integer_labels,
             "mirrorfit": softmax_crossentropy_with_integer_labels}


def value_and_grad(fn, labels):
    return jax.jit(jax.value_and_grad(lambda logits: jnp.mean(fn(logits, labels))))


def has_cuda_scatter(fn, logits, labels) -> bool:
    """Whether the gradient's CUDA lowering (no GPU needed) holds a ``stablehlo.scatter``."""
    text = value_and_grad(fn, labels).trace(logits).lower(lowering_platforms=("cuda",)).as_text()
    return "stablehlo.scatter" in text


def time_calls(fn, logits, calls: int, repeats: int) -> tuple[float, float]:
    """Best of ``repeats``: (wall seconds, process CPU seconds) per call."""
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            jax.block_until_ready(fn(logits))
        best = min(best, ((time.perf_counter() - wall) / calls,
                          (time.process_time() - cpu) / calls))
    return best


def measure(tokens: int, classes: int, args) -> dict:
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(tokens, classes)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, classes, tokens), jnp.int32)
    compiled = {name: value_and_grad(fn, labels) for name, fn in FUNCTIONS.items()}
    outs = {name: fn(logits) for name, fn in compiled.items()}
    np.testing.assert_allclose(outs["mirrorfit"][0], outs["optax"][0], rtol=1e-6)
    np.testing.assert_allclose(outs["mirrorfit"][1], outs["optax"][1], rtol=1e-6, atol=0)
    wall = {name: [] for name in compiled}
    cpu = {name: [] for name in compiled}
    for r in range(args.rounds):
        for name in (list(compiled) if r % 2 == 0 else list(compiled)[::-1]):
            w, c = time_calls(compiled[name], logits, args.calls, args.repeats)
            wall[name].append(w)
            cpu[name].append(c)
    med = {name: statistics.median(v) for name, v in wall.items()}
    med_cpu = {name: statistics.median(v) for name, v in cpu.items()}
    return {"tokens": tokens, "classes": classes,
            "ms_per_call": {name: 1e3 * v for name, v in med.items()},
            "ms_per_call_min_max": {name: [1e3 * min(v), 1e3 * max(v)]
                                    for name, v in wall.items()},
            "ratio": med["mirrorfit"] / med["optax"],
            "ratio_cpu_time": med_cpu["mirrorfit"] / med_cpu["optax"],
            "cuda_gradient_has_scatter": {name: has_cuda_scatter(fn, logits, labels)
                                          for name, fn in FUNCTIONS.items()}}


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [f"# Integer-label crossentropy `value_and_grad`, {report['date']}", "",
             (f"{m['cpu_count']} CPUs ({m['processor'] or m['machine']}), jax {m['jax']}, optax "
              f"{m['optax']}; float32 logits; {report['rounds']} interleaved rounds, each the "
              f"best of {report['repeats']} x {report['calls']} calls; medians."), "",
             ("| tokens × classes | optax ms | mirrorfit ms | mirrorfit / optax | per CPU-second "
              "| scatter in CUDA gradient (optax, mirrorfit) |"), "|---|---|---|---|---|---|"]
    for r in report["results"]:
        ms, sc = r["ms_per_call"], r["cuda_gradient_has_scatter"]
        lines.append(f"| {r['tokens']:,} × {r['classes']:,} | {ms['optax']:.2f} | "
                     f"{ms['mirrorfit']:.2f} | {r['ratio']:.3f}x | {r['ratio_cpu_time']:.3f}x | "
                     f"{'yes' if sc['optax'] else 'no'}, {'yes' if sc['mirrorfit'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="one tiny shape, one round; not written")
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.repeats, args.calls = 1, 1, 1
    report = {"date": datetime.date.today().isoformat(),
              "machine": {"cpu_count": os.cpu_count(), "processor": platform.processor(),
                          "machine": platform.machine(), "jax": jax.__version__,
                          "optax": optax.__version__},
              "rounds": args.rounds, "repeats": args.repeats, "calls": args.calls,
              "results": [measure(t, c, args) for t, c in (QUICK_SHAPES if args.quick
                                                           else SHAPES)]}
    text = markdown(report)
    print(text)
    if not args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"crossentropy-cpu-{os.cpu_count()}core-{report['date']}"
        path.with_suffix(".json").write_text(json.dumps(report, indent=1))
        path.with_suffix(".md").write_text(text)
    return report


if __name__ == "__main__":
    main()
