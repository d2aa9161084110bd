"""The quantizers as drop-in modules for any shape: sequences (B, N, D), 1-D / 2-D / 3-D feature maps, padding
masks, and the index round trip."""
from __future__ import annotations

import pytest
import torch

from tests.helpers import vector_quantize_pytorch_loop

from vqwae.quantizers import build_quantizer

KINDS = ("wasserstein", "vector", "stochastic")
SHAPES = {  # (channel_last, latent shape with D = 8)
    "audio frames (B, D, T)": (False, (4, 8, 16)),
    "image (B, D, H, W)": (False, (4, 8, 3, 4)),
    "video (B, D, T, H, W)": (False, (2, 8, 2, 3, 4)),
    "sequence (B, N, D)": (True, (4, 10, 8)),
    "image channel-last (B, H, W, D)": (True, (2, 3, 4, 8)),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_quantizer_takes_every_shape_and_indices_round_trip(kind, shape):
    channel_last, size = SHAPES[shape]
    q = build_quantizer(kind, num_codes=16, dim=8, channel_last=channel_last)
    z = torch.randn(*size, requires_grad=True)
    out = q.train()(z)
    out.loss.backward()
    assert out.quantized.shape == z.shape and z.grad is not None and torch.isfinite(z.grad).all()
    positions = size[1:-1] if channel_last else size[2:]
    assert out.indices.shape == (size[0], *positions) and out.indices.dtype == torch.long
    q.eval()
    with torch.no_grad():
        ev = q(z)
    assert torch.equal(q.indices_to_latents(ev.indices), ev.quantized)  # exact inverse, every layout


def test_a_channel_last_sequence_is_the_transposed_channel_first_one():
    torch.manual_seed(0)
    first = build_quantizer("wasserstein", num_codes=16, dim=8).train()
    torch.manual_seed(0)
    last = build_quantizer("wasserstein", num_codes=16, dim=8, channel_last=True).train()
    z = torch.randn(4, 8, 10)
    torch.manual_seed(1)  # the codebook's start is drawn from the first batch
    a = first(z)
    torch.manual_seed(1)
    b = last(z.transpose(1, 2))
    assert torch.equal(a.indices, b.indices) and torch.equal(a.quantized, b.quantized.transpose(1, 2))
    assert torch.equal(a.loss, b.loss)


def test_shared_pi_takes_any_length_and_per_position_pi_names_both_numbers():
    q = build_quantizer("wasserstein", num_codes=16, dim=8, channel_last=True).train()  # num_positions=None
    for n in (3, 17, 40):
        q(torch.randn(2, n, 8)).loss.backward()
    p = build_quantizer("wasserstein", num_codes=16, dim=8, num_positions=12, channel_last=True).train()
    with pytest.raises(ValueError, match=r"10 positions .* num_positions=12"):
        p(torch.randn(2, 10, 8))


@pytest.mark.parametrize("layout", ["bad shape", "not bool"])
def test_a_bad_mask_names_the_expected_shape(layout):
    q = build_quantizer("wasserstein", num_codes=16, dim=8, channel_last=True)
    mask = torch.ones(2, 9, dtype=torch.bool) if layout == "bad shape" else torch.ones(2, 10)
    with pytest.raises(ValueError, match=r"mask must be a bool tensor of shape \(2, 10\)"):
        q(torch.randn(2, 10, 8), mask)


def _padded(x: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N, D) -> (B, length, D) padded with junk, and the mask of the real tokens."""
    b, n, d = x.shape
    pad = torch.randn(b, length - n, d) * 5 + 3  # junk far from the data: it would move codes if it counted
    mask = torch.zeros(b, length, dtype=torch.bool)
    mask[:, :n] = True
    return torch.cat([x, pad], 1), mask


@pytest.mark.parametrize("kind, options", [
    ("wasserstein", {}),
    ("wasserstein", {"pull": None}),  # the latents-per-code pull counts the real latents (21 of 33 here: 0.16)
    ("wasserstein", {"split_unused": 0.5, "codebook_decay": 0.8}),
    ("wasserstein", {"quantize": "transport", "learn_pi": False, "pi_init": "peaked"}),
    ("vector", {}),
    ("vector", {"ema": True}),
])
def test_padding_under_a_mask_changes_nothing(kind, options):
    """A padded batch gives the loss, gradients, codebook (and its update) and perplexity of the same batch
    without the padding, up to float rounding (the mask weights the sums rather than indexing them, which
    would read the host); the padded positions are still quantized."""
    torch.manual_seed(0)
    x = torch.randn(3, 7, 8)
    xp, mask = _padded(x, 11)
    runs = []
    for inputs, m in ((x, None), (xp, mask)):
        torch.manual_seed(1)
        q = build_quantizer(kind, num_codes=16, dim=8, channel_last=True, **options).train()
        z = inputs.clone().requires_grad_(True)
        out = q(z, m) if m is not None else q(z)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in q.named_parameters() if p.grad is not None}
        runs.append((out, z.grad, grads, {k: v.clone() for k, v in q.state_dict().items()}))
    (a, ga, pa, sa), (b, gb, pb, sb) = runs
    close = dict(rtol=1e-5, atol=1e-7)
    assert torch.allclose(a.loss, b.loss, **close), (a.losses, b.losses)
    assert torch.allclose(ga, gb[:, :7], **close) and not gb[:, 7:].any()
    for name in pa:
        assert torch.allclose(pa[name], pb[name], **close), name
    for name in sa:
        assert torch.allclose(sa[name].float(), sb[name].float(), **close), name
    assert torch.equal(a.perplexity, b.perplexity)
    assert torch.equal(a.indices, b.indices[:, :7]) and b.indices.shape == (3, 11)


def test_sqvae_mask_leaves_the_padding_out_of_its_loss():
    """(In training SQ-VAE draws Gumbel noise per latent, padding included, so the draws differ from the unpadded
    batch's: the masked loss is compared in eval mode, where the quantizer is deterministic.)"""
    q = build_quantizer("stochastic", num_codes=16, dim=8, channel_last=True).eval()
    x = torch.randn(3, 7, 8)
    xp, mask = _padded(x, 11)
    a, b = q(x, compute_loss=True), q(xp, mask, compute_loss=True)
    assert torch.allclose(a.loss, b.loss) and torch.equal(a.perplexity, b.perplexity)


@pytest.mark.parametrize("latent_scale", ["data", "batch"])
def test_sqvae_padding_does_not_set_its_latent_scale(latent_scale):
    """The gain g = 1 / RMS that SQ-VAE quantizes g z with is measured on the real latents only."""
    torch.manual_seed(0)
    x = torch.randn(3, 7, 8)
    xp, mask = _padded(x, 11)
    gains = []
    for inputs, m in ((x, None), (xp, mask)):
        q = build_quantizer("stochastic", num_codes=16, dim=8, channel_last=True, latent_scale=latent_scale).train()
        q(inputs, m)
        gains.append(q.latent_gain.clone())
    assert torch.allclose(gains[0], gains[1], rtol=1e-6), gains
    assert torch.allclose(gains[0], 1 / x.pow(2).mean().sqrt(), rtol=1e-5)


def test_masks_need_a_shared_pi():
    q = build_quantizer("wasserstein", num_codes=16, dim=8, num_positions=4, channel_last=True).train()
    with pytest.raises(ValueError, match="shared pi"):
        q(torch.randn(2, 4, 8), torch.ones(2, 4, dtype=torch.bool))


# ---- residual quantization ----------------------------------------------------------------------------
def test_residual_levels_quantize_what_the_previous_levels_left():
    from vqwae.quantizers import ResidualQuantizer, WassersteinQuantizer

    torch.manual_seed(0)
    rq = ResidualQuantizer(lambda: WassersteinQuantizer(num_codes=16, dim=8, channel_last=True), num_levels=3)
    z = torch.randn(4, 10, 8, requires_grad=True)
    out = rq.train()(z)
    assert out.indices.shape == (4, 10, 3) and out.perplexity.shape == (3,) and out.levels_used == 3
    assert set(out.losses) == {f"level{l}/{t}" for l in (1, 2, 3) for t in ("ws", "kl")}
    assert torch.equal(out.loss, sum(out.losses.values()))
    out.loss.backward()
    assert z.grad is not None and z.grad.abs().sum() > 0
    rq.eval()
    with torch.no_grad():
        ev = rq(z)
        # level l's codes are its nearest codewords to the residual the levels before it left
        residual = z.detach()
        for level, q in enumerate(rq.levels):
            codes = q.indices_to_latents(ev.indices[..., level])
            assert torch.equal(q(residual).indices, ev.indices[..., level])
            residual = residual - codes
        assert torch.allclose(rq.indices_to_latents(ev.indices), ev.quantized, atol=1e-6)
        errors = [(z - rq(z, num_levels=n).quantized).pow(2).mean() for n in (1, 2, 3)]
    assert errors[0] > errors[1] > errors[2]  # every level removes part of the remaining error


def test_the_stacks_pull_scales_only_what_the_levels_losses_send_to_the_encoder():
    """pull weights the gradient of the levels' losses on the latents; each level's pi (and a gradient codebook)
    gets the same gradient as at pull 1, and the decoder's straight-through gradient is untouched."""
    from vqwae.quantizers import PaperWassersteinQuantizer, ResidualQuantizer

    grads = {}
    for pull in (1.0, 0.01):
        torch.manual_seed(0)
        rq = ResidualQuantizer(lambda: PaperWassersteinQuantizer(num_codes=16, dim=8, channel_last=True), 3,
                               pull=pull).train()
        z = torch.randn(4, 10, 8, requires_grad=True)
        out = rq(z)
        out.loss.backward()
        grads[pull] = (z.grad.clone(), [p.grad.clone() for p in rq.parameters()])
        z2 = z.detach().clone().requires_grad_(True)
        rq(z2).quantized.sum().backward()  # the decoder's path: the identity, whatever the pull
        assert torch.equal(z2.grad, torch.ones_like(z2))
    assert torch.allclose(grads[0.01][0], 0.01 * grads[1.0][0], rtol=1e-5, atol=1e-10)
    assert grads[1.0][0].abs().sum() > 0
    for a, b in zip(grads[1.0][1], grads[0.01][1]):
        assert torch.equal(a, b)


def test_the_stacks_default_pull_follows_its_levels_and_is_saved():
    from vqwae.quantizers import ResidualQuantizer, VectorQuantizer, WassersteinQuantizer, build_quantizer

    wae = ResidualQuantizer(lambda: WassersteinQuantizer(num_codes=16, dim=8), 2)
    vq = ResidualQuantizer(lambda: VectorQuantizer(num_codes=16, dim=8), 2)
    assert (wae.pull, vq.pull) == (0.01, 1.0)
    def build(kind, options):
        return build_quantizer(kind, **options)

    assert ResidualQuantizer.from_config_dict(wae.config_dict(), build).pull == 0.01
    old = {k: v for k, v in wae.config_dict().items() if k != "pull"}  # saved before pull existed: trained at 1
    assert ResidualQuantizer.from_config_dict(old, build).pull == 1.0
    with pytest.raises(ValueError, match="pull must be a number in"):
        ResidualQuantizer(lambda: VectorQuantizer(num_codes=16, dim=8), 2, pull=2)


def test_residual_dropout_uses_the_first_levels_and_marks_the_rest():
    from vqwae.quantizers import ResidualQuantizer, VectorQuantizer

    rq = ResidualQuantizer(lambda: VectorQuantizer(num_codes=16, dim=8), num_levels=4, dropout=True)
    z = torch.randn(2, 8, 5)
    out = rq.eval()(z, num_levels=2)
    assert (out.indices[..., 2:] == -1).all() and (out.indices[..., :2] >= 0).all()
    assert torch.isnan(out.perplexity[2:]).all()
    assert torch.allclose(rq.indices_to_latents(out.indices), out.quantized, atol=1e-6)
    rq.train()
    used = {rq(z).levels_used for _ in range(60)}
    assert used == {1, 2, 3, 4}  # SoundStream's quantizer dropout: 1..L levels, uniformly
    assert rq.eval()(z).levels_used == 4  # no dropout outside training
    with pytest.raises(ValueError, match="1..4"):
        rq(z, num_levels=5)


# ---- torch.compile, DDP, precision --------------------------------------------------------------------
def test_the_training_step_compiles_in_one_graph_and_matches_eager():
    """fullgraph=True fails on any graph break. (The first training call, which draws the codebook from the
    batch, reads one flag on the host; every later step is one graph.) aot_eager traces exactly what inductor
    compiles, without generating C++: the CPU speed-up of inductor is a benchmark (BENCHMARKS.md)."""
    import copy

    from vqwae.quantizers import WassersteinQuantizer

    torch.manual_seed(0)
    eager = WassersteinQuantizer(num_codes=32, dim=8, channel_last=True).train()
    eager(torch.randn(6, 10, 8))  # the codebook's start
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, fullgraph=True, backend="aot_eager")
    for _ in range(3):
        z = torch.randn(6, 10, 8)
        za, zb = z.clone().requires_grad_(True), z.clone().requires_grad_(True)
        a, b = eager(za), compiled(zb)
        a.loss.backward()
        b.loss.backward()
        assert torch.allclose(a.loss, b.loss, rtol=1e-6) and torch.equal(a.indices, b.indices)
        assert torch.allclose(za.grad, zb.grad, rtol=1e-5, atol=1e-7)
    for (name, x), (_, y) in zip(eager.state_dict().items(), twin.state_dict().items()):
        assert torch.allclose(x.float(), y.float(), rtol=1e-5, atol=1e-7), name  # solver state, codebook EMA


def test_bf16_autocast_keeps_quantization_in_fp32():
    from vqwae.quantizers import WassersteinQuantizer

    q = WassersteinQuantizer(num_codes=32, dim=8, channel_last=True).eval()
    z = torch.randn(4, 10, 8).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = q(z, compute_loss=True)
    reference = q(z.float(), compute_loss=True)
    assert torch.equal(out.indices, reference.indices) and out.quantized.dtype == torch.bfloat16
    assert out.loss.dtype == torch.float32 and torch.equal(out.loss, reference.loss)


def _ddp_sequence_worker(rank, world, port, path):
    import torch.distributed as dist

    from vqwae.quantizers import WassersteinQuantizer

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=8, channel_last=True).train()
    torch.manual_seed(10 + rank)  # each rank its own sequences, lengths and padding
    for _ in range(3):
        length = 6 + rank
        x = torch.randn(3, length + 2, 8)
        mask = torch.zeros(3, length + 2, dtype=torch.bool)
        mask[:, :length] = True
        q(x, mask).loss.backward()
    torch.save({k: v.clone() for k, v in q.state_dict().items()}, f"{path}/seq{rank}.pt")
    dist.destroy_process_group()


