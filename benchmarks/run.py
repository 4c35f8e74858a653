"""mirrorfit benchmark suite: one entry point, every measurement in its own subprocess.

Usage::

    python benchmarks/run.py            # full suite (about 15 minutes on 2 CPU cores)
    python benchmarks/run.py --quick    # tiny smoke run (well under a minute)
    python benchmarks/run.py --out DIR  # write results to DIR instead of benchmarks/results

Cases are grouped by workload (model, simulated devices D, global batch). In each group the
hand-written reference runs first and calibrates the work per repeat; every other case then does
exactly that work, in a fresh subprocess (``_worker.py``) with a timeout, and is reported with
its ratio to the matching hand-written loop. The run writes ``<machine>-<date>.json`` and ``.md``
and prints the markdown tables. Nothing here asserts on speed: the targets table shows what was met.
"""

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SPE = 32  # steps per call for the fused cases
COMPETITORS = {"keras3": "keras", "tf_keras": "tensorflow"}  # case -> package it needs
KERAS_BACKEND = {"keras3": "jax", "tf_keras": "tensorflow"}
REFERENCE = {  # case -> the hand-written loop it is compared with
    "handwritten_fused": "handwritten", "mirrorfit_fit": "handwritten",
    "mirrorfit_fit_spe": "handwritten_fused", "keras3": "handwritten", "tf_keras": "handwritten",
    "mirrorfit_evaluate": "handwritten_evaluate", "mirrorfit_predict": "handwritten_predict",
}
TRAIN = ["handwritten", "handwritten_fused", "mirrorfit_fit", "mirrorfit_fit_spe"]
EVALUATE = ["handwritten_evaluate", "mirrorfit_evaluate"]
PREDICT = ["handwritten_predict", "mirrorfit_predict"]


def plan(quick: bool) -> tuple[dict, list[dict]]:
    """Returns the run settings and the groups ``{model, devices, batch, n, cases}`` to measure."""
    if quick:
        settings = {"repeats": 2, "target_seconds": 0.1, "warmup_steps": 2, "timeout_s": 90}
        groups = [dict(model="mlp", devices=1, batch=32, n=2048, cases=TRAIN + list(COMPETITORS)),
                  dict(model="mlp", devices=2, batch=64, n=2048, cases=EVALUATE),
                  dict(model="mlp", devices=2, batch=64, n=2048, cases=PREDICT)]
        return settings, groups
    settings = {"repeats": 5, "target_seconds": 2.0, "warmup_steps": 8, "timeout_s": 300}
    groups = []
    for batch in (32, 256):
        for devices in (1, 2, 4, 8):
            competitors = list(COMPETITORS) if devices in (1, 8) else []
            groups.append(dict(model="mlp", devices=devices, batch=batch, n=60_000,
                               cases=TRAIN + competitors))
    for devices in (1, 8):
        groups.append(dict(model="mlp", devices=devices, batch=256, n=60_000, cases=EVALUATE))
        groups.append(dict(model="mlp", devices=devices, batch=256, n=60_000, cases=PREDICT))
        groups.append(dict(model="cnn", devices=devices, batch=256, n=10_000, cases=TRAIN))
    return settings, groups


def run_case(group: dict, case: str, settings: dict, calibration: dict | None) -> dict:
    """Measures one case in a subprocess; returns its result with ``status`` set."""
    if case in COMPETITORS and importlib.util.find_spec(COMPETITORS[case]) is None:
        return {"status": "not installed"}
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(HERE / "_worker.py"), "--case", case, "--model", group["model"],
               "--devices", str(group["devices"]), "--batch", str(group["batch"]),
               "--n", str(group["n"]), "--spe", str(SPE), "--repeats", str(settings["repeats"]),
               "--target-seconds", str(settings["target_seconds"]),
               "--warmup-steps", str(settings["warmup_steps"]), "--result", str(result_path)]
        if calibration:
            cmd += ["--rows", str(calibration["rows"]), "--epochs", str(calibration["epochs"])]
        env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="",
                   KERAS_BACKEND=KERAS_BACKEND.get(case, "jax"), TF_CPP_MIN_LOG_LEVEL="2")
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=settings["timeout_s"])
        except subprocess.TimeoutExpired:
            return {"status": f"deadlocked (timeout after {settings['timeout_s']} s)"}
        if result_path.exists():
            return json.loads(result_path.read_text())
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": f"crashed: exit code {proc.returncode}: {last[:300]}"}


