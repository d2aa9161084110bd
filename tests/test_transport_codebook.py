"""WassersteinQuantizer's codebook (``TransportCodebook``): it minimises the WS term exactly for the step's transport
map (an EMA of the barycentres of the transported latents) instead of taking optimiser steps, re-seeds the codes the
transport stopped reaching, and (split_unused) moves the codes a crowd of identical latents holds unused."""
import warnings

import pytest
import torch

from vqwae.ot.semidiscrete import assign
from vqwae.quantizers import WassersteinQuantizer
from vqwae.training.config import VQWAEOptions


def test_the_update_uses_the_transport_map_not_the_nearest_code():
    torch.manual_seed(0)
    # decay 0.9 from zero EMAs: the first step's code is exactly its barycentre (at decay 0 a code the step leaves
    # empty has a whole horizon of record, and is split as dead at once)
    q = WassersteinQuantizer(num_codes=8, dim=2, num_positions=1, codebook_decay=0.9).train()
    q.set_codebook(torch.randn(8, 2))
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


def test_ema_averages_the_barycentres_of_successive_steps():
    q = WassersteinQuantizer(num_codes=4, dim=2, num_positions=1, codebook_decay=0.5).train()
    q.set_codebook(torch.tensor([[0.0, 0], [1, 0], [0, 1], [1, 1]]))
    a = torch.tensor([[0.0, 0], [2, 0], [0, 2], [2, 2]])  # each code is one latent's nearest: each receives pi_k
    q(a.view(4, 2, 1, 1))
    torch.testing.assert_close(q.embedding.detach(), a)  # 0.5 * a / 0.5: the first step's barycentres
    assert q.solver.potential.abs().max() == 0  # every code received exactly its share: the potential holds
    q(torch.zeros(4, 2, 1, 1) + 4)  # all latents at (4, 4): the map sends them all to code 3, the nearest
    want = a.clone()
    want[3] = (0.25 * a[3] + 0.5 * 4 * 4) / (0.25 + 0.5 * 4)  # EMAs of the sum and of the mass, decay 0.5
    torch.testing.assert_close(q.embedding.detach(), want)


def test_the_optimiser_never_sees_the_codebook_and_eval_leaves_it_alone():
    q = WassersteinQuantizer(num_codes=16, dim=4, num_positions=4)
    assert not q.embedding.requires_grad
    z = torch.randn(8, 4, 2, 2)
    out = q.train()(z)
    out.loss.backward()  # the latents still get the WS gradient; the codebook gets none
    assert q.embedding.grad is None and q.beta.grad is not None
    before = {k: v.clone() for k, v in q.state_dict().items()}
    q.eval()(z, compute_loss=True)
    assert all(torch.equal(v, q.state_dict()[k]) for k, v in before.items())


def test_the_loss_in_eval_is_the_training_step_s_before_it_moves_anything():
    """Eval with compute_loss=True evaluates the same semi-dual as a training step at the same state: the training
    step computes its loss from the codebook and the potential it starts from, then moves them."""
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=4, channel_last=True).train()
    for _ in range(20):
        q(torch.randn(8, 12, 4))
    z = torch.randn(8, 12, 4)
    q.eval()
    held = q(z, compute_loss=True)
    trained = q.train()(z)
    torch.testing.assert_close(trained.loss, held.loss)
    assert torch.equal(trained.indices, held.indices)


def test_latent_gradient_uses_the_codes_the_latents_were_assigned_to():
    # The codebook moves in place during forward; the backward must still use the codes of this step's map.
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=8, dim=2, num_positions=1, codebook_decay=0.0, ws_weight=1.0, learn_pi=False,
                             pull=1.0).train()
    q.set_codebook(torch.randn(8, 2))
    z = torch.randn(16, 2, 1, 1, requires_grad=True)
    before = q.embedding.detach().clone()
    assigned, _, _ = assign(z.detach().reshape(16, 1, 2), before, None)  # zero potential: nearest codes
    q(z).loss.backward()
    expected = 2 * (z.detach().reshape(16, 2) - before[assigned[:, 0]]) / 16
    torch.testing.assert_close(z.grad.reshape(16, 2), expected)


