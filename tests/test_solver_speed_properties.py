"""Properties of the fast default solver ("semidiscrete"): it converges to the exact OT, its warm start
helps, chunking changes nothing, it never synchronises with the host, and the data-dependent codebook
initialisation behaves."""
import numpy as np
import ot
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vqwae.ot import nearest_code, squared_distances
from vqwae.ot.cost import MIN_BLOCK, min_rows
from vqwae.ot.semidiscrete import (SemiDiscreteSolver, ascend_potential, assign, fit_potential, semi_dual_value,
                                   sparse_step)
from vqwae.quantizers import PaperWassersteinQuantizer, WassersteinQuantizer

from tests.helpers import NoHostSync


def problem(n=64, g=2, k=16, d=3, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, g, d, generator=gen, dtype=dtype)
    c = torch.randn(k, d, generator=gen, dtype=dtype)
    pi = torch.softmax(0.5 * torch.randn(g, k, generator=gen, dtype=dtype), -1)
    return x, c, pi


def exact_values(x, c, pi):
    n = x.shape[0]
    return np.array([
        ot.emd2(np.full(n, 1 / n), (pi[m] / pi[m].sum()).numpy(), squared_distances(x[:, m], c).numpy(),
                numItermax=10**7)
        for m in range(x.shape[1])
    ])


def test_assign_matches_nearest_search_and_chunking_changes_nothing():
    x, c, _ = problem(n=40, g=3, k=11, d=5, dtype=torch.float32)
    pot = torch.randn(3, 11)
    near, a, err = assign(x, c, pot)
    assert torch.equal(near.reshape(-1), nearest_code(x.reshape(-1, 5), c))
    ref = (squared_distances(x, c) - pot).argmin(-1)
    assert torch.equal(a, ref)
    assert torch.allclose(err, squared_distances(x, c).min(-1).values.mean(), rtol=1e-5)
    for chunk in (1, 33, 11 * 3 * 7):  # below one batch row (still one row per chunk), odd sizes
        near_c, a_c, err_c = assign(x, c, pot, chunk_entries=chunk)
        assert torch.equal(near_c, near) and torch.equal(a_c, a)
        assert torch.allclose(err_c, err, rtol=1e-5)


@pytest.mark.parametrize("k", [MIN_BLOCK * 4, MIN_BLOCK * 16 + 0, MIN_BLOCK * 5 + 3, 100])
def test_min_rows_is_torch_min_exactly_ties_included(k):
    # the CPU's blockwise reduction (K a multiple of the block) and the fallback give torch's values and first indices
    gen = torch.Generator().manual_seed(k)
    d = torch.randint(0, 6, (7, 3, k), generator=gen).float()  # few distinct values: many ties, across blocks
    d[0, 0] = 0.0  # a row of ties only: index 0
    d[1, 1, -1] = -1.0  # the minimum in the last block
    d[2, 2, [5, k - 2]] = -3.0  # tied minima in the first and the last block: the first
    vals, idx = min_rows(d)
    ref_vals, ref_idx = d.min(-1)
    assert torch.equal(vals, ref_vals) and torch.equal(idx, ref_idx)
    assert idx[0, 0] == 0 and idx[1, 1] == k - 1 and idx[2, 2] == 5
    wide = torch.randn(300, k, generator=gen)  # continuous values
    assert torch.equal(min_rows(wide)[1], wide.argmin(-1))
    assert torch.equal(min_rows(wide[:, 1:])[1], wide[:, 1:].argmin(-1))  # not contiguous: the plain reduction


def test_assign_at_a_blocked_codebook_matches_the_plain_search():
    # K = 512 takes min_rows' blockwise path on a CPU, in one chunk and in several
    x, c, _ = problem(n=50, g=2, k=512, d=8, dtype=torch.float32)
    pot = 0.1 * torch.randn(2, 512)
    dist = squared_distances(x, c)
    for chunk in (1 << 24, 3 * 2 * 512):
        near, a, err = assign(x, c, pot, chunk_entries=chunk)
        assert torch.equal(near, dist.argmin(-1)) and torch.equal(a, (dist - pot).argmin(-1))
        assert torch.allclose(err, dist.min(-1).values.mean(), rtol=1e-4)
        assert torch.equal(nearest_code(x.reshape(-1, 8), c, chunk_entries=chunk), dist.reshape(-1, 512).argmin(-1))


