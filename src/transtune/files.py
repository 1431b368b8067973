"""Durable file writes: a file is replaced whole or not at all, and stays written after a
crash (temporary name, fsync, rename, fsync of the folder)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's (or a folder's) data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(tmp: Path, path: Path) -> None:
    """Move the written file ``tmp`` to ``path``, durably."""
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(path.parent)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    replace_durably(tmp, path)
