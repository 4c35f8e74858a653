"""One benchmark measurement, run by ``run.py`` in a fresh subprocess.

The process simulates ``--devices`` CPU devices (``XLA_FLAGS`` is set before JAX is imported),
builds one case's runner, then:

1. warms up on a short slice that ends in a partial batch, which covers compilation; the XLA
   compilations of this first call are counted and timed via ``jax.monitoring``;
2. for the reference case only (``--epochs 0``), calibrates how many rows and epochs make one
   repeat last about ``--target-seconds``; the other cases reuse those numbers so that every case
   in a group does the same work;
3. times ``--repeats`` repeats, each ending with a block on the device work. The machine may be
   shared, so each repeat also records how many CPU cores *other* processes kept busy meanwhile
   (from ``/proc/stat`` minus this process's own CPU time).

Peer cases (``PEER_CASES``) run this same script with the peer venv's interpreter (see
``venvs.py``), importing only ``peers`` and ``synthetic``, never Flax or mirrorfit.

It writes a JSON result (throughput of every repeat, compile counts, host peak RSS, live device
memory) to ``--result``; on an exception it writes ``{"status": "crashed: ..."}`` instead.
"""

import argparse
import importlib.util
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

# The repo's mirrorfit, uninstalled; MIRRORFIT_TREE points at another checkout's (ab_commits.py).
sys.path.insert(1, os.environ.get("MIRRORFIT_TREE") or str(Path(__file__).resolve().parents[1]))

GROUP_STEPS = 32  # timed slices are whole multiples of this many global batches
PEER_CASES = ("keras3", "keras3_spe", "tf_keras")  # run by the peer's venv interpreter
TRAIN_CASES = ("handwritten", "handwritten_fused", "handwritten_jit", "mirrorfit_fit",
               "mirrorfit_fit_spe", *PEER_CASES)
INFERENCE_CASES = ("handwritten_evaluate", "handwritten_predict", "mirrorfit_evaluate",
                   "mirrorfit_predict")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--case", required=True, choices=TRAIN_CASES + INFERENCE_CASES)
    p.add_argument("--model", default="mlp", choices=("mlp", "cnn"))
    p.add_argument("--devices", type=int, default=1, help="simulated CPU devices (replicas)")
    p.add_argument("--batch", type=int, default=256, help="global batch size")
    p.add_argument("--n", type=int, default=60_000, help="examples in the data set")
    p.add_argument("--spe", type=int, default=GROUP_STEPS, help="steps per call for fused cases")
    p.add_argument("--rows", type=int, default=0, help="rows per timed repeat (0: calibrate)")
    p.add_argument("--epochs", type=int, default=0, help="epochs/passes per repeat (0: calibrate)")
    p.add_argument("--target-seconds", type=float, default=2.5, help="calibrated repeat length")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup-steps", type=int, default=8, help="full batches in the warm-up slice")
    p.add_argument("--result", required=True, help="path of the JSON result")
    return p.parse_args(argv)


class CompileCounter:
    """Counts XLA backend compilations per phase from ``jax.monitoring`` duration events.

    Compilations of single primitives (``jit(broadcast_in_dim)`` and the like, from op-by-op
    dispatch outside any jitted step) are tallied apart from jitted functions such as train steps.
    Where JAX is not installed (the tf.keras venv), ``enabled`` is False and nothing is counted.
    """

    def __init__(self):
        self.phase = "setup"
        self.phases: dict = {}
        self.enabled = importlib.util.find_spec("jax") is not None
        if not self.enabled:
            return
        import jax
        from jax.extend.core import Primitive

        self.primitives = {p.name for p in vars(jax.lax).values() if isinstance(p, Primitive)}
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration: float, **kwargs) -> None:
        if event != "/jax/core/compile/backend_compile_duration":
            return
        stats = self.phases.setdefault(self.phase, self._empty())
        stats["count"] += 1
        stats["seconds"] += duration
        name = str(kwargs.get("fun_name", "?"))
        kind = "eager_ops" if name.removeprefix("jit(")[:-1] in self.primitives else "by_function"
        stats[kind][name] = stats[kind].get(name, 0) + 1

    @staticmethod
    def _empty() -> dict:
        return {"count": 0, "seconds": 0.0, "by_function": {}, "eager_ops": {}}

    def stats(self, phase: str) -> dict:
        return self.phases.get(phase, self._empty())


