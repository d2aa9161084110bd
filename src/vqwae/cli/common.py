"""What the ``vqwae`` commands share: a one-line error for a user's mistake, the device, CPU threads, progress
and wall time. (Parsing and printing only: the work is in the library.)"""
from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vqwae.extras import missing_extra
from vqwae.options import SEED_MAX

if TYPE_CHECKING:
    import torch

THREADS_HELP = "CPU threads (default: env VQWAE_THREADS, else the CPUs not already busy)."

# The parameters of the commands that read a trained run, declared once: ``device: Device = "auto"``.
RunDir = Annotated[Path, typer.Argument(help="A run folder made by `vqwae train`.")]
Device = Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")]
Threads = Annotated[int | None, typer.Option(help=THREADS_HELP)]
DataRoot = Annotated[str | None, typer.Option(help="Override the dataset location recorded in the run.")]
Seed = Annotated[int, typer.Option(min=0, max=SEED_MAX, help=f"Random seed, 0 to {SEED_MAX}.")]


# A disk that is full, read-only or not ours: the user's to fix, so one line (every file vqwae writes goes
# through an atomic replace, so what was written before stays whole).
DISK_ERRNOS = frozenset({errno.EROFS, errno.ENOSPC, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EDQUOT,
                         errno.ENAMETOOLONG, errno.ENOTDIR})


def one_line_errors(command):
    """Wrap a command so that what the user has to fix outside vqwae ends it with one line, never a traceback: a
    package an extra brings that is not installed (the ``pip install`` that brings it, ``vqwae.extras``), and a
    full, read-only or forbidden disk (the path)."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except ModuleNotFoundError as e:
            hint = missing_extra(e)
            if hint is None:
                raise
            fail(str(hint), code=1)
        except OSError as e:
            if e.errno not in DISK_ERRNOS:
                raise
            fail(f"cannot write {e.filename}: {e.strerror}" if e.filename else f"cannot write: {e.strerror}")
        except Exception as e:  # safetensors reports a full disk with its own error type: "... (os error 28)"
            code = re.search(r"os error (\d+)", str(e))
            if code is None or int(code.group(1)) not in DISK_ERRNOS:
                raise
            fail(f"cannot write: {os.strerror(int(code.group(1)))} ({type(e).__name__})")
    return wrapper


def nonempty_path(text: str) -> Path:
    """The ``parser`` of every --out: an empty value (``--out ""``, an unset shell variable) would name the current
    folder, and write there."""
    if not str(text).strip():
        raise typer.BadParameter("an empty path would write into the current folder; name a file or folder")
    return Path(text)


def fail(message: str, code: int = 2) -> None:
    """Stop the command with ``error: message`` on stderr (no traceback for a user's mistake)."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def check_run(run_dir) -> None:
    """A trained run folder, or a one-line error."""
    from vqwae.runs.layout import check_trained

    try:
        check_trained(run_dir)
    except FileNotFoundError as e:
        fail(str(e))


#: The devices a command computes on ("meta" and the like hold no data: a run on them would fail deep inside).
COMPUTE_DEVICES = ("cpu", "cuda", "mps")


def device_or_fail(name: str) -> torch.device:
    from vqwae.distributed import resolve_device

    try:
        dev = resolve_device(name)
    except ValueError as e:
        fail(f"bad --device {name!r}: {e}")
    except RuntimeError:  # torch lists every device type it knows
        fail(f"bad --device {name!r}; valid: auto, cpu, cuda, cuda:N, mps")
    if dev.type not in COMPUTE_DEVICES:
        fail(f"bad --device {name!r}: vqwae computes on {', '.join(COMPUTE_DEVICES)}, not on {dev.type}")
    return dev


def threads_on(dev: torch.device, threads: int | None):
    """On the CPU: torch's intra-op threads for the command (None: the idle CPUs, vqwae.threads)."""
    from vqwae.threads import cpu_threads

    return cpu_threads(threads) if dev.type == "cpu" else contextlib.nullcontext()


def at_least(name: str, value: int | float | None, minimum=1) -> None:
    if value is not None and value < minimum:
        fail(f"{name} must be >= {minimum}, got {value}")


def out_folder_or_fail(out: Path | None) -> None:
    """An --out that names an existing file where a folder of images goes: one line."""
    if out is not None and os.path.lexists(out) and not out.is_dir():  # a link to nowhere too (vqwae.files.taken)
        fail(f"--out {out} is {'a symbolic link that leads to no folder' if out.is_symlink() else 'a file'}, not a "
             "folder")


def print_wall(t0: float) -> None:
    typer.echo(f"wall time: {time.perf_counter() - t0:.1f} s")
