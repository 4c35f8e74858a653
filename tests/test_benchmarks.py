"""Smoke tests of the benchmark entry points: ``run.py --quick`` and ``gpu.py --quick`` run and
write their JSON; the GPU benchmark's FLOP counter matches a hand count; the suite's bookkeeping
(failure reasons, retries, merged rounds, peer targets) on hand-made results.

Not a timing test: it checks structure and that the measured throughputs are positive, never speed.
The peers (Keras 3, tf.keras) never run here: their virtualenvs would download hundreds of MB,
so their bookkeeping is tested on hand-made results.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import ab_commits  # noqa: E402
import run  # noqa: E402
import venvs  # noqa: E402

OWN_CASES = {"handwritten", "handwritten_fused", "handwritten_jit", "mirrorfit_fit",
             "mirrorfit_fit_spe", "handwritten_evaluate", "mirrorfit_evaluate",
             "handwritten_predict", "mirrorfit_predict"}


@pytest.mark.slow
def test_run_quick_writes_json_and_markdown(tmp_path):
    # Peers are left out: their venvs may or may not exist, and the suite never depends on
    # them (their runners are tested above without the network).
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--no-peers",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [path] = tmp_path.glob("cpu-*core-*.json")
    assert path.with_suffix(".md").exists()
    report = json.loads(path.read_text())
    rows = report["results"]
    assert {r["case"] for r in rows} == OWN_CASES
    for r in rows:
        assert r["status"] == "ok", (r["case"], r["status"])
        rates = r["examples_per_s"]
        assert 0 < rates["min"] <= rates["median"] <= rates["max"], (r["case"], rates)
        assert r["peak_rss_mb"] > 0
        if r["case"] not in ("handwritten", "handwritten_evaluate", "handwritten_predict"):
            assert r["ratio"] > 0 and r["rss_ratio"] > 0, r["case"]
    fit = next(r for r in rows if r["case"] == "mirrorfit_fit")
    assert fit["compiles"]["first_call"]["count"] >= 1
    measured = {t["target"] for t in report["targets"]}
    assert {"`mirrorfit_fit` vs `handwritten`", "`mirrorfit_fit` vs `handwritten_jit`, D=1"} <= measured
    assert "| handwritten |" in proc.stdout and "## Examples/s by case" in proc.stdout


@pytest.mark.slow
def test_fsdp_quick_prints_memory_and_largest_model_per_mode():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fsdp.py"), "--quick",
                           "--devices", "2"], capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines()
             if line.startswith("| 2 |")]
    rows = {row[1]: row for row in cells if len(row) == 9}  # the memory table's
    assert set(rows) == {"mirrored", "zero", "fsdp"}
    assert {row[2] for row in cells if len(row) == 6} == {"mirrored", "zero", "fsdp"}
    # device 0 holds the whole state mirrored, half of it with shard_params at D=2
    assert rows["mirrored"][4].startswith("1.00") and rows["fsdp"][4].startswith("0.50")


def test_failure_reason_prefers_xlas_fatal_log_line():
    # As Keras 3 DataParallel's crash at D=8 printed it (shortened): warnings, the fatal line
    # of each stuck thread, then abseil's stack trace.
    stderr = ("Epoch 1/1\nE1123 19:16:32.954660   18939 rendezvous.cc:116] [id=1] This thread "
              "has been waiting for `all reduce RendezvousKey{...}` for 20 seconds\n"
              "F1123 19:17:12.955009   18935 rendezvous.cc:161] [id=5] Termination timeout for "
              "`all reduce RendezvousKey{...}` of 40 seconds exceeded.\n"
              "F1123 19:17:12.955096   18940 rendezvous.cc:161] [id=4] Termination timeout\n"
              "*** Check failure stack trace: ***\n"
              "    @     0x7f9f33cb906f  tsl::(anonymous namespace)::PThread::ThreadFn()\n")
    assert run.failure_reason(stderr) == ("rendezvous.cc:161] [id=5] Termination timeout for "
                                          "`all reduce RendezvousKey{...}` of 40 seconds exceeded.")
    assert run.failure_reason("a\nb\n\nValueError: bad\n") == "b | ValueError: bad"
    assert run.failure_reason("") == "no output"


def test_plan_keeps_only_the_asked_device_counts():
    _, every = run.plan(quick=False)
    _, one = run.plan(quick=False, only_devices={1})
    assert {g["devices"] for g in every} == {1, 2, 4, 8}
    assert one == [g for g in every if g["devices"] == 1]


def test_regression_guard_flags_a_loss_over_five_percent_and_reports_the_cpu():
    def case(text, base, head):
        merged = {"handwritten": run.merge_rounds([_ok([100.0])]),
                  "base": run.merge_rounds([_ok([base])]), "head": run.merge_rounds([_ok([head])])}
        r = ab_commits.ratios(merged)
        return {"case": text, "sides": merged, "ratios": r,
                "regression": r["head/base"] < ab_commits.REGRESSION}

    cases = [case("1:32:1", 100.0, 96.0), case("1:32:32", 100.0, 94.0)]
    assert [c["regression"] for c in cases] == [False, True]
    assert cases[1]["ratios"] == {"head/base": 0.94, "head/handwritten": 0.94}
    assert ab_commits.fused_over_single(cases) == {"1:32:32": 94.0 / 96.0}
    text = ab_commits.markdown({"machine": {"cpu": "AMD EPYC", "cpus": 2, "python": "3.11",
                                            "jax": "0.10.2"}, "date": "2026-12-08",
                                "base": "e65b38e", "head": "abc", "rounds": 1, "cases": cases})
    assert "CPU: AMD EPYC (2 cores)" in text and "| 1:32:32 |" in text and "REGRESSION" in text
    assert ab_commits.parse_case("1:256") == dict(model="mlp", devices=1, batch=256, n=60_000,
                                                  spe=1)
    with pytest.raises(ValueError, match="D:B:K"):
        ab_commits.parse_case("1:x:3")


def test_should_run_again_retries_only_peer_crashes():
    crashed, hung = [{"status": "crashed: exit code -6: x"}], [{"status": "deadlocked (timeout)"}]
    assert run.should_run_again("keras3", crashed)
    assert not run.should_run_again("mirrorfit_fit", crashed)
    assert not run.should_run_again("keras3", hung)
    assert not run.should_run_again("tf_keras", [{"status": "unavailable: venv creation failed"}])
    assert run.should_run_again("mirrorfit_fit", [{"status": "ok"}]) and run.should_run_again("x", [])


def _ok(rates: list[float]) -> dict:
    return {"status": "ok", "rows": 64, "epochs": 1, "examples_per_s": rates,
            "other_processes_cores": [0.0] * len(rates), "compiles": None, "peak_rss_mb": 100.0,
            "live_device_mb": None}


def test_merge_rounds_pools_successful_rounds_and_counts_failures():
    merged = run.merge_rounds([_ok([1.0, 3.0]), {"status": "crashed: boom"}, _ok([2.0, 4.0])])
    assert merged["status"] == "failed in 1/3 rounds: crashed: boom"
    assert merged["examples_per_s"] == {"median": 2.5, "min": 1.0, "max": 4.0, "repeats": 4}
    assert merged["live_device_mb"] is None
    assert run.merge_rounds([{"status": "crashed: boom"}])["status"] == "crashed: boom"


def test_targets_against_peers_use_medians_of_the_same_workload():
    def row(case, median, devices=1, batch=32):
        return dict(model="mlp", devices=devices, batch=batch, case=case, status="ok",
                    examples_per_s={"median": median},
                    compiles={"first_call": {"by_function": {"jit(step)": 1}}, "timed": {"count": 0}})

    rows = [row("mirrorfit_fit", 110.0), row("keras3", 100.0), row("handwritten_jit", 120.0),
            row("mirrorfit_fit_spe", 150.0), row("keras3_spe", 100.0),
            row("mirrorfit_fit", 40.0, devices=8), row("tf_keras", 5.0, devices=8)]
    checks = {(c["target"], c["where"]): c for c in run.targets(rows)}
    keras = checks[("`mirrorfit_fit` vs `keras3`, D=1", "mlp D=1 b=32")]
    assert keras["measured"] == 1.1 and keras["met"]
    jit = checks[("`mirrorfit_fit` vs `handwritten_jit`, D=1", "mlp D=1 b=32")]
    assert jit["measured"] == 110 / 120 and not jit["met"]
    spe = checks[("`mirrorfit_fit_spe` vs `keras3_spe`, batch 32", "mlp D=1 b=32")]
    assert spe["measured"] == 1.5 and spe["met"] and spe["goal"] == ">= 1.4x"
    tf = checks[("`mirrorfit_fit` vs `tf_keras` (10x: D=8)", "mlp D=8 b=32")]
    assert tf["goal"] == ">= 10x" and not tf["met"]


def test_peer_ratios_carry_their_lowest_and_highest_value_within_one_round():
    def row(case, rounds):
        rates = [v for r in rounds if r["status"] == "ok" for v in r["examples_per_s"]]
        return dict(model="mlp", devices=1, batch=256, case=case, status="ok", rounds=rounds,
                    examples_per_s={"median": float(np.median(rates))},
                    compiles={"first_call": {"by_function": {}}, "timed": {"count": 0}})

    crashed = {"status": "crashed: boom"}
    ours = row("mirrorfit_fit", [_ok([10.0, 12.0]), _ok([30.0, 30.0]), _ok([20.0, 20.0])])
    peer = row("keras3", [_ok([10.0, 10.0]), crashed, _ok([10.0, 10.0])])
    check = next(c for c in run.targets([ours, peer]) if c["target"].endswith("D=1"))
    assert check["per_round"] == (1.1, 2.0)  # round 2 failed for the peer: left out
    assert check["measured"] == 20.0 / 10.0
    report = {"machine": {"slug": "m", "cpu": "c", "cpus": 2, "python": "3", "jax": "0",
                          "mirrorfit_commit": "x"}, "date": "d", "settings": {},
              "results": [], "targets": [check]}
    assert "| mlp D=1 b=256: 1.10–2.00 |" in run.markdown(report)


def test_peer_venv_is_not_ready_without_its_marker(tmp_path):
    (tmp_path / "keras3" / "bin").mkdir(parents=True)
    venvs.python_of(tmp_path, "keras3").write_text("")
    assert not venvs.is_ready(tmp_path, "keras3")
    (tmp_path / "keras3" / venvs.MARKER).write_text("\n".join(venvs.pins("keras3")))
    assert venvs.is_ready(tmp_path, "keras3")
    (tmp_path / "keras3" / venvs.MARKER).write_text("keras==3.0.0\n")
    assert not venvs.is_ready(tmp_path, "keras3")
@pytest.mark.slow
def test_gpu_quick_writes_json_with_ratios_and_mfu(tmp_path):
    """``benchmarks/gpu.py --quick`` (tiny ResNet and LM on the CPU here) runs end to end.

    No Keras wheels are given, so the Keras 3 cases are ``unavailable`` (or ``ok`` where this
    interpreter can import Keras) and the rest still runs.
    """
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--quick",
                           "--out", str(tmp_path), "--keras-wheels", str(tmp_path / "none"),
                           "--keras-venv", str(tmp_path / "venv"), "--case-memory"],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [path] = tmp_path.glob("cpu-*.json")
    assert "tokens/s" in path.with_suffix(".md").read_text()
    report = json.loads(path.read_text())
    rows = {(r["model"], r["case"]): r for r in report["results"]}
    assert set(rows) == {(m, c) for m in ("resnet18", "lm") for c in (
        "handwritten", "mirrorfit_fit", "mirrorfit_fit_float32", "keras3_fit")} | {
            ("resnet18", "handwritten_preplaced"), ("resnet18", "mirrorfit_fit_host")}
    assert report["matmul_peak_tflops"] > 0
    # each of these cases also ran alone, in its own process (the CPU reports no peak)
    assert [(r["model"], r["case"], r["status"]) for r in report["memory_by_case"]] == [
        (m, c, "ok") for m in ("resnet18", "lm") for c in ("handwritten", "mirrorfit_fit")]
    for key, r in rows.items():
        if key[1] == "keras3_fit" and r["status"] != "ok":
            assert r["status"].startswith("unavailable: keras is not importable"), r["status"]
            continue
        assert r["status"] == "ok", (key, r["status"])
        rates = r["examples_per_s"]
        assert 0 < rates["min"] <= rates["median"] <= rates["max"], (key, rates)
        assert r["mfu"] > 0 and r["flops_per_example"] > 0
        if key[1] != "keras3_fit":
            steps = {f: n for f, n in r["compiles"]["by_function"].items()
                     if f != "jit(_padded)"}  # a resident data set's padding, once per leaf
            assert max(steps.values()) == 1, (key, r["compiles"])
            # no step compiles again (a resident data set's padding may, per data set size)
            assert set(r["timed_compiles_by_function"]) <= {"jit(_padded)"}, key
    for model in ("resnet18", "lm"):
        fit = rows[model, "mirrorfit_fit"]
        assert fit["reference"] == "handwritten" and fit["ratio"] > 0
        assert fit["bf16_speedup"] == pytest.approx(
            fit["examples_per_s"]["median"]
            / rows[model, "mirrorfit_fit_float32"]["examples_per_s"]["median"])
        assert ("vs_keras3" in fit) == (rows[model, "keras3_fit"]["status"] == "ok")
    assert rows["resnet18", "mirrorfit_fit"]["vs_preplaced"] == pytest.approx(
        rows["resnet18", "mirrorfit_fit"]["examples_per_s"]["median"]
        / rows["resnet18", "handwritten_preplaced"]["examples_per_s"]["median"])
    lm = report["settings"]["lm"]
    head = lm["d_model"] // lm["heads"]
    per_token = 6 * report["lm_params"] + 12 * lm["layers"] * lm["heads"] * head * lm["seq"]
    assert rows["lm", "handwritten"]["flops_per_example"] == lm["seq"] * per_token


def test_gpu_short_runs_keras_at_one_and_32_steps_per_execution():
    """Issue 42: ``--short`` times each Keras 3 case at ``steps_per_execution`` 1 and 32, each
    in its own process, and reports ``fit`` against both."""
    import gpu

    specs = gpu.keras_specs(gpu.short_settings())
    assert [(s["model"], s["steps_per_execution"]) for s in specs] == [
        ("resnet18", 1), ("resnet18", 32), ("lm", 1), ("lm", 32)]
    fit = {"model": "lm", "batch": 32, "case": "mirrorfit_fit", "status": "ok",
           "flops_per_example": 1.0, "examples_per_s": {"median": 6.0}}
    results = [{"spec": spec, "status": "ok", "examples_per_s": [rate]}
               for spec, rate in zip(specs[2:], (3.0, 4.0))]
    rows = gpu.keras_rows(results, [fit], {}, peak=1.0)
    assert [r["case"] for r in rows] == ["keras3_fit", "keras3_fit_spe32"]
    assert (fit["vs_keras3"], fit["vs_keras3_spe32"]) == (2.0, 1.5)


def test_gpu_lm_at_full_size_is_gpt2_small():
    """The LM's default sizes give GPT-2 small's 124,439,808 params at its vocabulary 50,257."""
    from workloads import DecoderLM, lm_params_for_mfu

    module = DecoderLM(vocab=50_257)
    assert lm_params_for_mfu(module) + module.seq * module.d_model == 124_439_808


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
