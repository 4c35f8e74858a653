"""mirrorfit on one accelerator, bf16 through the dtype policy: ResNet-18 and a GPT-2-small-sized
language model, ``fit`` against the hand-written loop and against Keras 3, with MFU.

Usage (on the GPU machine, from the checkout)::

    PYTHONPATH=. python benchmarks/gpu.py --out DIR   # the full run (about 15 minutes)
    PYTHONPATH=. python benchmarks/gpu.py --short --no-keras --out DIR   # ~5 minutes
    PYTHONPATH=. python benchmarks/gpu.py --short --keras-only --merge-into DIR/X.json --out DIR
    PYTHONPATH=. python benchmarks/gpu.py --short --case-memory --out DIR   # issue 42's run
    python benchmarks/gpu.py --quick --out DIR        # tiny smoke run on any backend

``--short`` is the full models on less data with fewer, shorter rounds, sized to fit a
device lease of a few minutes; ``--no-keras`` and ``--keras-only --merge-into REPORT`` split
one run into two device calls (the Keras cases added to the report the first one wrote).
``--short`` runs each Keras case at ``steps_per_execution`` 1 and 32 (``keras3_fit``,
``keras3_fit_spe32``). ``--case-memory`` also runs ``handwritten`` and ``mirrorfit_fit`` of
each model alone, each in a process of its own, for that case's peak device memory
(`MEMORY_CASES`). ``benchmarks/gpu_issue42.sh`` is issue 42's device call.

Keras 3 needs wheels carried to the machine (``benchmarks/keras_wheels.sh`` downloads them
into ``.peer-wheels/``; see ``venvs.offline_keras_python``); without them its cases are
reported as ``unavailable`` and the rest runs.

Every mirrorfit and hand-written case runs in this process on the default backend (each
ResNet-18 or LM compilation costs tens of seconds). The models are float32 Flax modules
(``workloads.ResNet18``, ``workloads.DecoderLM``); bf16 compute comes from
``mf.Model(..., dtype_policy="mixed_bfloat16")`` in the mirrorfit cases and from the same casts
written by hand in the hand-written loops (``handwritten.BatchNormTrainer`` and ``LMTrainer``
with ``compute_dtype=bfloat16``: params (but the LM's token embedding table, whose rows are
cast, as under the policy) and floating inputs cast to bf16 inside the step,
logits back to float32 before the loss; master params, BatchNorm statistics and Adam state
float32). The cases:

* ResNet-18 (32x32x3 random images, global batch 256 and 1024): ``handwritten`` (the
  ``jit(shard_map)`` loop); ``mirrorfit_fit`` (``model.fit`` with the defaults a user gets,
  progress bar and accuracy metric); ``mirrorfit_fit_verbose0`` (no progress bar); at the
  first batch size ``handwritten_fused`` and ``mirrorfit_fit_spe`` (32 steps per call) and
  ``handwritten_preplaced`` (``handwritten.Preplaced``: the data set placed on the device once,
  each batch gathered there; ``mirrorfit_fit`` is also reported against it, issue 12's
  "≥ 0.99× a loop that pre-places every batch") and ``mirrorfit_fit_host``
  (``device_resident=False``: every batch sent from the host, where ``mirrorfit_fit`` places
  an in-memory data set on the device by default); at the last batch size
  ``mirrorfit_fit_float32`` (``dtype_policy="float32"``: the mixed-precision speed-up); and
  ``keras3_fit``.
* The decoder LM (GPT-2 small: 12 layers, d_model 768, 12 heads, vocabulary 50,304, sequence
  1024, tied output; random tokens, targets shifted by one; global batch 32 sequences):
  ``handwritten``, ``mirrorfit_fit`` (loss only, progress bar), ``mirrorfit_fit_float32``
  (with XLA's attention: cuDNN's takes only fp16/bf16) and ``keras3_fit``. Causal
  attention is ``jax.nn.dot_product_attention(is_causal=True)`` with the cuDNN
  implementation on a GPU (XLA's elsewhere).

Each case warms up on one epoch of the timed rows less half a batch, so it ends in a partial
batch (compilation; counted: ``first call s`` includes that epoch); the hand-written loop
calibrates the epochs per repeat; then the cases are timed in interleaved
rounds. The Keras 3 cases run first, each in its own process (``keras_gpu.py``; Keras is never
imported here), before this process touches the device, so they have all its memory; they
calibrate their own epochs per repeat.

Reported per case: examples/s (tokens/s for the LM; median over rounds, spread), the ratio to
the matching hand-written loop, ``mirrorfit_fit`` over ``keras3_fit``, and model FLOPs
utilization, ``MFU = train FLOPs per example * examples/s / measured bf16 matmul peak``:

* ResNet-18: ``3 *`` the forward pass's FLOPs counted on the jaxpr (``2 * M * N * K`` per
  ``dot_general``, ``2 * output elements * input channels per group * kernel window`` per
  convolution; the backward pass counted as twice the forward; elementwise work, BatchNorm
  and the optimizer not counted);
* the LM: ``6 N + 12 L H Q T`` FLOPs per token (PaLM, appendix B; nanoGPT's
  ``estimate_mfu``), ``N`` = every param except the position embedding (the tied token
  embedding counted once, for the output matmul), ``L`` layers, ``H`` heads, ``Q`` head size,
  ``T`` sequence length; the attention term is not halved for the causal mask.

The peak is the median rate of an ``N x N @ N x N`` bf16 matmul (N = 8192) on the same device
in the same run; MFU against the datasheet's dense bf16 peak (``ThroughputMonitor``'s table, `peak_flops_of`) is reported
beside it. Peak device memory (``memory_stats()["peak_bytes_in_use"]``) is read after each
model's cases (the process's high-water mark so far), and, with ``--case-memory``, in each
case's own process. Writes ``<device>-<date>.json`` and
``.md`` to ``--out`` after each model, and prints the tables.
"""

