"""Reads the records of a W&B run file (``run-<id>.wandb``), which W&B writes offline.

wandb no longer ships a Python reader of these files, so the tests read them here. The file
is a LevelDB log (https://github.com/google/leveldb/blob/main/doc/log_format.md) after a
7-byte header (``:W&B``, magic ``0xBEE1``, version 0): 32 KiB blocks of chunks, each
``crc32 (4 bytes LE) | length (2 bytes LE) | type (1 byte) | data``, where type FULL (1), or
FIRST (2), MIDDLE (3), LAST (4) split a record over blocks, and W&B's crc is zlib's CRC-32
of the type byte then the data. Each record is a ``wandb_internal_pb2.Record`` protobuf.
"""

import struct
import time
import zlib
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path) -> list:
    """Every complete `wandb_internal_pb2.Record` in the run file ``path``, in order (none
    of a file still empty, and not a last record still being written)."""
    data = Path(path).read_bytes()
    if len(data) < HEADER:
        return []
    assert struct.unpack("<4sHB", data[:HEADER]) == (b":W&B", 0xBEE1, 0), "not a W&B run file"
    records, pending, pos = [], b"", HEADER
    while len(data) - pos >= HEADER:
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:  # a block's zero trailer
            pos += left_in_block
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if pos + HEADER + length > len(data):  # being written
            break
        chunk = data[pos + HEADER:pos + HEADER + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == checksum, f"bad crc at {pos}"
        pos += HEADER + length
        pending += chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def read_finished_run(path, timeout: float = 30.0) -> list:
    """The records of a finished run's file, once its ``exit`` record is written.

    ``run.finish()`` can return before W&B's service has written the file (offline, the
    file may still be empty then), so this reads it again until the run's last record, its
    exit, is there, for at most ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        records = read_records(path) if Path(path).exists() else []
        if any(record.HasField("exit") for record in records):
            return records
        assert time.monotonic() < deadline, f"no exit record in {path} after {timeout} s"
        time.sleep(0.05)