def test_every_potential_gives_a_lower_bound_and_ascent_reaches_the_exact_value():
    x, c, pi = problem()
    exact = exact_values(x, c, pi)
    gaps, marg = [], []
    pot = None
    for steps in (0, 10, 100, 1000):
        pot = fit_potential(x, c, pi, steps=steps, lr=0.5) if steps else torch.zeros(2, 16, dtype=x.dtype)
        _, a, _ = assign(x, c, pot)
        per_group = [float(semi_dual_value(x[:, m : m + 1], c, a[:, m : m + 1], pot[m : m + 1], pi[m : m + 1].log()))
                     for m in range(2)]
        assert all(v <= e + 1e-9 for v, e in zip(per_group, exact)), (per_group, exact)  # weak duality
        gaps.append(float(np.max(exact - per_group)))
        mass = torch.stack([torch.bincount(a[:, m], minlength=16) for m in range(2)]).double() / x.shape[0]
        marg.append(float((mass - pi).abs().sum(-1).max()))
    assert all(a > b for a, b in zip(gaps, gaps[1:])), gaps
    assert gaps[-1] < 1e-3 * exact.mean(), (gaps, exact)
    assert marg[-1] < marg[0]


def test_at_the_optimum_the_assignment_is_the_exact_transport_map_and_gradients_agree():
    # N = K latents against uniform code weights: the exact optimal plan is a permutation, which the
    # converged semi-discrete assignment must reproduce, so the quantizer's gradients equal the exact ones.
    torch.manual_seed(0)
    n = k = 12
    kw = dict(num_codes=k, dim=3, num_positions=2, kl_weight=0.0, ws_weight=1.0, channel_last=True)
    fast = PaperWassersteinQuantizer(solver="semidiscrete", **kw).double()
    exact = PaperWassersteinQuantizer(solver="exact", **kw).double()
    exact.load_state_dict(fast.state_dict(), strict=False)  # the same codebook and pi (solver states differ)
    flat = torch.randn(n, 2, 3, dtype=torch.float64)
    with torch.no_grad():
        fast.solver.potential.copy_(fit_potential(flat, fast.embedding, fast.pi.double(), steps=1000, lr=0.5))
        fast.solver.scale.fill_(1.0)  # g = scale * potential
    fast.eval(), exact.eval()  # no ascent step
    grads = []
    for q in (fast, exact):
        z = flat.clone().requires_grad_(True)
        q.zero_grad()
        w = q(z, compute_loss=True).losses["ws"]
        w.backward()
        grads.append((float(w.detach()), z.grad, q.embedding.grad.clone()))
    (wf, zf, cf), (we, ze, ce) = grads
    assert abs(wf - we) < 1e-3 * abs(we)
    assert torch.allclose(zf, ze, atol=1e-8) and torch.allclose(cf, ce, atol=1e-8)


def test_warm_start_reduces_the_error_on_the_next_problem():
    x, c, pi = problem(n=256, k=32, seed=3)
    pot_prev = fit_potential(x, c, pi, steps=2000, lr=0.05)
    x2 = x + 0.05 * torch.randn_like(x)  # the next step: slightly moved latents
    exact = exact_values(x2, c, pi).sum()

    def gap(pot):
        _, a, _ = assign(x2, c, pot)
        return exact - float(semi_dual_value(x2, c, a, pot, pi.log()))

    cold = fit_potential(x2, c, pi, steps=20, lr=0.05)
    warm = fit_potential(x2, c, pi, steps=20, lr=0.05, potential=pot_prev.clone())
    assert 0 <= gap(warm) < 0.5 * gap(cold), (gap(warm), gap(cold))