import argparse
import copy
import datetime
import functools
import gc
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
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
import venvs  # noqa: E402
from frameworks import MirrorfitRunner  # noqa: E402
from mirrorfit._src.callbacks.throughput import peak_flops_of  # noqa: E402
from run import write_report  # noqa: E402
from _worker import CompileCounter  # noqa: E402
from synthetic import make_data, make_tokens  # noqa: E402
from workloads import (DecoderLM, ResNet18, Workload, lm_params_for_mfu,  # noqa: E402
                       lm_train_flops_per_token)

REFERENCE = {"mirrorfit_fit": "handwritten", "mirrorfit_fit_verbose0": "handwritten",
             "mirrorfit_fit_spe": "handwritten_fused", "mirrorfit_fit_host": "handwritten"}

POLICY = "mixed_bfloat16"  # every mirrorfit and Keras case; the hand-written loops cast to bf16


def settings(quick: bool) -> dict:
    """The run's sizes: ResNet-18 and GPT-2 small on a GPU, or tiny ones for smoke tests."""
    if quick:
        return {"resnet": {"width": 4, "stage_blocks": [1], "n": 48, "batches": [16],
                           "spe": 2, "fused": False, "verbose0": False},
                "lm": {"vocab": 64, "seq": 16, "layers": 1, "d_model": 32, "heads": 2, "n": 40,
                       "batch": 8},
                "rounds": 1, "target_seconds": 0.05, "matmul_n": 128, "keras_spe": [1]}
    return {"resnet": {"width": 64, "stage_blocks": [2, 2, 2, 2], "n": 65_536,
                       "batches": [256, 1024], "spe": 32, "fused": True, "verbose0": True},
            "lm": {"vocab": 50_304, "seq": 1024, "layers": 12, "d_model": 768, "heads": 12,
                   "n": 1024, "batch": 32},
            "rounds": 5, "target_seconds": 2.0, "matmul_n": 8192, "keras_spe": [1]}


def short_settings() -> dict:
    """`settings` of the full models for a device call of about five minutes: less data,
    three rounds of about a second, no fused or ``verbose=0`` cases, Keras 3 at batch 256,
    with ``steps_per_execution`` 1 and 32 (issue 42)."""
    cfg = settings(False)
    cfg["resnet"].update(n=16_384, verbose0=False, fused=False, keras_batches=[256])
    cfg["lm"].update(n=256)
    cfg.update(rounds=3, target_seconds=1.0, keras_spe=[1, 32])
    return cfg


