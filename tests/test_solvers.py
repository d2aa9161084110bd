"""The OT solvers as modules: one interface, their own state, and checkpoints of the earlier layout."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from vqwae.models import NetworkConfig, VQAutoencoder
from vqwae.ot import SOLVERS, Solver, Transport
from vqwae.quantizers import PaperWassersteinQuantizer, WassersteinQuantizer

# What each solver keeps in the quantizer's state dict (layout 2).
STATE = {"semidiscrete": {"solver.potential", "solver.scale"}, "sinkhorn": {"solver.potential"}, "exact": set(),
         "dual": {"solver.phi.w1", "solver.phi.b1", "solver.phi.w2", "solver.phi.b2", "solver.phi.adam_step"}}


@pytest.mark.parametrize("solver", list(SOLVERS))
def test_each_solver_owns_its_state_behind_one_interface(solver):
    q = PaperWassersteinQuantizer(num_codes=16, dim=4, num_positions=4, solver=solver).train()
    assert isinstance(q.solver, Solver) and type(q.solver) is SOLVERS[solver]
    keys = {k for k in q.state_dict() if k.startswith("solver.")}
    assert STATE[solver] <= keys and not any(k.startswith(("code_potential", "potential")) for k in q.state_dict())
    flat = torch.randn(8, 4, 4)
    log_pi = torch.log_softmax(q.beta.detach(), -1)
    t = q.solver(flat, q.embedding.detach(), log_pi, update=False)
    assert isinstance(t, Transport) and t.value.dim() == 0 and torch.isfinite(t.value)
    if solver in ("exact", "sinkhorn"):  # where the mass goes: the plan, or the transport map's assignment
        assert t.plan.shape == (4, 8, 16) and t.assigned is None
    elif solver == "semidiscrete":
        assert t.assigned.shape == (8, 4) and t.plan is None


def _layout_1(state: dict, prefix: str = "") -> dict:
    """The state dict the quantizer had before the solvers were modules (every solver's state on it)."""
    old = {k: v for k, v in state.items() if not k.startswith(prefix + "solver.")}
    groups, k = state[prefix + "beta"].shape
    old[prefix + "code_potential"] = state.get(prefix + "solver.potential", torch.zeros(groups, k))
    old[prefix + "potential_scale"] = state.get(prefix + "solver.scale", torch.zeros(()))
    for key, v in state.items():
        if key.startswith(prefix + "solver.phi."):
            old[prefix + "potential." + key[len(prefix + "solver.phi."):]] = v
    return old


@pytest.mark.parametrize("solver", list(SOLVERS))
def test_layout_1_checkpoints_load_and_give_the_same_outputs(solver):
    q = PaperWassersteinQuantizer(num_codes=16, dim=4, num_positions=4, solver=solver).train()
    z = torch.randn(8, 4, 2, 2)
    for _ in range(2):
        q(z).loss.backward()  # some solver state
    r = PaperWassersteinQuantizer(num_codes=16, dim=4, num_positions=4, solver=solver)
    r.load_state_dict(_layout_1(q.state_dict()))  # strict: every old key converted or dropped
    for a, b in zip(q.state_dict().values(), r.state_dict().values()):
        assert torch.equal(a, b)
    q.eval(), r.eval()
    assert torch.equal(q(z, compute_loss=True).loss, r(z, compute_loss=True).loss)


def test_a_saved_layout_1_model_loads_through_from_pretrained(tmp_path):
    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "paper-wasserstein", num_codes=16, solver="dual")
    m.train()(torch.rand(4, 1, 32, 32))
    m.save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    save_file(_layout_1(state, "quantizer."), str(tmp_path / "model.safetensors"))
    cfg = json.loads((tmp_path / "model_config.json").read_text())
    del cfg["format_version"]  # format 1 as well: a "wasserstein" of the time, with every option it had
    cfg["quantizer"].update(kind="wasserstein", codebook_update="transport", pi_floor=0.0, potential_lr=None)
    (tmp_path / "model_config.json").write_text(json.dumps(cfg))
    r = VQAutoencoder.from_pretrained(tmp_path)
    for k, v in m.state_dict().items():
        assert torch.equal(v, r.state_dict()[k]), k


def test_the_potentials_step_defaults_by_how_pi_is_shared():
    # docs/lab/08.md#slower-potential: 0.003 with one pi per position (a quieter potential: MNIST's usage stops
    # swinging),
    # 0.01 with a shared pi (at K = 8,192 the codes spread over the data three times faster).
    assert WassersteinQuantizer(num_codes=16, dim=4, num_positions=4).solver.potential_lr == 0.003
    assert WassersteinQuantizer(num_codes=16, dim=4).solver.potential_lr == 0.01
    with pytest.raises(TypeError, match="no option 'potential_lr'"):
        WassersteinQuantizer(num_codes=16, dim=4, potential_lr=0.02)


