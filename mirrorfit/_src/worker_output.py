"""Hides gloo's connection lines from a multi-process job's standard output.

On the CPU backend, every gloo communicator that XLA opens prints
``[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1``
with C++ ``std::cout``, several times per process and interleaved between threads. No
log level turns it off, so `hide_gloo_lines` puts a pipe on file descriptor 1 and a thread
copies everything else to the real standard output. ``MIRRORFIT_GLOO_LOGS=1`` keeps them.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading

_PREFIX = re.compile(rb"\[Gloo\] Rank ")
_MESSAGE = re.compile(rb"\d+ is connected to \d+ peer ranks\. Expected number of connected "
                      rb"peer ranks is : \d+")


def _without_gloo(line: bytes) -> bytes:
    """``line`` (no newline) minus gloo's message and its fragments; b"" if nothing is left."""
    if b"Gloo" not in line and b"is connected to" not in line:
        return line + b"\n"
    rest = _MESSAGE.sub(b"", _PREFIX.sub(b"", line))
    return b"" if not rest.strip() else rest + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


class _Relay:
    """Copies a pipe on fd 1 to the original standard output, minus gloo's lines."""

    def __init__(self):
        sys.stdout.flush()
        self.target = os.dup(1)
        self.read_end, write_end = os.pipe()
        os.dup2(write_end, 1)
        os.close(write_end)
        self.thread = threading.Thread(target=self._copy, name="mirrorfit-stdout", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        pending = b""
        while chunk := os.read(self.read_end, 1 << 16):
            *lines, pending = (pending + chunk).split(b"\n")
            out = b"".join(_without_gloo(line) for line in lines)
            if pending and b"Gloo" not in pending and b"is connected" not in pending:
                out, pending = out + pending, b""  # a prompt or a redrawn line: show it now
            _write_all(self.target, out)
        if pending:
            _write_all(self.target, _without_gloo(pending).rstrip(b"\n"))

    def close(self) -> None:
        """Puts the original standard output back on fd 1 and copies what is left."""
        if not self.thread.is_alive():
            return
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self.target, 1)  # closes the pipe's last write end: the thread sees EOF
        self.thread.join(timeout=2)


_relay: _Relay | None = None


def hide_gloo_lines() -> None:
    """Filters gloo's connection lines out of this process's fd 1, once per process."""
    global _relay
    if _relay is None:
        _relay = _Relay()
        atexit.register(_relay.close)


def flush() -> None:
    """Copies everything written so far to the real standard output (before ``os._exit``)."""
    if _relay is not None:
        _relay.close()
