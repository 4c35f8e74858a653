"""Where the time of one training step goes, sampled with py-spy: per line of the training loop.

Usage (one case per run; Keras 3 with its venv's interpreter, see ``venvs.py``)::

    python benchmarks/profile_host.py --case mirrorfit_fit --batch 32
    python benchmarks/profile_host.py --case handwritten_jit --batch 32
    KERAS_BACKEND=jax ~/.cache/mirrorfit-bench/peers/keras3/bin/python \\
        benchmarks/profile_host.py --case keras3 --batch 32

It re-runs itself under ``py-spy record --idle --nonblocking`` (``pip install py-spy``): the
child builds the case's runner as ``_worker.py`` does, warms it up (compilation), and trains
``--epochs`` epochs of ``--n`` rows inside ``timed_loop``. Only samples of the main thread
under ``timed_loop`` count. Idle samples are kept, so the samples add up to the wall time and
time spent waiting for the device shows up where the host waits (``block_until_ready``).
Printed, in microseconds per train step (the share of samples times the measured wall time per
step): the inclusive time of each line of mirrorfit, Keras and benchmark code on the stack, and
the innermost frames (where the time is actually spent). Last, the number of Python function
calls per step, counted with ``cProfile`` over one more run: a measure of host work that the
load of a shared machine does not change.
"""

import argparse
import collections
import cProfile
import pstats
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # the repo's mirrorfit, uninstalled

OWN_CODE = re.compile(r"(mirrorfit/|keras/src/|benchmarks/|frameworks\.py|handwritten\.py|"
                      r"peers\.py)")
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--case", default="mirrorfit_fit",
                   choices=("mirrorfit_fit", "handwritten", "handwritten_jit", "keras3"))
    p.add_argument("--model", default="mlp", choices=("mlp", "cnn"))
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--batch", type=int, default=32, help="global batch size")
    p.add_argument("--n", type=int, default=32 * 500, help="rows per epoch (a multiple of --batch)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--rate", type=int, default=1000, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=20, help="rows per table")
    p.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)  # internal: run the loop
    return p.parse_args(argv)


def timed_loop(runner, x, y, epochs: int) -> float:
    """Trains ``epochs`` epochs; returns the wall seconds. The frame py-spy samples are kept under."""
    start = time.perf_counter()
    runner.run(x, y, epochs)
    return time.perf_counter() - start


def child(args: argparse.Namespace) -> None:
    """Builds, warms up and times the runner; writes ``{"seconds", "steps"}`` to ``args.child``."""
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={args.devices}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from _worker import make_runner
    from synthetic import input_shape, make_data

    runner = make_runner(argparse.Namespace(case=args.case, model=args.model, devices=args.devices,
                                            batch=args.batch, spe=1))
    x, y = make_data(input_shape(args.model), args.n)
    runner.run(x[:args.batch * 8], y[:args.batch * 8], 1)  # compile
    seconds = timed_loop(runner, x, y, args.epochs)
    steps = args.epochs * (args.n // args.batch)
    profile = cProfile.Profile()  # after the sampled loop: py-spy sees no cProfile overhead
    profile.runcall(runner.run, x, y, args.epochs)
    calls = collections.Counter()
    for (path, _, _), (_, primitive, *_rest) in pstats.Stats(profile).stats.items():
        calls[_package(path)] += primitive / steps
    Path(args.child).write_text(json.dumps({"seconds": seconds, "steps": steps,
                                            "calls_per_step": calls}))


def _package(path: str) -> str:
    """The library a function belongs to, for counting Python calls per step."""
    if path == "~":
        return "builtins"
    for name in ("mirrorfit", "keras", "jax", "flax", "optax", "numpy", "tqdm", "optree",
                 "benchmarks"):
        if f"/{name}/" in path:
            return name
    return "other (stdlib, ...)"


def _frames(stack: str) -> list[tuple[str, str, int]]:
    out = []
    for frame in stack.split(";"):
        m = FRAME.match(frame)
        if m:
            out.append((m["func"], m["file"], int(m["line"])))
    return out


def breakdown(raw: str, seconds: float, steps: int, top: int) -> str:
    """Tables of microseconds per step from py-spy's raw (collapsed) samples."""
    inclusive, leaves, total = collections.Counter(), collections.Counter(), 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = _frames(stack)
        names = [f[0] for f in frames]
        if "timed_loop" not in names:
            continue
        frames = frames[names.index("timed_loop") + 1:]
        count = int(count)
        total += count
        for key in {f"{Path(file).name}:{ln} {func}" for func, file, ln in frames
                    if OWN_CODE.search(file)}:
            inclusive[key] += count
        if frames:
            func, file, ln = frames[-1]
            leaves[f"{'/'.join(Path(file).parts[-2:])}:{ln} {func}"] += count
    per_step = seconds / steps * 1e6
    us = lambda c: c / max(total, 1) * per_step  # noqa: E731
    lines = [f"wall: {per_step:.0f} us/step, {total} samples in the loop", "",
             "| us/step | line (inclusive) |", "|---:|---|"]
    lines += [f"| {us(c):.0f} | `{k}` |" for k, c in inclusive.most_common(top)]
    lines += ["", "| us/step | innermost frame |", "|---:|---|"]
    lines += [f"| {us(c):.0f} | `{k}` |" for k, c in leaves.most_common(top)]
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        return child(args)
    with tempfile.TemporaryDirectory() as tmp:
        result, raw = Path(tmp) / "result.json", Path(tmp) / "raw.txt"
        cmd = ["py-spy", "record", "--idle", "--nonblocking", "-r", str(args.rate), "-f", "raw",
               "-o", str(raw), "--", sys.executable, __file__, *(argv or sys.argv[1:]),
               "--child", str(result)]
        subprocess.run(cmd, check=True, capture_output=True)
        timing = json.loads(result.read_text())
        print(f"# {args.case}: {args.model}, D={args.devices}, batch {args.batch}, "
              f"{timing['steps']} steps, {timing['steps'] * args.batch / timing['seconds']:,.0f} "
              "examples/s under py-spy\n")
        print(breakdown(raw.read_text(), timing["seconds"], timing["steps"], args.top))
        calls = timing["calls_per_step"]
        print(f"\nPython function calls per step (cProfile, independent of machine load): "
              f"{sum(calls.values()):.0f}; by library: "
              + ", ".join(f"{k} {v:.0f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