def test_ascent_preserves_the_mean_of_the_potential_and_uses_the_assignment_mass():
    pot = torch.zeros(2, 4)
    a = torch.tensor([[0, 1], [0, 1], [0, 3], [2, 3]])  # (N=4, G=2)
    pi = torch.full((2, 4), 0.25)
    mass = ascend_potential(pot, a, pi, step=0.1)
    assert torch.allclose(mass, torch.tensor([[0.75, 0, 0.25, 0], [0, 0.5, 0, 0.5]]))
    assert torch.allclose(pot.sum(-1), torch.zeros(2))
    assert pot[0, 0] < 0 < pot[0, 1]  # over-used codes get cheaper for nobody, under-used ones attract


def _potential_step_noise(solver, latents: int, seed: int = 0) -> float:
    """The spread over codes of one training step's move of the potential (``update_state``, the training step's
    public entry), for latents assigned exactly as pi weighs the codes (their values only set the cost scale)."""
    k = solver.num_codes
    log_pi = torch.full((1, k), 1 / k).log()
    a = torch.randint(0, k, (latents, 1), generator=torch.Generator().manual_seed(seed))
    before = solver.potential.clone()
    solver.update_state(torch.zeros(latents, 1, 1), a, None, torch.zeros(()), log_pi)
    return float((solver.potential - before).std())


def test_a_shared_pis_potential_step_holds_its_noise_at_few_latents_a_code():
    # docs/lab/48-.md#large-k-potential-step: one code's count in a batch is ~r = n / K latents, so the full step's
    # noise on g grows as 1 / sqrt(r); below r = 1/8 the step shrinks as sqrt(8 r) and the noise stays at its level
    assert sparse_step(2048, 512) == sparse_step(2048, 16384) == 1.0
    assert sparse_step(2048, 65536) == pytest.approx(0.5)
    assert float(sparse_step(torch.tensor(2048.0), 65536)) == pytest.approx(0.5)
    dense = _potential_step_noise(SemiDiscreteSolver(1, 512, shared=True), 64)  # r = 1/8
    sparse = _potential_step_noise(SemiDiscreteSolver(1, 4096, shared=True), 64)  # r = 1/64
    assert sparse == pytest.approx(dense, rel=0.15), (dense, sparse)  # the full step: sqrt(8) = 2.8x
    # one pi per position keeps its step (0.003) at any r: its positions pool their gradients instead
    per_position = SemiDiscreteSolver(1, 4096, shared=False)
    assert _potential_step_noise(per_position, 64) == pytest.approx(0.003 / 0.01 * dense * 8 ** 0.5, rel=0.15)


class _NoDataDependentShapes(TorchDispatchMode):
    """Make every operator whose output size depends on tensor values raise: a boolean mask's indexing (``x[keep]``,
    ``x[keep] = y``), ``nonzero``, ``masked_select``, ``unique``, and any scalar read (``item``). On CUDA each of them
    waits for the device to tell the host a size; on the CPU they run without a wait, so ``NoHostSync`` cannot see
    them, but this mode sees every operator the step dispatches."""

    forbidden = {"aten::nonzero", "aten::masked_select", "aten::_local_scalar_dense", "aten::_unique2",
                 "aten::unique_dim", "aten::unique_consecutive", "aten::bincount"}
    indexing = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}  # (x, indices, ...)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        indices = args[1] if name in self.indexing else ()
        if name in self.forbidden or any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
            raise AssertionError(f"{name} has a data-dependent size: a host synchronisation on CUDA")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("pull", [1.0, None])
def test_a_masked_training_step_has_no_data_dependent_size(pull, monkeypatch):
    """Padding under a mask is weighted 0 in the semidiscrete solver, not removed: the step (forward, loss,
    backward) keeps every size known on the host, a batch of padding only included; pull=None counts the real
    latents on the device."""
    monkeypatch.setattr(WassersteinQuantizer, "check_finite", staticmethod(lambda z: None))  # a CPU-only read
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=8, channel_last=True, pull=pull).train()
    q(torch.randn(4, 10, 8))  # the data start (reads the host once)
    for mask in (torch.rand(4, 10) > 0.3, torch.zeros(4, 10, dtype=torch.bool)):
        z = torch.randn(4, 10, 8, requires_grad=True)
        with _NoDataDependentShapes():
            out = q(z, mask)
            out.loss.backward()
        assert z.grad is not None and torch.isfinite(z.grad).all()


