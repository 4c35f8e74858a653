"""The stuck-rank watchdog's bookkeeping in one process, with a stand-in for JAX's
coordination client and a hand-moved clock (the 2-process test is in test_multi_worker.py)."""

import pytest

from mirrorfit._src.distribute.multi_worker import watchdog


class _Client:
    """The key-value store of JAX's coordination client, in memory."""

    def __init__(self):
        self.store = {}

    def key_value_set(self, key, value, allow_overwrite=False):
        if key in self.store and not allow_overwrite:
            raise RuntimeError(f"ALREADY_EXISTS: {key}")
        self.store[key] = value

    def key_value_try_get(self, key):
        if key not in self.store:
            raise RuntimeError(f"NOT_FOUND: {key}")
        return self.store[key]

    def key_value_dir_get(self, directory):
        return [(k, v) for k, v in sorted(self.store.items()) if k.startswith(directory)]


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _dogs(timeout=10.0, processes=2):
    client, clock, left = _Client(), _Clock(), []
    dogs = [watchdog._Watchdog(client, rank, processes, timeout, lambda: None, left.append)
            for rank in range(processes)]
    for dog in dogs:
        dog.progress = watchdog.Progress(clock)
    return client, clock, dogs


def test_progress_is_published_and_a_stall_is_declared_only_inside_a_loop():
    client, clock, (chief, worker) = _dogs()
    clock.now += 60  # no loop runs (between fits): never stuck
    assert not chief.poll() and not worker.poll()
    for dog in (chief, worker):
        dog.progress.loop_begin("train")
    for _ in range(3):
        chief.progress.step_done()
    worker.progress.step_done()  # worker 1 then hangs inside its second step
    clock.now += 9.9
    assert not chief.poll() and not worker.poll()
    assert client.store["mirrorfit/progress/0"] == "3"
    assert client.store["mirrorfit/progress/1"] == "1"
    clock.now += 0.1
    assert worker.poll()  # 10 s without a step: worker 1 declares it
    assert client.store[watchdog._STUCK_KEY] == "1"
    assert chief.poll()  # the other process follows the declaration
    records = client.key_value_dir_get("mirrorfit/progress/")
    assert watchdog.behind(records, 2) == ([1], 3)
    line = watchdog.verdict(records, 2, 10.0)
    assert "Behind: process 1 (1 step); the furthest process completed 3 steps" in line


def test_verdict_names_no_process_when_all_stopped_in_the_same_step():
    records = [("mirrorfit/progress/0", "4"), ("mirrorfit/progress/1", "4")]
    assert watchdog.behind(records, 3) == ([2], 4)  # process 2 published nothing: 0 steps
    line = watchdog.verdict(records, 2, 5.0)
    assert "every process completed 4 steps, so none is behind" in line


def test_a_loop_that_raised_disarms_and_a_step_restarts_the_clock():
    clock = _Clock()
    progress = watchdog.Progress(clock)
    progress.loop_begin("train")
    progress.loop_begin("test")  # validation inside fit
    clock.now += 5
    assert progress.stalled_for() == 5
    progress.step_done()
    assert progress.stalled_for() == 0 and progress.steps == 1
    progress.loop_end("test")
    assert progress.loops == {"train"}
    progress.loop_end()  # fit raised
    clock.now += 1000
    assert progress.stalled_for() == 0


def test_timeout_from_argument_environment_default_and_off(monkeypatch):
    monkeypatch.delenv(watchdog.TIMEOUT_ENV, raising=False)
    monkeypatch.setattr(watchdog, "interactive", lambda: False)
    assert watchdog.resolve_timeout(None) == watchdog.DEFAULT_TIMEOUT == 1800
    assert watchdog.resolve_timeout(2.5) == 2.5
    assert watchdog.resolve_timeout(0) is None
    monkeypatch.setenv(watchdog.TIMEOUT_ENV, "7")
    assert watchdog.resolve_timeout(None) == 7.0
    assert watchdog.resolve_timeout(3) == 3.0  # the argument wins
    monkeypatch.setenv(watchdog.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="MIRRORFIT_STEP_TIMEOUT must be a number of seconds"):
        watchdog.resolve_timeout(None)
    with pytest.raises(ValueError, match="Received: step_timeout=-1"):
        watchdog.resolve_timeout(-1)
    monkeypatch.delenv(watchdog.TIMEOUT_ENV)
    monkeypatch.setattr(watchdog, "interactive", lambda: True)
    assert watchdog.resolve_timeout(None) is None  # off in notebooks unless asked for
    assert watchdog.resolve_timeout(60) == 60.0
