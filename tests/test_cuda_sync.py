"""On a GPU, a training step through each quantizer (forward, the loss, backward, Adam, and the quantizer's own
updates: the transport codebook, the potential's ascent, the split of dead cells, EMA and dead-code expiry) makes
no host synchronisation once its one-off starts (the data start, k-means) are done. CUDA's own sync debugger
raises on every implicit synchronisation (``.item()``, ``nonzero``, a boolean mask's indexing, a host copy), which
the CPU stand-in in ``test_solver_speed_properties.py`` cannot see. Skipped without CUDA (CI has none)."""
import pytest
import torch
from torch import nn

from vqwae.quantizers import ResidualQuantizer, VectorQuantizer, WassersteinQuantizer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the sync debugger)")

D, N = 16, 64  # latent width; latents per image (8 x 8 positions)
MASKED = "wasserstein, padded sequences under a mask"  # the only case whose step passes a mask

#: the Wasserstein quantizer's cases, each built for a compile_update setting (vqwae.fused: its own update compiled)
UPDATED = {
    "wasserstein, shared pi, K=512 (the default)": lambda c: WassersteinQuantizer(
        num_codes=512, dim=D, channel_last=True, compile_update=c),
    "wasserstein, shared pi, K=8192 (dead cells split)": lambda c: WassersteinQuantizer(
        num_codes=8192, dim=D, channel_last=True, compile_update=c),
    "wasserstein, per-position pi": lambda c: WassersteinQuantizer(
        num_codes=512, dim=D, channel_last=True, num_positions=N, compile_update=c),
    "wasserstein, paper: gradient codebook": lambda c: WassersteinQuantizer(
        num_codes=512, dim=D, channel_last=True, codebook_update="gradient", codebook_init="normal",
        compile_update=c),
    # sinkhorn's convergence check reads the marginal error on the host (its docstring says so): tol=0 turns it off
    "wasserstein, sinkhorn, no tolerance check": lambda c: WassersteinQuantizer(
        num_codes=512, dim=D, channel_last=True, solver="sinkhorn", sinkhorn_tol=0.0, compile_update=c),
    "residual, 4 x wasserstein": lambda c: ResidualQuantizer(
        lambda: WassersteinQuantizer(num_codes=256, dim=D, channel_last=True, compile_update=c), 4),
    MASKED: lambda c: WassersteinQuantizer(num_codes=512, dim=D, channel_last=True, compile_update=c),
}
#: the other quantizers: no update of their own to compile
OTHERS = {
    "vector, field VQ: k-means, EMA, dead-code expiry": lambda: VectorQuantizer(
        num_codes=512, dim=D, channel_last=True, ema=True, init="kmeans", dead_code_threshold=2),
    "vector, plain": lambda: VectorQuantizer(num_codes=512, dim=D, channel_last=True),
}
# every case eager, then every Wasserstein case with its update compiled, all in one process and in this order:
# the compiled cases share dynamo's caches, which is how a filled cache once made the last ones sync (BENCHMARKS 30)
PARAMS = [(name, False) for name in (*UPDATED, *OTHERS)] + [(name, True) for name in UPDATED]


def build(name: str, compile_update: bool) -> nn.Module:
    return UPDATED[name](compile_update) if name in UPDATED else OTHERS[name]()


@pytest.mark.parametrize("name,compile_update", PARAMS,
                         ids=[f"{n} [{'compiled' if c else 'eager'} update]" for n, c in PARAMS])
def test_training_step_never_syncs_with_the_host(name, compile_update):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    enc, dec = nn.Linear(8, D).to(dev), nn.Linear(D, 8).to(dev)
    q = build(name, compile_update).to(dev).train()
    params = [p for m in (enc, dec, q) for p in m.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-3)

    def step():
        x = torch.randn(32, N, 8, device=dev)
        # a mask of random lengths (at least one row of padding only): the padding is weighted 0, not indexed out
        mask = torch.arange(N, device=dev) < torch.randint(0, N, (32, 1), device=dev) if name == MASKED else None
        out = q(enc(x), mask)
        loss = nn.functional.mse_loss(dec(out.quantized), x) + out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    # the one-off starts (data start over ceil(K / N) batches, k-means, the update's compilation) may read the host
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
