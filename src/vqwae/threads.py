"""How many CPU threads vqwae's commands use on a shared machine, and a scope that sets them.

On a shared machine oversubscribed intra-op threads are many times slower than fewer threads (OpenMP threads
wait at barriers while another job holds a core), so a command takes the CPUs not already busy, unless the
environment variable VQWAE_THREADS (or a command's --threads) says how many.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

import torch
from vqwae.extras import require

ENV = "VQWAE_THREADS"
LOADAVG = "/proc/loadavg"  # Linux: the 4th field counts the runnable tasks now


def default_num_threads(loadavg: str = LOADAVG) -> int:
    """CPU threads for metric networks: the CPUs this process may use, minus those other work keeps busy.

    On a shared machine, oversubscribed intra-op threads are much slower than fewer threads (measured here
    with 2 cores and a load of ~5: Inception took 0.15 s/image on 1 thread vs 0.45 s/image on 2); an idle
    machine gets all its CPUs. "Busy" is the number of runnable tasks other than this one right now (Linux
    /proc/loadavg, the median of a few readings), not the 1-minute load average: that average still counts
    work that has just finished, such as this very process's training a moment ago.

    ``VQWAE_THREADS=N`` in the environment overrides the guess. ``loadavg``: where the runnable tasks are read.
    """
    env = os.environ.get(ENV, "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"{ENV}={env!r}: expected a whole number of threads >= 1")
        return int(env)
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, n - runnable_others(path=loadavg))


def runnable_others(readings: int = 5, interval: float = 0.02, path: str = LOADAVG) -> int:
    """Runnable tasks on the machine besides the reading thread (0 where /proc/loadavg is unavailable)."""
    counts = []
    for i in range(readings):
        try:
            with open(path) as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            return 0
        if i + 1 < readings:
            time.sleep(interval)
    return max(0, sorted(counts)[len(counts) // 2])


_THREAD_SCOPES = [0]  # nesting depth of cpu_threads()


@contextlib.contextmanager
def cpu_threads(n: int | None = None) -> Iterator[int]:
    """Temporarily set torch's intra-op CPU threads, restoring them afterwards.

    ``n=None``: :func:`default_num_threads`, except inside another ``cpu_threads`` block, whose
    setting is kept (so a per-batch call does not re-decide the thread count every batch).
    """
    old = torch.get_num_threads()
    if n is None:
        n = old if _THREAD_SCOPES[0] > 0 else default_num_threads()
    n = max(1, int(n))
    if n != old:
        torch.set_num_threads(n)
    _THREAD_SCOPES[0] += 1
    try:
        yield n
    finally:
        _THREAD_SCOPES[0] -= 1
        if torch.get_num_threads() != old:
            torch.set_num_threads(old)


@contextlib.contextmanager
def flush_denormals() -> Iterator[None]:
    """Flush subnormal floats to zero on the CPU for the block (CPU training): Adam's second moments decay into the
    subnormal range, where x86 arithmetic is about 10x slower (issue #65: an Adam step on 500k parameters 0.79 ->
    8.79 ms). Values below 1.2e-38 become 0; the setting (process-wide, no getter in torch) is off again after."""
    changed = torch.set_flush_denormal(True)  # False where the CPU cannot (no SSE3)
    try:
        yield
    finally:
        if changed:
            torch.set_flush_denormal(False)


@contextlib.contextmanager
def library_threads(n: int | None = None) -> Iterator[None]:
    """Cap the OpenMP / BLAS threads of scikit-learn and numpy (t-SNE, PCA) like torch's."""
    threadpool_limits = require("threadpoolctl").threadpool_limits  # scikit-learn's, imported only here

    with threadpool_limits(n if n is not None else default_num_threads()):
        yield