def _ddp_padding_only_worker(rank, world, port, path):
    import torch.distributed as dist

    from vqwae.quantizers import WassersteinQuantizer

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    # codebook_decay 0.5: the EMAs fill in 2 steps, so the split of dead cells is live from step 2 on
    q = WassersteinQuantizer(num_codes=16, dim=8, channel_last=True, codebook_decay=0.5).train()
    torch.manual_seed(10 + rank)
    for step in range(4):
        x = torch.randn(3, 8, 8)
        mask = torch.ones(3, 8, dtype=torch.bool)
        if step >= 1 and rank == 1:  # from step 1 on rank 1 holds only padding
            mask[:] = False
        if step == 3:  # and at step 3 so does rank 0: nothing anywhere, nothing may move
            mask[:] = False
            before = {k: v.clone() for k, v in q.state_dict().items()}
        out = q(x, mask)
        out.loss.backward()
        assert torch.isfinite(out.loss)
    assert all(torch.equal(v, before[k]) for k, v in q.state_dict().items())
    torch.save({k: v.clone() for k, v in q.state_dict().items()}, f"{path}/pad{rank}.pt")
    dist.destroy_process_group()


def _spawn_two_ranks(worker, tmp_path) -> None:
    """``worker(rank, world, port, path)`` on 2 CPU processes (gloo, a free local port)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)


def test_ddp_rank_with_only_padding_keeps_every_buffer_identical(tmp_path):
    _spawn_two_ranks(_ddp_padding_only_worker, tmp_path)
    a, b = (torch.load(tmp_path / f"pad{r}.pt") for r in range(2))
    for key in a:
        assert torch.equal(a[key], b[key]), key
        assert torch.isfinite(a[key].float()).all(), key


def test_ddp_on_padded_sequences_keeps_every_buffer_identical(tmp_path):
    _spawn_two_ranks(_ddp_sequence_worker, tmp_path)
    a, b = (torch.load(tmp_path / f"seq{r}.pt") for r in range(2))
    for key in a:
        assert torch.equal(a[key], b[key]), key


def _ddp_split_unused_worker(rank, world, port, path):
    import torch.distributed as dist

    from vqwae.quantizers import WassersteinQuantizer

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=8, channel_last=True, split_unused=0.5, codebook_decay=0.5).train()
    start = q.beta.detach().clone()
    torch.manual_seed(10 + rank)  # each rank its own latents and padding
    for step in range(8):
        x = torch.randn(3, 8, 8)
        x[:, :5] = 0.3  # a crowd of one repeated input: codes nobody's nearest, moved with their pi
        mask = torch.rand(3, 8) > 0.2
        if step == 0:  # rank 0 holds 24 real latents, rank 1 10 (< K): rank 0's batch draws the codebook for both
            mask = torch.arange(24).view(3, 8) < (24 if rank == 0 else 10)
        q(x, mask).loss.backward()
    assert not torch.equal(q.beta.detach(), start)  # pi moved with the codes
    torch.save({k: v.clone() for k, v in q.state_dict().items()}, f"{path}/unused{rank}.pt")
    dist.destroy_process_group()


def test_ddp_splitting_unused_codes_keeps_every_buffer_and_pi_identical(tmp_path):
    # also: the data start under masks that give the ranks different counts (it once deadlocked on the broadcast)
    _spawn_two_ranks(_ddp_split_unused_worker, tmp_path)
    a, b = (torch.load(tmp_path / f"unused{r}.pt") for r in range(2))
    for key in a:
        assert torch.equal(a[key], b[key]), key


# ---- a vector-quantize-pytorch loop, the constructor line changed (issue #66) ---------------------------------
def test_a_vector_quantize_pytorch_loop_trains_with_the_constructor_line_changed():
    import warnings

    from vqwae.quantizers import WassersteinQuantizer

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pi is in the optimizer: no warning
        first, last, indices = vector_quantize_pytorch_loop(WassersteinQuantizer(dim=32, num_codes=64,
                                                                                  channel_last=True))
    assert indices.shape == (32, 64) and indices.unique().numel() > 48  # most codes in use
    assert last < 0.8 * first
    try:
        from vector_quantize_pytorch import VectorQuantize
    except ImportError:
        return  # the peer is a benchmark extra (vqwae[bench])
    peer_first, peer_last, _ = vector_quantize_pytorch_loop(VectorQuantize(dim=32, codebook_size=64))
    assert peer_last < peer_first  # the same loop, unchanged, trains the peer too


def test_latents_that_fit_either_layout_are_refused_unless_the_layout_is_said():
    from vqwae.quantizers import WassersteinQuantizer

    z = torch.randn(2, 64, 64)  # 64 tokens of 64 dims, or 64 channels over 64 positions
    with pytest.raises(ValueError, match="say which holds the features"):
        WassersteinQuantizer(num_codes=16, dim=64)(z)
    for channel_last in (True, False):
        assert WassersteinQuantizer(num_codes=16, dim=64, channel_last=channel_last)(z).indices.shape == (2, 64)


def test_pi_outside_the_optimizer_draws_one_warning():
    from vqwae.quantizers import WassersteinQuantizer
    from vqwae.quantizers.wasserstein_base import PI_WATCH_CALLS

    q = WassersteinQuantizer(num_codes=16, dim=8, channel_last=True)
    enc = torch.nn.Linear(8, 8)
    opt = torch.optim.Adam(enc.parameters(), lr=1e-3)  # the encoder's only: pi never moves
    with pytest.warns(UserWarning, match="put the quantizer's parameters in your optimizer"):
        for _ in range(PI_WATCH_CALLS):
            opt.zero_grad()
            q(enc(torch.randn(4, 16, 8))).loss.backward()
            opt.step()


def test_pi_outside_the_optimizer_warns_in_a_loop_that_clears_gradients_before_the_forward():
    """``module.zero_grad()`` (set_to_none) before each forward leaves ``beta.grad`` None whenever the forward looks:
    the warning must still see that gradients reached pi; with pi in the optimizer it stays silent."""
    import warnings

    from vqwae.quantizers import WassersteinQuantizer
    from vqwae.quantizers.wasserstein_base import PI_WATCH_CALLS

    for pi_in_optimizer in (False, True):
        torch.manual_seed(0)
        model = torch.nn.ModuleDict(dict(enc=torch.nn.Linear(8, 8),
                                         vq=WassersteinQuantizer(num_codes=16, dim=8, channel_last=True)))
        opt = torch.optim.Adam(model.parameters() if pi_in_optimizer else model["enc"].parameters(), lr=1e-3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(PI_WATCH_CALLS + 10):
                model.zero_grad()  # set_to_none: beta.grad is None at every forward
                model["vq"](model["enc"](torch.randn(4, 16, 8))).loss.backward()
                opt.step()
        said = [w for w in caught if "put the quantizer's parameters in your optimizer" in str(w.message)]
        assert len(said) == (0 if pi_in_optimizer else 1), (pi_in_optimizer, [str(w.message) for w in caught])
