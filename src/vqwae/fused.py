"""The quantizers' own state updates as fused kernels: ``torch.compile`` of a no-grad method (opt-in).

VQ-WAE's training step keeps state beside the network's parameters (the semidiscrete potential's ascent, the
transport codebook's EMAs, the split of dead cells): about 65 small operators per step, each a kernel launch. On a
GPU such a step is bound by launches, not arithmetic (BENCHMARKS.md section 30: on an H100 the quantizer's
kernels run for 0.35 ms of a 5.4 ms step). Compiled, inductor fuses them into a few kernels. The update has
no host synchronisation, so it traces as one graph (``fullgraph=True``), with static shapes (``dynamic=False``: no
symbolic size to read back).

``compile_update=True`` (a quantizer option; default False) compiles it, on any device, except under DDP, whose
all-reduces sit inside the update, inside a region the caller compiles (dynamo traces the method itself), and
under a Python dispatch mode. On an H100 the quantizer's kernels fall from 176 to 112 per step and the training
step gains 0-10% (BENCHMARKS.md section 36). Each compiled method has its own dynamo cache (``fused_update`` applies
no_grad around the compiled call): through one shared ``@torch.no_grad()`` wrapper the configurations of one
process overflowed a shared cache and synchronised on the GPU (section 30). With that fixed the GPU sync check
passes with the update compiled (section 36); it stays opt-in because the gain is small for a compile step.
A compile that fails (an inductor bug of the installed torch, a graph break, a full cache) warns once and runs
eagerly from then on: the update is the same computation either way, up to float rounding.

Written by hand because no library offers "compile this method, lazily, where it pays, with a fallback".
"""
from __future__ import annotations

import functools
import warnings

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from vqwae.distributed import is_distributed


def wants_compile(setting: bool) -> bool:
    """Whether an update runs compiled under the ``compile_update`` setting: not inside a compiled region, under
    DDP, or under a Python dispatch mode (which dynamo cannot trace: e.g. an operator counter)."""
    return (setting and not torch.compiler.is_compiling() and not is_distributed()
            and _get_current_dispatch_mode() is None)


def _compile_error(e: Exception) -> bool:
    """Whether ``e`` is raised by torch.compile while tracing or compiling, before the graph runs: an inductor bug,
    a graph break, or more configurations than dynamo's cache keeps per function (its recompile limit)."""
    exc = torch._dynamo.exc  # imported by torch.compile by now (an import of its own costs ~1 s)
    kinds = tuple(getattr(exc, n) for n in ("TorchDynamoException", "FailOnRecompileLimitHit") if hasattr(exc, n))
    return isinstance(e, kinds)


def fused_update(method):
    """Decorator of a state update ``method(self, ...)`` of an object with a ``compile_update`` attribute: the
    method runs without autograd, through ``torch.compile(fullgraph=True, dynamic=False)`` when
    :func:`wants_compile` says so, else eagerly. The compiled function is made at the first compiled call and
    shared by all instances (dynamo keys its graphs on the state's shapes and the options' values).

    The method itself must not carry ``@torch.no_grad()``: every function so decorated runs through one wrapper
    whose code object dynamo's cache would share between them, and eight configurations filled it (its recompile
    limit), which ``fullgraph=True`` turns into an error."""
    compiled = None
    failed = False

    @functools.wraps(method)
    def update(self, *args, **kwargs):
        nonlocal compiled, failed
        with torch.no_grad():
            if failed or not wants_compile(self.compile_update):
                return method(self, *args, **kwargs)
            if compiled is None:
                # static shapes: no symbolic size to read back; another batch size recompiles
                compiled = torch.compile(method, fullgraph=True, dynamic=False)
            try:
                return compiled(self, *args, **kwargs)
            except Exception as e:
                if not _compile_error(e):
                    raise
                failed = True
                reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
                warnings.warn(f"{method.__qualname__}: torch.compile failed ({type(e).__name__}: {reason}); "
                              "running it eagerly from now on", stacklevel=2)
                return method(self, *args, **kwargs)

    return update