def test_bad_options_are_refused_with_a_clear_message():
    with pytest.raises(TypeError, match="no option 'codebook_update'.*PaperWassersteinQuantizer"):
        WassersteinQuantizer(num_codes=8, dim=2, codebook_update="transport")
    with pytest.raises(ValueError, match="codebook_decay"):
        WassersteinQuantizer(num_codes=8, dim=2, codebook_decay=1.0)
    with pytest.raises(ValueError, match=r"codes must have shape \(8, 2\)"):
        WassersteinQuantizer(num_codes=8, dim=2).set_codebook(torch.zeros(8, 3))


def test_a_code_the_transport_stopped_reaching_is_split_back_into_the_cloud():
    # The potential would have to climb ~1,600 cost units for the far code to win one latent; one ascent step per
    # batch never gets there: only the split of dead cells brings it back.
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=2, codebook_decay=0.9, learn_pi=False).train()
    data = torch.randn(4096, 2)
    q.set_codebook(torch.cat([data[:15], torch.tensor([[40.0, 40.0]])]))
    for step in range(80):
        q(data[torch.randint(0, 4096, (256,))].view(256, 2, 1, 1))
        if step == 5:
            assert q.embedding[15].norm() > 30  # stranded while the EMAs fill
    assert q.embedding[15].norm() < 4
    usage = torch.bincount(q.eval()(torch.randn(4096, 2, 1, 1)).indices.reshape(-1), minlength=16)
    assert (usage > 0).all()  # every code serves latents, the revived one included


def test_a_code_a_split_placed_is_judged_by_its_own_record_not_the_mass_it_inherited():
    """A split hands the moved code half its partner's EMA mass; judged by that EMA, a moved code whose new cell
    stays empty looks alive until the inherited mass decays below SPLIT_DEAD of its share (22 steps at decay 0.9,
    ~230 at 0.99: the blind phase of issue #81). Its own record since the split tells within a horizon."""
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=2, codebook_decay=0.9, learn_pi=False).train()
    data = torch.randn(4096, 2)
    q.set_codebook(data[:16])
    for _ in range(30):
        q(data[torch.randint(0, 4096, (256,))].view(256, 2, 1, 1))
    with torch.no_grad():  # code 15 as a split leaves it: a full share of EMA mass, a fresh record, but far away
        q.embedding[15] = torch.tensor([40.0, 40.0])
        q.transport.sum[15] = q.embedding[15] * q.transport.mass[15]
        q.transport.earned[15] = q.transport.expected[15] = 0.0
    splits = int(q.transport.splits)
    for _ in range(10):  # its record fills in a horizon (1 / (1 - 0.9) steps), its inherited EMA mass in 22
        q(data[torch.randint(0, 4096, (256,))].view(256, 2, 1, 1))
    assert q.embedding[15].norm() < 4 and int(q.transport.splits) > splits


def test_splitting_follows_pi_not_uniformity():
    # A fixed, peaked pi gives some codes a tiny share on purpose; they are not "dead" while they get it.
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=2, learn_pi=False, pi_init="peaked", codebook_decay=0.9).train()
    data = torch.randn(4096, 2)
    for _ in range(150):
        q(data[torch.randint(0, 4096, (256,))].view(256, 2, 1, 1))
    share = q.transport.mass / q.transport.mass.sum()
    pi = q.pi[0]
    assert torch.corrcoef(torch.stack([share, pi]))[0, 1] > 0.95


def _trained_state(compile_update: bool, num_positions=None, steps: int = 40) -> dict:
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=64, dim=8, num_positions=num_positions).set_runtime(
        compile_update=compile_update)
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
            q = WassersteinQuantizer(num_codes=k, dim=4).set_runtime(compile_update=True)
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
    q = WassersteinQuantizer(num_codes=16, dim=2, learn_pi=False, split_unused=0.1).train()
    for _ in range(20):
        q(torch.randn(32, 2, 1, 1))
    assert q.transport.nearest_mass.abs().max() == 0  # its statistics never gathered
    assert "split_unused" in VQWAEOptions(learn_pi=False, split_unused=0.1).unread()
    # the buffers exist whatever the options: a state dict's layout follows K, D and the positions only
    assert q.state_dict().keys() == WassersteinQuantizer(num_codes=16, dim=2).state_dict().keys()
