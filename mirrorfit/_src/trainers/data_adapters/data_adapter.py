"""`DataAdapter`: the interface every input kind provides to the loops, as Keras 3's
``trainers/data_adapters/data_adapter.py``.

The trainer, ``fit``'s argument checks and the callbacks read an input only through it:
the steps per epoch, the epoch's padded host batches, the first inputs (to build or check the
model), how the batches are placed and produced, and what a resume or a fingerprint needs.
The concrete adapters are `ArrayDataAdapter` (in-memory arrays) and `IterableDataAdapter`
(every source of batches); `get_data_adapter` chooses one per input kind.

Units: a *step* consumes one global batch (all replicas together), so steps per epoch and
batches per epoch are the same count. A *global batch* is the rows of one step over all
replicas; ``padded_batch_size`` rounds it up to a multiple of the replica count (the rows
beyond the real ones repeat real rows and are masked, `mirrorfit._src.distribute.batch`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mirrorfit._src.distribute.batch import Batch


class DataAdapter(abc.ABC):
    """The interface of an input kind; see the module docstring for the units.

    Attributes:
        steps: steps (global batches) per epoch, or ``None`` when unknown until the source
            runs dry. `get_data_adapter` lowers it to ``steps_per_epoch`` (``steps``,
            ``validation_steps``) when given.
        batch_size: the global batch size (real rows per step over all replicas) when it is
            known before any batch is read (arrays); ``None`` for a source of batches, whose
            batches fix their own size.
        padded_batch_size: rows of every yielded batch (this process's rows with
            `local_rows`): the first batch's rows rounded up to a multiple of the replica
            count (of the local replica count with `local_rows`). ``None`` until a source
            of batches has yielded its first batch. A partial batch (the last of an epoch,
            or a short one of a source) is padded to it and its padding rows are masked.
        local_rows: whether each batch holds only this process's rows of the global batch
            (one input pipeline per process), to place with `DeviceMesh.shard_local_batch`;
            ``False``: every process passes the whole global batch (`DeviceMesh.shard_batch`).
        runs_user_code: whether producing a batch runs the user's code (a generator,
            ``__getitem__``, a loader): the trainer then produces batches ahead on the
            prefetch thread (`mirrorfit._src.trainers.prefetch`).
        kind: how messages name the input (``"arrays"``, ``"generator"``, ``"PyDataset"``).
        steps_seen: steps the newest `batches` iterator has read from the start of its epoch
            (``start_step`` included); once it is exhausted, the steps the epoch really had.
        check_input: set by the model once built (``None`` before): raises a
            ``ValueError`` for inputs ``x`` (a batch, ``[rows, ...]``) that its params do not
            fit. A source of batches calls it on the first batch it pads, whose per-example
            shapes every later batch must have; arrays never do (`first_inputs` is all of
            ``x``, checked by the model already).
        resident: ``None`` for the host path; for device-resident arrays, the
            `mirrorfit._src.trainers.resident.DeviceResident` that places them once and
            yields index batches (set by ``fit``, ``evaluate`` and ``predict``).
    """

    steps: int | None
    batch_size: int | None
    padded_batch_size: int | None
    local_rows: bool = False
    runs_user_code: bool
    kind: str
    steps_seen: int = 0
    check_input: Callable[[Any], None] | None = None
    resident: Any = None

    @abc.abstractmethod
    def first_inputs(self) -> Any:
        """Inputs ``x`` (NumPy pytree ``[rows, ...]``) to build or check the model with.

        All of ``x`` for arrays; the first batch's ``x`` for a source of batches (read once
        ahead: epoch 0 then starts with that batch).

        Raises:
            ValueError: if the source yields no batch, or a malformed one.
        """

    @abc.abstractmethod
    def batches(self, epoch: int = 0, *, start_step: int = 0, group: int = 1
                ) -> Iterator[Batch]:
        """Yields the padded host batches of ``epoch`` from step ``start_step`` on.

        Args:
            epoch: the epoch (0-based); it fixes the shuffle order where there is one.
            start_step: steps of the epoch to skip (a resumed epoch).
            group: steps per yielded item (``steps_per_execution``): ``group > 1`` stacks
                that many batches on a leading ``[group]`` axis, and fills a partial last
                group with fully masked batches, which the steps treat as no-ops.

        Yields:
            `Batch` es of ``padded_batch_size`` rows (``[group, padded_batch_size, ...]``
            when grouped), at most ``steps - start_step`` steps of them when ``steps`` is
            known; fewer if a source runs dry.
        """

    def epoch_order(self, epoch: int) -> np.ndarray | None:
        """int ``[num_examples]``: the order in which ``epoch`` visits the rows, or ``None``.

        ``None`` (the default) when there is no such order to check: rows in order, or a
        source of batches. `mirrorfit.callbacks.BackupAndRestore` stores it with a backup
        taken mid-epoch and resumes only if the order is the same again.
        """
        del epoch
        return None

    def arrays(self) -> tuple[Any, Any, Any] | None:
        """The whole input in host memory, ``(x, y, sample_weight)``, or ``None``.

        NumPy pytrees ``[num_examples, ...]`` (``y`` and ``sample_weight`` may be ``None``;
        ``sample_weight`` includes ``class_weight``) for in-memory inputs, from which the
        fingerprints are taken (several processes compare them; backups store them).
        ``None`` (the default) for a source of batches, which cannot be read without
        consuming it.
        """
        return None
