"""Smoke test of the benchmark entry point: ``benchmarks/run.py --quick`` runs and writes its JSON.

Not a timing test: it checks structure and that the measured throughputs are positive, never speed.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPECTED_CASES = {"handwritten", "handwritten_fused", "mirrorfit_fit", "mirrorfit_fit_spe",
                  "keras3", "tf_keras", "handwritten_evaluate", "mirrorfit_evaluate",
                  "handwritten_predict", "mirrorfit_predict"}


def test_run_quick_writes_json_and_markdown(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [path] = tmp_path.glob("cpu-*core-*.json")
    assert path.with_suffix(".md").exists()
    report = json.loads(path.read_text())
    rows = report["results"]
    assert {r["case"] for r in rows} == EXPECTED_CASES
    for r in rows:
        if r["case"] in ("keras3", "tf_keras"):
            assert r["status"] == "not installed" or r["status"] == "ok" or r["status"].startswith(
                ("crashed", "deadlocked")), r["status"]
            continue
        assert r["status"] == "ok", (r["case"], r["status"])
        rates = r["examples_per_s"]
        assert 0 < rates["min"] <= rates["median"] <= rates["max"], (r["case"], rates)
        assert r["peak_rss_mb"] > 0
        if r["case"] not in ("handwritten", "handwritten_evaluate", "handwritten_predict"):
            assert r["ratio"] > 0 and r["rss_ratio"] > 0, r["case"]
    fit = next(r for r in rows if r["case"] == "mirrorfit_fit")
    assert fit["compiles"]["first_call"]["count"] >= 1
    assert any(t["target"] == "`mirrorfit_fit` vs `handwritten`" for t in report["targets"])
    assert "| handwritten |" in proc.stdout
