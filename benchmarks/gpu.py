"""mirrorfit on one accelerator: ResNet-18 in bf16, `fit` against the hand-written loop, with MFU.

Usage (on the GPU machine, from the checkout)::

    PYTHONPATH=. python benchmarks/gpu.py --out DIR   # ResNet-18, 32x32x3, global batch 256 and 1024
    python benchmarks/gpu.py --quick --out DIR        # tiny smoke run on any backend, no fused cases

Unlike ``run.py`` (many simulated CPU devices, one subprocess per case), every case here runs in
one process on the default backend, because each ResNet-18 compilation costs tens of seconds of
accelerator time. Per global batch size, it builds the cases (``handwritten``: the
``jit(shard_map)`` loop of ``handwritten.BatchNormTrainer``; ``mirrorfit_fit``: ``model.fit``
with the defaults a user gets, progress bar and accuracy metric; ``mirrorfit_fit_verbose0``: the
same without the progress bar; and at the first batch size the
``steps_per_execution`` pair, ``handwritten_fused`` and ``mirrorfit_fit_spe``), warms each up on
a slice ending in a partial batch (compilation; counted), calibrates epochs per repeat on the
hand-written loop, then times the cases in interleaved rounds.

Reported per case: examples/s (median over rounds, spread), the ratio to the matching
hand-written loop, and model FLOPs utilization::

    MFU = 3 * (forward FLOPs per example) * examples/s / measured bf16 matmul peak

The forward FLOPs are counted on the model's jaxpr: ``2 * M * N * K`` per ``dot_general`` and
``2 * output elements * input channels per group * kernel window`` per convolution; the
backward pass is counted as twice the forward (the usual convention: gradients with respect to
activations and to weights), so elementwise work, BatchNorm and the optimizer are not counted.
The peak is the median rate of an ``N x N @ N x N`` bf16 matmul (N = 8192) on the same device
in the same run. Writes
``<device>-<date>.json`` and ``.md`` to ``--out`` and prints the table.
"""

import argparse
import datetime
import functools
import gc
import importlib.metadata
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # the repo's mirrorfit, uninstalled

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.extend.core import ClosedJaxpr, Jaxpr  # noqa: E402

import handwritten  # noqa: E402
from frameworks import MirrorfitRunner  # noqa: E402
from run import write_report  # noqa: E402
from _worker import CompileCounter  # noqa: E402
from synthetic import make_data  # noqa: E402
from workloads import ResNet18, Workload  # noqa: E402

REFERENCE = {"mirrorfit_fit": "handwritten", "mirrorfit_fit_verbose0": "handwritten",
             "mirrorfit_fit_spe": "handwritten_fused"}


def settings(quick: bool) -> dict:
    """The run's sizes: full ResNet-18 on a GPU, or a tiny one for smoke tests."""
    if quick:
        return {"width": 4, "n": 256, "batches": [32], "spe": 4, "fused": False, "rounds": 1,
                "target_seconds": 0.1, "matmul_n": 256}
    return {"width": 64, "n": 65_536, "batches": [256, 1024], "spe": 32, "fused": True,
            "rounds": 5, "target_seconds": 2.0, "matmul_n": 8192}


def matmul_peak(n: int, repeats: int = 7, calls: int = 10) -> float:
    """Measured bf16 matmul rate in FLOP/s: median over ``repeats`` of ``calls`` chained products."""
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (n, n), jnp.bfloat16)
    b = jax.random.normal(kb, (n, n), jnp.bfloat16)
    matmul = jax.jit(lambda a, b: a @ b)
    matmul(a, b).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        outs = [matmul(a, b) for _ in range(calls)]
        jax.block_until_ready(outs)
        times.append((time.perf_counter() - start) / calls)
    return 2 * n**3 / statistics.median(times)


def _sub_jaxprs(params: dict):
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, Jaxpr):
                yield item


def _matmul_flops(jaxpr) -> float:
    """FLOPs of the matrix products and convolutions in ``jaxpr``, nested calls included."""
    total = 0.0
    for eqn in jaxpr.eqns:
        out = eqn.outvars[0].aval
        if eqn.primitive.name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval
            total += 2 * np.prod(out.shape) * np.prod([lhs.shape[d] for d in contract])
        elif eqn.primitive.name == "conv_general_dilated":
            rhs, rhs_spec = eqn.invars[1].aval, eqn.params["dimension_numbers"].rhs_spec
            window = np.prod([rhs.shape[d] for d in rhs_spec[2:]])
            total += 2 * np.prod(out.shape) * rhs.shape[rhs_spec[1]] * window
        for sub in _sub_jaxprs(eqn.params):
            total += _matmul_flops(sub)
    return float(total)


def train_flops_per_example(workload: Workload) -> float:
    """``3 *`` the forward pass's matmul and convolution FLOPs for one example (see above)."""
    x = jax.ShapeDtypeStruct((1, *workload.input_shape), jnp.float32)
    variables = jax.eval_shape(workload.module.init, jax.random.key(0), x)
    forward = jax.make_jaxpr(lambda v, x: workload.module.apply(v, x))(variables, x)
    return 3 * _matmul_flops(forward.jaxpr)


