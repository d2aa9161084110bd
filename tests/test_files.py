"""Atomic writes and the save/load mixin shared by the autoencoder and the PixelCNN."""
import json
import shutil

import pytest
import torch

from vqwae.files import atomic_path, atomic_write_text
from vqwae.models import NetworkConfig, VQAutoencoder
from vqwae.models import pretrained
from vqwae.prior import GatedPixelCNN, PixelCNNConfig


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    p = tmp_path / "eval.json"
    atomic_write_text(p, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(p) as tmp:
            tmp.write_text("half of the new")
            raise RuntimeError("killed mid-write")
    assert p.read_text() == "old" and [f.name for f in tmp_path.iterdir()] == ["eval.json"]
    atomic_write_text(p, "new")
    assert p.read_text() == "new" and (p.stat().st_mode & 0o777) == 0o644


@pytest.mark.parametrize("make", [
    lambda: VQAutoencoder.from_config(NetworkConfig(in_channels=1), "paper-wasserstein", num_codes=16),
    lambda: GatedPixelCNN(PixelCNNConfig(num_codes=16, hidden_channels=8, num_layers=3)),
])
def test_both_models_round_trip_bit_identically_with_a_format_version(tmp_path, make):
    m = make()
    m.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / type(m).config_name).read_text())
    assert cfg["format_version"] == type(m).format_version
    r = type(m).from_pretrained(tmp_path)
    for k, v in m.state_dict().items():
        assert torch.equal(v, r.state_dict()[k]), k
    del cfg["format_version"]  # a file written before format versions existed still loads (a VQ-WAE of then: the
    # paper's gradient-trained codebook, which is what format 1 implies)
    (tmp_path / type(m).config_name).write_text(json.dumps(cfg))
    type(m).from_pretrained(tmp_path)


def test_a_hub_repo_id_is_downloaded_when_it_is_not_a_local_folder(tmp_path, monkeypatch):
    m = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "vector", num_codes=8)
    m.save_pretrained(tmp_path / "remote")
    calls = []

    def fake_download(repo_id, filename):  # no network in tests: serve the "repo" from a local folder
        calls.append((repo_id, filename))
        (tmp_path / "snapshot").mkdir(exist_ok=True)
        return str(shutil.copy(tmp_path / "remote" / filename, tmp_path / "snapshot" / filename))

    hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub (the `hub` extra) is not installed")
    monkeypatch.setattr(hub, "hf_hub_download", fake_download)
    r = VQAutoencoder.from_pretrained("someone/vq-model")
    assert {f for _, f in calls} == {"model.safetensors", "model_config.json"}
    assert torch.equal(r.quantizer.embedding, m.quantizer.embedding)
    assert pretrained.WEIGHTS_NAME == "model.safetensors"
