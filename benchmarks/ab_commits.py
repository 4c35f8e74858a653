"""The fit-path regression guard: the working tree against an earlier commit, in one run.

    python benchmarks/ab_commits.py BASE [HEAD] [--rounds 3] [--keras]
                                    [--cases 1:32:1 1:32:32 1:256:1 1:256:32] [--check]

Checks out ``BASE`` (and ``HEAD``; default: the working tree) as temporary git worktrees and
times, for each case ``D:B:K`` (D simulated CPU devices, global batch B, K
``steps_per_execution``), the suite's MLP workload (784-128-10, Adam, sparse crossentropy,
accuracy, 60,000 rows, ``verbose=1``: `frameworks.MirrorfitRunner`) in fresh
``_worker.py`` processes:

* ``base``: ``fit`` of BASE's mirrorfit (the worker imports it through ``MIRRORFIT_TREE``);
* ``head``: ``fit`` of HEAD's;
* ``handwritten``: the hand-written ``jit(shard_map)`` loop (a ``lax.scan`` over K steps for
  K > 1), which calibrates the rows and epochs of a repeat in round 1;
* with ``--keras``: Keras 3's ``fit`` with the same ``steps_per_execution`` (its venv from
  `venvs`, created on first use).

The sides of a case alternate, ``--rounds`` times, so machine drift falls on all of them.
The report (``ab-<machine>-<date>.md``/``.json`` in ``--out``) names the CPU model and both
commits and gives medians, spreads and the ratios head/base, head/hand-written and
head/Keras 3. A case where head/base is below `REGRESSION` is marked a regression; with
``--check`` the script then exits with status 1. A fit-path change that loses more than 5%
at any of the four default cases is a regression to fix before it lands
(``benchmarks/README.md``). Nothing in the test suite asserts on speed.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path

import run
import venvs

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CASES = ["1:32:1", "1:32:32", "1:256:1", "1:256:32"]
REGRESSION = 0.95
"""head/base below this is a regression: more than 5% lost."""
SETTINGS = {"repeats": 2, "target_seconds": 1.2, "warmup_steps": 8, "timeout_s": 300,
            "peer_timeout_s": 180}


def parse_case(text: str) -> dict:
    """``"D:B:K"`` (or ``"D:B"``, K=1) as a `run.run_group`-style group.

    Raises:
        ValueError: for a malformed case.
    """
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"a case is D:B:K (devices, global batch, steps_per_execution), "
                         f"positive ints. Received: {text!r}")
    devices, batch, spe = (*map(int, parts), 1)[:3]
    return {"model": "mlp", "devices": devices, "batch": batch, "n": 60_000, "spe": spe}


def sides(group: dict, keras: bool) -> dict[str, tuple[str, str]]:
    """side -> (worker case, tree key) for one case; the hand-written loop first."""
    fused = group["spe"] > 1
    found = {"handwritten": ("handwritten_fused" if fused else "handwritten", "head"),
             "base": ("mirrorfit_fit_spe" if fused else "mirrorfit_fit", "base"),
             "head": ("mirrorfit_fit_spe" if fused else "mirrorfit_fit", "head")}
    if keras:
        found["keras3"] = ("keras3_spe" if fused else "keras3", "head")
    return found


def measure(group: dict, trees: dict[str, Path], rounds: int, pythons: dict) -> dict:
    """Every side of ``group`` in ``rounds`` interleaved rounds; merged results per side."""
    calibration, results = None, {side: [] for side in sides(group, "keras3_spe" in pythons)}
    for round_ in range(rounds):
        for side, (case, tree) in sides(group, "keras3_spe" in pythons).items():
            if not run.should_run_again(case, results[side]):
                continue
            print(f"  [{round_ + 1}/{rounds}] {label(group)} {side} ...", end=" ", flush=True,
                  file=sys.stderr)
            result = run.run_case(group, case, SETTINGS, calibration, pythons, tree=trees[tree])
            print(result["status"], file=sys.stderr)
            if calibration is None and result["status"] == "ok":
                calibration = {"rows": result["rows"], "epochs": result["epochs"]}
            results[side].append(result)
    return {side: run.merge_rounds(rs) for side, rs in results.items()}


def label(group: dict) -> str:
    return f"D={group['devices']} batch={group['batch']} spe={group['spe']}"


def ratios(merged: dict) -> dict[str, float | None]:
    """head/base, head/handwritten and head/keras3 of the medians (``None`` when missing)."""
    def median(side):
        r = merged.get(side)
        return r["examples_per_s"]["median"] if r and "examples_per_s" in r else None

    head = median("head")
    return {f"head/{other}": (head / median(other) if head and median(other) else None)
            for other in ("base", "handwritten", "keras3") if other in merged}


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [f"# fit regression guard, {report['date']}", "",
             (f"CPU: {m['cpu']} ({m['cpus']} cores); Python {m['python']}, jax {m['jax']}; "
              f"base `{report['base']}`, head `{report['head']}`; {report['rounds']} "
              "interleaved rounds of 2 repeats per side, each a fresh process; MLP 784-128-10, "
              "Adam, accuracy, 60,000 rows; examples/s, medians (min-max)."), "",
             ("| case | hand-written | base | head | Keras 3 | head/base | head/hand | "
              "head/Keras 3 | verdict |"), "|---|---|---|---|---|---|---|---|---|"]

    def cell(r):
        if r is None:
            return "—"
        if "examples_per_s" not in r:
            return r["status"][:60]
        e = r["examples_per_s"]
        return f"{e['median'] / 1e3:.1f}k ({e['min'] / 1e3:.0f}-{e['max'] / 1e3:.0f}k)"

    def ratio(value):
        return "—" if value is None else f"{value:.2f}"

    for case in report["cases"]:
        merged, r = case["sides"], case["ratios"]
        verdict = ("REGRESSION" if case["regression"] else "ok") if r.get(
            "head/base") is not None else "—"
        lines.append(f"| {case['case']} | {cell(merged.get('handwritten'))} | "
                     f"{cell(merged.get('base'))} | {cell(merged.get('head'))} | "
                     f"{cell(merged.get('keras3'))} | {ratio(r.get('head/base'))} | "
                     f"{ratio(r.get('head/handwritten'))} | {ratio(r.get('head/keras3'))} | "
                     f"{verdict} |")
    fused = fused_over_single(report["cases"])
    if fused:
        lines += ["", "`steps_per_execution` K against K=1 at the same D and batch (head): "
                  + "; ".join(f"{case}: {value:.2f}" for case, value in fused.items())]
    return "\n".join(lines) + "\n"


def fused_over_single(cases: list[dict]) -> dict[str, float]:
    """head's examples/s at ``D:B:K`` over its ``D:B:1`` 's, for every K > 1 with both."""
    def head(case):
        side = case["sides"].get("head", {})
        return side["examples_per_s"]["median"] if "examples_per_s" in side else None

    single = {tuple(c["case"].split(":")[:2]): head(c) for c in cases
              if parse_case(c["case"])["spe"] == 1}
    found = {}
    for case in cases:
        one = single.get(tuple(case["case"].split(":")[:2]))
        if parse_case(case["case"])["spe"] > 1 and one and head(case):
            found[case["case"]] = head(case) / one
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the earlier commit (any git revision)")
    parser.add_argument("head", nargs="?", default=None, help="default: the working tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=DEFAULT_CASES, metavar="D:B:K")
    parser.add_argument("--keras", action="store_true", help="Keras 3 in the same rounds")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 when head/base < {REGRESSION} in any case")
    args = parser.parse_args(argv)
    groups = [parse_case(case) for case in args.cases]
    pythons: dict = {}
    if args.keras:
        python, reason = venvs.ensure(venvs.default_root(), "keras3")
        pythons = {"keras3": python or reason, "keras3_spe": python or reason}
    info = run.machine()
    def git(*arguments: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *arguments], check=True,
                              capture_output=True, text=True).stdout.strip()

    names = {"base": git("rev-parse", "--short", args.base),
             "head": info["mirrorfit_commit"] if args.head is None
             else git("rev-parse", "--short", args.head)}
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for side, ref in (("base", args.base), ("head", args.head)):
            if ref is None:
                trees[side] = REPO
                continue
            trees[side] = Path(tmp) / side
            git("worktree", "add", "--detach", str(trees[side]), ref)
        try:
            for text, group in zip(args.cases, groups):
                merged = measure(group, trees, args.rounds, pythons)
                r = ratios(merged)
                cases.append({"case": text, "sides": merged, "ratios": r,
                              "regression": r.get("head/base") is not None
                              and r["head/base"] < REGRESSION})
        finally:
            for side, tree in trees.items():
                if tree != REPO:
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                                    str(tree)], check=False, capture_output=True)
    report = {"machine": dict(info, slug="ab-" + info["slug"]),
              "date": datetime.date.today().isoformat(), "base": names["base"],
              "head": names["head"], "rounds": args.rounds, "cases": cases}
    run.write_report(report, args.out, markdown(report))
    regressed = [c["case"] for c in cases if c["regression"]]
    if regressed:
        print(f"Regression (head/base < {REGRESSION}): {regressed}", file=sys.stderr)
    return 1 if regressed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
