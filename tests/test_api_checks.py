"""The Python API refuses, in one line, what it would otherwise accept and fail on later or silently (issue #65):
option types as config files check them, ``diagnostics``, ``fit_transport``, ``set_runtime``, latents beyond float32's
squared distances, the meta device, indices that are no tensor; and a module cast leaves the quantizers' state in
float32."""
import pytest
import torch
from torch import nn

from vqwae.quantizers import (PaperWassersteinQuantizer, ResidualQuantizer, StochasticQuantizer, VectorQuantizer,
                              WassersteinQuantizer, diagnostics)

SHAPE = dict(num_codes=16, dim=8, channel_last=True)


def _one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize("cls,options,words", [
    (PaperWassersteinQuantizer, dict(sinkhorn_iters=2.5), "sinkhorn_iters: 2.5 is not an integer"),
    (WassersteinQuantizer, dict(num_positions=16.0), "num_positions: 16.0 is not an integer"),
    (WassersteinQuantizer, dict(learn_pi="False"), "learn_pi: 'False' is not a boolean"),
    (VectorQuantizer, dict(ema="yes"), "ema: 'yes' is not a boolean"),
    (WassersteinQuantizer, dict(ws_weight="1e-3"), "ws_weight: '1e-3' is not a number"),
])
def test_options_of_the_wrong_type_are_refused_at_construction(cls, options, words):
    with pytest.raises(ValueError) as e:
        cls(**options)
    assert words in _one_line(e)


def test_a_float_option_takes_an_int():
    assert WassersteinQuantizer(ws_weight=1).config.ws_weight == 1


@pytest.mark.parametrize("options,words", [
    (dict(graph_update="false"), "graph_update must be True or False"),
    (dict(compile_update=1), "compile_update must be True or False"),
    (dict(chunk_entries=float("inf")), "chunk_entries must be an int >= 1"),
    (dict(chunk_entries=0), "chunk_entries must be an int >= 1"),
])
def test_set_runtime_checks_its_values(options, words):
    q = WassersteinQuantizer(**SHAPE)
    with pytest.raises(ValueError) as e:
        q.set_runtime(**options)
    assert words in _one_line(e)


@pytest.mark.parametrize("steps", [2.5, "10", -1, True])
def test_fit_transport_refuses_a_step_count_that_is_not_a_whole_number(steps):
    q = WassersteinQuantizer(**SHAPE)
    with pytest.raises(ValueError, match="steps must be an int >= 0"):
        q.fit_transport(torch.randn(4, 16, 8), steps)


@pytest.mark.parametrize("latents,words", [
    (torch.randn(0, 16, 8), "empty"),
    (torch.randn(4, 16, 5), "codebook dim is 8"),
    (torch.full((4, 16, 8), float("nan")), "NaN"),
])
def test_fit_transport_checks_the_latents(latents, words):
    q = WassersteinQuantizer(**SHAPE)
    with pytest.raises(ValueError) as e:
        q.fit_transport(latents, 3)
    assert words in _one_line(e)


@pytest.mark.parametrize("latents,words", [
    (torch.full((4, 16, 8), float("nan")), "NaN"),
    (torch.randn(4, 16, 5), "codebook dim is 8"),
    (torch.randn(0, 16, 8), "empty"),
])
def test_diagnostics_checks_the_latents(latents, words):
    with pytest.raises(ValueError) as e:
        diagnostics(WassersteinQuantizer(**SHAPE), latents)
    assert words in _one_line(e)


def test_diagnostics_checks_the_quantizer_and_the_batch():
    z = torch.randn(4, 16, 8)
    for q in (VectorQuantizer(**SHAPE), ResidualQuantizer(lambda: WassersteinQuantizer(**SHAPE), 2)):
        with pytest.raises(TypeError) as e:
            diagnostics(q, z)
        assert "takes a WassersteinQuantizer or PaperWassersteinQuantizer" in _one_line(e)
    with pytest.raises(ValueError, match="batch must be an int >= 1"):
        diagnostics(WassersteinQuantizer(**SHAPE), z, batch=0)


