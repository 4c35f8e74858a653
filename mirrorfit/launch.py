"""Local multi-process launcher for `MultiWorkerMirroredStrategy`, like ``torchrun``.

    python -m mirrorfit.launch --nproc 2 --cpu-devices 2 [--port P] [--max-restarts N] \
        script.py [args ...]

Starts ``--nproc`` copies of ``script.py`` on this machine as the processes of one job, each
output line prefixed with ``[rank]``; a failing process stops the job within seconds, and
``--max-restarts N`` starts a failed job again. The program is
`mirrorfit._src.distribute.multi_worker.launch`, whose docstring says what it does in full.
"""

import sys

from mirrorfit._src.distribute.multi_worker.launch import GRACE_SECONDS as GRACE_SECONDS
from mirrorfit._src.distribute.multi_worker.launch import free_port as free_port
from mirrorfit._src.distribute.multi_worker.launch import launch as launch
from mirrorfit._src.distribute.multi_worker.launch import main as main

__all__ = ["GRACE_SECONDS", "free_port", "launch", "main"]

if __name__ == "__main__":
    sys.exit(main())
