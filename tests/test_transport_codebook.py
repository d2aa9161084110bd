"""codebook_update="transport": the codebook minimises the WS term exactly for the step's plan (an EMA of
barycentres of the transported latents) instead of taking optimiser steps on it."""
import warnings

import ot
import pytest
import torch

from vqwae.ot.semidiscrete import assign
from vqwae.quantizers import WassersteinQuantizer


def test_exact_plan_update_moves_each_code_to_the_barycentre_of_its_transported_latents():
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=6, dim=3, num_positions=1, solver="exact", codebook_update="transport",
                             codebook_init="normal", codebook_decay=0.0).train()
    z = torch.randn(10, 3, 1, 1) * 2 + 1
    before = q.embedding.detach().clone().double()
    q(z)
    x = z.reshape(10, 3).double()
    plan = torch.from_numpy(ot.emd(torch.full((10,), 0.1).double().numpy(), q.pi[0].double().numpy(),
                                   torch.cdist(x, before).pow(2).numpy()))
    expected = (plan.t() @ x) / plan.sum(0, keepdim=True).t()
    torch.testing.assert_close(q.embedding.detach().double(), expected, atol=1e-5, rtol=1e-5)


def test_semidiscrete_update_uses_the_power_assignment_not_the_nearest_code():
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=8, dim=2, num_positions=1, codebook_update="transport",
                             codebook_init="normal", codebook_decay=0.0).train()
    with torch.no_grad():  # a potential that makes the power cells differ from the nearest-code cells
        q.solver.scale.fill_(1.0)
        q.solver.potential.copy_(torch.linspace(-2, 2, 8)[None])
    z = torch.randn(64, 2, 1, 1)
    x = z.reshape(64, 1, 2)
    nearest, assigned, _ = assign(x, q.embedding.detach(), q.solver.code_potential())
    assert not torch.equal(nearest, assigned)
    before = q.embedding.detach().clone()
    q(z)
    for k in range(8):
        mine = assigned[:, 0] == k
        want = x[mine, 0].mean(0) if mine.any() else before[k]  # a code with no latent keeps its place
        torch.testing.assert_close(q.embedding.detach()[k], want)


def test_ema_averages_the_plans_of_successive_steps():
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=4, dim=2, num_positions=1, solver="exact", codebook_update="transport",
                             codebook_init="normal", codebook_decay=0.5).train()
    with torch.no_grad():
        q.embedding.copy_(torch.tensor([[0.0, 0], [1, 0], [0, 1], [1, 1]]))
    a = torch.tensor([[0.0, 0], [2, 0], [0, 2], [2, 2]])  # each code gets one latent (uniform pi, 4 latents)
    q(a.view(4, 2, 1, 1))
    torch.testing.assert_close(q.embedding.detach(), a)
    q(torch.zeros(4, 2, 1, 1) + 4)  # all latents at (4, 4): each code gets one of them
    # (0.5 * 0.5 * a + 0.5 * 4) / (0.5 * 0.5 + 0.5) with the same mass per step
    torch.testing.assert_close(q.embedding.detach(), (0.25 * a + 0.5 * 4) / 0.75)


def test_the_optimiser_never_sees_the_codebook_and_eval_leaves_it_alone():
    q = WassersteinQuantizer(num_codes=16, dim=4, num_positions=4, codebook_update="transport", codebook_init="normal")
    assert not q.embedding.requires_grad
    z = torch.randn(8, 4, 2, 2)
    out = q.train()(z)
    out.loss.backward()  # the latents still get the WS gradient; the codebook gets none
    assert q.embedding.grad is None and q.beta.grad is not None
    before = q.embedding.detach().clone()
    q.eval()(z, compute_loss=True)
    assert torch.equal(q.embedding.detach(), before)


