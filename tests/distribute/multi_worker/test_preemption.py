"""PreemptionNotice in one process (a SIGTERM handler for the duration of fit), and the
launcher's --max-restarts. The 2-process preemption test is in test_multi_worker.py."""

import os
import signal
import subprocess
import sys
import threading

import pytest

from mirrorfit import launch
from mirrorfit._src.distribute.multi_worker.preemption import (
    PREEMPTED_EXIT_CODE,
    PreemptionNotice,
)
from mirrorfit._src.utils.checks import MirrorfitWarning
from tests.helpers import REPO_ROOT


def test_notice_sets_on_sigterm_and_restores_previous_handler():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda *_: seen.append("user"))
    try:
        notice = PreemptionNotice()
        notice.install()
        assert not notice.multi_process
        assert not notice.reached(1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert notice.reached(2)  # caught: the process lives on, and the user's handler
        assert seen == []  # is not called while fit runs
        notice.uninstall()
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == ["user"]
    finally:
        signal.signal(signal.SIGTERM, previous)


def _script(tmp_path, body):
    script = tmp_path / "job.py"
    script.write_text("import os, sys\n" + body)
    return str(script)


def test_launcher_restarts_failed_job_up_to_max_restarts(tmp_path, capfd):
    script = _script(tmp_path, (
        "open(os.path.join(sys.argv[1], os.environ['MIRRORFIT_PROCESS_ID'] + '-' +\n"
        "     os.environ['MIRRORFIT_RESTART_COUNT']), 'w').close()\n"
        f"sys.exit({PREEMPTED_EXIT_CODE})\n"))
    assert launch.launch(script, [str(tmp_path)], nproc=2, max_restarts=2) == 76
    runs = sorted(p.name for p in tmp_path.iterdir() if p.name != "job.py")
    assert runs == ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]
    assert capfd.readouterr().err.count("[launch] restarting the job") == 2


def test_launcher_stops_restarting_once_job_succeeds(tmp_path):
    script = _script(tmp_path, "sys.exit(0 if os.environ['MIRRORFIT_RESTART_COUNT'] == '1'"
                               " else 1)\n")
    assert launch.launch(script, nproc=2, max_restarts=5) == 0
    assert launch.launch(script, nproc=1, max_restarts=0) == 1  # no restart: the failure


def test_launcher_rejects_negative_max_restarts(capsys):
    with pytest.raises(SystemExit):
        launch.main(["--nproc", "1", "--max-restarts", "-1", sys.executable])
    assert "--max-restarts must be a non-negative int" in capsys.readouterr().err


def test_launcher_forwards_sigterm_to_every_process_and_does_not_restart(tmp_path):
    script = _script(tmp_path, (
        "import signal, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: sys.exit({PREEMPTED_EXIT_CODE}))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "mirrorfit.launch", "--nproc", "2",
                             "--max-restarts", "3", script], env=env, cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert proc.stdout is not None
    while sum("ready" in line for line in lines) < 2:  # both processes wait for the signal
        line = proc.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
    proc.send_signal(signal.SIGTERM)
    output = "".join(lines) + proc.communicate(timeout=60)[0]
    assert proc.returncode == PREEMPTED_EXIT_CODE, output
    assert "restarting" not in output
    assert "[launch] the job was preempted" in output


def test_notice_outside_main_thread_warns_and_leaves_handler_alone():
    before = signal.getsignal(signal.SIGTERM)
    caught = []

    def run():
        with pytest.warns(MirrorfitWarning, match="main thread"):
            PreemptionNotice().install()
        caught.append(True)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert caught and signal.getsignal(signal.SIGTERM) is before
