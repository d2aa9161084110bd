"""Metric layer: PSNR / SSIM, LPIPS and evaluate_reconstructions (the FID layer: test_metrics_fid.py).

Tests that need the pretrained weights in ../shared/weights skip with a reason when they are absent.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from vqwae import threads as threadmod
from vqwae.metrics import fid as fidmod
from vqwae.metrics.evaluate import evaluate_reconstructions
from vqwae.metrics.fid_cache import FIDStatsCache, StatsKey, dataset_fingerprint
from vqwae.metrics.fid import (
    INCEPTION_FILENAME,
    InceptionFeatures,
    feature_statistics,
)
from vqwae.metrics.image import prepare_images, psnr, psnr_per_image, ssim_per_image
from vqwae.metrics.lpips import LPIPS_ENV, load_lpips
from tests.helpers import eig_frechet, inception


# -- helpers ------------------------------------------------------------------------------------
def _lpips_dir(shared_weights: Path) -> Path:
    d = shared_weights / "lpips"
    if not (d / "alexnet_features.pth").is_file() or not (d / "v0.1" / "alex.pth").is_file():
        pytest.skip(f"LPIPS weights not found under {d}")
    return d


def _example(name: str, shared_weights: Path) -> torch.Tensor:
    from PIL import Image

    p = _lpips_dir(shared_weights) / "examples" / f"{name}.png"
    if not p.is_file():
        pytest.skip(f"LPIPS example image {p} not found")
    arr = np.array(Image.open(p).convert("RGB"), dtype=np.float32) / 255.0
    return torch.from_numpy(arr).permute(2, 0, 1)[None]


# -- PSNR / SSIM --------------------------------------------------------------------------------
@pytest.mark.parametrize("channels,size", [(3, 32), (1, 28)])
def test_psnr_ssim_match_scikit_image(channels, size):
    skm = pytest.importorskip("skimage.metrics")
    x = torch.rand(3, channels, size, size, dtype=torch.float64)
    y = (x + 0.08 * torch.randn_like(x)).clamp(0, 1)
    p = psnr_per_image(y, x)
    s = ssim_per_image(y, x)
    for i in range(3):
        a, b = x[i].numpy(), y[i].numpy()
        assert p[i].item() == pytest.approx(skm.peak_signal_noise_ratio(a, b, data_range=1.0), abs=1e-6)
        # uniform 11x11 window, population variances, valid region: exactly skimage's computation
        ref = skm.structural_similarity(a, b, win_size=11, data_range=1.0, channel_axis=0, use_sample_covariance=False)
        assert s[i].item() == pytest.approx(ref, abs=1e-6)
        # skimage's default (sample covariance, 121/120 factor) differs only slightly
        ref_default = skm.structural_similarity(a, b, win_size=11, data_range=1.0, channel_axis=0)
        assert s[i].item() == pytest.approx(ref_default, abs=1e-3)


def test_ssim_is_uniform_window_not_gaussian():
    from torchmetrics.functional.image import structural_similarity_index_measure as tm_ssim

    x = torch.rand(2, 3, 32, 32, dtype=torch.float64)
    y = (x + 0.1 * torch.randn_like(x)).clamp(0, 1)
    s = ssim_per_image(y, x)
    _, full_uniform = tm_ssim(y, x, gaussian_kernel=False, kernel_size=11, data_range=1.0, reduction="none", return_full_image=True)
    _, full_gauss = tm_ssim(y, x, data_range=1.0, reduction="none", return_full_image=True)
    assert torch.allclose(s, full_uniform[..., 5:-5, 5:-5].flatten(1).mean(1))
    assert not torch.allclose(s, full_gauss[..., 5:-5, 5:-5].flatten(1).mean(1), atol=1e-4)
    assert torch.allclose(ssim_per_image(x, x), torch.ones(2, dtype=torch.float64))


def test_images_are_clamped_and_resolution_256():
    x = torch.rand(2, 3, 32, 32)
    y = x.clone()
    y[:, :, 0, 0] = 5.0  # out of range: clamped to 1 before the metric
    yc = y.clamp(0, 1)
    assert torch.allclose(psnr_per_image(y, x), psnr_per_image(yc, x))
    up = prepare_images(x, 256)
    assert up.shape == (2, 3, 256, 256) and up.min() >= 0 and up.max() <= 1
    ref = torch.nn.functional.interpolate(x, size=(256, 256), mode="bilinear", align_corners=False)
    assert torch.allclose(up, ref)
    p256 = psnr_per_image(y, x, resolution=256)
    assert torch.allclose(p256, psnr_per_image(prepare_images(yc, 256), up))
    assert psnr(x, x) == pytest.approx(100.0)  # MSE floor 1e-10 keeps a perfect match finite
    with pytest.raises(ValueError):
        prepare_images(x, "huge")


# -- LPIPS --------------------------------------------------------------------------------------
def test_lpips_reference_values(shared_weights):
    d = _lpips_dir(shared_weights)
    net, why = load_lpips(d, download=False)
    assert net is not None, why
    ref, p0, p1 = (_example(n, shared_weights) for n in ("ex_ref", "ex_p0", "ex_p1"))
    with torch.inference_mode():
        d0 = net(ref * 2 - 1, p0 * 2 - 1).item()
        d1 = net(ref * 2 - 1, p1 * 2 - 1).item()
        d1n = net(ref, p1, normalize=True).item()
        same = net(ref, ref, normalize=True).item()
    assert d0 == pytest.approx(0.7219, abs=1e-3)
    assert d1 == pytest.approx(0.1376, abs=1e-3)
    assert d1n == pytest.approx(d1, abs=1e-6)
    assert same == pytest.approx(0.0, abs=1e-7)


def test_lpips_weight_resolution(shared_weights, tmp_path, monkeypatch):
    d = _lpips_dir(shared_weights)
    monkeypatch.delenv(LPIPS_ENV, raising=False)
    # the parent folder (holding lpips/) and the trunk file itself are accepted too
    for loc in (shared_weights, d / "alexnet_features.pth"):
        net, why = load_lpips(loc, download=False)
        assert net is not None, why
    monkeypatch.setenv(LPIPS_ENV, str(d))
    net, why = load_lpips(download=False)
    assert net is not None, why
    monkeypatch.setenv(LPIPS_ENV, str(tmp_path))  # a folder without the files
    net, why = load_lpips(download=False)
    assert net is None and "alexnet_features.pth" in why and LPIPS_ENV in why


def test_lpips_missing_weights_give_reason(tmp_path, monkeypatch):
    monkeypatch.delenv(LPIPS_ENV, raising=False)
    net, why = load_lpips(tmp_path / "nowhere", download=False)
    assert net is None and "alexnet_features.pth" in why and "\n" not in why
    net, why = load_lpips(download=False)
    assert net is None and LPIPS_ENV in why


def test_lpips_greyscale_and_batch(shared_weights):
    net, why = load_lpips(_lpips_dir(shared_weights), download=False)
    assert net is not None, why
    x = torch.rand(3, 1, 32, 32)
    y = (x + 0.1 * torch.randn_like(x)).clamp(0, 1)
    with torch.inference_mode():
        batch = net(x, y, normalize=True)
        single = torch.cat([net(x[i : i + 1], y[i : i + 1], normalize=True) for i in range(3)])
        rgb = net(x.repeat(1, 3, 1, 1), y.repeat(1, 3, 1, 1), normalize=True)
    assert batch.shape == (3,) and (batch > 0).all()
    assert torch.allclose(batch, single, atol=1e-5) and torch.allclose(batch, rgb, atol=1e-6)


# -- evaluate_reconstructions -------------------------------------------------------------------
@dataclass
class _Out:
    quantized: torch.Tensor
    indices: torch.Tensor
    perplexity: torch.Tensor


class _NoisyIdentity(nn.Module):
    """Test double for the autoencoder API: x_hat = x + noise (may leave [0, 1]); fake 4x4 codes."""

    def __init__(self, num_codes: int = 16, noise: float = 0.1):
        super().__init__()
        self.num_codes, self.noise = num_codes, noise
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        g = torch.Generator().manual_seed(int(x.sum().item() * 1000) % (2**31))
        x_hat = x * self.scale + self.noise * torch.randn(x.shape, generator=g)
        idx = (x[:, 0, ::8, ::8] * self.num_codes).long().clamp(0, self.num_codes - 1)
        return x_hat, _Out(torch.zeros(x.shape[0], 2, 4, 4), idx, torch.tensor(1.0))


class _TinyFeatures(InceptionFeatures):
    """Test double for the Inception wrapper: 16 fixed random projections of 4x4 average pools."""

    def __init__(self):
        proj = nn.Conv2d(3, 16, kernel_size=1, bias=False)
        nn.init.normal_(proj.weight, generator=torch.Generator().manual_seed(0))
        super().__init__(nn.Sequential(nn.AdaptiveAvgPool2d(4), proj, nn.Flatten()), identity="tiny-v1")

    def _forward(self, batch):
        return self.module(batch.to(self.device).float()).double()


def _loader(n=10, bs=4, size=32):
    data = torch.rand(n, 3, size, size)
    ds = torch.utils.data.TensorDataset(data, torch.zeros(n, dtype=torch.long))
    return data, torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=False)


def test_evaluate_without_metric_networks(tmp_path):
    model = _NoisyIdentity()
    model.train()
    data, loader = _loader(10, 4)
    missing_net, why = load_lpips(tmp_path / "none", download=False)
    assert missing_net is None
    res = evaluate_reconstructions(model, loader, num_codes=16, device="cpu", lpips_net=missing_net,
                                   inception=None, progress=False, skip_reasons={"lpips": why})
    assert model.training  # mode restored
    assert res["num_images"] == 10 and res["resolution"] == "native"
    assert res["lpips"] is None and res["lpips_skipped"] == why
    assert res["rfid"] is None and "Inception" in res["rfid_skipped"]

    # the other metrics are computed, on reconstructions clamped to [0, 1]
    model.eval()
    with torch.no_grad():
        rec = torch.cat([model(b)[0] for b, _ in loader]).clamp(0, 1)
    assert res["mse"] == pytest.approx(float(((rec - data) ** 2).mean()), rel=1e-6)
    assert res["psnr"] == pytest.approx(float(psnr_per_image(rec, data).mean()), rel=1e-6)
    assert res["ssim"] == pytest.approx(float(ssim_per_image(rec, data).mean()), rel=1e-6)
    counts = torch.bincount((data[:, 0, ::8, ::8] * 16).long().clamp(0, 15).reshape(-1), minlength=16)
    assert res["code_counts"] == counts.tolist() and sum(res["code_counts"]) == 10 * 16
    p = counts.double() / counts.sum()
    assert res["perplexity"] == pytest.approx(float(torch.exp(-(p[p > 0] * p[p > 0].log()).sum())), rel=1e-9)
    assert res["codes_used"] == int((counts > 0).sum())

    # limit and the 256 resolution
    res = evaluate_reconstructions(model, loader, num_codes=16, device="cpu", resolution=256, limit=5, progress=False)
    assert res["num_images"] == 5 and res["resolution"] == 256 and sum(res["code_counts"]) == 5 * 16
    with torch.no_grad():  # the second batch was cut to 1 image before the model saw it
        rec5 = torch.cat([model(data[:4])[0], model(data[4:5])[0]]).clamp(0, 1)
    assert res["psnr"] == pytest.approx(float(psnr_per_image(rec5, data[:5], resolution=256).mean()), rel=1e-6)


def test_evaluate_auto_networks_missing(tmp_path, monkeypatch):
    monkeypatch.setenv(LPIPS_ENV, str(tmp_path / "no-lpips"))
    monkeypatch.setenv(fidmod.INCEPTION_ENV, str(tmp_path / "no-inception"))
    threads = torch.get_num_threads()
    _, loader = _loader(4, 4)
    res = evaluate_reconstructions(_NoisyIdentity(), loader, num_codes=16, device="cpu", lpips_net="auto",
                                   inception="auto", progress=False, num_threads=1)
    assert torch.get_num_threads() == threads
    assert res["lpips"] is None and LPIPS_ENV in res["lpips_skipped"]
    assert res["rfid"] is None and INCEPTION_FILENAME in res["rfid_skipped"]
    assert res["psnr"] > 0 and res["ssim"] > 0 and res["codes_used"] > 0


def test_evaluate_rfid_uses_stats_cache(tmp_path):
    model = _NoisyIdentity()
    data, loader = _loader(10, 4)
    feats = _TinyFeatures()
    cache = FIDStatsCache(tmp_path)
    key = StatsKey("toy", "test", None, str(tmp_path), dataset_fingerprint(data))
    r1 = evaluate_reconstructions(model, loader, num_codes=16, device="cpu", inception=feats,
                                  real_stats_cache_key=key, stats_cache=cache, progress=False)
    assert r1["rfid_real_stats"] == "computed" and r1["rfid"] > 0
    assert cache.lookup(key, "tiny-v1", 10) is not None
    r2 = evaluate_reconstructions(model, loader, num_codes=16, device="cpu", inception=feats,
                                  real_stats_cache_key=key, stats_cache=cache, progress=False)
    # the same value: both paths take the exact sample-space form (N = 10 < 256 features)
    assert r2["rfid_real_stats"] == "cache" and r2["rfid"] == pytest.approx(r1["rfid"], rel=1e-9)
    # a key that does not describe the loader (here: 8 of the 10 images) is a miss, not silently used
    with pytest.warns(UserWarning, match="not 8"):
        r3 = evaluate_reconstructions(model, loader, num_codes=16, device="cpu", inception=feats, limit=8,
                                      real_stats_cache_key=key, stats_cache=cache, progress=False)
    assert r3["rfid_real_stats"] == "computed"
    cache.save(key, "tiny-v1", *feature_statistics(feats(data)), num_images=10)
    # the cached real statistics are those of the real images
    mu, sigma = cache.lookup(key, "tiny-v1", 10)
    mu_ref, sigma_ref = feature_statistics(feats(data))
    assert np.allclose(mu, mu_ref) and np.allclose(sigma, sigma_ref)
    # the value equals FID of real vs reconstruction features computed by hand
    model.eval()
    with torch.no_grad():
        rec = torch.cat([model(b)[0] for b, _ in loader]).clamp(0, 1)
    # (FID is a difference of traces ~1e3 times larger: methods agree to ~1e-9 of those, not of FID)
    assert r1["rfid"] == pytest.approx(eig_frechet(*feature_statistics(feats(data)), *feature_statistics(feats(rec))), rel=1e-4)


def test_evaluate_with_real_networks(shared_weights):
    lp, why = load_lpips(_lpips_dir(shared_weights), download=False)
    assert lp is not None, why
    inc = inception(shared_weights)
    model = _NoisyIdentity(noise=0.05)
    data, loader = _loader(3, 2)
    res = evaluate_reconstructions(model, loader, num_codes=16, device="cpu", lpips_net=lp, inception=inc, progress=False)
    assert "lpips_skipped" not in res and "rfid_skipped" not in res
    assert 0 < res["lpips"] < 1 and res["rfid"] > 0
    with torch.no_grad():
        rec = torch.cat([model(b)[0] for b, _ in loader]).clamp(0, 1)
        assert res["lpips"] == pytest.approx(float(lp(rec, data, normalize=True).mean()), rel=1e-5)


def test_metric_threads_leave_cpus_that_other_work_keeps_busy(tmp_path, monkeypatch):
    # /proc/loadavg's 4th field counts runnable tasks now, the reader included; the 1-minute average is not
    # used because it still counts work that has just finished (this process's own training, say).
    p = tmp_path / "loadavg"
    p.write_text("7.90 3.10 1.20 3/412 12345\n")
    assert threadmod.runnable_others(readings=3, interval=0, path=str(p)) == 2
    p.write_text("7.90 3.10 1.20 1/412 12345\n")  # only the reader: the machine is idle whatever the average
    assert threadmod.runnable_others(readings=1, interval=0, path=str(p)) == 0
    assert threadmod.runnable_others(readings=1, interval=0, path=str(tmp_path / "missing")) == 0
    monkeypatch.delenv(threadmod.ENV)  # the guess, not the pin that conftest sets for every test
    monkeypatch.setattr(threadmod.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    for others, expected in ((0, 4), (1, 3), (3, 1), (9, 1)):
        p.write_text(f"7.90 3.10 1.20 {others + 1}/412 12345\n")  # the reader and `others` runnable tasks
        assert threadmod.default_num_threads(loadavg=str(p)) == expected