def measure_batch(workload: Workload, x, y, batch: int, cfg: dict, fused: bool,
                  counter: CompileCounter, peak: float) -> list[dict]:
    """All cases at one global batch size, timed in interleaved rounds."""
    devices = len(jax.devices())
    mesh = handwritten.make_mesh(devices)
    fit = functools.partial(MirrorfitRunner, workload, devices, batch, "fit", from_logits=True)
    cases = {"handwritten": handwritten.BatchNormTrainer(workload, mesh, batch),
             "mirrorfit_fit": fit(), "mirrorfit_fit_verbose0": fit(verbose=0)}
    if fused:
        k = cfg["spe"]
        cases["handwritten_fused"] = handwritten.BatchNormTrainer(workload, mesh, batch, k)
        cases["mirrorfit_fit_spe"] = fit(steps_per_execution=k)
    flops_per_example = train_flops_per_example(workload)
    rows = {}
    for name, runner in cases.items():  # warm-up: compilation, ending in a partial batch
        counter.phase = f"{batch}/{name}"
        steps = cfg["spe"] + 1 if name.endswith(("fused", "spe")) else 3
        start = time.perf_counter()
        runner.run(x[:steps * batch + batch // 2], y[:steps * batch + batch // 2], 1)
        rows[name] = {"case": name, "batch": batch, "first_call_s": time.perf_counter() - start,
                      "compiles": counter.stats(counter.phase), "examples_per_s_all": []}
    unit = cfg["spe"] * batch  # timed rows: whole groups, so no case has a partial batch
    rows_timed = len(x) // unit * unit
    start = time.perf_counter()
    cases["handwritten"].run(x[:rows_timed], y[:rows_timed], 1)
    epochs = max(1, round(cfg["target_seconds"] / (time.perf_counter() - start)))
    counter.phase = f"{batch}/timed"
    for _ in range(cfg["rounds"]):
        for name, runner in cases.items():
            start = time.perf_counter()
            examples = runner.run(x[:rows_timed], y[:rows_timed], epochs)
            rows[name]["examples_per_s_all"].append(examples / (time.perf_counter() - start))
    later_compiles = counter.stats(counter.phase)["count"]
    for name, row in rows.items():
        rates = row.pop("examples_per_s_all")
        median = statistics.median(rates)
        row.update(rows_per_repeat=rows_timed, epochs_per_repeat=epochs,
                   examples_per_s={"median": median, "min": min(rates), "max": max(rates),
                                   "repeats": len(rates)},
                   flops_per_example=flops_per_example,
                   tflops_per_s=flops_per_example * median / 1e12,
                   mfu=flops_per_example * median / peak,
                   compiles_during_timed_rounds=later_compiles)
        ref = REFERENCE.get(name)
        if ref in rows:
            row["reference"] = ref
    for row in rows.values():
        if "reference" in row:
            ref = rows[row["reference"]]["examples_per_s"]["median"]
            row["ratio"] = row["examples_per_s"]["median"] / ref
    del cases
    gc.collect()
    return list(rows.values())


def machine() -> dict:
    device = jax.devices()[0]
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                         capture_output=True).stdout.strip()
    kind = device.device_kind.lower().replace(" ", "-")
    return {"slug": f"{device.platform}-{kind}", "device": device.device_kind,
            "devices": len(jax.devices()), "python": platform.python_version(),
            "jax": jax.__version__, "flax": importlib.metadata.version("flax"),
            "optax": importlib.metadata.version("optax"), "mirrorfit_commit": git or "unknown"}


def markdown(report: dict) -> str:
    m, cfg = report["machine"], report["settings"]
    lines = [f"# mirrorfit on one accelerator, {report['date']}, {m['device']}", "",
             f"{m['devices']} × {m['device']}, Python {m['python']}, jax {m['jax']}, flax "
             f"{m['flax']}, optax {m['optax']}, mirrorfit {m['mirrorfit_commit']}. ResNet-18 "
             f"(width {cfg['width']}) on {cfg['n']:,} random 32×32×3 images, bf16 compute, Adam. "
             f"Measured bf16 matmul peak: {report['matmul_peak_tflops']:.0f} TFLOP/s "
             f"({cfg['matmul_n']}³). {cfg['rounds']} interleaved rounds; median and min–max.", "",
             "| batch | case | examples/s | spread | vs hand-written | TFLOP/s | MFU | "
             "first call s | compiles in first call |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        e = r["examples_per_s"]
        ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "—"
        lines.append(f"| {r['batch']} | {r['case']} | {e['median']:,.0f} | {e['min']:,.0f}–"
                     f"{e['max']:,.0f} | {ratio} | {r['tflops_per_s']:.1f} | {r['mfu']:.1%} | "
                     f"{r['first_call_s']:.1f} | {r['compiles']['count']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> Path:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny ResNet, for smoke tests")
    p.add_argument("--out", type=Path, default=HERE / "results", help="output directory")
    args = p.parse_args(argv)
    cfg = settings(args.quick)
    counter = CompileCounter()
    info = machine()
    peak = matmul_peak(cfg["matmul_n"])
    print(f"bf16 matmul peak: {peak / 1e12:.1f} TFLOP/s", file=sys.stderr)
    workload = Workload(ResNet18(width=cfg["width"]), (32, 32, 3))
    x, y = make_data(workload.input_shape, cfg["n"])
    results = []
    for i, batch in enumerate(cfg["batches"]):
        results += measure_batch(workload, x, y, batch, cfg, fused=cfg["fused"] and i == 0,
                                 counter=counter,
                                 peak=peak)
    report = {"machine": info, "date": datetime.date.today().isoformat(), "quick": args.quick,
              "settings": cfg, "matmul_peak_tflops": peak / 1e12, "results": results}
    return write_report(report, args.out, markdown(report))


if __name__ == "__main__":
    main()
