"""Virtualenvs for the peer frameworks, created on first use, apart from mirrorfit's environment.

Keras 3 and TensorFlow pull in hundreds of MB of dependencies (and TensorFlow pins its own
NumPy and protobuf), so each peer gets its own virtualenv under a cache folder
(``$MIRRORFIT_BENCH_PEERS``, else ``~/.cache/mirrorfit-bench/peers``), made with
``python -m venv`` and pip from the interpreter that runs ``run.py``. A venv is ready when its
marker file lists exactly the pins below; otherwise ``ensure`` (re)installs them. Keras 3 gets
the same ``jax``/``jaxlib`` version as mirrorfit's environment, so both run the same XLA.

The GPU benchmark's machine has no registry access: `offline_keras_python` installs Keras from
wheels downloaded beforehand (``benchmarks/keras_wheels.sh``) into a venv that sees the
machine's own packages, so Keras runs on the preinstalled jax.
"""

import importlib.metadata
import importlib.util
import os
import site
import subprocess
import sys
from pathlib import Path

MARKER = "mirrorfit-bench-pins.txt"  # written into a venv once its pins are installed
PIP_TIMEOUT_S = 1800  # creating the TensorFlow venv downloads ~600 MB
CASE_PEER = {"keras3": "keras3", "keras3_spe": "keras3", "tf_keras": "tf_keras"}  # case -> venv


def pins(peer: str) -> list[str]:
    """The pip requirements of ``peer`` (``"keras3"`` or ``"tf_keras"``), exact versions.

    Raises:
        ValueError: if ``peer`` is not a known peer.
    """
    if peer == "keras3":
        return ["keras==3.15.1", *(f"{p}=={importlib.metadata.version(p)}" for p in ("jax", "jaxlib"))]
    if peer == "tf_keras":
        return ["tensorflow-cpu==2.21.0"]
    raise ValueError(f"peer must be 'keras3' or 'tf_keras'. Received: peer={peer!r}")


def default_root() -> Path:
    """The cache folder holding one venv per peer."""
    env = os.environ.get("MIRRORFIT_BENCH_PEERS")
    return Path(env) if env else Path.home() / ".cache" / "mirrorfit-bench" / "peers"


def python_of(root: Path, peer: str) -> Path:
    """The interpreter of ``peer``'s venv under ``root`` (it may not exist yet)."""
    return root / peer / "bin" / "python"


def is_ready(root: Path, peer: str) -> bool:
    """Whether ``peer``'s venv exists with exactly its current pins installed."""
    marker = root / peer / MARKER
    return (python_of(root, peer).exists() and marker.exists()
            and marker.read_text().split() == pins(peer))


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(ln.strip() for ln in text.strip().splitlines()[-lines:])[:400]


def ensure(root: Path, peer: str) -> tuple[Path | None, str]:
    """Returns ``(python, "")`` for ``peer``'s ready venv, creating it with pip if needed.

    Creation prints its progress to stderr and can take minutes. On failure (no network, a
    version not on the index) it returns ``(None, reason)`` with the last lines pip printed.
    """
    if is_ready(root, peer):
        return python_of(root, peer), ""
    venv = root / peer
    steps = [[sys.executable, "-m", "venv", str(venv)]] if not python_of(root, peer).exists() else []
    steps.append([str(python_of(root, peer)), "-m", "pip", "install", "--quiet", *pins(peer)])
    reason = _run_steps(steps, "venv creation")
    if reason:
        return None, reason
    (venv / MARKER).write_text("\n".join(pins(peer)) + "\n")
    return python_of(root, peer), ""


def offline_keras_python(venv: Path, wheels: Path) -> tuple[str | None, str]:
    """An interpreter that can import Keras 3, for ``gpu.py``'s Keras cases, without the network.

    In order: this interpreter, if Keras is importable (checked without importing it); the
    venv at ``venv``, if an earlier call made it; else a new venv there, made with
    ``--system-site-packages`` and a ``.pth`` file listing this interpreter's site-packages
    (so it sees this environment's jax even when this one is itself a venv), into which
    ``pip install --no-index --find-links wheels keras==...`` installs Keras and only the
    dependencies not already installed.

    Returns:
        ``(python, "")``, or ``(None, reason)`` when there are no Keras wheels in ``wheels``
        or the install failed (with the last lines pip printed).
    """
    if importlib.util.find_spec("keras") is not None:
        return sys.executable, ""
    keras_pin = pins("keras3")[0]
    python = venv / "bin" / "python"
    marker = venv / MARKER
    if python.exists() and marker.exists() and marker.read_text().split() == [keras_pin]:
        return str(python), ""
    if not any(Path(wheels).glob("keras-*.whl")):
        return None, (f"keras is not importable and {wheels} holds no keras wheel (run "
                      "benchmarks/keras_wheels.sh where a registry can be reached)")
    steps = [[sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
             [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
              str(wheels), keras_pin]]
    reason = _run_steps(steps[:1], "keras venv creation")
    if not reason:
        _see_parent_packages(python)
        reason = _run_steps(steps[1:], "keras venv creation")
    if reason:
        return None, reason
    marker.write_text(keras_pin + "\n")
    return str(python), ""


def _run_steps(steps: list[list[str]], what: str) -> str:
    """Runs the commands of a venv's creation in order, showing each on stderr; returns ""
    when all succeed, else why ``what`` failed (a timeout, or the last lines pip printed)."""
    for cmd in steps:
        print(f"  {what}: {' '.join(cmd[-4:])}", file=sys.stderr, flush=True)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"{what} timed out after {PIP_TIMEOUT_S} s"
        if proc.returncode:
            return f"{what} failed: {_tail(proc.stderr or proc.stdout)}"
    return ""


def _see_parent_packages(python: Path) -> None:
    """Writes a ``.pth`` into the venv of ``python`` listing this interpreter's site-packages."""
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    parent = [*site.getsitepackages(), site.getusersitepackages()]
    Path(purelib, "mirrorfit-bench-parent.pth").write_text(
        "\n".join(p for p in parent if os.path.isdir(p)) + "\n")