def test_the_data_dependent_size_check_sees_a_masks_indexing():
    x, keep = torch.randn(5, 3), torch.tensor([True, False, True, True, False])
    with pytest.raises(AssertionError, match="data-dependent"), _NoDataDependentShapes():
        x[keep]
    with pytest.raises(AssertionError, match="data-dependent"), _NoDataDependentShapes():
        x[keep] = 0.0


SEMIDISCRETE = {"per position": lambda: WassersteinQuantizer(num_codes=16, dim=8, num_positions=4, channel_last=True),
                "shared pi": lambda: WassersteinQuantizer(num_codes=16, dim=8, channel_last=True),
                "paper-fast": lambda: PaperWassersteinQuantizer(num_codes=16, dim=8, num_positions=4,
                                                                channel_last=True)}


@pytest.mark.parametrize("name", list(SEMIDISCRETE))
def test_semidiscrete_training_step_never_syncs_with_the_host(name, monkeypatch):
    """After the data start, a training step (the search, the value, the potential's ascent, the transport codebook
    or the paper's gradient codebook) and its backward never read the device from the host."""
    q = SEMIDISCRETE[name]().train()
    monkeypatch.setattr(type(q), "check_finite", staticmethod(lambda z: None))  # a CPU-only read
    q(torch.randn(6, 4, 8))  # the data start (reads the host once)
    flat = torch.randn(6, 4, 8, requires_grad=True)
    before, potential = q.embedding.detach().clone(), q.solver.potential.clone()
    with NoHostSync():
        q(flat).loss.backward()
    assert flat.grad is not None and q.beta.grad is not None
    assert not torch.equal(q.solver.potential, potential)  # the ascent step happened
    if isinstance(q, PaperWassersteinQuantizer):
        assert q.embedding.grad is not None
    else:
        assert q.embedding.grad is None and not torch.equal(q.embedding.detach(), before)


def test_forward_shares_one_distance_computation(monkeypatch):
    import vqwae.quantizers.base as base

    def forbidden(*a, **k):
        raise AssertionError("the semidiscrete forward must not run a second nearest-code search")

    q = WassersteinQuantizer(num_codes=16, dim=8, num_positions=4).train()
    monkeypatch.setattr(base, "nearest_code", forbidden)
    z = torch.randn(5, 8, 2, 2)
    out = q(z)
    ref = nearest_code(q.flatten(z).reshape(-1, 8), q.embedding.detach())
    assert torch.equal(out.indices.reshape(-1), ref)
    assert set(out.losses) == {"ws", "kl"}


def test_training_balances_code_use_on_a_fixed_distribution():
    # The quantizer's own per-step ascent (one step per call, batch 32, codes held fixed off to one side of
    # the latents) learns a potential under which the power assignment gives the codes their shares pi_k:
    # the OT constraint that spreads the latents over the codebook.
    torch.manual_seed(0)
    q = PaperWassersteinQuantizer(num_codes=16, dim=2, num_positions=1, learn_pi=False,
                                  codebook_init="normal").train()  # no optimiser: the codes stay
    with torch.no_grad():
        q.embedding.copy_(torch.randn(16, 2) * 0.5 + 2.0)
    x = torch.randn(20000, 1, 2)

    def marginal_error():
        _, a, _ = assign(x, q.embedding.detach(), q.solver.code_potential())
        return float((torch.bincount(a[:, 0], minlength=16).float() / len(x) - 1 / 16).abs().sum())

    before = marginal_error()  # g = 0: nearest codes
    for _ in range(3000):
        q(torch.randn(32, 2, 1, 1))
    after = marginal_error()
    assert after < 0.25 and after < before / 3, (before, after)  # measured: 1.71 -> 0.15


