"""On a GPU, a training step through each quantizer (forward, the loss, backward, Adam, and the quantizer's own
updates: the transport codebook, the potential's ascent, the split of dead cells, EMA and dead-code expiry) makes
no host synchronisation once its one-off starts (the data start, k-means) are done. CUDA's own sync debugger
raises on every implicit synchronisation (``.item()``, ``nonzero``, a boolean mask's indexing, a host copy), which
the CPU stand-in in ``test_solver_speed_properties.py`` cannot see. Skipped without CUDA (CI has none)."""
import warnings

import pytest
import torch
from torch import nn

from vqwae.fused import fused_update
from vqwae.quantizers import PaperWassersteinQuantizer, ResidualQuantizer, VectorQuantizer, WassersteinQuantizer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the sync debugger)")

D, N = 16, 64  # latent width; latents per image (8 x 8 positions)
MASKED = "wasserstein, padded sequences under a mask"
MASKED_PULL = "wasserstein, pull=None, padded sequences under a mask (the mask counted on the device)"
MASKS = (MASKED, MASKED_PULL)  # the cases whose step passes a mask

#: how the Wasserstein quantizer's own update runs (vqwae.fused): replayed as a CUDA graph (the default), launched
#: operator by operator, or compiled
MODES = {"graph": {}, "eager": dict(graph_update=False), "compiled": dict(compile_update=True)}


def _product(c: dict, **options) -> WassersteinQuantizer:
    """A WassersteinQuantizer whose update runs as the mode says (its runtime settings)."""
    return WassersteinQuantizer(**options).set_runtime(**c)


def _paper(c: dict, **options) -> PaperWassersteinQuantizer:
    return PaperWassersteinQuantizer(**options).set_runtime(**c)

#: the Wasserstein quantizer's cases, each built for a mode's options
UPDATED = {
    "wasserstein, shared pi, K=512 (the default)": lambda c: _product(c, num_codes=512, dim=D, channel_last=True),
    "wasserstein, shared pi, K=8192 (dead cells split)": lambda c: _product(c, num_codes=8192, dim=D,
                                                                            channel_last=True),
    "wasserstein, per-position pi": lambda c: _product(c, num_codes=512, dim=D, channel_last=True, num_positions=N),
    "paper-wasserstein, semidiscrete: gradient codebook": lambda c: _paper(c, num_codes=512, dim=D, channel_last=True,
                                                                           codebook_init="normal"),
    # sinkhorn's convergence check reads the marginal error on the host (its docstring says so): tol=0 turns it off
    "paper-wasserstein, sinkhorn, no tolerance check": lambda c: _paper(c, num_codes=512, dim=D, channel_last=True,
                                                                        solver="sinkhorn", sinkhorn_tol=0.0),
    "residual, 4 x wasserstein": lambda c: ResidualQuantizer(
        lambda: _product(c, num_codes=256, dim=D, channel_last=True), 4),
    MASKED: lambda c: _product(c, num_codes=512, dim=D, channel_last=True),
    "wasserstein, pull=None, K=8192 (the latents-per-code pull)": lambda c: _product(
        c, num_codes=8192, dim=D, channel_last=True, pull=None),
    # K = 2,048 (~1,000 real latents a step: pull ~0.1): the data start fills within the 8 warm-up steps
    MASKED_PULL: lambda c: _product(c, num_codes=2048, dim=D, channel_last=True, pull=None),
    "wasserstein, split_unused (codes nobody's nearest split)": lambda c: _product(
        c, num_codes=512, dim=D, channel_last=True, split_unused=0.1),
}
#: the other quantizers: no update of their own to compile
OTHERS = {
    "vector, field VQ: k-means, EMA, dead-code expiry": lambda: VectorQuantizer(
        num_codes=512, dim=D, channel_last=True, ema=True, init="kmeans", dead_code_threshold=2),
    "vector, plain": lambda: VectorQuantizer(num_codes=512, dim=D, channel_last=True),
}
# every case as by default, then launched eagerly, then every Wasserstein case with its update compiled, all in one
# process and in this order: the compiled cases share dynamo's caches, which is how a filled cache once made the
# last ones sync (docs/lab/30-39.md#gpu-launch-bound)
PARAMS = ([(name, "graph") for name in (*UPDATED, *OTHERS)] + [(name, "eager") for name in UPDATED]
          + [(name, "compiled") for name in UPDATED])


def build(name: str, mode: str) -> nn.Module:
    return UPDATED[name](MODES[mode]) if name in UPDATED else OTHERS[name]()


