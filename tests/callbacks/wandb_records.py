"""Reads the records of a W&B run file (``run-<id>.wandb``), which W&B writes offline.

wandb no longer ships a Python reader of these files, so the tests read them here. The file
is a LevelDB log (https://github.com/google/leveldb/blob/main/doc/log_format.md) after a
7-byte header (``:W&B``, magic ``0xBEE1``, version 0): 32 KiB blocks of chunks, each
``crc32 (4 bytes LE) | length (2 bytes LE) | type (1 byte) | data``, where type FULL (1), or
FIRST (2), MIDDLE (3), LAST (4) split a record over blocks, and W&B's crc is zlib's CRC-32
of the type byte then the data. Each record is a ``wandb_internal_pb2.Record`` protobuf.
"""

import struct
import zlib
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path) -> list:
    """Every `wandb_internal_pb2.Record` in the run file ``path``, in order."""
    data = Path(path).read_bytes()
    assert struct.unpack("<4sHB", data[:HEADER]) == (b":W&B", 0xBEE1, 0), "not a W&B run file"
    records, pending, pos = [], b"", HEADER
    while len(data) - pos >= HEADER:
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:  # a block's zero trailer
            pos += left_in_block
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
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