def peak_memory_bytes() -> int | None:
    """The default device's peak bytes in use so far, where the backend reports it."""
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


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


def time_cases(cases: dict, x, y, batch: int, unit: int, cfg: dict, counter: CompileCounter,
               flops_per_example: float, peak: float, tag: str) -> list[dict]:
    """Warms up, calibrates on ``cases["handwritten"]`` and times ``cases`` in interleaved rounds.

    Args:
        cases: case name -> runner (``run(x, y, epochs) -> examples``); fused cases' names end
            in ``"fused"`` or ``"spe"``.
        x, y: the data set, ``[n, ...]`` each.
        batch: global batch size.
        unit: timed rows are a multiple of it (whole device calls for every case).
        flops_per_example: train FLOPs per example, for TFLOP/s and MFU.
        peak: measured bf16 matmul FLOP/s.
        tag: the workload's name in the rows (``"resnet18"`` or ``"lm"``).
    """
    rows = {}
    rows_timed = len(x) // unit * unit
    # Warm-up: compilation, on one epoch of the timed rows less half a batch, so it ends in a
    # partial batch and a device-resident data set pads to the timed rows' size (one compile);
    # the pre-placed loop compiles for its data set's exact shape (and drops partial batches).
    for name, runner in cases.items():
        counter.phase = f"{tag}/{batch}/{name}"
        warm = rows_timed if name.endswith("preplaced") else rows_timed - batch // 2
        start = time.perf_counter()
        runner.run(x[:warm], y[:warm], 1)
        rows[name] = {"model": tag, "case": name, "batch": batch, "status": "ok",
                      "first_call_s": time.perf_counter() - start,
                      "compiles": counter.stats(counter.phase), "examples_per_s_all": []}
    start = time.perf_counter()
    cases["handwritten"].run(x[:rows_timed], y[:rows_timed], 1)
    epochs = max(1, round(cfg["target_seconds"] / (time.perf_counter() - start)))
    counter.phase = f"{tag}/{batch}/timed"
    for _ in range(cfg["rounds"]):
        for name, runner in cases.items():
            start = time.perf_counter()
            examples = runner.run(x[:rows_timed], y[:rows_timed], epochs)
            rows[name]["examples_per_s_all"].append(examples / (time.perf_counter() - start))
    later = copy.deepcopy(counter.stats(counter.phase))  # the counter's own dict grows on
    for name, row in rows.items():
        row.update(rows_per_repeat=rows_timed, epochs_per_repeat=epochs,
                   compiles_during_timed_rounds=later["count"],
                   timed_compiles_by_function=later["by_function"],
                   **rates(row.pop("examples_per_s_all"), flops_per_example, peak))
        if REFERENCE.get(name) in rows:
            row["reference"] = REFERENCE[name]
            row["ratio"] = (row["examples_per_s"]["median"]
                            / rows[REFERENCE[name]]["examples_per_s"]["median"])
    if "mirrorfit_fit_float32" in rows:  # the mixed-precision speed-up of the same fit
        rows["mirrorfit_fit"]["bf16_speedup"] = (
            rows["mirrorfit_fit"]["examples_per_s"]["median"]
            / rows["mirrorfit_fit_float32"]["examples_per_s"]["median"])
    if "handwritten_preplaced" in rows:
        rows["mirrorfit_fit"]["vs_preplaced"] = (
            rows["mirrorfit_fit"]["examples_per_s"]["median"]
            / rows["handwritten_preplaced"]["examples_per_s"]["median"])
    return list(rows.values())


def rates(examples_per_s: list[float], flops_per_example: float, peak: float) -> dict:
    """Median, spread, TFLOP/s and MFU of one case's per-round rates (``mfu`` against the
    measured ``peak``, ``mfu_datasheet`` against the device's `datasheet_peak` if known)."""
    median = statistics.median(examples_per_s)
    datasheet = peak_flops_of(jax.devices()[0].device_kind)
    return {"examples_per_s": {"median": median, "min": min(examples_per_s),
                               "max": max(examples_per_s), "repeats": len(examples_per_s)},
            "flops_per_example": flops_per_example,
            "tflops_per_s": flops_per_example * median / 1e12,
            "mfu": flops_per_example * median / peak,
            "mfu_datasheet": flops_per_example * median / datasheet if datasheet else None}