@pytest.mark.parametrize("name,mode", PARAMS, ids=[f"{n} [{m} update]" for n, m in PARAMS])
def test_training_step_never_syncs_with_the_host(name, mode):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    enc, dec = nn.Linear(8, D).to(dev), nn.Linear(D, 8).to(dev)
    q = build(name, mode).to(dev).train()
    params = [p for m in (enc, dec, q) for p in m.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-3)

    def step():
        x = torch.randn(32, N, 8, device=dev)
        # a mask of random lengths (at least one row of padding only): the padding is weighted 0, not indexed out
        mask = torch.arange(N, device=dev) < torch.randint(0, N, (32, 1), device=dev) if name in MASKS else None
        out = q(enc(x), mask)
        loss = nn.functional.mse_loss(dec(out.quantized), x) + out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    # the one-off starts (data start over ceil(K / N) batches, k-means, the update's compilation or capture) may
    # read the host; a compilation that fails (and falls back to eager, with a warning) fails the test
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*torch.compile failed")
        for _ in range(8):
            step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.parametrize("name", ["wasserstein, shared pi, K=8192 (dead cells split)", "wasserstein, per-position pi",
                                  MASKED, MASKED_PULL, "residual, 4 x wasserstein"])
def test_the_replayed_update_moves_the_state_as_the_launched_one(name):
    """The CUDA graph replays the update's kernels on the quantizer's own buffers: trained on the same latents, a
    quantizer whose update is replayed and one whose update is launched operator by operator keep the same state
    (to the rounding of CUDA's atomic adds), through the data start, the capture, and a move of the state to the host
    and back (new addresses: captured anew)."""
    torch.manual_seed(0)
    dev = torch.device("cuda")
    built = {}
    for mode in ("graph", "eager"):
        torch.manual_seed(0)
        built[mode] = build(name, mode).to(dev).train()
    g = torch.Generator(device="cpu").manual_seed(1)
    agree = []
    for step in range(24):
        z = torch.randn(32, N, D, generator=g).to(dev) * (1 + step / 8)  # latents that grow: the codebook follows
        lengths = torch.randint(0, N, (32, 1), generator=g).to(dev)
        mask = torch.arange(N, device=dev) < lengths if name in MASKS else None
        if step == 12:
            built = {m: q.cpu().to(dev) for m, q in built.items()}
        outs = {}
        for m, q in built.items():
            torch.manual_seed(step)  # the data start draws its codes at random: the same draws for both
            outs[m] = q(z, mask)
        agree.append((outs["graph"].indices == outs["eager"].indices).float().mean().item())
    replayed = built["graph"].state_dict()
    for key, eager in built["eager"].state_dict().items():
        torch.testing.assert_close(replayed[key], eager, rtol=1e-4, atol=1e-5, msg=lambda m: f"{key}: {m}")
    assert min(agree) > 0.99, agree
    quantizers = [m for m in built["graph"].modules() if isinstance(m, WassersteinQuantizer)]
    assert all(captured_graphs(q) for q in quantizers), "the update was never replayed as a graph"


def captured_graphs(q: WassersteinQuantizer) -> int:
    """How many update graphs ``q`` holds (vqwae.fused's caches: its training step's, or its solver's)."""
    caches = (type(q)._step.graphs, type(q.solver).update_state.graphs)
    held = [c.by_object.get(o) for c, o in zip(caches, (q, q.solver))]
    return sum(e.graph is not None for h in held if h for e in h[1].values())


class _ReadsTheHost(nn.Module):
    """A state update that CUDA cannot capture: it reads a value on the host (``.item()``) before it writes."""

    compile_update, graph_update = False, True

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(()))

    @fused_update
    def add(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum().item() > float("-inf"):  # a host read: fails the capture before the write below is recorded
            self.total += x.mean()
        return self.total


def test_a_capture_that_fails_warns_once_and_runs_eagerly_from_then_on():
    """The fallback of ``vqwae.fused`` (``CaptureFailed``): the first call runs eagerly, the second tries to capture;
    when CUDA cannot capture an operator, the capture recorded nothing (the state is as it was), the call reruns
    eagerly with one warning, and every later call runs eagerly without a warning or a graph."""
    m = _ReadsTheHost().cuda()
    x = torch.ones(4, device="cuda")
    assert m.add(x).item() == 1  # eagerly, the first call
    with pytest.warns(UserWarning, match="CUDA graph capture failed"):
        assert m.add(x).item() == 2  # the failed capture added nothing; the eager rerun added once
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert m.add(x).item() == 3
    held = type(m).add.graphs.by_object.get(m)
    assert not held or all(e.graph is None for e in held[1].values())
    torch.cuda.synchronize()  # the device is usable after the failed capture


def test_the_trainers_steps_read_the_host_a_fixed_number_of_times_whatever_their_count(tmp_path):
    """The trainer's loop (forward, loss, backward, Adam, the logged sums, the non-finite check) reads the device only
    at its progress refresh and with the epoch's figures: 4 steps and 16 steps of one epoch make the same number of
    synchronisations (CUDA's sync debugger counts them as warnings), where a read per step would add 12."""
    from vqwae.training import TrainConfig, train

    def syncs(steps: int) -> int:
        cfg = TrainConfig.resolve(out=str(tmp_path / f"run{steps}"), dataset="digits", train_limit=512,
                                  eval_limit=32, batch_size=32, num_codes=32, device="cuda", epochs=1,
                                  max_steps=steps)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                train(cfg, progress=False)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught)

    syncs(4)  # the one-off starts (the data start, cuDNN's choices) and the CUDA graph's capture
    assert syncs(16) == syncs(4)
