"""``vqwae.compat.VectorQuantize`` speaks vector-quantize-pytorch 1.32's ``VectorQuantize`` (issue #83): the peer's
README tests and the behaviours its tests assert, written anew from what they assert (shapes, eval-time lookups,
masks, frozen codebooks, expiry), run through the import-line switch; what compat cannot honour is refused in one
line naming what to use. Where the peer is installed (``vqwae[bench]``), its constructor and forward are checked to
hold exactly the arguments compat declares, and both run the same training loop."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import vector_quantize_pytorch_loop
from vqwae.compat import ARGUMENTS, FORWARD_ARGUMENTS, LossBreakdown, VectorQuantize

BACKENDS = ["wasserstein", "vector"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_readme_call_returns_the_peers_tuple(backend):
    vq = VectorQuantize(dim=256, codebook_size=512, decay=0.8, commitment_weight=1.0, backend=backend)
    x = torch.randn(1, 1024, 256, requires_grad=True)  # an encoder's output
    quantized, indices, commit_loss = vq(x)
    assert quantized.shape == x.shape and indices.shape == (1, 1024) and indices.dtype == torch.long
    assert commit_loss.dim() == 0 and commit_loss.requires_grad
    assert vq.codebook.shape == (512, 256)


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_eval_the_output_is_the_lookup_of_the_indices(backend):
    vq = VectorQuantize(dim=256, codebook_size=512, decay=0.8, backend=backend)
    x = torch.randn(1, 1024, 256)
    vq(x)  # a training call: the codebook's start
    vq.eval()
    quantized, indices, _ = vq(x)
    assert torch.allclose(quantized, vq.get_output_from_indices(indices))
    assert torch.equal(vq.get_codes_from_indices(indices), vq.codebook[indices])


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_image_feature_map_comes_back_in_its_layout(backend):
    vq = VectorQuantize(dim=64, codebook_size=32, accept_image_fmap=True, backend=backend)
    fmap = torch.randn(2, 64, 8, 8)
    quantized, indices, _ = vq(fmap)
    assert quantized.shape == fmap.shape and indices.shape == (2, 8, 8)
    vq.eval()
    quantized, indices, _ = vq(fmap)
    assert torch.allclose(quantized, vq.get_output_from_indices(indices))
    video = VectorQuantize(dim=16, codebook_size=8, accept_3d_fmap=True, backend=backend)
    assert video(torch.randn(1, 16, 2, 4, 4))[1].shape == (1, 2, 4, 4)


def test_one_token_a_row_is_taken_and_returned_as_it_came():
    vq = VectorQuantize(dim=16, codebook_size=8)
    quantized, indices, _ = vq(torch.randn(5, 16))
    assert quantized.shape == (5, 16) and indices.shape == (5,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dead_code_expiry_as_the_peer_sets_it(backend):
    vq = VectorQuantize(dim=32, codebook_size=64, threshold_ema_dead_code=2, kmeans_init=True, backend=backend)
    for _ in range(5):
        quantized, indices, _ = vq(torch.randn(4, 128, 32))
    assert indices.unique().numel() > 32  # most codes in use on Gaussian latents


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_comes_back_as_zeros_with_index_minus_one_and_lens_is_the_same_mask(backend):
    torch.manual_seed(0)
    vq = VectorQuantize(dim=8, codebook_size=16, backend=backend)
    x = torch.randn(3, 10, 8)
    lens = torch.tensor([10, 4, 1])
    mask = torch.arange(10) < lens[:, None]
    vq.eval()
    by_mask, by_lens = vq(x, mask=mask), vq(x, lens=lens)
    for quantized, indices, _ in (by_mask, by_lens):
        assert torch.equal(indices[~mask], torch.full_like(indices[~mask], -1))
        assert torch.equal(quantized[~mask], torch.zeros_like(quantized[~mask]))
        assert (indices[mask] >= 0).all()
    assert torch.equal(by_mask[1], by_lens[1])
    assert torch.equal(vq(x, mask=mask.float())[1], by_mask[1])  # a float mask: nonzero is real
    assert torch.equal(vq.get_output_from_indices(by_mask[1]), by_mask[0])  # -1 looks up zeros
    keep_input = VectorQuantize(dim=8, codebook_size=16, return_zeros_for_masked_padding=False, backend=backend).eval()
    quantized, _, _ = keep_input(x, mask=mask)
    assert torch.equal(quantized[~mask], x[~mask])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_frozen_codebook_does_not_move_and_the_loss_still_reaches_the_latents(backend):
    for frozen_at in ("construction", "call"):
        vq = VectorQuantize(dim=8, codebook_size=16, backend=backend,
                            **({"freeze_codebook": True} if frozen_at == "construction" else {}))
        vq(torch.randn(4, 32, 8), freeze_codebook=False)  # one step that may move it (its start)
        before = vq.codebook.detach().clone()
        for _ in range(3):
            x = torch.randn(4, 32, 8, requires_grad=True)
            _, _, loss = vq(x, freeze_codebook=True if frozen_at == "call" else None)
            loss.backward()
            assert x.grad is not None and x.grad.abs().sum() > 0
        assert torch.equal(vq.codebook.detach(), before), frozen_at
        assert vq.quantizer.training  # the call put the training mode back
    vq(torch.randn(4, 32, 8), freeze_codebook=False)
    assert not torch.equal(vq.codebook.detach(), before)  # unfrozen, it moves


def test_the_loss_breakdown_has_the_peers_fields():
    quantized, indices, loss, parts = VectorQuantize(dim=8, codebook_size=16)(torch.randn(2, 8, 8),
                                                                             return_loss_breakdown=True)
    assert isinstance(parts, LossBreakdown) and parts._fields == ("commitment", "codebook_diversity",
                                                                  "orthogonal_reg", "inplace_optimize")
    assert torch.equal(parts.commitment, loss) and parts.orthogonal_reg == 0


@pytest.mark.parametrize("options,says", [
    (dict(layernorm_after_project_in=True), "plain nn.Linear"),
    (dict(heads=8, separate_codebook_per_head=True), "several heads"),
    (dict(stochastic_sample_codes=True, sample_codebook_temp=0.1), "StochasticQuantizer"),
    (dict(learnable_codebook=True, ema_update=False), "VectorQuantizer(ema=False)"),
    (dict(orthogonal_reg_weight=10.0), "orthogonal_reg_weight"),
])
def test_what_compat_cannot_honour_is_refused_in_one_line_naming_the_alternative(options, says):
    with pytest.raises(ValueError, match="cannot be honoured") as e:
        VectorQuantize(dim=256, codebook_size=256, **options)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_codebook_dim_and_cosine_search_on_the_sphere_in_the_lower_dimension_as_the_peer(backend):
    torch.manual_seed(0)
    vq = VectorQuantize(dim=32, codebook_size=64, codebook_dim=8, use_cosine_sim=True, backend=backend,
                        kmeans_init=backend == "vector")
    quantized, indices, loss = vq(torch.randn(4, 50, 32))
    assert quantized.shape == (4, 50, 32) and vq.codebook.shape == (64, 8)
    torch.testing.assert_close(vq.codebook.norm(dim=-1), torch.ones(64))
    vq.eval()
    x = torch.randn(4, 50, 32)
    quantized, indices, _ = vq(x)
    similarity = F.normalize(vq.quantizer.project_in(x), dim=-1) @ vq.codebook.t()  # the peer's cosine search
    assert torch.equal(indices, similarity.argmax(-1))
    assert vq.get_codes_from_indices(indices).shape == (4, 50, 8)  # the peer's: codes before project_out
    torch.testing.assert_close(vq.get_output_from_indices(indices), quantized)
    image = VectorQuantize(dim=32, codebook_size=16, codebook_dim=4, accept_image_fmap=True, backend=backend).eval()
    fmap = torch.randn(2, 32, 5, 5)
    q, idx, _ = image(fmap)
    assert q.shape == (2, 32, 5, 5) and idx.shape == (2, 5, 5)
    torch.testing.assert_close(image.get_output_from_indices(idx), q)


def test_an_unknown_argument_or_backend_is_refused_naming_the_valid_ones():
    with pytest.raises(TypeError, match="has no argument 'num_codes'.*codebook_dim"):
        VectorQuantize(dim=8, codebook_size=16, num_codes=16)
    with pytest.raises(ValueError, match="unknown backend 'simvq'"):
        VectorQuantize(dim=8, codebook_size=16, backend="simvq")
    vq = VectorQuantize(dim=8, codebook_size=16)
    with pytest.raises(ValueError, match=r"forward\(topk=2\) cannot be honoured"):
        vq(torch.randn(2, 4, 8), topk=2)
    with pytest.raises(ValueError, match="mask or lens, not both"):
        vq(torch.randn(2, 4, 8), mask=torch.ones(2, 4, dtype=torch.bool), lens=torch.tensor([4, 4]))


def test_the_peers_arguments_are_all_declared():
    """Every argument of vector-quantize-pytorch's constructor and forward is mapped, kept or refused by compat."""
    peer = pytest.importorskip("vector_quantize_pytorch", reason="the peer is the benchmark extra vqwae[bench]")
    init = list(inspect.signature(peer.VectorQuantize.__init__).parameters)[1:]
    forward = list(inspect.signature(peer.VectorQuantize.forward).parameters)[1:]
    assert init[:2] == ["dim", "codebook_size"] and set(init[2:]) == set(ARGUMENTS)
    assert forward[0] == "x" and set(forward[1:]) == set(FORWARD_ARGUMENTS)
    defaults = {name: p.default for name, p in inspect.signature(peer.VectorQuantize.__init__).parameters.items()}
    assert all(defaults[name] == default for name, (default, _) in ARGUMENTS.items()), \
        [name for name, (default, _) in ARGUMENTS.items() if defaults[name] != default]