def resnet_workload(cfg: dict) -> Workload:
    rc = cfg["resnet"]
    return Workload(ResNet18(rc["width"], tuple(rc["stage_blocks"])), (32, 32, 3))


def resnet_cases(cfg: dict, workload: Workload, i: int, batch: int) -> dict:
    """The ResNet-18 cases at the ``i``-th global batch size: name -> runner factory."""
    rc = cfg["resnet"]
    devices = len(jax.devices())
    fit = functools.partial(MirrorfitRunner, workload, devices, batch, "fit",
                            from_logits=True, dtype_policy=POLICY)
    hand = functools.partial(handwritten.BatchNormTrainer, workload,
                             handwritten.make_mesh(devices), batch, compute_dtype=jnp.bfloat16)
    cases = {"handwritten": hand, "mirrorfit_fit": fit}
    if i == 0:  # issue 12's ceiling for host input: every batch already on the device
        cases["handwritten_preplaced"] = lambda: handwritten.Preplaced(hand())
        cases["mirrorfit_fit_host"] = functools.partial(fit, device_resident=False)
    if i == len(rc["batches"]) - 1:
        cases["mirrorfit_fit_float32"] = functools.partial(fit, dtype_policy="float32")
    if rc["verbose0"]:
        cases["mirrorfit_fit_verbose0"] = functools.partial(fit, verbose=0)
    if rc["fused"] and i == 0:
        cases["handwritten_fused"] = functools.partial(hand, steps_per_call=rc["spe"])
        cases["mirrorfit_fit_spe"] = functools.partial(fit, steps_per_execution=rc["spe"])
    return cases


def resnet_rows(cfg: dict, counter: CompileCounter, peak: float) -> list[dict]:
    """The ResNet-18 cases at every global batch size."""
    rc = cfg["resnet"]
    workload = resnet_workload(cfg)
    x, y = make_data(workload.input_shape, rc["n"])
    flops = train_flops_per_example(workload)
    rows = []
    for i, batch in enumerate(rc["batches"]):
        cases = {name: make() for name, make in resnet_cases(cfg, workload, i, batch).items()}
        unit = rc["spe"] * batch if rc["fused"] and i == 0 else batch
        rows += time_cases(cases, x, y, batch, unit, cfg, counter, flops, peak, "resnet18")
        del cases
        gc.collect()
    return rows


def lm_module(cfg: dict) -> DecoderLM:
    """The decoder LM of ``cfg``; cuDNN attention on a GPU, XLA's elsewhere."""
    lc = cfg["lm"]
    attention = "cudnn" if jax.default_backend() == "gpu" else None
    return DecoderLM(lc["vocab"], lc["seq"], lc["layers"], lc["d_model"], lc["heads"], attention)


def lm_cases(workload: Workload, batch: int) -> dict:
    """The language model's cases: name -> runner factory."""
    devices = len(jax.devices())
    return {"handwritten": functools.partial(handwritten.LMTrainer, workload,
                                             handwritten.make_mesh(devices), batch,
                                             compute_dtype=jnp.bfloat16),
            "mirrorfit_fit": functools.partial(MirrorfitRunner, workload, devices, batch, "fit",
                                               from_logits=True, dtype_policy=POLICY,
                                               metrics=()),
            # float32 calls run XLA's attention (workloads.CausalSelfAttention)
            "mirrorfit_fit_float32": functools.partial(MirrorfitRunner, workload, devices,
                                                       batch, "fit", from_logits=True,
                                                       metrics=())}


