"""``.keras`` files: a whole saved model in one zip file, as Keras' ``model.save("m.keras")``.

The zip holds the orbax checkpoint directory that ``Model.save`` writes (arrays, and its
``meta`` JSON with the compile configuration) under ``model/``, plus ``config.json`` (that
JSON, readable without orbax). It is written to a temporary file and renamed, so a crash
never leaves a partial ``.keras`` file, and a directory is never created under a ``.keras``
name.

Errors name the ``.keras`` file, never the temporary files: a failed write gives the cause
and its errno (a full disk, a read-only destination), and a file that is a zip but cannot be
read whole is "damaged or truncated", told apart from one that is no ``.keras`` file at all.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mirrorfit._src.saving import checkpoint as checkpoint_lib
from mirrorfit._src.saving import checkpoint_format
from mirrorfit._src.saving.checkpoint_files import CheckpointWriteError, write_failure
from mirrorfit._src.saving.checkpoint_format import LoadedVersion

SUFFIX = ".keras"
_MEMBER_ROOT = "model"


def is_archive_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a ``.keras`` file."""
    return os.fspath(path).endswith(SUFFIX)


def write(path: str | os.PathLike, save_dir: Callable[[Path], dict[str, Any]],
          argument: str = "path") -> Path:
    """Writes a ``.keras`` zip: ``save_dir(tmp)`` saves into a directory, which is zipped.

    Args:
        path: the ``.keras`` file to write (replaced if it exists).
        save_dir: saves the model into the given directory; returns the JSON to store as
            ``config.json``.
        argument: how the caller's user names ``path`` in error messages.

    Raises:
        ValueError: if ``path`` is an existing directory.
        CheckpointWriteError: naming ``path`` (never the temporary files) and the cause
            with its errno (28 for a full disk, 30 for a read-only file system), if writing
            fails. An existing file at ``path`` is left as it was.
    """
    shown = os.fspath(path)
    target = Path(path).absolute()
    if target.is_dir():
        raise ValueError(f"{shown!r} is a directory; a .keras model is one file. "
                         f"Remove it or save to another name. Received: {argument}={shown!r}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            config = save_dir(Path(tmp) / _MEMBER_ROOT)
            partial = Path(tmp) / "archive.zip"
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.writestr("config.json", json.dumps(config))
                for file in sorted((Path(tmp) / _MEMBER_ROOT).rglob("*")):
                    if file.is_file():
                        archive.write(file, file.relative_to(tmp).as_posix())
            os.replace(partial, target)
    except OSError as err:  # CheckpointWriteError included: it names the temporary directory
        what, fix, code = write_failure(err) or (
            "the file system refused it", "Check that {argument} can be written.", errno.EIO)
        kept = ("The previous file there is unchanged." if target.is_file()
                else "Nothing was written there.")
        raise CheckpointWriteError(
            code, f"Could not write the .keras file {argument}={shown!r}: {what}. "
                  f"{fix.format(argument=argument)} {kept} Received: {argument}={shown!r}",
        ) from err
    return target


_DAMAGED = (
    "The .keras file {path!r} is damaged or truncated ({detail}): it was cut short or changed "
    "after model.save wrote it (an interrupted copy or download, a full disk). Save the model "
    "again, or copy the file again from its source. Received: path={path!r}")
"""Error for a ``.keras`` file that is a zip but cannot be read whole."""

_NOT_AN_ARCHIVE = (
    "{path!r} is not a .keras file written by model.save ({detail}). Pass a .keras file that "
    "model.save wrote, or a checkpoint directory. Received: path={path!r}")
"""Error for a ``.keras`` path that is not such a zip at all."""


def _zip_signature(path: str | os.PathLike) -> bool:
    """Whether the file starts as a zip does (so a read failure means damage)."""
    try:
        with open(path, "rb") as file:
            return file.read(4) == b"PK\x03\x04"
    except OSError:
        return False


@contextlib.contextmanager
def extracted(path: str | os.PathLike) -> Iterator[Path]:
    """The checkpoint directory inside a ``.keras`` file, extracted for the ``with`` block.

    Raises:
        CheckpointError: (a ``ValueError``) naming ``path``, if there is no such file.
        ValueError: naming ``path``: "damaged or truncated" for a zip that cannot be read
            whole, "not a .keras file" for anything else that is not a zip `write` wrote.
    """
    shown = os.fspath(path)
    if Path(path).is_dir():
        raise ValueError(_NOT_AN_ARCHIVE.format(path=shown, detail="it is a directory"))
    if not Path(path).exists():
        raise checkpoint_format.CheckpointError(f"No .keras file found at {shown!r}: check the "
                                                f"path. Received: path={shown!r}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                if any(name.startswith(("/", "..")) or ".." in Path(name).parts
                       for name in names):
                    raise ValueError(_NOT_AN_ARCHIVE.format(
                        path=shown, detail="it holds paths outside its own folder"))
                if "config.json" not in names:
                    raise ValueError(_NOT_AN_ARCHIVE.format(
                        path=shown, detail="it is a zip without config.json"))
                archive.extractall(tmp)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
            template = _DAMAGED if _zip_signature(path) else _NOT_AN_ARCHIVE
            detail = f"{type(err).__name__}: {err}"
            if template is _NOT_AN_ARCHIVE:
                detail = f"it is not a zip file; {detail}"
            raise ValueError(template.format(path=shown, detail=detail)) from err
        yield Path(tmp) / _MEMBER_ROOT


def read_latest(path: str | os.PathLike) -> LoadedVersion:
    """Loads and verifies the model checkpoint inside the ``.keras`` file ``path``.

    Returns:
        The checkpoint; its ``path`` is the ``.keras`` file.

    Raises:
        ValueError: naming ``path`` (never the temporary directory it is extracted to), if
            there is no such file, it is not a ``.keras`` file, or it is damaged or
            truncated (`CheckpointError`).
    """
    shown = os.fspath(path)
    with extracted(path) as directory:
        try:
            found = checkpoint_lib.read_latest(directory)
        except checkpoint_format.NewerFormatError as err:  # intact: say so, naming the file
            raise checkpoint_format.NewerFormatError(
                str(err).replace(os.fspath(directory.parent), shown)) from err
        except checkpoint_format.CheckpointError as err:
            raise checkpoint_format.CheckpointError(_DAMAGED.format(
                path=shown, detail=str(err).replace(os.fspath(directory.parent), shown)),
            ) from err
    return found._replace(path=Path(path))
