"""The quantizers' own no-grad work per training step with fewer kernel launches: replayed as a CUDA graph (the
default on a GPU) or through ``torch.compile`` (opt-in).

VQ-WAE's training step does no-grad work beside the network's (the search for the nearest codes and the transport
assignment, the potential's ascent, the transport codebook's EMAs, the split of dead cells, the batch's perplexity):
about 110 small operators per step, each a kernel launch. On a GPU such a step is bound by launches, not
arithmetic (docs/lab/30-39.md#gpu-launch-bound: on an H100 the quantizer's kernels run for 0.35 ms of a 5.4 ms
step). The
work has no host synchronisation and static shapes, and all the state it writes lives in buffers registered at
construction, at fixed addresses: the conditions for a CUDA graph.

* ``graph_update=True`` (a quantizer option, the default; CUDA only): the work runs eagerly at its first call with
  a given input signature (lazy initialisations happen there), is captured into a CUDA graph at the second (one
  synchronisation, once) and from then on is replayed: a copy per input tensor, one launch, a copy per output the
  caller keeps. A change of the state's addresses (``.to()``, a new device) or of the inputs' shapes captures anew
  (at most ``MAX_GRAPHS`` signatures per object; beyond, eagerly). Each captured signature keeps the memory of its
  intermediates reserved (the largest: the search's distance chunk, at most ``chunk_entries`` floats, 64 MiB by
  default; 8 MiB at K = 512 and batch 32 x 64 positions). The replay runs the captured kernels on the same
  addresses, so the state moves as eagerly (``tests/test_cuda_sync.py`` on a GPU). On an H100 the quantizer then
  issues 55 launches per step against VQ-VAE's 58, and a training step costs 0.97-1.03x VQ-VAE's
  (docs/lab/40-47.md#gpu-cuda-graph).
* ``compile_update=True`` (opt-in, any device): ``torch.compile(fullgraph=True, dynamic=False)``, a few fused
  kernels; it costs 2-15 s of compilation per process, takes precedence, and measured slower than the graph on an
  H100 (1.13x VQ-VAE's step against 1.00x; docs/lab/30-39.md#gpu-launch-bound, #h100-compile-update,
  docs/lab/40-47.md#gpu-cuda-graph).

Neither applies under DDP (the update's all-reduces sit inside it), inside a region the caller compiles or
captures, or under a Python dispatch mode (an operator counter). A compile or a capture that fails warns once and
runs eagerly from then on: the update is the same computation either way.

Written by hand because no library offers "run this stateful no-grad method as a replayed graph (or compiled),
lazily, where it pays, with a fallback": ``torch.cuda.make_graphed_callables`` graphs autograd callables, not an
in-place update of a module's buffers, and ``torch.compile(mode="reduce-overhead")`` brings the compile step.
"""
from __future__ import annotations

import functools
import warnings
import weakref

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from vqwae.distributed import is_distributed

#: input signatures captured per object and method; further ones run eagerly (a batch size that keeps changing)
MAX_GRAPHS = 8


def _may_fuse() -> bool:
    """What compiling and capturing both need (the decorator runs a method plainly inside a region the caller
    compiles): no DDP, whose all-reduces sit inside the update, and no Python dispatch mode (an operator counter),
    which neither dynamo nor a capture sees through."""
    return not is_distributed() and _get_current_dispatch_mode() is None


def wants_compile(setting: bool) -> bool:
    """Whether an update runs compiled under the ``compile_update`` setting."""
    return setting and _may_fuse()


def wants_graph(setting: bool, tensors: list[torch.Tensor]) -> bool:
    """Whether an update with these input tensors is replayed as a CUDA graph under the ``graph_update`` setting:
    on CUDA tensors, and not inside a capture of the caller's own (a decorated method called by another runs as part
    of the caller's graph)."""
    return (setting and bool(tensors) and all(t.is_cuda for t in tensors) and _may_fuse()
            and not torch.cuda.is_current_stream_capturing())


def _compile_error(e: Exception) -> bool:
    """Whether ``e`` is raised by torch.compile while tracing or compiling, before the graph runs: an inductor bug,
    a graph break, or more configurations than dynamo's cache keeps per function (its recompile limit)."""
    exc = torch._dynamo.exc  # imported by torch.compile by now (an import of its own costs ~1 s)
    kinds = tuple(getattr(exc, n) for n in ("TorchDynamoException", "FailOnRecompileLimitHit") if hasattr(exc, n))
    return isinstance(e, kinds)


class CaptureFailed(RuntimeError):
    """A method's CUDA-graph capture failed (before any of its kernels ran)."""


class _Captured:
    """One input signature of one method on one object: seen once (``graph`` None), or captured."""

    def __init__(self):
        self.seen = False  # run once eagerly
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: list = []  # the call's arguments, its tensors as static copies that each replay refills
        self.output = None