def lm_rows(cfg: dict, counter: CompileCounter, peak: float) -> list[dict]:
    """The language model's cases, with tokens/s."""
    lc = cfg["lm"]
    module = lm_module(cfg)
    workload = Workload(module, (lc["seq"],), jnp.int32)
    x, y = make_tokens(lc["n"], lc["seq"], lc["vocab"])
    batch = lc["batch"]
    cases = {name: make() for name, make in lm_cases(workload, batch).items()}
    flops = lc["seq"] * lm_train_flops_per_token(module)
    rows = time_cases(cases, x, y, batch, batch, cfg, counter, flops, peak, "lm")
    del cases
    gc.collect()
    return rows


MEMORY_CASES = (("resnet18", "handwritten"), ("resnet18", "mirrorfit_fit"),
                ("lm", "handwritten"), ("lm", "mirrorfit_fit"))
"""The cases ``--case-memory`` also runs alone, each in its own process, at the model's first
batch size (issue 42: one process holding every case says nothing of any one of them)."""


def case_memory(cfg: dict, tag: str, name: str) -> dict:
    """Runs case ``name`` of model ``tag`` alone in this process, as `time_cases` warms it up,
    then one timed epoch's rows; returns its row with the process's peak device memory."""
    if tag == "resnet18":
        rc = cfg["resnet"]
        workload, batch = resnet_workload(cfg), rc["batches"][0]
        x, y = make_data(workload.input_shape, rc["n"])
        runner = resnet_cases(cfg, workload, 0, batch)[name]()
        unit = rc["spe"] * batch if rc["fused"] else batch
    else:
        lc = cfg["lm"]
        workload, batch = Workload(lm_module(cfg), (lc["seq"],), jnp.int32), lc["batch"]
        x, y = make_tokens(lc["n"], lc["seq"], lc["vocab"])
        runner, unit = lm_cases(workload, batch)[name](), batch
    rows = len(x) // unit * unit
    runner.run(x[:rows - batch // 2], y[:rows - batch // 2], 1)
    runner.run(x[:rows], y[:rows], 1)
    return {"model": tag, "case": name, "batch": batch, "status": "ok",
            "peak_memory_bytes": peak_memory_bytes()}


def run_case_memory(cfg: dict) -> list[dict]:
    """`case_memory` of each of `MEMORY_CASES`, each in a fresh process of this script; a
    failed process gives ``status = "crashed: <last stderr lines>"``."""
    results = []
    for tag, name in MEMORY_CASES:
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "result.json"
            cmd = [sys.executable, str(HERE / "gpu.py"), "--memory-case", f"{tag}/{name}",
                   "--settings-json", json.dumps(cfg), "--result", str(result)]
            print(f"memory of {tag} {name}, in its own process", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode or not result.exists():
                tail = " | ".join(proc.stderr.strip().splitlines()[-5:])[-800:]
                results.append({"model": tag, "case": name, "status": f"crashed: {tail}"})
            else:
                results.append(json.loads(result.read_text()))
    return results


def keras_specs(cfg: dict) -> list[dict]:
    """One ``keras_gpu.py`` spec per Keras 3 case (and ``steps_per_execution`` in
    ``cfg["keras_spe"]``), with the mirrorfit cases' sizes."""
    rc, lc = cfg["resnet"], cfg["lm"]
    specs = []
    for i, batch in enumerate(rc["batches"]):
        if batch not in rc.get("keras_batches", rc["batches"]):
            continue
        unit = rc["spe"] * batch if rc["fused"] and i == 0 else batch
        specs.append({"model": "resnet18", "batch": batch, "n": rc["n"],
                      "arch": {"width": rc["width"], "stage_blocks": rc["stage_blocks"]},
                      "warm_rows": 3 * batch + batch // 2, "rows": rc["n"] // unit * unit})
    specs.append({"model": "lm", "batch": lc["batch"], "n": lc["n"],
                  "arch": {k: lc[k] for k in ("vocab", "seq", "layers", "d_model", "heads")},
                  "warm_rows": 3 * lc["batch"] + lc["batch"] // 2,
                  "rows": lc["n"] // lc["batch"] * lc["batch"]})
    for spec in specs:
        spec.update(rounds=cfg["rounds"], target_seconds=cfg["target_seconds"])
    return [dict(spec, steps_per_execution=spe) for spec in specs
            for spe in cfg.get("keras_spe", [1])]


def keras_case(spec: dict) -> str:
    """``keras3_fit``, or ``keras3_fit_spe32`` for ``steps_per_execution=32``."""
    spe = spec.get("steps_per_execution", 1)
    return "keras3_fit" if spe == 1 else f"keras3_fit_spe{spe}"


def run_keras(specs: list[dict], python: str | None, reason: str) -> list[dict]:
    """Runs each spec in a ``keras_gpu.py`` subprocess; returns ``{"spec", "status", ...}``.

    A failed process gives ``status = "crashed: <last stderr lines>"``; no Keras interpreter
    gives ``"unavailable: <reason>"`` for every spec. Never raises for a Keras failure.
    """
    results = []
    env = dict(os.environ, KERAS_BACKEND="jax",
               PYTHONPATH=os.pathsep.join(filter(None, [str(HERE),
                                                        os.environ.get("PYTHONPATH")])))
    for spec in specs:
        if python is None:
            results.append({"spec": spec, "status": f"unavailable: {reason}"})
            continue
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "result.json"
            cmd = [python, str(HERE / "keras_gpu.py"), "--spec", json.dumps(spec),
                   "--result", str(result)]
            print(f"keras3 {spec['model']} batch {spec['batch']} steps_per_execution "
                  f"{spec.get('steps_per_execution', 1)}", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode or not result.exists():
                tail = " | ".join(proc.stderr.strip().splitlines()[-5:])[-800:]
                results.append({"spec": spec, "status": f"crashed: {tail}"})
            else:
                results.append({"spec": spec, **json.loads(result.read_text())})
    return results


def keras_rows(results: list[dict], rows: list[dict], cfg: dict, peak: float) -> list[dict]:
    """The Keras 3 rows, and ``vs_keras3`` (mirrorfit ``fit`` / Keras 3 ``fit``; with
    ``steps_per_execution`` K > 1, ``vs_keras3_speK``) on ``rows``."""
    out = []
    for result in results:
        spec = result.pop("spec")
        tag, case = spec["model"], keras_case(spec)
        fit = next((r for r in rows if (r["model"], r["batch"], r["case"], r["status"])
                    == (tag, spec["batch"], "mirrorfit_fit", "ok")), None)
        row = {"model": tag, "case": case, "batch": spec["batch"]}
        row.update(result)
        if result["status"] == "ok" and fit is not None:
            row.update(rates(row.pop("examples_per_s"), fit["flops_per_example"], peak))
            fit[case.replace("keras3_fit", "vs_keras3")] = (
                fit["examples_per_s"]["median"] / row["examples_per_s"]["median"])
        out.append(row)
    return out


def machine() -> dict:
    device = jax.devices()[0]
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                         capture_output=True).stdout.strip()
    kind = device.device_kind.lower().replace(" ", "-")
    return {"slug": f"{device.platform}-{kind}", "device": device.device_kind,
            "devices": len(jax.devices()), "python": platform.python_version(),
            "jax": jax.__version__, "flax": importlib.metadata.version("flax"),
            "optax": importlib.metadata.version("optax"), "mirrorfit_commit": git or "unknown"}


def _row(r: dict, per: int) -> str:
    """One markdown table row; ``per``: the rate multiplier (sequence length for tokens/s)."""
    if r["status"] != "ok":
        return f"| {r['batch']} | {r['case']} | {r['status'][:200]} | | | | | | | | |"
    e = r["examples_per_s"]
    ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "—"
    keras = "; ".join(f"{r[k]:.2f}x" + (f" (K={k[len('vs_keras3_spe'):]})" if k != "vs_keras3"
                                         else "") for k in r if k.startswith("vs_keras3")) or "—"
    if "vs_preplaced" in r:
        ratio += f" ({r['vs_preplaced']:.2f}x pre-placed)"
    if "bf16_speedup" in r:
        ratio += f"; {r['bf16_speedup']:.2f}x float32"
    compiles = r["compiles"]["count"] if "compiles" in r else "—"
    datasheet = f"{r['mfu_datasheet']:.1%}" if r.get("mfu_datasheet") else "—"
    return (f"| {r['batch']} | {r['case']} | {e['median'] * per:,.0f} | {e['min'] * per:,.0f}–"
            f"{e['max'] * per:,.0f} | {ratio} | {keras} | {r['tflops_per_s']:.1f} | "
            f"{r['mfu']:.1%} | {datasheet} | {r['first_call_s']:.1f} | {compiles} |")


def _memory(report: dict, model: str) -> list[str]:
    """The peak-memory line under a model's table, where it was measured: this process's
    high-water mark after the model's cases, each ``--case-memory`` case's and each Keras
    case's own process."""
    mirrorfit = report.get("peak_memory_bytes", {}).get(model)
    alone = [r for r in report.get("memory_by_case", [])
             if r["model"] == model and r.get("peak_memory_bytes")]
    keras = [r for r in report["results"]
             if r["model"] == model and r.get("peak_memory_bytes")]
    parts = ([f"mirrorfit's process after this model's cases {mirrorfit / 2**30:.1f} GiB"]
             if mirrorfit else [])
    parts += [f"`{r['case']}` alone {r['peak_memory_bytes'] / 2**30:.1f} GiB" for r in alone]
    parts += [f"`{r['case']}` (Keras 3, its own process) {r['peak_memory_bytes'] / 2**30:.1f} GiB"
              for r in keras]
    return ["", "Peak device memory (`peak_bytes_in_use`): " + "; ".join(parts) + "."] if parts else []


def markdown(report: dict) -> str:
    m, cfg = report["machine"], report["settings"]
    rc, lc = cfg["resnet"], cfg["lm"]
    head = ("| batch | case | {unit} | spread | vs hand-written | mirrorfit fit vs Keras 3 | "
            "TFLOP/s | MFU (measured peak) | MFU (datasheet) | first call s | "
            "compiles in first call |")
    rule = "|---|---|---|---|---|---|---|---|---|---|---|"
    datasheet = peak_flops_of(m["device"])
    lines = [f"# mirrorfit on one accelerator, {report['date']}, {m['device']}", "",
             f"{m['devices']} × {m['device']}, Python {m['python']}, jax {m['jax']}, flax "
             f"{m['flax']}, optax {m['optax']}, mirrorfit {m['mirrorfit_commit']}. bf16 through "
             f"`dtype_policy=\"{POLICY}\"` (hand-written: the same casts), Adam. Measured bf16 "
             f"matmul peak: {report['matmul_peak_tflops']:.0f} TFLOP/s ({cfg['matmul_n']}³); "
             + (f"datasheet dense bf16 peak {datasheet / 1e12:.0f} TFLOP/s. " if datasheet
                else "no datasheet peak known for this device. ")
             + f"{cfg['rounds']} interleaved rounds; median and min–max. Keras 3 cases run in "
             "their own process, before the others"
             + (" (in a later device call of the same session)." if report.get("keras_later")
                else "."), "",
             "`mirrorfit_fit` places an in-memory data set on the device (the default, "
             "`device_resident=None`); `mirrorfit_fit_host` sends every batch from the host; "
             "`mirrorfit_fit_float32` is the same `fit` without mixed precision (its ratio, "
             "`Nx float32`, is the bf16 speed-up).", "",
             f"## ResNet-18 (width {rc['width']}, blocks {rc['stage_blocks']}), "
             f"{rc['n']:,} random 32×32×3 images", "", head.format(unit="examples/s"), rule]
    lines += [_row(r, 1) for r in report["results"] if r["model"] == "resnet18"]
    lines += _memory(report, "resnet18")
    lines += ["", f"## Decoder LM ({report['lm_params'] / 1e6:.1f}M params for MFU, "
              f"{lc['layers']} layers, d_model {lc['d_model']}, {lc['heads']} heads, vocab "
              f"{lc['vocab']:,}, sequence {lc['seq']}, tied output), {lc['n']:,} random "
              f"sequences, attention: {report['lm_attention']}", "",
              head.format(unit="tokens/s"), rule]
    lines += [_row(r, lc["seq"]) for r in report["results"] if r["model"] == "lm"]
    lines += _memory(report, "lm")
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny models, for smoke tests")
    size.add_argument("--short", action="store_true",
                      help="the full models on less data, fewer and shorter rounds")
    keras = p.add_mutually_exclusive_group()
    keras.add_argument("--no-keras", action="store_true", help="skip the Keras 3 cases")
    keras.add_argument("--keras-only", action="store_true",
                       help="only the Keras 3 cases, added to the report of --merge-into")
    p.add_argument("--merge-into", type=Path,
                   help="with --keras-only: the JSON report of an earlier --no-keras run")
    p.add_argument("--out", type=Path, default=HERE / "results", help="output directory")
    p.add_argument("--keras-wheels", type=Path, default=HERE.parent / ".peer-wheels",
                   help="wheels from keras_wheels.sh, for a Keras venv made offline")
    p.add_argument("--keras-venv", type=Path, default=HERE.parent / ".peer-venv" / "keras3",
                   help="where that venv is made (reused when ready)")
    p.add_argument("--case-memory", action="store_true",
                   help="also run each of MEMORY_CASES alone, in its own process, for its "
                        "peak device memory (before this process touches the device)")
    p.add_argument("--memory-case", help=argparse.SUPPRESS)  # MODEL/CASE: the worker's
    p.add_argument("--settings-json", help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.keras_only != (args.merge_into is not None):
        p.error("--keras-only and --merge-into REPORT.json go together: the Keras cases are "
                f"added to an earlier --no-keras run's report. Received: --keras-only="
                f"{args.keras_only}, --merge-into={args.merge_into}")
    return args


def keras_cases(args, cfg: dict) -> list[dict]:
    """The Keras 3 results of ``cfg``'s cases (each in its own process), or none."""
    if args.no_keras:
        return []
    python, reason = venvs.offline_keras_python(args.keras_venv, args.keras_wheels)
    return run_keras(keras_specs(cfg), python, reason)


def main(argv=None) -> Path | None:
    args = parse_args(argv)
    if args.memory_case:  # a worker of run_case_memory
        tag, name = args.memory_case.split("/")
        result = case_memory(json.loads(args.settings_json), tag, name)
        args.result.write_text(json.dumps(result))
        return None
    if args.keras_only:
        report = json.loads(args.merge_into.read_text())
        results = keras_cases(args, report["settings"])
        report["results"] += keras_rows(results, report["results"], report["settings"],
                                        report["matmul_peak_tflops"] * 1e12)
        report["keras_later"] = True
        return write_report(report, args.out, markdown(report))
    cfg = short_settings() if args.short else settings(args.quick)
    # Keras first, in its own processes, while this one has not touched the device.
    keras_results = keras_cases(args, cfg)
    memory = run_case_memory(cfg) if args.case_memory else []  # each alone, device untouched
    counter = CompileCounter()
    module = lm_module(cfg)
    peak = matmul_peak(cfg["matmul_n"])
    print(f"bf16 matmul peak: {peak / 1e12:.1f} TFLOP/s", file=sys.stderr)
    report = {"machine": machine(), "date": datetime.date.today().isoformat(),
              "quick": args.quick, "short": args.short, "settings": cfg,
              "matmul_peak_tflops": peak / 1e12, "lm_params": lm_params_for_mfu(module),
              "lm_attention": module.attention or "xla", "results": [],
              "peak_memory_bytes": {}, "memory_by_case": memory}
    for tag, rows_of in (("resnet18", resnet_rows), ("lm", lm_rows)):
        try:
            report["results"] += rows_of(cfg, counter, peak)
        except Exception as e:  # noqa: BLE001 - keep the other model's results
            report["results"].append({"model": tag, "case": "all", "batch": "—",
                                      "status": f"crashed: {type(e).__name__}: {e}"[:800]})
        report["peak_memory_bytes"][tag] = peak_memory_bytes()
        path = write_report(report, args.out, markdown(report))  # kept if a later part dies
        gc.collect()
    report["results"] += keras_rows(keras_results, report["results"], cfg, peak)
    return write_report(report, args.out, markdown(report)) if keras_results else path


if __name__ == "__main__":
    main()