def make_runner(args: argparse.Namespace):
    """Returns the runner of ``args.case`` (see ``handwritten``, ``frameworks`` and ``peers``).

    Peer cases import only ``peers`` (NumPy and the framework): their venvs have no Flax.
    """
    case, d, b = args.case, args.devices, args.batch
    if case in PEER_CASES:
        from peers import KerasRunner
        from synthetic import input_shape

        k = args.spe if case.endswith("_spe") else 1
        return KerasRunner(input_shape(args.model), d, b, case.removesuffix("_spe"),
                           steps_per_execution=k)
    import handwritten
    from frameworks import MirrorfitRunner
    from workloads import get_workload

    workload = get_workload(args.model)
    if case == "handwritten_jit":
        return handwritten.JitTrainer(workload, b)
    if case.startswith("handwritten"):
        mesh = handwritten.make_mesh(d)
        if case == "handwritten_evaluate":
            return handwritten.Evaluator(workload, mesh, b)
        if case == "handwritten_predict":
            return handwritten.Predictor(workload, mesh, b)
        k = args.spe if case == "handwritten_fused" else 1
        return handwritten.Trainer(workload, mesh, b, steps_per_call=k)
    mode = case.split("_")[1]  # mirrorfit_fit, mirrorfit_fit_spe, mirrorfit_evaluate, ...
    k = args.spe if case == "mirrorfit_fit_spe" else 1
    return MirrorfitRunner(workload, d, b, mode, steps_per_execution=k)


def calibrate(runner, x, y, args: argparse.Namespace, train: bool) -> tuple[int, int]:
    """Times one short run and returns ``(rows, epochs)`` for repeats of about the target length."""
    unit = GROUP_STEPS * args.batch if train else len(x)
    rows = min(len(x) // unit, 2) * unit if train else len(x)
    start = time.perf_counter()
    runner.run(x[:rows], y[:rows], 1)
    target_rows = args.target_seconds * rows / (time.perf_counter() - start)
    if not train:
        return rows, max(1, round(target_rows / rows))
    rows = min(len(x) // unit, max(1, round(target_rows / unit))) * unit
    return rows, max(1, round(target_rows / rows))


def busy_cpu_seconds() -> float:
    """CPU seconds all processes but this one have been busy since boot (0 where not Linux)."""
    try:
        fields = open("/proc/stat").readline().split()[1:]
        own = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[11:13]
    except OSError:
        return 0.0
    ticks = [int(f) for f in fields[:8]]
    busy = sum(ticks) - ticks[3] - ticks[4]  # minus idle and iowait
    return (busy - int(own[0]) - int(own[1])) / os.sysconf("SC_CLK_TCK")


def measure(args: argparse.Namespace) -> dict:
    """Warms up, calibrates if asked, times the repeats; returns the result dict.

    Where JAX is not installed (the tf.keras venv), compile counts and device memory are ``None``.
    """
    from synthetic import input_shape, make_data

    counter = CompileCounter()
    x, y = make_data(input_shape(args.model), args.n)
    train = args.case in TRAIN_CASES
    runner = make_runner(args)

    counter.phase = "first_call"
    warm = min(len(x), args.warmup_steps * args.batch + args.batch // 2)
    if train and args.case.endswith(("fused", "spe")):
        warm = min(len(x), args.spe * args.batch + args.batch // 2)
    runner.run(x[:warm], y[:warm], 1)
    counter.phase = "calibration"
    rows, epochs = args.rows, args.epochs
    if not (rows and epochs):
        rows, epochs = calibrate(runner, x, y, args, train)
    counter.phase = "timed"
    rates, others = [], []
    for _ in range(args.repeats):
        busy, start = busy_cpu_seconds(), time.perf_counter()
        examples = runner.run(x[:rows], y[:rows], epochs)
        elapsed = time.perf_counter() - start
        rates.append(examples / elapsed)
        others.append(max(0.0, (busy_cpu_seconds() - busy) / elapsed))
    device_mb, compiles = None, None
    if counter.enabled:
        import jax

        device_mb = sum(s.data.nbytes for a in jax.live_arrays()
                        for s in a.addressable_shards) / 2**20
        compiles = {"first_call": counter.stats("first_call"), "timed": counter.stats("timed"),
                    "first_call_rows": warm}
    return {
        "status": "ok",
        "rows": rows,
        "epochs": epochs,
        "examples_per_s": rates,
        "other_processes_cores": others,
        "compiles": compiles,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "live_device_mb": device_mb,
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={args.devices}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        result = measure(args)
    except Exception as e:  # reported as the case's status; the parent keeps going
        traceback.print_exc()
        result = {"status": f"crashed: {type(e).__name__}: {e}".splitlines()[0][:300]}
    with open(args.result, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