class _GraphCache:
    """The captured graphs of one method, per object (weakly: a graph dies with its object, and a copy of the object
    captures its own, on its own addresses)."""

    def __init__(self):
        self.by_object: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def entry(self, obj, key) -> _Captured | None:
        """The entry for ``key`` (the inputs' signature), or None when the object already holds MAX_GRAPHS others.
        The entries are dropped when the object's state has moved (its tensors' addresses are part of the graph)."""
        state = tuple(t.data_ptr() for t in (*obj.parameters(), *obj.buffers()))
        held = self.by_object.get(obj)
        if held is None or held[0] != state:
            held = (state, {})
            self.by_object[obj] = held
        entries = held[1]
        if key not in entries:
            if len(entries) >= MAX_GRAPHS:
                return None
            entries[key] = _Captured()
        return entries[key]


def _signature(args: tuple) -> tuple:
    """What a captured graph depends on besides the state: each tensor's shape, dtype and device, the other
    arguments' values. Raises CaptureFailed for an argument that is neither (the caller then runs eagerly)."""
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            sig.append(("T", tuple(a.shape), a.dtype, a.device))
        elif a is None or isinstance(a, (bool, int, float, str)):
            sig.append(a)
        else:
            raise CaptureFailed(f"an argument of type {type(a).__name__} cannot be captured")
    return tuple(sig)


def _replayed(method, cache: _GraphCache, self, args: tuple, transient: tuple[int, ...]):
    """Run ``method(self, *args)`` (no grad) through the CUDA-graph cache; see the module docstring. Returns its
    output: None, a tensor or a tuple of tensors, each a new tensor except those at the ``transient`` positions of a
    tuple (the graph's own memory, valid until the next replay)."""
    entry = cache.entry(self, _signature(args))
    if entry is None:
        return method(self, *args)
    if not entry.seen:  # the first call: eagerly, so that lazy initialisations happen here
        entry.seen = True
        return method(self, *args)
    if entry.graph is None:  # the second: capture (kernels recorded, not run), then replay below for this call
        inputs = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.device(next(a.device for a in args if isinstance(a, torch.Tensor))):
                # thread_local: only this thread's CUDA calls must be capturable (a DataLoader's pinning thread goes on)
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    entry.output = method(self, *inputs)
        except RuntimeError as e:  # an operator CUDA cannot capture; nothing ran, the state is as it was
            raise CaptureFailed(str(e)) from e
        entry.graph, entry.inputs = graph, inputs
    else:
        for static, a in zip(entry.inputs, args):
            if isinstance(a, torch.Tensor):
                static.copy_(a)
    entry.graph.replay()
    # the output lives in the graph's memory, which the next replay overwrites: the caller gets its own copy
    out = entry.output
    if isinstance(out, tuple):
        return tuple(o if i in transient else o.clone() for i, o in enumerate(out))
    return None if out is None else out.clone()


def fused_update(method=None, *, transient: tuple[int, ...] = ()):
    """Decorator of a state update ``method(self, *args)`` of a module with ``compile_update`` and ``graph_update``
    attributes (positional arguments: tensors, None or plain values; it returns None, a tensor or a tuple of
    tensors): the method runs without autograd, compiled when :func:`wants_compile` says so, else replayed as a CUDA
    graph when :func:`wants_graph` does, else eagerly. Replayed, its outputs are copies, except the tuple positions
    named in ``transient``, which the caller promises to use before the next call and not to keep (saved by autograd
    for a backward, returned to a user): a launch saved each. A decorated method called from another one runs as
    part of the caller's graph.

    The method itself must not carry ``@torch.no_grad()``: every function so decorated runs through one wrapper
    whose code object dynamo's cache would share between them, and eight configurations filled it (its recompile
    limit), which ``fullgraph=True`` turns into an error."""
    if method is None:  # @fused_update(transient=...)
        return functools.partial(fused_update, transient=transient)
    compiled = None
    compile_failed = graph_failed = False
    graphs = _GraphCache()

    @functools.wraps(method)
    def update(self, *args):
        nonlocal compiled, compile_failed, graph_failed
        if torch.compiler.is_compiling():  # traced into a compiled caller (whole model, or an enclosing update)
            with torch.no_grad():
                return method(self, *args)
        with torch.no_grad():
            if not compile_failed and wants_compile(self.compile_update):
                if compiled is None:
                    # static shapes: no symbolic size to read back; another batch size recompiles
                    compiled = torch.compile(method, fullgraph=True, dynamic=False)
                try:
                    return compiled(self, *args)
                except Exception as e:
                    if not _compile_error(e):
                        raise
                    compile_failed = True
                    _warn_eager(method, "torch.compile", e)
                    return method(self, *args)
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if not graph_failed and wants_graph(getattr(self, "graph_update", False), tensors):
                try:
                    return _replayed(method, graphs, self, args, transient)
                except CaptureFailed as e:  # an argument it cannot hold, or an operator CUDA cannot capture
                    graph_failed = True
                    _warn_eager(method, "CUDA graph capture", e)
                    return method(self, *args)
            return method(self, *args)

    update.graphs = graphs  # the captured graphs, for the tests
    return update


def _warn_eager(method, what: str, e: Exception) -> None:
    reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
    warnings.warn(f"{method.__qualname__}: {what} failed ({type(e).__name__}: {reason}); running it eagerly from "
                  "now on", stacklevel=3)
