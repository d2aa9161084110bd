"""``vqwae.compat.ResidualVQ`` speaks vector-quantize-pytorch 1.32's ``ResidualVQ`` (issue #83): its tuple (summed
codes, indices with a level axis, one loss a level), its lookups, masks, frozen codebooks and quantizer dropout,
written anew from what the peer's README and tests assert; what it cannot honour is refused in one line. Where the
peer is installed, its arguments are checked to be exactly the ones compat declares."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from vqwae.compat import RESIDUAL_ARGUMENTS, RESIDUAL_FORWARD_ARGUMENTS, ResidualVQ

BACKENDS = ["wasserstein", "vector"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_readme_call_returns_the_peers_tuple(backend):
    rq = ResidualVQ(dim=32, num_quantizers=4, codebook_size=64, backend=backend)
    for _ in range(3):  # past the data start
        quantized, indices, losses = rq(torch.randn(2, 100, 32, requires_grad=True))
    assert quantized.shape == (2, 100, 32) and indices.shape == (2, 100, 4) and losses.shape == (4,)
    assert indices.dtype == torch.long and (indices >= 0).all() and (indices < 64).all()
    assert (losses > 0).all() and losses.requires_grad
    assert rq.codebooks.shape == (4, 64, 32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_eval_the_output_is_the_sum_of_the_levels_codes(backend):
    torch.manual_seed(0)
    rq = ResidualVQ(dim=16, num_quantizers=3, codebook_size=32, backend=backend)
    rq(torch.randn(4, 50, 16))
    rq.eval()
    x = torch.randn(2, 20, 16)
    quantized, indices, losses, codes = rq(x, return_all_codes=True)
    assert codes.shape == (3, 2, 20, 16) and torch.equal(codes, rq.get_codes_from_indices(indices))
    torch.testing.assert_close(rq.get_output_from_indices(indices), quantized)
    torch.testing.assert_close(codes.sum(0), quantized)
    assert torch.equal(losses, torch.zeros(3))
    # each level codes the residual the levels before it left: the error shrinks level by level
    errors = [float((x - codes[:n].sum(0)).pow(2).mean()) for n in range(1, 4)]
    assert errors[0] > errors[1] > errors[2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_comes_back_as_zeros_with_index_minus_one(backend):
    torch.manual_seed(0)
    rq = ResidualVQ(dim=8, num_quantizers=2, codebook_size=16, backend=backend)
    x = torch.randn(3, 10, 8)
    mask = torch.arange(10) < torch.tensor([10, 4, 1])[:, None]
    rq(x, mask=mask)
    rq.eval()
    quantized, indices, _ = rq(x, mask=mask)
    assert torch.equal(indices[~mask], torch.full_like(indices[~mask], -1)) and (indices[mask] >= 0).all()
    assert torch.equal(quantized[~mask], torch.zeros_like(quantized[~mask]))
    assert torch.equal(rq(x, mask=mask.float())[1], indices)  # a float mask: nonzero is real
    assert torch.equal(rq.get_output_from_indices(indices), quantized)  # -1 looks up zeros


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_frozen_codebook_does_not_move_and_the_loss_still_reaches_the_latents(backend):
    rq = ResidualVQ(dim=8, num_quantizers=2, codebook_size=16, backend=backend)
    rq(torch.randn(4, 32, 8))
    before = rq.codebooks.detach().clone()
    x = torch.randn(4, 32, 8, requires_grad=True)
    _, _, losses = rq(x, freeze_codebook=True)
    losses.sum().backward()
    assert torch.equal(rq.codebooks.detach(), before) and rq.training
    assert x.grad is not None and x.grad.abs().sum() > 0
    rq(torch.randn(4, 32, 8))
    assert not torch.equal(rq.codebooks.detach(), before)


def test_quantize_dropout_uses_fewer_levels_in_some_training_calls_and_all_in_eval():
    torch.manual_seed(0)
    rq = ResidualVQ(dim=8, num_quantizers=4, codebook_size=16, quantize_dropout=True)
    used = {int((rq(torch.randn(2, 16, 8))[1][0, 0] >= 0).sum()) for _ in range(30)}
    assert len(used) > 1 and used <= {1, 2, 3, 4}
    rq.eval()
    assert (rq(torch.randn(2, 16, 8))[1] >= 0).all()


def test_per_level_codebook_sizes_and_an_image_feature_map():
    rq = ResidualVQ(dim=8, num_quantizers=2, codebook_size=(32, 16), accept_image_fmap=True)
    quantized, indices, _ = rq(torch.randn(2, 8, 4, 4))
    assert quantized.shape == (2, 8, 4, 4) and indices.shape == (2, 4, 4, 2)
    assert [b.shape[0] for b in rq.codebooks] == [32, 16]
    with pytest.raises(ValueError, match="3 codebook sizes for 2 quantizers"):
        ResidualVQ(dim=8, num_quantizers=2, codebook_size=(8, 8, 8))


@pytest.mark.parametrize("options, says", [
    (dict(shared_codebook=True), "own codebook"),
    (dict(quantize_dropout_cutoff_index=1), "draws 1..L levels"),
    (dict(beam_size=4), "greedy"),
    (dict(use_cosine_sim=True), "wraps one quantizer, not the levels of a stack"),  # a level argument
])
def test_what_compat_cannot_honour_is_refused_in_one_line(options, says):
    with pytest.raises(ValueError, match=says):
        ResidualVQ(dim=8, num_quantizers=2, codebook_size=16, **options)
    with pytest.raises(TypeError, match="no argument 'codebook_sizes'"):
        ResidualVQ(dim=8, num_quantizers=2, codebook_size=16, codebook_sizes=4)
    with pytest.raises(ValueError, match="cannot be honoured"):
        ResidualVQ(dim=8, num_quantizers=2, codebook_size=16)(torch.randn(1, 4, 8), beam_size=2)


def test_the_peers_arguments_are_all_declared():
    peer = pytest.importorskip("vector_quantize_pytorch", reason="the peer is the benchmark extra vqwae[bench]")
    init = inspect.signature(peer.ResidualVQ.__init__).parameters
    named = [n for n, p in init.items() if n != "self" and p.kind != p.VAR_KEYWORD]
    assert set(named) == {"dim", "num_quantizers", "codebook_size", *RESIDUAL_ARGUMENTS}
    assert all(init[n].default == default for n, (default, _) in RESIDUAL_ARGUMENTS.items())
    forward = list(inspect.signature(peer.ResidualVQ.forward).parameters)[1:]
    assert forward[0] == "x" and set(forward[1:]) == set(RESIDUAL_FORWARD_ARGUMENTS)


def test_the_migration_page_lists_every_residual_argument():
    page = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "migration.md").read_text()
    missing = [n for n in ["num_quantizers", *RESIDUAL_ARGUMENTS, *RESIDUAL_FORWARD_ARGUMENTS] if f"`{n}`" not in page]
    assert not missing, missing


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("train", [True, False])
def test_the_peers_residual_tests_through_the_import_line(backend, train):
    """The peer's test_residual_vq (the options compat honours) and test_residual_vq3 (k-means start)."""
    torch.manual_seed(0)
    rq = ResidualVQ(dim=32, num_quantizers=8, codebook_size=128, backend=backend)
    x = torch.randn(1, 256, 32)
    rq.train(train)
    quantized, indices, _ = rq(x, freeze_codebook=train)
    torch.testing.assert_close(quantized, rq.get_output_from_indices(indices), atol=1e-5, rtol=0)
    rq3 = ResidualVQ(dim=256, codebook_size=256, num_quantizers=4, kmeans_init=True, kmeans_iters=10, backend=backend)
    quantized, indices, _ = rq3(torch.randn(1, 1024, 256))
    assert quantized.shape == (1, 1024, 256) and indices.shape == (1, 1024, 4)