def most_compiles_of_one_function(result: dict) -> int:
    """Most compilations of any one jitted function (not eager op) in the first call; 1: no recompile."""
    return max(result["compiles"]["first_call"]["by_function"].values(), default=0)


def run_group(group: dict, settings: dict) -> list[dict]:
    """Runs a group's cases, reference first, and adds ratios to the matching hand-written loop."""
    rows, calibration = [], None
    for case in group["cases"]:
        label = f"{group['model']} D={group['devices']} batch={group['batch']} {case}"
        print(f"  {label} ...", end=" ", flush=True, file=sys.stderr)
        result = run_case(group, case, settings, calibration)
        if case.startswith("handwritten") and calibration is None and result["status"] == "ok":
            calibration = {"rows": result["rows"], "epochs": result["epochs"]}
        print(result["status"], file=sys.stderr)
        row = {k: v for k, v in group.items() if k != "cases"}
        rows.append(dict(row, case=case, **result))
    by_case = {r["case"]: r for r in rows}
    for r in rows:
        ref = by_case.get(REFERENCE.get(r["case"], ""))
        if r["status"] == "ok" and ref is not None and ref["status"] == "ok":
            r["reference"] = ref["case"]
            r["ratio"] = r["examples_per_s"]["median"] / ref["examples_per_s"]["median"]
            r["rss_ratio"] = r["peak_rss_mb"] / ref["peak_rss_mb"]
            r["device_mem_ratio"] = r["live_device_mb"] / ref["live_device_mb"]
    return rows


def _find(rows: list[dict], **keys) -> dict | None:
    for r in rows:
        if all(r.get(k) == v for k, v in keys.items()) and r["status"] == "ok":
            return r
    return None


def targets(rows: list[dict]) -> list[dict]:
    """Evaluates issue 5's targets on the measured rows; unmeasurable targets are left out."""
    out = []

    def add(name, where, value, goal, met):
        out.append({"target": name, "where": where, "measured": value, "goal": goal, "met": met})

    for r in rows:
        if r["status"] != "ok" or not r["case"].startswith("mirrorfit"):
            continue
        where = f"{r['model']} D={r['devices']} batch={r['batch']}"
        if "ratio" in r:
            add(f"{r['case']} vs {r['reference']}", where, r["ratio"], ">= 0.97x", r["ratio"] >= 0.97)
            add(f"{r['case']} host peak RSS vs {r['reference']}", where, r["rss_ratio"],
                "<= 1.2x", r["rss_ratio"] <= 1.2)
        if "ratio" in r and r["case"].startswith("mirrorfit_fit"):
            add(f"{r['case']} live device memory after fit vs {r['reference']}", where,
                r["device_mem_ratio"], "<= 1.2x", r["device_mem_ratio"] <= 1.2)
        if r["case"].startswith("mirrorfit_fit"):
            n = most_compiles_of_one_function(r)
            add(f"{r['case']} compilations of the train step in the first fit (partial last "
                "batch included)", where, n, "1", n == 1)
            timed = r["compiles"]["timed"]["count"]
            add(f"{r['case']} compilations in later fits", where, timed, "0", timed == 0)
    for r in rows:
        if r["case"] not in COMPETITORS or r["status"] != "ok":
            continue
        keys = dict(model=r["model"], devices=r["devices"], batch=r["batch"])
        where = f"{r['model']} D={r['devices']} batch={r['batch']}"
        rate = r["examples_per_s"]["median"]
        spe = _find(rows, case="mirrorfit_fit_spe", **keys)
        fit = _find(rows, case="mirrorfit_fit", **keys)
        if r["case"] == "keras3" and spe and r["devices"] == 1 and r["batch"] == 32:
            ratio = spe["examples_per_s"]["median"] / rate
            add("mirrorfit_fit_spe vs keras3", where, ratio, ">= 1.4x", ratio >= 1.4)
        if r["case"] == "tf_keras" and fit and r["batch"] == 256:
            ratio, goal = fit["examples_per_s"]["median"] / rate, 3 if r["devices"] == 1 else 10
            add("mirrorfit_fit vs tf_keras", where, ratio, f">= {goal}x", ratio >= goal)
    return out


