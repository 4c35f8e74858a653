"""The roll call before ``jax.distributed``: every process arrives, or a clear error.

JAX's coordination service aborts the whole process (in C++, "Terminating process because
the JAX distributed service detected fatal errors") when the job does not form in time, and
never says which process is missing. So before JAX is touched, process 0 listens on the
coordinator's port and every other process reports its ``process_id`` and
``num_processes`` there over plain TCP:

* all present and consistent: process 0 answers ``ok`` to each, closes the port, and every
  process goes on to ``jax.distributed.initialize`` (process 0's coordination service then
  takes the same port);
* a process missing after ``initialization_timeout``: every process raises a
  ``TimeoutError`` naming the missing process ids;
* two processes claiming one id, or disagreeing on ``num_processes``: a ``ValueError``.
"""

from __future__ import annotations

import socket
import time

_JOIN = "mirrorfit-join"
_POLL = 0.2  # seconds between connection attempts / accept checks


def _send(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall((line + "\n").encode())
    except OSError:
        pass  # that peer is gone; it fails on its own


def _read_line(conn: socket.socket, timeout: float) -> str:
    conn.settimeout(max(timeout, 0.1))
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def _missing_message(missing: list[int], num_processes: int, timeout: float,
                     address: str) -> str:
    return (f"The job did not form: process ids {missing} of num_processes={num_processes} "
            f"did not join the coordinator at {address} within initialization_timeout="
            f"{timeout:g} s. Start every process (each with its own process_id), or raise "
            f"the timeout (initialization_timeout or MIRRORFIT_INIT_TIMEOUT).")


def _serve(address: str, num_processes: int, timeout: float) -> None:
    """Process 0: waits for processes 1..n-1, then answers every one of them."""
    port = int(address.rpartition(":")[2])
    family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
    try:
        server = socket.create_server(("", port), family=family,
                                      dualstack_ipv6=family == socket.AF_INET6)
    except OSError as err:
        raise ValueError(f"coordinator_address={address!r}: process 0 cannot listen on port "
                         f"{port} ({err}). Choose a free port. Received: "
                         f"coordinator_address={address!r}") from None
    peers: list[tuple[int, socket.socket]] = []  # (process id, its connection)
    deadline = time.monotonic() + timeout
    error: Exception | None = None
    with server:
        server.settimeout(_POLL)
        while error is None:
            arrived = {peer_id for peer_id, _ in peers}
            if len(arrived) == num_processes - 1:
                break
            if time.monotonic() >= deadline:
                missing = sorted(set(range(1, num_processes)) - arrived)
                error = TimeoutError(_missing_message(missing, num_processes, timeout, address))
                break
            try:
                conn, _ = server.accept()
            except OSError:  # includes socket.timeout: nobody knocked in this poll
                continue
            try:
                words = _read_line(conn, 5.0).split()
            except OSError:
                words = []
            if len(words) != 3 or words[0] != _JOIN or not all(w.isdigit() for w in words[1:]):
                conn.close()  # not one of ours (a port scan, a health check)
                continue
            peer_id, peer_count = int(words[1]), int(words[2])
            if peer_count != num_processes:
                error = ValueError(
                    f"The processes disagree on num_processes: process 0 has "
                    f"{num_processes}, process {peer_id} has {peer_count}. Start every "
                    f"process with the same num_processes. Received: num_processes="
                    f"{peer_count} on process {peer_id}")
            elif peer_id in arrived or not 0 < peer_id < num_processes:
                error = ValueError(
                    f"Two processes claim process_id={peer_id}. Give every process its own "
                    f"process_id in [0, {num_processes}). Received: process_id={peer_id} twice")
            peers.append((peer_id, conn))
    for _, conn in peers:
        _send(conn, "ok" if error is None else
              f"{'timeout' if isinstance(error, TimeoutError) else 'error'} {error}")
    for _, conn in peers:  # let each peer close first, so the port is free at once
        try:
            _read_line(conn, 2.0)
        except OSError:
            pass
        conn.close()
    if error is not None:
        raise error


def _join(address: str, num_processes: int, process_id: int, timeout: float) -> None:
    """Processes 1..n-1: report to process 0 and wait for its answer."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = socket.create_connection((host.strip("[]"), int(port)), timeout=_POLL * 5)
            break
        except OSError as err:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"The job did not form: process 0 (the coordinator at {address}) did not "
                    f"accept a connection within initialization_timeout={timeout:g} s (this "
                    f"is process_id={process_id} of num_processes={num_processes}). Check "
                    f"that process 0 runs and that host and port are right (coordinator_"
                    f"address or MIRRORFIT_COORDINATOR). Received: {err}") from None
            time.sleep(_POLL)
    with conn:
        _send(conn, f"{_JOIN} {process_id} {num_processes}")
        try:
            answer = _read_line(conn, deadline - time.monotonic() + 5.0)
        except OSError:
            answer = ""
    kind, _, message = answer.partition(" ")
    if kind == "ok":
        return
    if kind == "timeout":
        raise TimeoutError(message)
    if kind == "error":
        raise ValueError(message)
    raise TimeoutError(f"The job did not form: process 0 (the coordinator at {address}) did "
                       f"not confirm that all num_processes={num_processes} processes "
                       f"joined; see its output. (This is process_id={process_id}.)")


def roll_call(address: str, num_processes: int, process_id: int, timeout: float) -> None:
    """Returns once all ``num_processes`` processes have arrived at ``address``.

    Args:
        address: ``"host:port"`` of process 0; it listens on that port for the roll call.
        num_processes: processes in the job.
        process_id: this process's index in ``[0, num_processes)``.
        timeout: seconds to wait for every process (``initialization_timeout``).

    Raises:
        TimeoutError: naming the process ids that did not arrive in time (on process 0 and
            every process that did arrive), or process 0 when it is unreachable.
        ValueError: if two processes claim one id or they disagree on ``num_processes``.
    """
    if num_processes == 1:
        return
    if process_id == 0:
        _serve(address, num_processes, timeout)
    else:
        _join(address, num_processes, process_id, timeout)
