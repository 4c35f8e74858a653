"""Smoke tests of the benchmark entry points: ``run.py --quick`` and ``gpu.py --quick`` run and
write their JSON; the GPU benchmark's FLOP counter matches a hand count.

Not a timing test: it checks structure and that the measured throughputs are positive, never speed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPECTED_CASES = {"handwritten", "handwritten_fused", "mirrorfit_fit", "mirrorfit_fit_spe",
                  "keras3", "tf_keras", "handwritten_evaluate", "mirrorfit_evaluate",
                  "handwritten_predict", "mirrorfit_predict"}


def test_run_quick_writes_json_and_markdown(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
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


def test_gpu_quick_writes_json_with_ratios_and_mfu(tmp_path):
    """``benchmarks/gpu.py --quick`` (a tiny ResNet on the CPU here) runs end to end."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--quick",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [path] = tmp_path.glob("cpu-*.json")
    assert path.with_suffix(".md").exists()
    report = json.loads(path.read_text())
    rows = {r["case"]: r for r in report["results"]}
    assert set(rows) == {"handwritten", "mirrorfit_fit", "mirrorfit_fit_verbose0"}
    assert report["matmul_peak_tflops"] > 0
    for case, r in rows.items():
        rates = r["examples_per_s"]
        assert 0 < rates["min"] <= rates["median"] <= rates["max"], (case, rates)
        assert r["mfu"] > 0 and r["flops_per_example"] > 0
        assert max(r["compiles"]["by_function"].values()) == 1, (case, r["compiles"])
    assert rows["mirrorfit_fit"]["reference"] == "handwritten"
    assert rows["mirrorfit_fit"]["ratio"] > 0


def test_gpu_flop_count_matches_hand_count():
    """The jaxpr FLOP counter: 2*M*N*K per matmul, 2*out*C_in*window per convolution."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import flax.linen as nn
    import gpu
    from workloads import Workload

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(8, (3, 3), strides=2)(x)  # out 4x4x8 from 8x8x3
            return nn.Dense(5)(x.reshape(x.shape[0], -1))  # 128 -> 5

    forward = 2 * (4 * 4 * 8) * 3 * 9 + 2 * 128 * 5
    assert gpu.train_flops_per_example(Workload(Net(), (8, 8, 3))) == 3 * forward