def test_diagnostics_with_every_latent_on_its_code_has_no_ratio():
    """K = 1 and the latents on the code: the exact W is 0, and the ratio is None rather than a division by zero."""
    q = WassersteinQuantizer(num_codes=1, dim=8, channel_last=True)
    z = q.codebook.detach().expand(4, 16, 8).clone()
    d = diagnostics(q, z)
    assert d.w_ratio is None and d.dead_codes == 0 and d.perplexity == pytest.approx(1.0)


QUANTIZERS = {
    "wasserstein": lambda: WassersteinQuantizer(**SHAPE),
    "paper semidiscrete": lambda: PaperWassersteinQuantizer(**SHAPE),
    "paper sinkhorn": lambda: PaperWassersteinQuantizer(solver="sinkhorn", **SHAPE),
    "paper dual": lambda: PaperWassersteinQuantizer(solver="dual", **SHAPE),
    "vector": lambda: VectorQuantizer(**SHAPE),
    "stochastic": lambda: StochasticQuantizer(**SHAPE),
}


@pytest.mark.parametrize("name", list(QUANTIZERS))
def test_latents_whose_squared_distances_overflow_are_refused(name):
    """At 1e20 the squared distances overflow float32: before, Sinkhorn and the dual returned a NaN loss, the
    semidiscrete solver an infinite one and SQ-VAE a non-finite quantized tensor, silently."""
    q = QUANTIZERS[name]().train()
    with pytest.raises(ValueError) as e:
        q(torch.full((2, 16, 8), 1e20))
    assert "overflow float32" in _one_line(e)
    out = q(torch.randn(2, 16, 8) * 1e3)  # large, still finite in its squares: accepted
    assert torch.isfinite(out.loss) and torch.isfinite(out.quantized).all()


@pytest.mark.parametrize("name", list(QUANTIZERS))
def test_latents_on_the_meta_device_are_refused(name):
    with pytest.raises(ValueError) as e:
        QUANTIZERS[name]()(torch.empty(2, 16, 8, device="meta"))
    assert "'meta' device" in _one_line(e)


def test_indices_that_are_no_tensor_are_refused():
    for q in (WassersteinQuantizer(**SHAPE), ResidualQuantizer(lambda: VectorQuantizer(**SHAPE), 2)):
        with pytest.raises(TypeError) as e:
            q.indices_to_latents([[1, 2]])
        assert "must be an int64 tensor" in _one_line(e)


# ---- a module cast leaves the quantizer's state in float32 ---------------------------------------------------
@pytest.mark.parametrize("cast", ["bfloat16", "half"])
def test_a_module_cast_keeps_the_quantizer_state_float32_and_its_training_unchanged(cast):
    """``model.bfloat16()`` casts the network, not the quantizer: trained on the same float32 latents, the cast
    model's quantizer keeps every buffer and parameter equal to an uncast one's (before, bf16 EMAs drifted: a
    mass of 516 against 487)."""
    def build():
        torch.manual_seed(0)
        return nn.ModuleDict(dict(enc=nn.Linear(8, 8), q=WassersteinQuantizer(**SHAPE)))

    plain, cast_model = build(), getattr(build(), cast)()
    assert cast_model["enc"].weight.dtype != torch.float32
    assert all(t.dtype == torch.float32 for t in [*cast_model["q"].parameters(), *cast_model["q"].buffers()]
               if t.is_floating_point())
    g = torch.Generator().manual_seed(1)
    for step in range(5):
        z = torch.randn(4, 16, 8, generator=g)
        torch.manual_seed(step)  # the data start draws its codes at random: the same draws for both
        a = plain["q"](z)
        torch.manual_seed(step)
        b = cast_model["q"](z)
        assert torch.equal(a.indices, b.indices)
    for (name, x), (_, y) in zip(plain["q"].state_dict().items(), cast_model["q"].state_dict().items()):
        assert torch.equal(x, y), name
    assert cast_model["q"].double().codebook.dtype == torch.float64  # a double quantizer is still a choice
