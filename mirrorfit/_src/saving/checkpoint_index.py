"""The ``checkpoint`` index file beside `mirrorfit.Checkpoint` saves, and finding the newest.

``tf.train.Checkpoint.save`` and ``tf.train.CheckpointManager`` keep a small text file named
``checkpoint`` in the directory of their saves, naming the newest save and the ones kept
(relative to the directory), and ``tf.train.latest_checkpoint(directory)`` reads it::

    model_checkpoint_path: "ckpt-3"
    all_model_checkpoint_paths: "ckpt-2"
    all_model_checkpoint_paths: "ckpt-3"

mirrorfit writes the same file, in the same format, beside its versions (orbax directories,
see `mirrorfit._src.saving.checkpoint`). `latest` reads it and checks that the version it
names is complete; without a usable file (a directory written by ``model.save_weights``,
``CheckpointManager`` of an earlier mirrorfit, or a file naming a deleted version) it takes
the complete version ``<prefix>-<n>`` with the highest ``n``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jax

from mirrorfit._src.saving.checkpoint_files import has_version_layout

INDEX_NAME = "checkpoint"
"""The index file's name, as TensorFlow's."""
_LINE = re.compile(r'(\w+):\s*(".*")\s*')
_NUMBERED = re.compile(r"(.+)-(\d+)")


def _shown(path: Path, directory: Path) -> str:
    return path.name if path.absolute().parent == directory else os.fspath(path.absolute())


def write_index(directory: str | os.PathLike, latest: Path, kept: list[Path]) -> None:
    """Writes ``directory/checkpoint`` naming ``latest`` and ``kept`` (oldest first).

    Only process 0 writes; the file is replaced atomically (written beside, then renamed).
    """
    if jax.process_index() != 0:
        return
    root = Path(directory).absolute()
    lines = [f"model_checkpoint_path: {json.dumps(_shown(latest, root))}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(_shown(p, root))}" for p in kept]
    temporary = root / f".{INDEX_NAME}.tmp-{os.getpid()}"
    temporary.write_text("\n".join(lines) + "\n")
    os.replace(temporary, root / INDEX_NAME)


def read_index(directory: str | os.PathLike) -> tuple[Path | None, list[Path]]:
    """``(newest, kept)`` as ``directory/checkpoint`` names them (``(None, [])`` without one).

    Relative paths are joined to ``directory`` (``"run/ckpt-3"`` for ``directory="run"``, as
    TensorFlow returns them); lines that do not parse are skipped.
    """
    root = Path(directory)
    try:
        text = (root / INDEX_NAME).read_text()
    except (OSError, UnicodeDecodeError):
        return None, []
    newest, kept = None, []
    for line in text.splitlines():
        match = _LINE.fullmatch(line)
        if match is None:
            continue
        try:
            path = root / json.loads(match.group(2))
        except json.JSONDecodeError:
            continue
        if match.group(1) == "model_checkpoint_path":
            newest = path
        elif match.group(1) == "all_model_checkpoint_paths":
            kept.append(path)
    return newest, kept


def numbered(directory: str | os.PathLike, prefix: str | None = None) -> list[Path]:
    """Complete versions ``<prefix>-<n>`` in ``directory`` (joined to it), oldest first: by
    ``n``, then by time written.

    Args:
        directory: where to look (a missing directory holds none).
        prefix: the versions' name before ``-<n>``; ``None``: any.
    """
    root = Path(directory)
    if not root.is_dir():
        return []
    found = [(int(m.group(2)), p.stat().st_mtime, p) for p in root.iterdir()
             if (m := _NUMBERED.fullmatch(p.name)) and (prefix is None or m.group(1) == prefix)
             and has_version_layout(p)]
    return [p for *_, p in sorted(found)]


def latest(directory: str | os.PathLike, prefix: str | None = None) -> Path | None:
    """The newest complete version in ``directory``, or ``None`` (see the module docstring):
    of ``mf.Checkpoint``'s saves, and of ``model.save_weights``' ``ckpt-<n>`` versions.

    Args:
        directory: where to look (a missing directory holds none).
        prefix: the versions' name before ``-<n>``, also of the one the index names;
            ``None``: any (the index may name a save of any name).
    """
    newest, _ = read_index(directory)
    if newest is not None and has_version_layout(newest) and (
            prefix is None or _is_numbered(newest, prefix)):
        return newest
    found = numbered(directory, prefix)
    return found[-1] if found else None


def _is_numbered(path: Path, prefix: str) -> bool:
    match = _NUMBERED.fullmatch(path.name)
    return match is not None and match.group(1) == prefix
