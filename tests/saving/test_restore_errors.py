"""A damaged checkpoint gives one error naming the array at fault, and no asyncio noise; a
restore cut short by a failed peer process names the peer, not damage."""

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import orbax.checkpoint as ocp
import pytest

from mirrorfit._src.distribute.multi_worker import failfast
from mirrorfit._src.saving import checkpoint as checkpoint_lib
from mirrorfit._src.saving import checkpoint_format, restore_errors

_LOAD_DAMAGED = textwrap.dedent("""
    import sys
    from pathlib import Path
    import numpy as np
    from mirrorfit._src.saving import checkpoint as checkpoint_lib
    from mirrorfit._src.saving import checkpoint_format

    # 200 arrays: orbax reads them all at once, so many reads are in flight when one fails.
    rng = np.random.default_rng(0)
    tree = {f"k{i:02d}": rng.normal(size=4000).astype(np.float32) for i in range(200)}
    version = checkpoint_lib.save(Path(sys.argv[1]), tree)
    for data in (version / "arrays").glob("ocdbt.process_*/d/*"):  # the arrays' data files
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    try:
        checkpoint_lib.load(version)
    except checkpoint_format.CheckpointError as err:
        print(err)
    else:
        print("loaded")
    import gc; gc.collect()
""")


def test_damaged_checkpoint_error_names_array_and_stderr_has_no_closed_loop_noise(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.getcwd(), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", _LOAD_DAMAGED, str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=120, env=env, check=True)
    message = done.stdout.strip()
    assert message.startswith(f"The checkpoint {str(tmp_path / 'w' / 'ckpt-1')!r} is damaged")
    assert "array 'k" in message and "cannot be read" in message  # the key at fault
    assert restore_errors.CLOSED_LOOP not in done.stderr
    assert "Traceback" not in done.stderr


def test_first_damaged_is_none_for_an_intact_checkpoint(tmp_path):
    version = checkpoint_lib.save(tmp_path / "w", {"a": {"b": np.arange(3.0)}, "c": np.ones(2)})
    assert restore_errors.first_damaged(version, [["a", "b"], ["c"]]) is None


def test_quiet_closed_loop_drops_only_the_closed_loop_error(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    loop = asyncio.new_event_loop()
    loop.close()
    errors = []
    for fail in (lambda: loop.call_soon_threadsafe(print), lambda: 1 / 0):
        try:
            fail()
        except Exception as err:  # noqa: BLE001
            errors.append(err)
    with restore_errors.quiet_closed_loop():
        for err in errors:
            sys.unraisablehook(types.SimpleNamespace(
                exc_type=type(err), exc_value=err, exc_traceback=err.__traceback__,
                err_msg=None, object=None))
    assert [u.exc_value for u in seen] == errors[1:]  # the ZeroDivisionError only
    assert sys.unraisablehook == seen.append  # removed after a block that completed


def test_restore_cut_short_by_a_failed_peer_names_the_peer_not_damage(tmp_path, monkeypatch):
    # Process 1 raised and recorded itself; orbax's barrier at the end of the restore fails.
    version = checkpoint_lib.save(tmp_path / "w", {"a": np.arange(3.0)})

    def barrier_fails(*args, **kwargs):
        raise RuntimeError("DEADLINE_EXCEEDED: Barrier timed out. Id: Checkpointer:restore")

    monkeypatch.setattr(failfast, "_installed", types.SimpleNamespace(_failure=lambda: "1 1"))
    monkeypatch.setattr(ocp.Checkpointer, "restore", barrier_fails)
    with pytest.raises(failfast.PeerFailedError) as err:
        checkpoint_lib.load(version)
    message = str(err.value)
    assert "process 1 of the job failed with exit code 1" in message
    assert str(version) in message and "damaged" not in message.replace("not found damaged", "")
    assert not isinstance(err.value, checkpoint_format.CheckpointError)  # backups are kept


def test_abandoned_reads_of_a_failed_restore_leave_no_asyncio_log_records(caplog):
    # After a failed restore, asyncio's "never retrieved" records of that checkpoint's reads
    # are dropped, for good; other records (another path, other messages) still pass.
    version = "/ckpts/w/ckpt-7"
    with pytest.raises(ValueError), restore_errors.quiet_closed_loop(version):
        raise ValueError("restore failed")
    logger = logging.getLogger("asyncio")
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        logger.error("Future exception was never retrieved\nfuture: <Future finished "
                     f"exception=ValueError('Error reading in local file \"{version}/arrays/\"')>")
        logger.error("Future exception was never retrieved\nfuture: <Future finished "
                     "exception=ValueError('Error reading \"/elsewhere/arrays/\"')>")
        logger.error(f"Some other asyncio error about {version}")
    assert [r.getMessage().splitlines()[-1] for r in caplog.records] == [
        "future: <Future finished exception=ValueError('Error reading \"/elsewhere/arrays/\"')>",
        "Some other asyncio error about /ckpts/w/ckpt-7"]