def test_lambda_r_defaults_by_how_pi_is_shared_and_weighs_the_kl_term():
    # docs/lab/08.md#rd-k512-mnist, docs/lab/08.md#shared-pi-kl-weight: 1 with one pi per position (lighter collapsed
    # MNIST on one seed), 0.01 with a
    # shared pi (no collapse at K = 512 or 8,192; better reconstruction at K = 8,192).
    z = torch.randn(8, 4, 2, 2)
    peaked = torch.softmax(torch.arange(16.0), 0)

    def kl_term(**options):
        q = WassersteinQuantizer(num_codes=16, dim=4, **options)
        q.set_pi(peaked)
        return q(z).losses["kl"], q.kl_to_uniform()

    for options, weight in [({}, 0.01), (dict(num_positions=4), 1.0), (dict(kl_weight=0.5), 0.5),
                            (dict(num_positions=4, kl_weight=0.2), 0.2)]:
        term, kl = kl_term(**options)
        assert kl > 1 and torch.allclose(term, weight * kl), options
    q = WassersteinQuantizer(num_codes=16, dim=4, kl_weight=0.0)
    assert "kl" not in q(z).losses
    with pytest.raises(ValueError, match="kl_weight"):
        WassersteinQuantizer(num_codes=16, dim=4, kl_weight=-1.0)


def test_a_format_2_model_of_the_transport_codebook_loads_and_gives_the_same_outputs(tmp_path):
    """A model saved before issue #56 (format 2: kind "wasserstein" with every option of the time, the transport
    codebook's EMAs on the quantizer itself, no nearest-code EMAs) loads into today's WassersteinQuantizer, through
    the documented upgrade (``upgrade_quantizer_config``, ``upgrade_state_dict``), with identical outputs."""
    torch.manual_seed(0)
    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=16, quantize="transport",
                                  learn_pi=False, pi_init="peaked")
    for _ in range(3):
        m.train()(torch.rand(4, 1, 32, 32))
    m.save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    for new, old in (("mass", "transport_mass"), ("sum", "transport_sum"), ("steps", "transport_steps")):
        state[f"quantizer.{old}"] = state.pop(f"quantizer.transport.{new}")
    for name in ("nearest_mass", "nearest_error", "nearest_of"):  # split_unused was off: no such buffers then
        del state[f"quantizer.transport.{name}"]
    save_file(state, str(tmp_path / "model.safetensors"))
    cfg = json.loads((tmp_path / "model_config.json").read_text())
    cfg["format_version"] = 2
    cfg["quantizer"].update(solver="semidiscrete", codebook_update="transport", codebook_init="data", pi_floor=0.0,
                            potential_lr=None, potential_steps=1, split_dead=0.1, kl_reduction="sum",
                            global_batch=False, graph_update=True, compile_update=False, fit_steps=0, pull_target=0.0)
    (tmp_path / "model_config.json").write_text(json.dumps(cfg))
    r = VQAutoencoder.from_pretrained(tmp_path)
    assert type(r.quantizer) is WassersteinQuantizer and r.quantizer.config == m.quantizer.config
    x = torch.rand(6, 1, 32, 32)
    m.eval()
    assert torch.equal(r(x)[0], m(x)[0]) and torch.equal(r.encode(x), m.encode(x))
    for k, v in m.state_dict().items():
        assert torch.equal(v, r.state_dict()[k]), k
    cfg["quantizer"]["pi_floor"] = 0.2  # an option that changed pi: refused, naming it
    (tmp_path / "model_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="pi_floor=0.2"):
        VQAutoencoder.from_pretrained(tmp_path)


@pytest.mark.parametrize("solver", ["sinkhorn", "dual"])
def test_the_entropic_solvers_stay_finite_on_a_constant_batch(solver):
    """A batch of identical latents (all zeros, or any constant) drawn into the codebook has zero cost: the
    solvers' eps is floored, and a non-finite step would leave the state as it was, so no state turns NaN and the
    next batches train as usual."""
    q = PaperWassersteinQuantizer(num_codes=8, dim=4, channel_last=True, solver=solver).train()
    for z in (torch.zeros(4, 6, 4), torch.full((4, 6, 4), 3.0), torch.randn(4, 6, 4)):
        z.requires_grad_(True)
        out = q(z)
        out.loss.backward()
        assert torch.isfinite(out.loss) and torch.isfinite(z.grad).all()
        assert all(torch.isfinite(v.float()).all() for v in q.state_dict().values())


def test_non_finite_options_and_latents_are_refused_in_one_line():
    with pytest.raises(ValueError, match="ws_weight must be a finite number, got inf"):
        WassersteinQuantizer(num_codes=8, dim=4, ws_weight=float("inf"))
    with pytest.raises(ValueError, match="needs epsilon > 0"):
        PaperWassersteinQuantizer(num_codes=8, dim=4, solver="sinkhorn", epsilon=0.0)
    q = WassersteinQuantizer(num_codes=8, dim=4, channel_last=True)
    q(torch.randn(4, 6, 4))
    potential = q.solver.potential.clone()
    with pytest.raises(ValueError, match="NaN or Inf"):
        q.fit_transport(torch.full((4, 6, 4), float("nan")), 5)
    assert torch.equal(q.solver.potential, potential)
    from vqwae.quantizers import ResidualQuantizer

    with pytest.raises(TypeError, match="floating point, got torch.int64"):
        ResidualQuantizer(lambda: WassersteinQuantizer(num_codes=8, dim=4), 2)(torch.ones(2, 4, 3, dtype=torch.long))


def test_the_exact_solver_names_latents_that_overflow_the_distances():
    q = PaperWassersteinQuantizer(num_codes=8, dim=4, channel_last=True, solver="exact", codebook_init="normal")
    with pytest.raises(ValueError, match="overflow float32; scale the latents"):
        q(torch.full((4, 6, 4), 1e20))