def test_the_migration_page_lists_every_argument():
    page = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "migration.md").read_text()
    missing = [name for name in ["dim", "codebook_size", *ARGUMENTS, *FORWARD_ARGUMENTS] if f"`{name}`" not in page]
    assert not missing, missing


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_peers_loop_trains_with_the_import_line_changed(backend):
    first, last, indices = vector_quantize_pytorch_loop(VectorQuantize(dim=32, codebook_size=64, backend=backend), 60)
    assert last < 0.8 * first and indices.unique().numel() > 32


def test_without_kmeans_the_vector_backend_starts_where_the_peer_starts():
    """The peer draws its codebook with kaiming_uniform_ on a (1, K, D) table: U(-b, b), b = sqrt(6 / (K D))."""
    torch.manual_seed(0)
    vq = VectorQuantize(dim=32, codebook_size=256, backend="vector")
    bound = (6 / (256 * 32)) ** 0.5
    codes = vq.codebook.detach()
    assert float(codes.abs().max()) <= bound and float(codes.abs().max()) > 0.99 * bound
    assert abs(float(codes.std()) - bound / 3 ** 0.5) < 0.02 * bound  # a uniform's spread
    assert torch.equal(vq.quantizer.ema_embed_sum, codes)  # the EMA starts from the same codes (count 1 each)
    peer = pytest.importorskip("vector_quantize_pytorch", reason="the peer is the benchmark extra vqwae[bench]")
    theirs = peer.VectorQuantize(dim=32, codebook_size=256).codebook.detach()
    assert abs(float(theirs.abs().max()) - float(codes.abs().max())) < 0.01 * bound
