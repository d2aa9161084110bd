"""Save/load of VQAutoencoder: bit-identical reload, corrupt and mismatched files, older checkpoints."""
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from vqwae.models import NetworkConfig, VQAutoencoder


@pytest.mark.parametrize("kind,kw", [("wasserstein", {"quantize": "transport"}), ("paper-wasserstein", {}),
                                     ("vector", {"ema": True}), ("stochastic", {})])
def test_save_load_bit_identical(tmp_path, kind, kw):
    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), kind, num_codes=32, **kw)
    m.train()
    m(torch.rand(4, 1, 32, 32))  # some training state in the buffers
    m.save_pretrained(tmp_path)
    r = VQAutoencoder.from_pretrained(tmp_path)
    m.eval(), r.eval()
    x = torch.rand(3, 1, 32, 32)
    assert torch.equal(m(x)[0], r(x)[0])
    assert torch.equal(m.encode(x), r.encode(x))
    assert torch.equal(m.decode_indices(m.encode(x)), r.decode_indices(r.encode(x)))


def test_missing_buffer_loads_with_warning_but_missing_parameter_fails(tmp_path):
    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=32)
    m.save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    save_file({k: v for k, v in state.items() if k != "quantizer.solver.scale"}, str(tmp_path / "model.safetensors"))
    with pytest.warns(UserWarning, match="solver.scale"):
        VQAutoencoder.from_pretrained(tmp_path)
    save_file({k: v for k, v in state.items() if k != "quantizer.embedding"}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="quantizer.embedding"):
        VQAutoencoder.from_pretrained(tmp_path)


def test_corrupt_and_missing_files_name_the_file(tmp_path):
    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "vector", num_codes=16)
    m.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="model.safetensors"):
        VQAutoencoder.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="model_config.json"):
        VQAutoencoder.from_pretrained(tmp_path / "nowhere")


def test_a_loaded_model_is_in_eval_mode_and_running_it_changes_nothing(tmp_path):
    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=32)
    m.train()
    m(torch.rand(4, 1, 32, 32))  # some training state
    m.save_pretrained(tmp_path)
    r = VQAutoencoder.from_pretrained(tmp_path)
    assert not r.training and not any(mod.training for mod in r.modules())
    before = {k: v.clone() for k, v in r.state_dict().items()}
    with torch.no_grad():
        first = r(torch.rand(4, 1, 32, 32))[0]
    x = torch.rand(3, 1, 32, 32)
    with torch.no_grad():
        a, b = r(x)[0], r(x)[0]
    assert torch.equal(a, b) and first.shape == (4, 1, 32, 32)
    assert all(torch.equal(v, before[k]) for k, v in r.state_dict().items())


def test_images_and_code_grids_of_another_size_are_refused_naming_the_networks():
    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=16).eval()
    with pytest.raises(ValueError, match=r"images of 31x31, but the network takes 32x32 \(its code grid: 8x8\)"):
        m.encode(torch.rand(2, 1, 31, 31))
    with pytest.raises(ValueError, match=r"code grids of \(3, 3\), but the network makes 8x8 grids from 32x32"):
        m.decode_indices(torch.zeros(2, 3, 3, dtype=torch.long))
    assert m.decode_indices(m.encode(torch.rand(2, 1, 32, 32))).shape == (2, 1, 32, 32)


@pytest.mark.parametrize("kind", ["wasserstein", "stochastic"])
def test_latents_that_overflow_the_distances_leave_the_state_finite(kind):
    """Latents around 1e20 overflow float32 squared distances: they are refused before anything moves (issue #65:
    before, a silent NaN or infinite loss), and the next ordinary batch trains as usual."""
    from vqwae.quantizers import build_quantizer

    q = build_quantizer(kind, num_codes=8, dim=4, channel_last=True).train()
    q(torch.randn(4, 6, 4))
    before = {k: v.clone() for k, v in q.state_dict().items()}
    with pytest.raises(ValueError, match="overflow float32"):
        q(torch.full((4, 6, 4), 1e20))
    assert all(torch.equal(before[k], v) for k, v in q.state_dict().items()), kind
    q(torch.randn(4, 6, 4))
    assert all(torch.isfinite(v.float()).all() for v in q.state_dict().values()), kind


def _retype_in_header(path, name: str, dtype: str) -> None:
    """Rewrite a safetensors header so that tensor ``name`` is said to be ``dtype`` (bytes of the same size kept)."""
    import json
    import struct

    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header[name]["dtype"] = dtype
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


@pytest.mark.parametrize("name,dtype", [("quantizer.embedding", "I32"), ("encoder.net.0.weight", "I32"),
                                        ("quantizer.codes_drawn", "F64")])
def test_a_header_that_names_another_dtype_of_the_same_size_is_refused_naming_the_tensor(tmp_path, name, dtype):
    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=32)
    m.save_pretrained(tmp_path)
    _retype_in_header(tmp_path / "model.safetensors", name, dtype)
    with pytest.raises(ValueError, match=rf"tensor {name} is torch\.\w+ in the file, but the model holds torch\."):
        VQAutoencoder.from_pretrained(tmp_path)


def test_a_residual_stacks_float64_dropout_state_is_refused_not_cast(tmp_path):
    from vqwae.quantizers import ResidualQuantizer, WassersteinQuantizer

    rq = ResidualQuantizer(lambda: WassersteinQuantizer(num_codes=8, dim=64, channel_last=False), 2, dropout=True)
    from vqwae.models import build_networks

    enc, dec = build_networks(NetworkConfig(in_channels=1))
    m = VQAutoencoder(enc, rq, dec, NetworkConfig(in_channels=1))
    m.save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    state["quantizer.dropout_state"] = state["quantizer.dropout_state"].double() + 0.5
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="quantizer.dropout_state is torch.float64"):
        VQAutoencoder.from_pretrained(tmp_path)


@pytest.mark.parametrize("edit,says", [(dict(quantizer=None), "'quantizer' must be an object"),
                                       (dict(network=[1]), "'network' must be an object"),
                                       (dict(extra=1), "unknown key(s) 'extra'")])
def test_a_model_config_that_is_not_a_model_is_refused_in_one_line(tmp_path, edit, says):
    import json

    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "vector", num_codes=16)
    m.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "model_config.json").read_text())
    (tmp_path / "model_config.json").write_text(json.dumps({**cfg, **edit}))
    with pytest.raises(ValueError, match=re.escape(says)) as e:
        VQAutoencoder.from_pretrained(tmp_path)
    assert "\n" not in str(e.value)


def test_a_double_quantizer_returns_quantized_in_the_latents_dtype_and_flat_indices_give_codewords():
    from vqwae.quantizers import WassersteinQuantizer

    q = WassersteinQuantizer(num_codes=16, dim=8, channel_last=False).double().eval()
    z = torch.randn(2, 8, 4, 4)
    out = q(z)
    assert out.quantized.dtype == torch.float32  # the decoder's dtype, whatever the quantizer's
    assert torch.equal(out.quantized, q.indices_to_latents(out.indices).float())
    flat = out.indices.reshape(-1)
    assert q.indices_to_latents(flat).shape == (32, 8)  # (N,) -> (N, D) codewords, in either layout
    assert torch.equal(q.indices_to_latents(flat), q.codebook[flat])
