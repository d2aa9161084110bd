"""A run folder belongs to one training process at a time: RUN_DIR/run.lock.

The lock is an advisory ``flock`` on RUN_DIR/run.lock, which also records its holder (pid, host, start time,
command) for the error a second writer gets. The operating system releases a ``flock`` when its process dies,
kill -9 included, so a lock file left behind by a dead process is stale by construction: the next writer takes
it over without asking anyone to delete it. Where ``fcntl`` does not exist (Windows), the holder's pid is
checked instead (on this host; a lock taken on another host is reported and left to the user).

Under DDP only rank 0 holds the lock, and every rank learns whether it got it (:func:`hold_run_folder`), so
a second ``torchrun`` into a folder a first one still writes stops on every rank, with the same message.

Written by hand: the few lock libraries (filelock, fasteners) give no holder to report. The file is removed on
release while still locked, and a taker checks after locking that the path still names the file it locked (else
it opens the path again), so removing it races with no one.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

from vqwae.training.folder import LOCK

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None



class RunFolderBusy(RuntimeError):
    """Another live process is writing this run folder."""


def _holder_text(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "another process"
    if not info:
        return "another process"
    return (f"pid {info.get('pid')} on {info.get('host')} (since {info.get('started')}: "
            f"{info.get('command', '?')})")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


class RunLock:
    """``with RunLock(run_dir):`` holds the folder's lock, or raises :class:`RunFolderBusy` naming the holder."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            return self._acquire_by_pid()
        for _ in range(100):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise RunFolderBusy(f"{self.path.parent} is being written by {_holder_text(self.path)}; wait for it "
                                    "to finish or stop it (a lock whose process has died is taken over "
                                    "automatically)") from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the holder released and removed this file after we opened it: open the current one
        else:
            raise RunFolderBusy(f"{self.path} keeps changing; another process is taking the lock")
        self._fd = fd
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        return self

    def _acquire_by_pid(self) -> "RunLock":
        try:
            info = json.loads(self.path.read_text())
        except (OSError, ValueError):
            info = None
        if info and info.get("pid") != os.getpid():
            same_host = info.get("host") == socket.gethostname()
            if not same_host or _pid_alive(int(info["pid"])):
                raise RunFolderBusy(f"{self.path.parent} is being written by {_holder_text(self.path)}"
                                    + ("" if same_host else f"; if that process is gone, delete {self.path}"))
        self.path.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                         "started": time.strftime("%Y-%m-%d %H:%M:%S")}))
        self._fd = -1
        return self

    def release(self) -> None:
        """Let go of the lock and remove its file (while still holding it: a process that opened the file in the
        meantime finds, once it holds the lock, that the path no longer names it, and opens the path again), so
        a folder that training left (or refused) keeps no run.lock."""
        if self._fd is None:
            return
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                if _same_file(self._fd, self.path):
                    self.path.unlink()
            os.close(self._fd)  # closing releases the flock
        else:
            with contextlib.suppress(OSError):
                self.path.unlink()
        self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@contextlib.contextmanager
def hold_run_folder(run_dir: str | os.PathLike, *, is_main: bool = True, distributed: bool = False,
                    device=None) -> Iterator[None]:
    """Hold RUN_DIR's lock for the block: rank 0 takes it and every rank stops when it could not (DDP)."""
    lock, error = RunLock(run_dir), None
    if is_main:
        try:
            lock.acquire()
        except RunFolderBusy as e:
            error = e
    if distributed:
        import torch
        import torch.distributed as dist

        flag = torch.tensor([0.0 if error is None else 1.0], device=device)
        dist.all_reduce(flag)
        if error is None and float(flag) > 0:  # rank 0 could not lock it: name the holder here too
            error = RunFolderBusy(f"{Path(run_dir)} is being written by {_holder_text(lock.path)} (rank 0 could not "
                                  "lock it)")
    if error is not None:
        raise error
    try:
        yield
    finally:
        lock.release()
