"""mirrorfit benchmark suite: one entry point, every measurement in its own subprocess.

Usage::

    python benchmarks/run.py            # full suite (about 70 minutes on 2 CPU cores with the peers)
    python benchmarks/run.py --quick    # tiny smoke run (well under a minute)
    python benchmarks/run.py --out DIR  # write results to DIR instead of benchmarks/results
    python benchmarks/run.py --no-peers # skip Keras 3 and tf.keras
    python benchmarks/run.py --devices 1  # the one-device groups only (about 25 minutes)

Cases are grouped by workload (model, simulated devices D, global batch). In each group the
hand-written reference runs first and calibrates the work per repeat; every other case then does
exactly that work. Every measurement is a fresh subprocess (``_worker.py``) with a timeout, and
the group's cases run in interleaved rounds; each case is reported with its ratio to the
matching hand-written loop. The peers (Keras 3, tf.keras) run the same worker with their own
venv's interpreter (``venvs.py``; created with pip on first use) and are interleaved with
mirrorfit's cases in every round. The run writes ``<machine>-<date>.json`` and ``.md``
and prints the markdown tables. Nothing here asserts on speed: the targets table shows what was met.
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import re
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import venvs

HERE = Path(__file__).resolve().parent
SPE = 32  # steps per call for the fused cases
KERAS_BACKEND = {"keras3": "jax", "keras3_spe": "jax", "tf_keras": "tensorflow"}
REFERENCE = {  # case -> the hand-written loop it is compared with
    "handwritten_fused": "handwritten", "handwritten_jit": "handwritten",
    "mirrorfit_fit": "handwritten", "mirrorfit_fit_spe": "handwritten_fused",
    "keras3": "handwritten", "keras3_spe": "handwritten_fused", "tf_keras": "handwritten",
    "mirrorfit_evaluate": "handwritten_evaluate", "mirrorfit_predict": "handwritten_predict",
}
TRAIN = ["handwritten", "handwritten_fused", "mirrorfit_fit", "mirrorfit_fit_spe"]
JIT = ["handwritten_jit"]  # the plain-jit, no-mesh ceiling: one device only
PEERS = ["keras3", "keras3_spe", "tf_keras"]
EVALUATE = ["handwritten_evaluate", "mirrorfit_evaluate"]
PREDICT = ["handwritten_predict", "mirrorfit_predict"]


def plan(quick: bool, peers: bool = True, only_devices: set[int] | None = None
         ) -> tuple[dict, list[dict]]:
    """Returns the run settings and the groups ``{model, devices, batch, n, cases}`` to measure.

    ``only_devices`` keeps only the groups with those device counts (all when ``None``).

    ``--quick`` keeps one point of each peer (Keras 3 and tf.keras at D=1, batch 32). Peers
    run at D in {1, 2, 8}: Keras 3 ``DataParallel`` often hangs on several CPU devices, and
    each hang costs ``peer_timeout_s``.
    """
    if quick:
        settings = {"rounds": 1, "repeats": 2, "target_seconds": 0.1, "warmup_steps": 2,
                    "timeout_s": 90, "peer_timeout_s": 90}
        peer_cases = ["keras3", "tf_keras"] if peers else []
        groups = [dict(model="mlp", devices=1, batch=32, n=2048, cases=TRAIN + JIT + peer_cases),
                  dict(model="mlp", devices=2, batch=64, n=2048, cases=EVALUATE),
                  dict(model="mlp", devices=2, batch=64, n=2048, cases=PREDICT)]
        return settings, groups
    settings = {"rounds": 5, "repeats": 2, "target_seconds": 1.2, "warmup_steps": 8,
                "timeout_s": 300, "peer_timeout_s": 180}
    groups = []
    for batch in (32, 256):
        for devices in (1, 2, 4, 8):
            cases = TRAIN + (JIT if devices == 1 else [])
            cases += PEERS if peers and devices in (1, 2, 8) else []
            groups.append(dict(model="mlp", devices=devices, batch=batch, n=60_000, cases=cases))
    for devices in (1, 8):
        groups.append(dict(model="mlp", devices=devices, batch=256, n=60_000, cases=EVALUATE))
        groups.append(dict(model="mlp", devices=devices, batch=256, n=60_000, cases=PREDICT))
    for devices in (1, 8):  # no fused cases: XLA:CPU runs convolutions in a loop ~30x slower
        cases = ["handwritten", "mirrorfit_fit"] + (JIT if devices == 1 else [])
        cases += ["keras3", "tf_keras"] if peers else []
        groups.append(dict(model="cnn", devices=devices, batch=256, n=10_000, cases=cases))
    if only_devices is not None:
        groups = [g for g in groups if g["devices"] in only_devices]
    return settings, groups


FATAL_LOG = re.compile(r"^F\d{4} [\d:.]+\s+\d+ (.*)")
"""A fatal line of XLA's log (``F1123 19:17:12.955 18935 rendezvous.cc:161] ...``): group 1
is the message after the time and thread id."""


def failure_reason(stderr: str, lines: int = 2) -> str:
    """The informative part of a failed case's stderr.

    XLA's first fatal log line if there is one (when XLA:CPU's in-process all-reduce
    deadlocks: ``rendezvous.cc:161] [id=5] Termination timeout for `all reduce ...```), else
    the last ``lines`` non-empty lines.
    """
    text = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    for ln in text:
        fatal = FATAL_LOG.match(ln)
        if fatal:
            return fatal.group(1)[:300]
    return " | ".join(text[-lines:])[:300] or "no output"


def run_case(group: dict, case: str, settings: dict, calibration: dict | None,
             pythons: dict, tree: Path | None = None) -> dict:
    """Measures one case in a subprocess; returns its result with ``status`` set.

    ``pythons`` maps each peer case to its venv interpreter, or to the reason it has none.
    ``group["spe"]`` (default `SPE`) is the fused cases' steps per call; ``tree`` is the
    checkout whose mirrorfit the worker imports (default: this one).
    """
    python, timeout = sys.executable, settings["timeout_s"]
    if case in venvs.CASE_PEER:
        python, timeout = pythons[case], settings["peer_timeout_s"]
        if not isinstance(python, Path):
            return {"status": f"unavailable: {python}"}
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [str(python), str(HERE / "_worker.py"), "--case", case, "--model", group["model"],
               "--devices", str(group["devices"]), "--batch", str(group["batch"]),
               "--n", str(group["n"]), "--spe", str(group.get("spe", SPE)),
               "--repeats", str(settings["repeats"]),
               "--target-seconds", str(settings["target_seconds"]),
               "--warmup-steps", str(settings["warmup_steps"]), "--result", str(result_path)]
        if calibration:
            cmd += ["--rows", str(calibration["rows"]), "--epochs", str(calibration["epochs"])]
        env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="",
                   KERAS_BACKEND=KERAS_BACKEND.get(case, "jax"), TF_CPP_MIN_LOG_LEVEL="2",
                   MIRRORFIT_TREE=str(tree) if tree else "")
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
            return {"status": f"deadlocked (timeout after {timeout} s): {failure_reason(err)}"}
        if result_path.exists():
            return json.loads(result_path.read_text())
        return {"status": f"crashed: exit code {proc.returncode}: {failure_reason(proc.stderr)}"}


def most_compiles_of_one_function(result: dict) -> int:
    """Most compilations of any one jitted function (not eager op) in the first call; 1: no recompile."""
    return max(result["compiles"]["first_call"]["by_function"].values(), default=0)


def merge_rounds(results: list[dict]) -> dict:
    """Combines one case's per-round worker results: all repeats pooled, first failure kept.

    The status is ``ok`` when every round succeeded, else the first failure, prefixed with
    ``failed in k/n rounds`` when some rounds did succeed (their repeats are still pooled).
    """
    ok = [r for r in results if r["status"] == "ok"]
    failed = [r["status"] for r in results if r["status"] != "ok"]
    status = "ok"
    if failed:
        status = failed[0] if not ok else f"failed in {len(failed)}/{len(results)} rounds: {failed[0]}"
    merged = {"status": status, "rounds": results}
    if not ok:
        return merged
    device_mb = [r["live_device_mb"] for r in ok if r["live_device_mb"] is not None]
    rates = [v for r in ok for v in r["examples_per_s"]]
    others = [v for r in ok for v in r["other_processes_cores"]]
    return dict(merged, rows=ok[0]["rows"], epochs=ok[0]["epochs"], compiles=ok[0]["compiles"],
                examples_per_s={"median": float(np.median(rates)), "min": min(rates),
                                "max": max(rates), "repeats": len(rates)},
                other_processes_cores=float(np.mean(others)),
                peak_rss_mb=max(r["peak_rss_mb"] for r in ok),
                live_device_mb=max(device_mb) if device_mb else None)


def should_run_again(case: str, earlier: list[dict]) -> bool:
    """Whether a case runs in the next round, given its earlier rounds' results.

    A timeout or a missing venv is never paid for twice. A crash is retried only for the peers:
    Keras 3 ``DataParallel`` on several CPU devices crashes in some runs and not in others.
    """
    statuses = [r["status"] for r in earlier]
    if any(s.startswith(("deadlocked", "unavailable")) for s in statuses):
        return False
    return case in venvs.CASE_PEER or all(s == "ok" for s in statuses)


def run_group(group: dict, settings: dict, pythons: dict) -> list[dict]:
    """Runs a group's cases in interleaved rounds and adds ratios to the matching hand-written loop.

    The group's first (hand-written) case calibrates the work per repeat in round 1; every later
    process reuses it. Interleaving the cases spreads background load on a shared machine over
    all of them instead of penalizing whichever ran during a burst.
    """
    calibration, results = None, {case: [] for case in group["cases"]}
    for round_ in range(settings["rounds"]):
        for case in group["cases"]:
            if not should_run_again(case, results[case]):
                continue
            label = f"{group['model']} D={group['devices']} batch={group['batch']} {case}"
            print(f"  [{round_ + 1}/{settings['rounds']}] {label} ...", end=" ", flush=True,
                  file=sys.stderr)
            result = run_case(group, case, settings, calibration, pythons)
            print(result["status"], file=sys.stderr)
            if calibration is None and result["status"] == "ok":
                calibration = {"rows": result["rows"], "epochs": result["epochs"]}
            results[case].append(result)
    info = {k: v for k, v in group.items() if k != "cases"}
    rows = [dict(info, case=case, **merge_rounds(rs)) for case, rs in results.items()]
    by_case = {r["case"]: r for r in rows}
    for r in rows:
        ref = by_case.get(REFERENCE.get(r["case"], ""))
        if "examples_per_s" in r and ref is not None and "examples_per_s" in ref:
            r["reference"] = ref["case"]
            r["ratio"] = r["examples_per_s"]["median"] / ref["examples_per_s"]["median"]
            r["rss_ratio"] = r["peak_rss_mb"] / ref["peak_rss_mb"]
            if r["live_device_mb"] and ref["live_device_mb"]:
                r["device_mem_ratio"] = r["live_device_mb"] / ref["live_device_mb"]
    return rows


def _where(r: dict) -> str:
    return f"{r['model']} D={r['devices']} b={r['batch']}"


def _measured(r: dict) -> bool:
    return "examples_per_s" in r


def targets(rows: list[dict]) -> list[dict]:
    """Checks the targets of issues 5 and 17: one ``{target, goal, where, measured, met}`` per workload.

    Against the peers: ``fit`` >= 1.05x Keras 3 ``fit`` and >= 0.97x the plain-jit loop at D=1;
    ``steps_per_execution`` >= 1.4x (batch 32) / 1.2x (batch 256) Keras 3 with the same
    ``steps_per_execution``; ``fit`` >= 3x tf.keras at every D (>= 10x at D=8, issue 5).
    A ratio to a peer also carries ``per_round``: the lowest and highest ratio of the two
    cases' medians within one round (both ran minutes apart at most), its uncertainty.
    """
    checks = []

    def check(target: str, goal: str, r: dict, value, met: bool, per_round=None) -> None:
        checks.append({"target": target, "goal": goal, "where": _where(r), "measured": value,
                       "met": bool(met), "per_round": per_round})

    def row_of(case: str, r: dict) -> dict | None:
        for other in rows:
            if other["case"] == case and _measured(other) and _where(other) == _where(r):
                return other
        return None

    def against(case: str, peer: dict, target: str, goal: float) -> None:
        ours = row_of(case, peer)
        if ours is None:
            return
        ratio = ours["examples_per_s"]["median"] / peer["examples_per_s"]["median"]
        check(target, f">= {goal}x", peer, ratio, ratio >= goal,
              per_round=round_ratios(ours, peer))

    for r in filter(_measured, rows):
        case = r["case"]
        if case.startswith("mirrorfit") and "ratio" in r:
            check(f"`{case}` vs `{r['reference']}`", ">= 0.97x", r, r["ratio"], r["ratio"] >= 0.97)
            check("host peak RSS vs hand-written", "<= 1.2x", r, r["rss_ratio"],
                  r["rss_ratio"] <= 1.2)
            if case.startswith("mirrorfit_fit"):
                check("live device memory after fit vs hand-written", "<= 1.2x", r,
                      r["device_mem_ratio"], r["device_mem_ratio"] <= 1.2)
        if case.startswith("mirrorfit_fit"):
            n = most_compiles_of_one_function(r)
            check("train-step compilations in the first fit (ends in a partial batch)", "1", r,
                  n, n == 1)
            later = r["compiles"]["timed"]["count"]
            check("compilations in later fits", "0", r, later, later == 0)
        if case in ("keras3", "handwritten_jit") and r["devices"] == 1:
            against("mirrorfit_fit", r, f"`mirrorfit_fit` vs `{case}`, D=1",
                    1.05 if case == "keras3" else 0.97)
        if case == "keras3_spe":
            against("mirrorfit_fit_spe", r,
                    f"`mirrorfit_fit_spe` vs `keras3_spe`, batch {r['batch']}",
                    1.4 if r["batch"] <= 32 else 1.2)
        if case == "tf_keras":
            against("mirrorfit_fit", r, "`mirrorfit_fit` vs `tf_keras` (10x: D=8)",
                    10 if r["devices"] == 8 else 3)
    return checks


def round_ratios(ours: dict, peer: dict) -> tuple[float, float] | None:
    """Lowest and highest ratio of ``ours`` to ``peer`` (median examples/s) within a round.

    A case's ``rounds`` list the rounds it ran, from the first, so equal positions are the
    same round; rounds that failed for either case are left out. ``None`` without any.
    """
    ratios = [np.median(a["examples_per_s"]) / np.median(b["examples_per_s"])
              for a, b in zip(ours.get("rounds", []), peer.get("rounds", []))
              if a["status"] == "ok" and b["status"] == "ok"]
    return (float(min(ratios)), float(max(ratios))) if ratios else None


def _fmt(x, spec: str = ".0f", suffix: str = "") -> str:
    if x is None:
        return "—"
    return str(x) if isinstance(x, int) else f"{x:{spec}}{suffix}"


def markdown(report: dict) -> str:
    """Renders the results table and the targets summary as markdown."""
    m = report["machine"]
    lines = [f"# mirrorfit benchmark, {report['date']}, {m['slug']}", "",
             f"{m['cpu']}, {m['cpus']} cores, Python {m['python']}, jax {m['jax']}, "
             f"mirrorfit {m['mirrorfit_commit']}. Settings: {report['settings']}.", "",
             "examples/s: median over all repeats of all rounds, spread min–max. vs hand-written: "
             "median / median of the matching hand-written loop in this run (the fused loop for "
             "`mirrorfit_fit_spe`). busy: CPU cores other processes used meanwhile (mean). "
             "compiles: XLA compilations in the first call (warm-up ending in a partial batch), "
             "eager single-op ones included, and their seconds.", "",
             "| model | D | batch | case | examples/s | spread | vs hand-written | peak RSS MB "
             "(ratio) | device MB | compiles (s) | busy | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        eps = r.get("examples_per_s", {})
        comp = r["compiles"]["first_call"] if _measured(r) and r["compiles"] else {}
        rss = _fmt(r.get("peak_rss_mb"))
        if "rss_ratio" in r:
            rss += f" ({r['rss_ratio']:.2f}x)"
        spread = f"{eps['min']:,.0f}–{eps['max']:,.0f}" if eps else "—"
        lines.append(
            f"| {r['model']} | {r['devices']} | {r['batch']} | {r['case']} | "
            f"{_fmt(eps.get('median'), ',.0f')} | {spread} | {_fmt(r.get('ratio'), '.2f', 'x')} | "
            f"{rss} | {_fmt(r.get('live_device_mb'), '.1f')} | "
            f"{comp.get('count', '—')} ({_fmt(comp.get('seconds'), '.2f')}) | "
            f"{_fmt(r.get('other_processes_cores'), '.1f')} | {r['status']} |")
    lines += ["", "## Examples/s by case", "", *summary(report["results"]), "",
              "## Targets", "", "per round: the lowest and highest ratio within one round of "
              "the interleaved cases (the VM's speed drifts between rounds).", "",
              "| target | goal | met | misses (measured) | per round |", "|---|---|---|---|---|"]
    by_target: dict[tuple, list] = {}
    for c in report["targets"]:
        by_target.setdefault((c["target"], c["goal"]), []).append(c)
    for (target, goal), checks in by_target.items():
        misses = "; ".join(f"{c['where']}: {_fmt(c['measured'], '.2f')}"
                           for c in checks if not c["met"])
        spans = "; ".join(f"{c['where']}: {c['per_round'][0]:.2f}–{c['per_round'][1]:.2f}"
                          for c in checks if c.get("per_round"))
        met = sum(c["met"] for c in checks)
        lines.append(f"| {target} | {goal} | {met}/{len(checks)} | {misses or '—'} | "
                     f"{spans or '—'} |")
    return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> list[str]:
    """The training cases as one markdown table: a row per case, a column per workload.

    Cells are median examples/s, or the first words of a failure (``deadlocked``, ``crashed``).
    """
    train = [r for r in rows if not r["case"].endswith(("evaluate", "predict"))]
    columns = list(dict.fromkeys(_where(r) for r in train))
    cases = list(dict.fromkeys(r["case"] for r in train))
    cell = {(r["case"], _where(r)): r for r in train}
    lines = ["| case | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for case in cases:
        cells = []
        for col in columns:
            r = cell.get((case, col))
            if r is None:
                cells.append("")
            elif _measured(r):
                failed = "" if r["status"] == "ok" else f" ({r['status'].split(':')[0]})"
                cells.append(f"{r['examples_per_s']['median'] / 1000:,.1f}k{failed}")
            else:
                cells.append(r["status"].split(":")[0].split(" (")[0])
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return lines


def machine() -> dict:
    """Describes the host: a short slug like ``cpu-2core``, CPU model and package versions."""
    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").exists():
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    git = lambda *a: subprocess.run(["git", *a], cwd=HERE, text=True,  # noqa: E731
                                    capture_output=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") + ("+dirty" if git("status", "--porcelain",
                                                                     "../mirrorfit") else "")
    return {"slug": f"cpu-{os.cpu_count()}core", "cpu": cpu, "cpus": os.cpu_count(),
            "python": platform.python_version(), "jax": importlib.metadata.version("jax"),
            "numpy": np.__version__, "mirrorfit_commit": commit or "unknown"}


def main(argv=None) -> Path:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny workload, for smoke tests")
    p.add_argument("--out", type=Path, default=HERE / "results", help="output directory")
    p.add_argument("--no-peers", action="store_true", help="skip Keras 3 and tf.keras")
    p.add_argument("--peers-dir", type=Path, default=venvs.default_root(),
                   help="cache folder of the peers' virtualenvs (created on first use)")
    p.add_argument("--devices", type=int, nargs="+", metavar="D",
                   help="only the groups with these device counts (the report's name ends "
                        "in -D<counts>)")
    args = p.parse_args(argv)
    devices = None if args.devices is None else set(args.devices)
    settings, groups = plan(args.quick, peers=not args.no_peers, only_devices=devices)
    info = machine()  # before the run: the commit measured, not the one at the end
    if devices is not None:
        info["slug"] += "-D" + "-".join(map(str, sorted(devices)))
    pythons, peers = {}, {}
    for case in sorted({c for g in groups for c in g["cases"] if c in venvs.CASE_PEER}):
        peer = venvs.CASE_PEER[case]
        if peer not in peers:
            python, reason = venvs.ensure(args.peers_dir, peer)
            peers[peer] = {"pins": venvs.pins(peer), "python": str(python) if python else None,
                           "reason": reason}
        pythons[case] = Path(peers[peer]["python"]) if peers[peer]["python"] else peers[peer]["reason"]
    rows = []
    for group in groups:
        rows += run_group(group, settings, pythons)
    report = {"machine": info, "date": datetime.date.today().isoformat(), "quick": args.quick,
              "settings": settings, "peers": peers, "results": rows, "targets": targets(rows)}
    return write_report(report, args.out, markdown(report))


def write_report(report: dict, out: Path, text: str) -> Path:
    """Writes ``<slug>-<date>.json`` and the markdown ``text`` as ``.md`` to ``out``; prints it."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{report['machine']['slug']}-{report['date']}.json"
    path.write_text(json.dumps(report, indent=1))
    path.with_suffix(".md").write_text(text)
    print(text)
    return path


if __name__ == "__main__":
    main()