def _fmt(x, spec=".0f", suffix=""):
    return "—" if x is None else f"{x:{spec}}{suffix}"


def markdown(report: dict) -> str:
    """Renders the results and targets as markdown tables."""
    m, load = report["machine"], report["load_average_1min"]
    lines = [f"# mirrorfit benchmark, {report['date']}, {m['slug']}", "",
             f"{m['cpu']}, {m['cpus']} cores, Python {m['python']}, jax {m['jax']}, "
             f"mirrorfit {m['mirrorfit_commit']}. Settings: {report['settings']}. Load average "
             f"(1 min) at start/end: {load['start']:.1f}/{load['end']:.1f}.", "",
             "examples/s: median over repeats, spread min–max; ratio: median / median of the "
             "matching hand-written loop in this run (fused loop for `mirrorfit_fit_spe`); "
             "compiles: XLA compilations (all, incl. eager ops) and their seconds in the first call "
             "(warm-up, ends in a partial batch).", "",
             "| model | D | batch | case | examples/s | spread | vs hand-written | peak RSS MB "
             "(ratio) | device MB | compiles (s) | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        ok = r["status"] == "ok"
        eps = r["examples_per_s"] if ok else {}
        comp = r["compiles"]["first_call"] if ok else {}
        rss = f"{r['peak_rss_mb']:.0f}" if ok else "—"
        if "rss_ratio" in r:
            rss += f" ({r['rss_ratio']:.2f}x)"
        spread = f"{eps['min']:,.0f}–{eps['max']:,.0f}" if ok else "—"
        lines.append(
            f"| {r['model']} | {r['devices']} | {r['batch']} | {r['case']} | "
            f"{_fmt(eps.get('median'), ',.0f')} | {spread} | {_fmt(r.get('ratio'), '.2f', 'x')} | "
            f"{rss} | {_fmt(r.get('live_device_mb'), '.1f')} | "
            f"{comp.get('count', '—')} ({_fmt(comp.get('seconds'), '.2f')}) | {r['status']} |")
    lines += ["", "## Targets", "", "| target | where | measured | goal | met |",
              "|---|---|---|---|---|"]
    for t in report["targets"]:
        value = t["measured"] if isinstance(t["measured"], int) else _fmt(t["measured"], ".2f")
        lines.append(f"| {t['target']} | {t['where']} | {value} | {t['goal']} | "
                     f"{'yes' if t['met'] else '**MISSED**'} |")
    return "\n".join(lines) + "\n"


def machine() -> dict:
    """Describes the host: a short slug like ``cpu-2core``, CPU model and package versions."""
    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").exists():
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                            capture_output=True).stdout.strip()
    return {"slug": f"cpu-{os.cpu_count()}core", "cpu": cpu, "cpus": os.cpu_count(),
            "python": platform.python_version(), "jax": importlib.metadata.version("jax"),
            "numpy": np.__version__, "mirrorfit_commit": commit or "unknown"}


def main(argv=None) -> Path:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny workload, for smoke tests")
    p.add_argument("--out", type=Path, default=HERE / "results", help="output directory")
    args = p.parse_args(argv)
    settings, groups = plan(args.quick)
    load_start = os.getloadavg()[0]
    rows = []
    for group in groups:
        rows += run_group(group, settings)
    info = machine()
    report = {"machine": info, "date": datetime.date.today().isoformat(), "quick": args.quick,
              "settings": settings,
              "load_average_1min": {"start": load_start, "end": os.getloadavg()[0]}, "results": rows, "targets": targets(rows)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{info['slug']}-{report['date']}.json"
    path.write_text(json.dumps(report, indent=1))
    text = markdown(report)
    path.with_suffix(".md").write_text(text)
    print(text)
    return path


if __name__ == "__main__":
    main()
