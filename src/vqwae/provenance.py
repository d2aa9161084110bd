"""What a result ran with: the code (the git commit of vqwae's source, whether it had uncommitted changes, and a digest
of the package's Python files, which names the code also where there is no checkout: an installed or copied package),
the date, torch and Python, and the device. A run folder logs one line of it each time training starts or resumes and
each time the run is evaluated (``training.folder.PROVENANCE``), so a number can be traced to the code that made it
without naming the machine's paths."""
from __future__ import annotations

import functools
import hashlib
import platform
import subprocess
import time
from pathlib import Path

import torch

import vqwae


#: What a run's "uncommitted_changes" does not count: edits that cannot change what the code computes (the docs,
#: Markdown anywhere, the benchmarks' result files)
NOT_CODE = (":(top,exclude)docs", ":(top,exclude,glob)**/*.md", ":(top,exclude)benchmarks/results")


#: The vqwae package this process imported (a checkout's src/vqwae, an installed copy, or a copy on PYTHONPATH)
PACKAGE = Path(vqwae.__file__).resolve().parent


def commit_of(path: Path) -> tuple[str | None, bool | None]:
    """(the commit of the git checkout holding ``path``, whether its tracked files other than ``NOT_CODE`` differ
    from it), or (None, None) outside a git checkout or without git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":/", *NOT_CODE],
                                cwd=path, capture_output=True, text=True, timeout=10)
        return commit.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None, None


@functools.lru_cache(maxsize=1)
def source_commit() -> tuple[str | None, bool | None]:
    """``commit_of`` the checkout vqwae is imported from: (None, None) for an installed copy. Read once per
    process."""
    return commit_of(PACKAGE)


def digest_of(package: Path) -> str:
    """The first 16 hex digits of the SHA-256 of every ``*.py`` file under ``package`` (their paths relative to it,
    sorted, and their bytes): equal for the same code wherever it lies, different after any edit of it."""
    h = hashlib.sha256()
    for f in sorted(package.rglob("*.py")):
        data = f.read_bytes()
        h.update(f"{f.relative_to(package).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """``digest_of`` the vqwae package this process imported. Read once per process."""
    return digest_of(PACKAGE)


def describe_device(device: torch.device) -> str:
    """"cuda: NVIDIA H100 ..." or "cpu: N threads, x86_64, AVX512" (the processor's model, not the host's name; on
    the CPU the vector instructions torch's kernels use: one command ran on two machines of one kind can give
    other figures, docs/lab/48-.md#large-k-rerun)."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    described = f"{device.type}: {torch.get_num_threads()} threads, {platform.machine()}"
    if device.type == "cpu":
        described += f", {torch.backends.cpu.get_cpu_capability()}"
    return described


def provenance(event: str, device: torch.device, **extra) -> dict:
    """One line of a run's provenance log: ``event`` ("train", "eval", ...), when, with what code and on what."""
    commit, dirty = source_commit()
    return {"event": event, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": commit,
            "uncommitted_changes": dirty, "source_digest": source_digest(), "vqwae": vqwae.__version__,
            "torch": torch.__version__, "python": platform.python_version(), "device": describe_device(device), **extra}