def test_data_codebook_init_draws_codes_from_the_first_training_batch_once():
    torch.manual_seed(0)
    kw = dict(num_codes=8, dim=4, num_positions=4, codebook_init="data")  # the paper's codebook: no optimiser, it stays
    q = PaperWassersteinQuantizer(**kw)
    z = torch.randn(3, 4, 2, 2) * 5 + 10  # 12 latents, far from the N(0, 1) init
    q.eval()
    q(z)  # evaluation never initialises
    assert not bool(q.codebook_initialized)
    q.train()
    q(z)
    flat = q.flatten(z).reshape(-1, 4)
    assert bool(q.codebook_initialized)
    # every codeword is one of the batch's latents
    assert torch.cdist(q.embedding.detach(), flat).min(-1).values.max() < 1e-5
    before = q.embedding.detach().clone()
    q(torch.randn(3, 4, 2, 2))
    assert torch.equal(q.embedding.detach(), before)  # not drawn again
    # the flag travels with the state dict: a restored quantizer does not re-draw
    r = PaperWassersteinQuantizer(**kw)
    r.load_state_dict(q.state_dict())
    r.train()(torch.randn(3, 4, 2, 2))
    assert torch.equal(r.embedding.detach(), before)
    # a checkpoint saved before codes_drawn existed loads as fully drawn
    old = {k: v for k, v in q.state_dict().items() if k != "codes_drawn"}
    r = PaperWassersteinQuantizer(**kw)
    r.load_state_dict(old)
    assert int(r.codes_drawn) == 8


def test_data_codebook_init_with_fewer_latents_than_codes_draws_from_the_next_batches():
    """K > N: the first batch fills the codebook with its N latents and noisy copies; each next training batch
    replaces N copies with its own latents, so after ceil(K / N) batches every code is a distinct latent."""
    torch.manual_seed(0)
    kw = dict(num_codes=32, dim=4, num_positions=None, codebook_init="data")  # no optimiser: the codes stay
    q = PaperWassersteinQuantizer(**kw).train()
    batches = [torch.randn(3, 4, 2, 2) * 5 + 10 * i for i in range(3)]  # 12 latents each, apart from each other
    flats = [q.flatten(z).reshape(-1, 4) for z in batches]

    def from_batch(i):  # which codes are (up to float error) latents of batch i
        exact = torch.cdist(q.embedding.detach(), flats[i], compute_mode="donot_use_mm_for_euclid_dist")
        return exact.min(-1).values < 1e-4

    q(batches[0])
    assert torch.unique(q.embedding.detach(), dim=0).shape[0] == 32  # copies are noisy: all distinct
    assert from_batch(0)[:12].all() and int(q.codes_drawn) == 12 and not bool(q.codebook_initialized)
    r = PaperWassersteinQuantizer(**kw)
    r.load_state_dict(q.state_dict())  # a run resumed mid-draw goes on drawing where it stopped
    for m in (q, r.train()):
        torch.manual_seed(1)  # the same draw for both
        m(batches[1])
    assert torch.equal(q.embedding, r.embedding)
    assert from_batch(1)[12:24].all() and int(q.codes_drawn) == 24
    q(batches[2])
    assert from_batch(2)[24:].all() and bool(q.codebook_initialized)  # 8 of its 12 latents: K reached
    assert (from_batch(0)[:12].sum(), from_batch(1)[12:24].sum()) == (12, 12)  # earlier draws kept
    before = q.embedding.detach().clone()
    q.eval()(batches[0] * 0)
    assert torch.equal(q.embedding, before)


DDP_SOLVERS = ("semidiscrete", "sinkhorn", "dual")


