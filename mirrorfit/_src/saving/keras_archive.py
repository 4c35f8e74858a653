"""``.keras`` files: a whole saved model in one zip file, as Keras' ``model.save("m.keras")``.

The zip holds the orbax checkpoint directory that ``Model.save`` writes (arrays, and its
``meta`` JSON with the compile configuration) under ``model/``, plus ``config.json`` (that
JSON, readable without orbax). It is written to a temporary file and renamed, so a crash
never leaves a partial ``.keras`` file, and a directory is never created under a ``.keras``
name.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SUFFIX = ".keras"
_MEMBER_ROOT = "model"


def is_archive_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a ``.keras`` file."""
    return os.fspath(path).endswith(SUFFIX)


def write(path: str | os.PathLike, save_dir: Callable[[Path], dict[str, Any]]) -> Path:
    """Writes a ``.keras`` zip: ``save_dir(tmp)`` saves into a directory, which is zipped.

    Args:
        path: the ``.keras`` file to write (replaced if it exists).
        save_dir: saves the model into the given directory; returns the JSON to store as
            ``config.json``.

    Raises:
        ValueError: if ``path`` is an existing directory.
    """
    target = Path(path).absolute()
    if target.is_dir():
        raise ValueError(f"{os.fspath(path)!r} is a directory; a .keras model is one file. "
                         f"Remove it or save to another name. Received: path={os.fspath(path)!r}")
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
    return target


@contextlib.contextmanager
def extracted(path: str | os.PathLike) -> Iterator[Path]:
    """The checkpoint directory inside a ``.keras`` file, extracted for the ``with`` block.

    Raises:
        ValueError: if ``path`` is not a zip written by `write`.
    """
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                if any(name.startswith(("/", "..")) or ".." in Path(name).parts
                       for name in names) or "config.json" not in names:
                    raise zipfile.BadZipFile("not a mirrorfit .keras archive")
                archive.extractall(tmp)
        except (zipfile.BadZipFile, OSError) as err:
            raise ValueError(f"{os.fspath(path)!r} is not a .keras file written by "
                             f"model.save ({err}). Received: path={os.fspath(path)!r}") from err
        yield Path(tmp) / _MEMBER_ROOT