def test_latent_gradient_uses_the_codes_the_latents_were_assigned_to():
    # The codebook moves in place during forward; the backward must still use the codes of this step's plan.
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=8, dim=2, num_positions=1, codebook_update="transport",
                             codebook_init="normal", codebook_decay=0.0, ws_weight=1.0, learn_pi=False,
                             pull=1.0).train()  # the full WS gradient (16 latents for 8 codes: the default's 0.32)
    z = torch.randn(16, 2, 1, 1, requires_grad=True)
    before = q.embedding.detach().clone()
    assigned, _, _ = assign(z.detach().reshape(16, 1, 2), before, None)  # zero potential: nearest codes
    q(z).loss.backward()
    expected = 2 * (z.detach().reshape(16, 2) - before[assigned[:, 0]]) / 16
    torch.testing.assert_close(z.grad.reshape(16, 2), expected)


def test_bad_options_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="codebook_update"):
        WassersteinQuantizer(num_codes=8, dim=2, codebook_update="kmeans")
    with pytest.raises(ValueError, match="codebook_decay"):
        WassersteinQuantizer(num_codes=8, dim=2, codebook_update="transport", codebook_decay=1.0)


def _stranded(split_dead: float) -> WassersteinQuantizer:
    """16 codes on 2-D data, one of them stranded far outside the latents' cloud; 80 steps of transport."""
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=2, codebook_init="normal", codebook_decay=0.9, learn_pi=False,
                             split_dead=split_dead).train()
    data = torch.randn(4096, 2)
    with torch.no_grad():
        q.embedding.copy_(torch.cat([data[:15], torch.tensor([[40.0, 40.0]])]))
    for _ in range(80):
        q(data[torch.randint(0, 4096, (256,))].view(256, 2, 1, 1))
    return q


def test_a_code_the_transport_stopped_reaching_is_split_back_into_the_cloud():
    # The potential would have to climb ~1,600 cost units for the far code to win one latent; one ascent step
    # per batch never gets there, so without split_dead the code stays out and serves nothing.
    stuck, split = _stranded(0.0), _stranded(0.1)
    assert stuck.embedding[15].norm() > 30
    assert split.embedding[15].norm() < 4
    usage = torch.bincount(split.eval()(torch.randn(4096, 2, 1, 1)).indices.reshape(-1), minlength=16)
    assert (usage > 0).all()  # every code serves latents, the revived one included


def test_splitting_follows_pi_not_uniformity():
    # A fixed, peaked pi gives some codes a tiny share on purpose; they are not "dead" while they get it.
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=2, learn_pi=False, pi_init="peaked", codebook_decay=0.9).train()
    data = torch.randn(4096, 2)
    for _ in range(150):
        q(data[torch.randint(0, 4096, (256,))].view(256, 2, 1, 1))
    share = q.transport_mass / q.transport_mass.sum()
    pi = q.pi[0]
    assert torch.corrcoef(torch.stack([share, pi]))[0, 1] > 0.95


def test_more_potential_steps_bring_the_cells_nearer_pi_on_the_same_batches():
    """potential_steps re-assigns the batch after each ascent step: after the same batches, the transport cells'
    masses on a held-out sample are nearer pi than with one step a batch (the potential is nearer its optimum)."""
    from vqwae.ot import assign, assignment_mass

    def run(steps: int) -> float:
        torch.manual_seed(0)
        q = WassersteinQuantizer(num_codes=32, dim=4, channel_last=True, potential_steps=steps, split_dead=0.0).train()
        data = torch.randn(4096, 4) * torch.tensor([3.0, 1.0, 0.5, 0.2])  # uneven density: cells must adapt
        for i in range(240):
            q(data[torch.randint(0, 4096, (256,))][None])
        held = torch.randn(8192, 1, 4) * torch.tensor([3.0, 1.0, 0.5, 0.2])
        _, a, _ = assign(held, q.codebook.detach(), q.solver.code_potential())
        return float((assignment_mass(a, 1, 32)[0] - q.pi.mean(0)).abs().sum() / 2)  # total variation

    one, four = run(1), run(4)
    assert four < 0.75 * one, (one, four)  # measured: 0.113 against 0.069


def _trained_state(compile_update: bool, num_positions=None, steps: int = 40) -> dict:
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=64, dim=8, num_positions=num_positions, compile_update=compile_update)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        z = torch.randn(16, 8, 4, 4, generator=g).requires_grad_(True)
        out = q(z)
        (out.loss + out.quantized.sum()).backward()
    return q.state_dict()


