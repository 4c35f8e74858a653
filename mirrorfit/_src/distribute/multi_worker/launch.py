"""Local multi-process launcher for `MultiWorkerMirroredStrategy`, like ``torchrun``.

    python -m mirrorfit.launch --nproc 2 --cpu-devices 2 [--port P] [--max-restarts N] \
        script.py [args ...]

Starts ``--nproc`` copies of ``script.py`` on this machine, with the coordinator of
``jax.distributed`` on loopback (``127.0.0.1:P``, a free port by default). Each process gets
``MIRRORFIT_COORDINATOR``, ``MIRRORFIT_NUM_PROCESSES`` and ``MIRRORFIT_PROCESS_ID`` (which
``mf.MultiWorkerMirroredStrategy()`` reads) and, with ``--cpu-devices D``, an ``XLA_FLAGS``
that splits its CPU into ``D`` devices. Every output line is prefixed with ``[rank]``,
redrawn progress lines (``\r``) included.

If a process fails, the others stop within seconds: under `MultiWorkerMirroredStrategy` they
notice on their own and exit with code 75 (`PEER_FAILED_EXIT_CODE`); any process still
running `GRACE_SECONDS` after the first failure is killed. The launcher then prints one line
naming the failing process (its traceback is in its prefixed output, once) and exits with
that process's code (``128 + signal`` for a process killed by a signal).

With ``--max-restarts N`` (default 0), a job that fails is started again, all of its
processes, up to ``N`` times, as ``torchrun --max-restarts`` does: any non-zero exit counts,
whether a preemption (every process saved a backup and exited with code 76,
`PREEMPTED_EXIT_CODE`, see ``BackupAndRestore(save_before_preemption=True)``) or a crash
(``BackupAndRestore`` resumes from the last backup either way). A restart gets a new free
port (unless ``--port`` is given) and ``MIRRORFIT_RESTART_COUNT`` (0 for the first run) in
its environment. When the launcher itself gets SIGTERM (the scheduler is taking the whole
allocation), it forwards the signal to every process, so that they save, and does not
restart.
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

from mirrorfit._src.distribute.multi_worker.failfast import PEER_FAILED_EXIT_CODE
from mirrorfit._src.distribute.multi_worker.preemption import PREEMPTED_EXIT_CODE

GRACE_SECONDS = 5.0  # after a failure, how long the other processes get to stop on their own
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
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="times to restart the whole job after it fails (default 0)")
    parser.add_argument("script", help="the Python script every process runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the script")
    args = parser.parse_args(argv)
    if args.nproc < 1:
        parser.error(f"--nproc must be a positive int. Received: --nproc={args.nproc}")
    if args.max_restarts < 0:
        parser.error("--max-restarts must be a non-negative int. Received: "
                     f"--max-restarts={args.max_restarts}")
    if args.cpu_devices is not None and args.cpu_devices < 1:
        parser.error(f"--cpu-devices must be a positive int. Received: "
                     f"--cpu-devices={args.cpu_devices}")
    return args


def _env(rank: int, nproc: int, port: int, cpu_devices: int | None,
         restart: int = 0) -> dict[str, str]:
    env = dict(os.environ)
    env.update(MIRRORFIT_COORDINATOR=f"127.0.0.1:{port}", MIRRORFIT_NUM_PROCESSES=str(nproc),
               MIRRORFIT_PROCESS_ID=str(rank), MIRRORFIT_RESTART_COUNT=str(restart),
               PYTHONUNBUFFERED="1")
    if cpu_devices is not None:
        flags = _DEVICE_FLAG.sub("", env.get("XLA_FLAGS", "")).split()
        env["XLA_FLAGS"] = " ".join(
            flags + [f"--xla_force_host_platform_device_count={cpu_devices}"])
        env.setdefault("JAX_PLATFORMS", "cpu")
    return env


_SEGMENT = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")


def _prefixed(rank: int, data: bytes) -> tuple[bytes, bytes]:
    """Complete segments of ``data`` (each ended by ``\n``, ``\r\n`` or ``\r``) with the
    rank prefix, and the unfinished rest. A redrawn line (``\r``) gets the prefix again."""
    out, end = [], 0
    for match in _SEGMENT.finditer(data):
        segment = match.group()
        text = segment.rstrip(b"\r\n")
        out.append((b"[%d] " % rank + text if text else b"") + segment[len(text):])
        end = match.end()
    return b"".join(out), data[end:]


def _forward(rank: int, stream, lock: threading.Lock) -> None:
    pending = b""
    while chunk := stream.read1(1 << 16):
        out, pending = _prefixed(rank, pending + chunk)
        if out:
            with lock:
                sys.stdout.buffer.write(out)
                sys.stdout.flush()
    if pending:
        with lock:
            sys.stdout.buffer.write(b"[%d] " % rank + pending + b"\n")
            sys.stdout.flush()
    stream.close()


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _supervise(procs: list[subprocess.Popen]) -> tuple[int, int | None]:
    """Waits for every process; returns (exit code, failing rank or None).

    The failing rank is the first to exit non-zero, preferring a process killed by a signal
    that this launcher did not send (SIGKILL, the OOM killer: it has no traceback, and the
    others fail because it vanished, some of them with code 1 in the same 50 ms poll), then a
    process that failed on its own over one that stopped because a peer failed
    (`PEER_FAILED_EXIT_CODE`).
    """
    failures: list[tuple[int, int]] = []  # (rank, exit code), in order of exit
    signalled: set[int] = set()  # ranks killed by a signal that this launcher did not send
    running, kill_at = set(range(len(procs))), None
    while running:
        for rank in sorted(running):
            returncode = procs[rank].poll()
            if returncode is None:
                continue
            running.discard(rank)
            if returncode != 0:
                failures.append((rank, _exit_code(returncode)))
                if returncode < 0 and (kill_at is None or time.monotonic() < kill_at):
                    signalled.add(rank)
                kill_at = kill_at or time.monotonic() + GRACE_SECONDS
        if kill_at is not None and time.monotonic() >= kill_at:
            for rank in running:
                procs[rank].kill()
        time.sleep(0.05)
    if not failures:
        return 0, None
    killed = [f for f in failures if f[0] in signalled]
    own = [f for f in failures if f[1] != PEER_FAILED_EXIT_CODE]
    rank, code = (killed or own or failures)[0]
    return code, rank


def launch(script: str, args: Sequence[str] = (), *, nproc: int,
           cpu_devices: int | None = None, port: int | None = None,
           max_restarts: int = 0) -> int:
    """Runs ``script`` as ``nproc`` processes of one job; returns the job's exit code.

    Args:
        script: path of the Python script each process runs.
        args: the script's arguments (the same for every process).
        nproc: number of processes (``num_processes``).
        cpu_devices: simulated CPU devices per process, or ``None`` to leave ``XLA_FLAGS``.
        port: coordinator port on 127.0.0.1; ``None`` picks a free one for every run.
        max_restarts: how many times a failed job (any non-zero exit) is started again.

    Returns:
        0 if every process of the last run succeeded, else the exit code of the process that
        failed first on its own (see `_supervise`).
    """
    terminated = threading.Event()
    current: list[subprocess.Popen] = []

    def forward_sigterm(signum, frame):
        del signum, frame
        terminated.set()
        for proc in current:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, forward_sigterm) \
        if threading.current_thread() is threading.main_thread() else None
    try:
        restart = 0
        while True:
            code = _run_once(script, args, nproc, cpu_devices, port, restart, current)
            if code == 0 or restart >= max_restarts or terminated.is_set():
                return code
            restart += 1
            print(f"[launch] restarting the job ({restart} of --max-restarts={max_restarts}).",
                  file=sys.stderr, flush=True)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run_once(script: str, args: Sequence[str], nproc: int, cpu_devices: int | None,
              port: int | None, restart: int, current: list[subprocess.Popen]) -> int:
    """One run of the job (see `launch`); its processes are listed in ``current``."""
    port = free_port() if port is None else port
    lock = threading.Lock()
    procs, threads = current, []
    procs.clear()
    for rank in range(nproc):
        proc = subprocess.Popen([sys.executable, script, *args],
                                env=_env(rank, nproc, port, cpu_devices, restart),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        thread = threading.Thread(target=_forward, args=(rank, proc.stdout, lock), daemon=True)
        thread.start()
        procs.append(proc)
        threads.append(thread)
    try:
        code, rank = _supervise(procs)
    except KeyboardInterrupt:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        code, rank = 130, None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for thread in threads:
            thread.join(timeout=5)
    if code == PREEMPTED_EXIT_CODE:
        print(f"[launch] the job was preempted: its processes saved a backup and exited with "
              f"code {code}.", file=sys.stderr, flush=True)
    elif rank is not None:
        print(f"[launch] process {rank} failed with exit code {code} (its output above is "
              f"prefixed [{rank}]); the job stopped.", file=sys.stderr, flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    args = _parse(argv)
    return launch(args.script, args.args, nproc=args.nproc, cpu_devices=args.cpu_devices,
                  port=args.port, max_restarts=args.max_restarts)

