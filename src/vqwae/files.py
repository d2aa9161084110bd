"""File writes: the one way vqwae writes a file that must never be seen half-written.

The content goes to a temporary file in the same folder, is flushed to disk, and is renamed over the target
(``os.replace`` is atomic on POSIX and Windows). A crash at any moment (kill -9 included) leaves either the old
file or the new one, never a mix; the temporary file is removed when the write fails, and one that a killed
process left (its name holds the writer's pid) is removed by the next write to the same target. A log of lines (a JSON
Lines file) grows by :func:`append_line` instead: one write per line, synced, so a crash can cut only the last
line short, which its readers skip.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

import torch


def taken(path: str | os.PathLike) -> bool:
    """Whether anything of the user's sits at ``path``: a file, a folder, or a symbolic link, even one that leads
    nowhere or to itself (``Path.exists`` follows the link and says no for those, and a write would replace the link).
    The one test before a write that needs ``--force`` to replace what is there."""
    return os.path.lexists(path)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, mode: int = 0o644) -> Iterator[Path]:
    """Yields a temporary path beside ``path``; on success it is synced and renamed to ``path``, with the
    file ``mode``. For writers that want a file name (safetensors' save_file, numpy)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _remove_orphans(path: Path) -> None:
    """Remove the temporary files of earlier writes to ``path`` whose process no longer runs (killed mid-write)."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: a check, nothing sent
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


class _WriteErrors:
    """A binary file for ``torch.save`` that keeps the OSError of a failed write: torch's writer turns it into a
    RuntimeError without errno ("unexpected pos ..."), and a full disk must stay an OSError (ENOSPC) that says so."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self.f.flush()


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """``torch.save``, atomically; a failed write (a full disk) raises its OSError."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        writer = _WriteErrors(f)
        try:
            torch.save(obj, writer)
        except RuntimeError:
            if writer.error is not None:
                raise OSError(writer.error.errno, writer.error.strerror, str(path)) from None
            raise


def read_json_object(path: str | os.PathLike, what: str = "a JSON object") -> dict:
    """The JSON object (dict) in ``path``; a ValueError naming the file when it is not JSON or holds something
    else (a list, null...). FileNotFoundError as ``open`` raises it."""
    path = Path(path)
    try:
        value = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"{path} is damaged: not JSON ({e}); it should hold {what}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is damaged: it holds {type(value).__name__ if value is not None else 'null'}, "
                         f"not {what}")
    return value


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append ``line`` and a newline to a log file in one write, synced to disk."""
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
