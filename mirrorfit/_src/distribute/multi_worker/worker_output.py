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
import select
import sys
import threading

_QUIET_SECONDS = 0.05  # an unfinished line is shown after this long without output
# The pieces gloo's message is written in; threads interleave them, with the numbers.
_PIECES = re.compile(rb"\[Gloo\] Rank |\s*Expected number of connected peer ranks is :\s*|"
                     rb"\s*is connected to\s*|\s*peer ranks\.\s*")
_NUMBERS = re.compile(rb"[\d\s]*")


def _without_gloo(line: bytes) -> bytes:
    """b"" if ``line`` (no newline) holds only gloo's message pieces and numbers, else
    ``line`` unchanged, with its newline."""
    rest, found = _PIECES.subn(b"", line)
    return b"" if found and _NUMBERS.fullmatch(rest) else line + b"\n"


def _may_be_gloo(partial: bytes) -> bool:
    """Whether an unfinished line may still turn out to be (part of) gloo's message."""
    return bool(_PIECES.search(partial) or _NUMBERS.fullmatch(partial))


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
        pending = b""  # an unfinished line
        while True:
            if (pending and not _may_be_gloo(pending) and
                    not select.select([self.read_end], [], [], _QUIET_SECONDS)[0]):
                # A prompt or a redrawn line: show it once the writer pauses.
                _write_all(self.target, pending)
                pending = b""
                continue
            chunk = os.read(self.read_end, 1 << 16)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            _write_all(self.target, b"".join(_without_gloo(line) for line in lines))
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
