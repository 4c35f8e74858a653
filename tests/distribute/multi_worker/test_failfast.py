"""The fail-fast hooks' messages, with a stand-in for JAX's coordination client (no job)."""

import pytest

from mirrorfit._src.distribute.multi_worker import failfast


class _Client:
    """The key-value store of JAX's coordination client, in memory."""

    def __init__(self):
        self.store = {}

    def key_value_set(self, key, value):
        if key in self.store:
            raise RuntimeError(f"ALREADY_EXISTS: {key}")
        self.store[key] = value

    def key_value_try_get(self, key):
        if key not in self.store:
            raise RuntimeError(f"NOT_FOUND: {key}")
        return self.store[key]


def _watch(client, process_id, monkeypatch):
    watch = failfast._Watch(client, process_id, 3, 1.0, lambda: None)
    left = []
    monkeypatch.setattr(watch, "_leave", lambda code, acks_needed=0: left.append(code))
    monkeypatch.setattr(watch, "previous_hook", lambda *args: None)
    return watch, left


def test_a_process_that_lost_its_peer_is_not_reported_as_the_failure(monkeypatch, capsys):
    # Worker 1 is SIGKILLed; process 0's collective fails with gloo's lost-peer error. Process
    # 2 must not read "process 0 failed" but that process 0 lost a process that died.
    client = _Client()
    chief, left = _watch(client, 0, monkeypatch)
    error = RuntimeError("Gloo all-reduce failed: Connection closed by peer [127.0.0.1]:1234")
    chief.excepthook(RuntimeError, error, None)
    assert left == [1] and client.store[failfast._FAILED_KEY] == "0 1 lost"
    capsys.readouterr()
    other, left = _watch(client, 2, monkeypatch)
    other._peer_failed(other._failure())
    err = capsys.readouterr().err
    assert "process 0 lost its connection to another process" in err
    assert "died without a Python traceback" in err
    assert "process 0 of the job failed" not in err
    assert left == [failfast.PEER_FAILED_EXIT_CODE]


@pytest.mark.parametrize("process_id", [0, 1])
def test_a_process_that_raised_is_named_as_the_failure(monkeypatch, capsys, process_id):
    client = _Client()
    failing, _ = _watch(client, process_id, monkeypatch)
    failing.excepthook(ValueError, ValueError("bad input"), None)
    assert client.store[failfast._FAILED_KEY] == f"{process_id} 1"
    other, _ = _watch(client, 2, monkeypatch)
    other._peer_failed(other._failure())
    assert (f"process {process_id} of the job failed with exit code 1 (see its traceback)"
            in capsys.readouterr().err)


def test_an_error_caused_by_the_failed_peer_adds_no_local_blame(monkeypatch, capsys):
    client = _Client()
    client.store[failfast._FAILED_KEY] = "1 1"
    chief, left = _watch(client, 0, monkeypatch)
    error = failfast.PeerFailedError("Could not load the checkpoint '/b/ckpt-3': process 1 ...")
    chief.excepthook(failfast.PeerFailedError, error, None)
    err = capsys.readouterr().err
    assert "process 1 of the job failed with exit code 1" in err
    assert "Here:" not in err and "ckpt-3" not in err
    assert left[0] == failfast.PEER_FAILED_EXIT_CODE