def _ddp_worker(rank, world, port, path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    for solver in DDP_SOLVERS:
        torch.manual_seed(0)  # identical quantizers
        if solver == "semidiscrete":  # the transport codebook's EMAs are all-reduced
            q = WassersteinQuantizer(num_codes=16, dim=4, num_positions=4).train()
        else:
            q = PaperWassersteinQuantizer(num_codes=16, dim=4, num_positions=4, solver=solver).train()
        torch.manual_seed(100 + rank)  # different batches per rank
        for _ in range(3):
            q(torch.randn(5, 4, 2, 2)).loss.backward()
        torch.save({k: v.clone() for k, v in q.state_dict().items()}, f"{path}/{solver}-rank{rank}.pt")
    # the field's VQ: rank 0's k-means start and expiry draws are broadcast, the EMA statistics all-reduced
    from vqwae.quantizers import VectorQuantizer

    torch.manual_seed(rank)  # different codebooks before the k-means start: it must make them equal
    q = VectorQuantizer(num_codes=16, dim=4, ema=True, init="kmeans", dead_code_threshold=2).train()
    torch.manual_seed(100 + rank)
    for step in range(8):
        mask = torch.ones(5, 2, 2, dtype=torch.bool)
        if step >= 4 and rank == 1:  # then rank 1 holds only padding: rank 0's draws still apply on both
            mask[:] = False
        q(torch.randn(5, 4, 2, 2), mask)
    torch.save({k: v.clone() for k, v in q.state_dict().items()}, f"{path}/kmeans-rank{rank}.pt")
    dist.destroy_process_group()


def test_ddp_ranks_keep_every_buffer_identical(tmp_path):
    """Each rank sees its own batch, yet every solver's state (potentials, cost scale, the dual's network and
    its Adam moments) and the codebook stay identical across ranks."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    for solver in DDP_SOLVERS:
        a, b = (torch.load(tmp_path / f"{solver}-rank{r}.pt") for r in range(2))
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), (solver, key)
        state = [k for k in a if k.startswith("solver.")]
        assert state and any(a[k].float().abs().sum() > 0 for k in state), solver
    a, b = (torch.load(tmp_path / f"kmeans-rank{r}.pt") for r in range(2))
    for key in a:
        assert torch.equal(a[key], b[key]), ("field's VQ", key)


def test_the_fields_vq_never_syncs_with_the_host_after_its_kmeans_start(monkeypatch):
    from vqwae.quantizers import VectorQuantizer

    # the input's finiteness check reads the host on the CPU only (an async device assert elsewhere)
    monkeypatch.setattr(VectorQuantizer, "check_finite", staticmethod(lambda z: None))
    torch.manual_seed(0)
    q = VectorQuantizer(num_codes=16, dim=8, ema=True, init="kmeans", dead_code_threshold=2).train()
    q(torch.randn(6, 8, 4, 4))  # the k-means start (reads the host once)
    with NoHostSync():
        for mask in (None, torch.rand(6, 4, 4) > 0.3):
            q(torch.randn(6, 4, 4, 8).movedim(-1, 1), mask)


def test_splitting_a_dead_cell_never_syncs_with_the_host(monkeypatch):
    monkeypatch.setattr(WassersteinQuantizer, "check_finite", staticmethod(lambda z: None))  # a CPU-only read
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=8, channel_last=True, codebook_decay=0.5).train()
    data = torch.randn(512, 8)
    codes = torch.randn(16, 8)
    codes[15] = 100.0  # stranded: the transport never reaches it
    q.set_codebook(codes)
    for _ in range(1):  # a code is judged a horizon after its start (2 updates at decay 0.5): the next one splits
        q(data[torch.randint(0, 512, (64,))].view(64, 1, 8))
    assert q.embedding[15].abs().min() == 100.0
    flat = data[:64].view(64, 1, 8).requires_grad_()
    with NoHostSync():
        q(flat).loss.backward()
    assert q.embedding[15].abs().max() < 10  # split into an overloaded cell


def test_splitting_an_unused_code_never_syncs_with_the_host(monkeypatch):
    # the input's finiteness check reads the host on the CPU only (an async device assert elsewhere)
    monkeypatch.setattr(WassersteinQuantizer, "check_finite", staticmethod(lambda z: None))
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=8, channel_last=True, split_unused=0.5, codebook_decay=0.5).train()
    crowd = torch.randn(8, 12, 8)
    crowd[:, :8] = 0.3  # one input repeated: the codes the transport gives it are nobody's nearest but one
    for _ in range(4):
        q(crowd).loss.backward()
    before = q.transport.nearest_mass.clone()
    for mask in (None, torch.rand(8, 12) > 0.3):
        with NoHostSync():
            q(crowd.clone().requires_grad_(), mask).loss.backward()
    assert not torch.equal(q.transport.nearest_mass, before)
