"""Local multi-process launcher for `MultiWorkerMirroredStrategy`, like ``torchrun``.

    python -m mirrorfit.launch --nproc 2 --cpu-devices 2 [--port P] script.py [args ...]

Starts ``--nproc`` copies of ``script.py`` on this machine, with the coordinator of
``jax.distributed`` on loopback (``127.0.0.1:P``, a free port by default). Each process gets
``MIRRORFIT_COORDINATOR``, ``MIRRORFIT_NUM_PROCESSES`` and ``MIRRORFIT_PROCESS_ID`` (which
``mf.MultiWorkerMirroredStrategy()`` reads) and, with ``--cpu-devices D``, an ``XLA_FLAGS``
that splits its CPU into ``D`` devices. Every output line is prefixed with ``[rank]``. If a
process fails, the launcher kills the others and exits with the first non-zero exit code
(``128 + signal`` for a process killed by a signal).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

_DEVICE_FLAG = re.compile(r"--xla_force_host_platform_device_count(=\S*)?")


def free_port() -> int:
    """A TCP port on loopback that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m mirrorfit.launch",
        description="Run a MultiWorkerMirroredStrategy script as N local processes.")
    parser.add_argument("--nproc", type=int, required=True, help="processes to start")
    parser.add_argument("--cpu-devices", type=int, default=None,
                        help="simulated CPU devices per process (sets XLA_FLAGS)")
    parser.add_argument("--port", type=int, default=None,
                        help="coordinator port on 127.0.0.1 (default: a free port)")
    parser.add_argument("script", help="the Python script every process runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the script")
    args = parser.parse_args(argv)
    if args.nproc < 1:
        parser.error(f"--nproc must be a positive int. Received: --nproc={args.nproc}")
    if args.cpu_devices is not None and args.cpu_devices < 1:
        parser.error(f"--cpu-devices must be a positive int. Received: "
                     f"--cpu-devices={args.cpu_devices}")
    return args


def _env(rank: int, nproc: int, port: int, cpu_devices: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(MIRRORFIT_COORDINATOR=f"127.0.0.1:{port}", MIRRORFIT_NUM_PROCESSES=str(nproc),
               MIRRORFIT_PROCESS_ID=str(rank), PYTHONUNBUFFERED="1")
    if cpu_devices is not None:
        flags = _DEVICE_FLAG.sub("", env.get("XLA_FLAGS", "")).split()
        env["XLA_FLAGS"] = " ".join(
            flags + [f"--xla_force_host_platform_device_count={cpu_devices}"])
        env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def _forward(rank: int, stream, lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            sys.stdout.write(f"[{rank}] {line.decode(errors='replace')}")
            sys.stdout.flush()
    stream.close()


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def launch(script: str, args: Sequence[str] = (), *, nproc: int,
           cpu_devices: int | None = None, port: int | None = None) -> int:
    """Runs ``script`` as ``nproc`` processes of one job; returns the job's exit code.

    Args:
        script: path of the Python script each process runs.
        args: the script's arguments (the same for every process).
        nproc: number of processes (``num_processes``).
        cpu_devices: simulated CPU devices per process, or ``None`` to leave ``XLA_FLAGS``.
        port: coordinator port on 127.0.0.1; ``None`` picks a free one.

    Returns:
        0 if every process succeeded, else the first non-zero exit code.
    """
    port = free_port() if port is None else port
    lock = threading.Lock()
    procs, threads = [], []
    for rank in range(nproc):
        proc = subprocess.Popen([sys.executable, script, *args],
                                env=_env(rank, nproc, port, cpu_devices),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        thread = threading.Thread(target=_forward, args=(rank, proc.stdout, lock), daemon=True)
        thread.start()
        procs.append(proc)
        threads.append(thread)
    code = 0
    try:
        running = set(range(nproc))
        while running:
            for rank in sorted(running):
                returncode = procs[rank].poll()
                if returncode is None:
                    continue
                running.discard(rank)
                if returncode != 0 and code == 0:
                    code = _exit_code(returncode)
                    with lock:
                        print(f"[launch] process {rank} exited with code {code}; stopping the "
                              "others", file=sys.stderr, flush=True)
                    for other in running:
                        procs[other].kill()
            time.sleep(0.05)
    except KeyboardInterrupt:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        code = 130
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for thread in threads:
            thread.join(timeout=5)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    args = _parse(argv)
    return launch(args.script, args.args, nproc=args.nproc, cpu_devices=args.cpu_devices,
                  port=args.port)


if __name__ == "__main__":
    sys.exit(main())