@pytest.mark.parametrize("num_positions", [None, 16])
def test_the_compiled_update_moves_the_state_as_the_eager_one(num_positions):
    """compile_update fuses the potential's ascent, the transport codebook and the split (vqwae.fused): the same
    computation, up to float rounding, with no fallback (a warning would fail the test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        compiled = _trained_state(True, num_positions)
    eager = _trained_state(False, num_positions)
    for name, value in eager.items():
        if value.is_floating_point():
            torch.testing.assert_close(compiled[name], value, rtol=1e-4, atol=1e-5, msg=name)
        else:
            assert torch.equal(compiled[name], value), name


def test_a_compile_that_fails_warns_once_and_runs_eagerly(monkeypatch):
    import vqwae.fused

    def broken_compile(fn, **kw):
        def fail(*a, **k):
            raise torch._dynamo.exc.TorchDynamoException("inductor bug")
        return fail

    calls = []

    class Holder:
        compile_update = True

        @vqwae.fused.fused_update
        def update(self, x):
            calls.append(x)
            return x + 1

    monkeypatch.setattr(torch, "compile", broken_compile)
    with pytest.warns(UserWarning, match="torch.compile failed .*inductor bug.*running it eagerly"):
        assert Holder().update(1) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Holder().update(2) == 3  # eager from then on, silently
    assert calls == [1, 2]
    Holder.compile_update = False
    assert Holder().update(3) == 4


def test_compiled_updates_of_several_configurations_each_keep_their_own_graphs():
    """Every configuration compiles its two update functions once, in its first step, and no function's graphs
    crowd out another's: with dynamo's cache cut to 2 graphs per function, two configurations fit (the methods
    must not share a code object through a @torch.no_grad() wrapper: they did, and eight configurations in one
    process overflowed it, a hard error under fullgraph=True)."""
    # dynamo's own patch: a monkeypatch's undo deleted the setting (recompile_limit is an alias in dynamo's config),
    # which broke every later torch.compile of the process
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=2), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fallback to eager would warn
        for k in (16, 32):
            q = WassersteinQuantizer(num_codes=k, dim=4, compile_update=True)
            for _ in range(3):
                z = torch.randn(8, 4, 2, 2, requires_grad=True)
                out = q(z)
                (out.loss + out.quantized.sum()).backward()
    torch._dynamo.reset()


def test_the_graph_cache_follows_the_state_and_bounds_the_signatures():
    """vqwae.fused's CUDA-graph cache (its capture needs a GPU: tests/test_cuda_sync.py): a graph holds the
    addresses of the module's state, so a module whose state moved (``.to()``, a copy) starts a new cache; each input
    signature (shapes, dtypes, the plain arguments) has its own entry, and past MAX_GRAPHS of them the update runs
    eagerly (None) instead of capturing without end."""
    import vqwae.fused as fused

    q = WassersteinQuantizer(num_codes=16, dim=4)
    cache = fused._GraphCache()
    sig = fused._signature((torch.zeros(8, 1, dtype=torch.long), None, torch.zeros(()), 64, True))
    first = cache.entry(q, sig)
    assert cache.entry(q, sig) is first  # the same signature: the same entry
    assert fused._signature((torch.zeros(9, 1, dtype=torch.long), None, torch.zeros(()), 64, True)) != sig
    others = [cache.entry(q, ("other", i)) for i in range(fused.MAX_GRAPHS - 1)]
    assert all(e is not None for e in others) and cache.entry(q, ("one too many",)) is None
    q.double()  # new tensors for the state: the graphs captured on the old addresses are dropped
    assert cache.entry(q, sig) is not first
    with pytest.raises(fused.CaptureFailed, match="cannot be captured"):
        fused._signature((object(),))


@pytest.mark.parametrize("num_positions,masked,options", [(None, False, {}), (None, True, {}), (16, False, {}),
                                                          (None, False, dict(potential_steps=2)),
                                                          (None, True, dict(split_unused=0.5, codebook_decay=0.8))],
                         ids=["shared pi", "shared pi, padded rows", "one pi per position", "two potential steps",
                              "unused codes split"])
def test_the_one_piece_training_step_equals_the_general_one(num_positions, masked, options):
    """The shipped configuration's training step runs its no-grad work as one piece (``_step_state``, one CUDA graph
    on a GPU); the general path (the solver's search, value and update, then the codebook's) serves the other
    configurations and is forced here. They are one computation: the same indices, loss, gradient, perplexity and
    state, step after step (to float rounding), with padded rows too (and a row of padding only)."""
    torch.manual_seed(0)
    one_piece, general = (WassersteinQuantizer(num_codes=32, dim=4, channel_last=True, num_positions=num_positions,
                                               **options).train() for _ in range(2))
    general.load_state_dict(one_piece.state_dict())
    general._one_piece_step = lambda: False
    g = torch.Generator().manual_seed(1)
    for step in range(30):
        z = torch.randn(8, 16, 4, generator=g) * (1 + step / 10)  # growing latents: the codebook follows
        mask = None
        if masked:
            mask = torch.arange(16) < torch.randint(0, 17, (8, 1), generator=g)
            mask[0] = False
        outs, grads = [], []
        for q in (one_piece, general):
            torch.manual_seed(step)  # the data start draws codes at random: the same draws for both
            zq = z.clone().requires_grad_(True)
            out = q(zq, mask)
            (out.loss + out.quantized.square().mean()).backward()
            outs.append(out)
            grads.append(zq.grad)
        assert torch.equal(outs[0].indices, outs[1].indices), step
        torch.testing.assert_close(outs[0].loss, outs[1].loss, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(outs[0].losses["kl"], outs[1].losses["kl"], rtol=1e-5, atol=1e-8)
        torch.testing.assert_close(outs[0].perplexity, outs[1].perplexity)
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-8)
    for (name, a), b in zip(one_piece.state_dict().items(), general.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def _crowd_run(split_unused: float):
    """A learned pi over latents of which 62% are one input repeated (a sequence's blank patches) and the rest
    Gaussian; returns the codes sitting in the crowd, the other latents' quantization error and the codes in use."""
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=32, dim=4, channel_last=True, split_unused=split_unused).train()
    opt = torch.optim.Adam(q.parameters(), 1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(300):
        x = torch.randn(16, 16, 4, generator=g)
        x[:, :10] = 0.5
        out = q(x)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    x = torch.randn(256, 16, 4, generator=g)
    x[:, :10] = 0.5
    with torch.no_grad():
        idx = q.eval()(x).indices
    error = (x[:, 10:] - q.codebook[idx[:, 10:]]).pow(2).mean()
    in_crowd = (q.codebook - 0.5).norm(dim=1) < 0.2
    crowd_pi = float(q.pi[0][in_crowd].sum())
    return int(in_crowd.sum()), error, int(torch.bincount(idx.flatten(), minlength=32).gt(0).sum()), crowd_pi


def test_codes_a_crowd_of_identical_latents_holds_unused_are_moved_where_the_error_is():
    # With a uniform pi the transport gives the crowd 62% of the codes, which all transport it at no cost but only
    # one of which is anybody's nearest: W keeps them there. split_unused moves them to split the cells with the
    # largest error, and the learned pi gives the crowd's remaining codes the mass.
    crowd, error, used, crowd_pi = _crowd_run(0.0)
    crowd_split, error_split, used_split, crowd_pi_split = _crowd_run(0.1)
    assert crowd >= 12 and crowd_split <= 5
    assert used_split == 32 > used
    assert error_split < 0.85 * error
    # the crowd keeps its share of pi (62% of the latents) on the few codes left there
    assert abs(crowd_pi - 10 / 16) < 0.1 and abs(crowd_pi_split - 10 / 16) < 0.1


def test_split_unused_needs_a_learned_pi():
    # with a fixed pi a code nobody's nearest is the user's choice (a peaked pi), so the option does not act
    q = WassersteinQuantizer(num_codes=16, dim=2, learn_pi=False, split_unused=0.1)
    assert not q.config.splits_unused_cells and "split_unused" in q.config.unread()
    assert not hasattr(q, "nearest_mass")
    assert WassersteinQuantizer(num_codes=16, dim=2, split_unused=0.1).nearest_mass.shape == (16,)
