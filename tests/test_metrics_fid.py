"""The FID layer: Inception preprocessing (uint8 rounding, TF1 bilinear resize), the Frechet distance against two
independent formulas and torch-fidelity, the Inception features, and the statistics cache.

Tests that need the pretrained weights in ../shared/weights skip with a reason when they are absent. Inception-based
tests use a handful of images (the network costs ~0.1-0.5 s per image on 2 CPU cores).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from vqwae import threads as threadmod
from vqwae.metrics import fid as fidmod
from vqwae.metrics.fid_cache import FIDStatsCache, StatsKey, dataset_fingerprint
from vqwae.metrics.fid import (
    INCEPTION_FILENAME,
    feature_statistics,
    fid_from_features,
    frechet_distance,
    load_inception,
    preprocess_for_inception,
    quantize_uint8,
    resize_bilinear_tf1,
)

from tests.helpers import eig_frechet, inception

HAS_TORCH_FIDELITY = importlib.util.find_spec("torch_fidelity") is not None


# -- an independent Frechet distance ---------------------------------------------------------------
def _gram_frechet(f1: np.ndarray, f2: np.ndarray) -> float:
    """Independent low-sample Frechet distance: eigenvalues of (A1 A2^T)(A1 A2^T)^T via np.linalg.eigvals."""
    a1, a2 = f1 - f1.mean(0), f2 - f2.mean(0)
    n1, n2 = len(f1), len(f2)
    m = a1 @ a2.T
    ev = np.real(np.linalg.eigvals(m @ m.T))
    tr_covmean = np.sqrt(np.clip(ev, 0, None)).sum() / np.sqrt((n1 - 1) * (n2 - 1))
    d = f1.mean(0) - f2.mean(0)
    return float(d @ d + (a1**2).sum() / (n1 - 1) + (a2**2).sum() / (n2 - 1) - 2 * tr_covmean)



# -- Inception preprocessing --------------------------------------------------------------------
def test_uint8_quantisation_rounds():
    x = torch.tensor([0.0, 0.49 / 255, 0.51 / 255, 100.4 / 255, 100.6 / 255, 254.6 / 255, 1.0, 1.3, -0.2])
    q = quantize_uint8(x)
    assert q.dtype == torch.uint8
    assert q.tolist() == [0, 0, 1, 100, 101, 255, 255, 255, 0]  # truncation would give 0,0,0,100,100,254,...
    # exact uint8 values survive the round trip [0, 255] -> [0, 1] -> uint8
    u = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(quantize_uint8(u.float() / 255), u)


def test_tf1_bilinear_resize():
    # 2 -> 4 pixels: source coordinates 0, 0.5, 1, 1.5 (clamped) -> a, (a+b)/2, b, b
    x = torch.tensor([[[[0.0, 10.0]]]]).expand(1, 1, 2, 2).contiguous()
    out = resize_bilinear_tf1(x, size=4)
    assert torch.allclose(out[0, 0, 0], torch.tensor([0.0, 5.0, 10.0, 10.0]))
    # not torch's half-pixel bilinear
    torch_bilinear = torch.nn.functional.interpolate(x, size=(4, 4), mode="bilinear", align_corners=False)
    assert not torch.allclose(out, torch_bilinear)
    x = torch.rand(2, 3, 32, 32) * 255
    out = resize_bilinear_tf1(x)
    assert out.shape == (2, 3, 299, 299)
    if HAS_TORCH_FIDELITY:
        from torch_fidelity.interpolate_compat_tensorflow import interpolate_bilinear_2d_like_tensorflow1x

        ref = interpolate_bilinear_2d_like_tensorflow1x(x, size=(299, 299), align_corners=False)
        assert torch.equal(out, ref)


def test_preprocess_greyscale_repeats_channels():
    g = torch.rand(2, 1, 28, 28)
    a = preprocess_for_inception(g)
    b = preprocess_for_inception(g.repeat(1, 3, 1, 1))
    assert a.shape == (2, 3, 299, 299) and torch.equal(a, b)
    assert a.min() >= -1.0 and a.max() <= 127 / 128


# -- Frechet distance ---------------------------------------------------------------------------
def test_frechet_distance_matches_independent_formula():
    rng = np.random.default_rng(0)
    for n in (300, 20):  # full-rank and rank-deficient covariances
        f1 = rng.normal(size=(n, 48))
        f2 = rng.normal(size=(n, 48)) * 1.3 + 0.2
        mu1, s1 = feature_statistics(f1)
        mu2, s2 = feature_statistics(f2)
        ours = frechet_distance(mu1, s1, mu2, s2)
        assert ours == pytest.approx(eig_frechet(mu1, s1, mu2, s2), rel=1e-6)
        assert ours == pytest.approx(fid_from_features(f1, f2), rel=1e-6)
        assert frechet_distance(mu1, s1, mu1, s1) == pytest.approx(0.0, abs=1e-4)
    # the sample-space path (N < D) against the sqrtm path on the same features
    f1, f2 = rng.normal(size=(12, 64)), rng.normal(size=(10, 64)) + 0.1
    assert fid_from_features(f1, f2) == pytest.approx(frechet_distance(*feature_statistics(f1), *feature_statistics(f2)), rel=1e-6)
    assert fid_from_features(f1, f2) == pytest.approx(_gram_frechet(f1, f2), rel=1e-9)


def test_frechet_distance_tiny_imaginary_parts_are_dropped():
    # 1-D: (1 * 4)^(1/2) = 2, distance = (1-3)^2 + 1 + 4 - 4 = 5
    assert frechet_distance(np.array([1.0]), np.array([[1.0]]), np.array([3.0]), np.array([[4.0]])) == pytest.approx(5.0)
    rng = np.random.default_rng(1)
    a = rng.normal(size=(5, 8))
    s = a.T @ a / 4  # rank 4 of 8: sqrtm of a singular product
    assert abs(frechet_distance(np.zeros(8), s, np.zeros(8), s)) < 1e-3


# -- Inception features -------------------------------------------------------------------------
def test_inception_features_and_fid(shared_weights):
    inc = inception(shared_weights)
    x = torch.rand(3, 3, 32, 32)
    y = (x + 0.15 * torch.randn_like(x)).clamp(0, 1)
    fx, fy = inc(torch.cat([x, y])).split(3)
    assert fx.shape == (3, 2048) and fx.dtype == torch.float64 and torch.isfinite(fx).all() and (fx >= 0).all()
    # batching does not change features
    assert torch.allclose(inc(x[:1]), fx[:1], atol=1e-4)
    # FID of a set against itself is 0; pipeline FID equals an independently computed one
    assert abs(fid_from_features(fx, fx)) < 1e-3
    ours = fid_from_features(fx, fy)
    assert ours > 0
    assert ours == pytest.approx(_gram_frechet(fx.numpy(), fy.numpy()), rel=1e-6)


def test_inception_weight_resolution(shared_weights, tmp_path, monkeypatch):
    inception(shared_weights)  # skips without the file
    monkeypatch.delenv(fidmod.INCEPTION_ENV, raising=False)
    net, why = load_inception(tmp_path / "missing.pt", download=False)
    assert net is None and INCEPTION_FILENAME in why
    net, why = load_inception(download=False)
    assert net is None and fidmod.INCEPTION_ENV in why
    monkeypatch.setenv(fidmod.INCEPTION_ENV, str(shared_weights))  # folder holding inception/
    net, why = load_inception(download=False)
    assert net is not None, why
    assert net.identity.endswith("7ff4a85c3a6378f0dfc8433ffd789663b01176bec0a683a435651739c091fa34")


def _torch_fidelity_from_torchscript(ts_module):
    """torch-fidelity's InceptionV3 with the TorchScript file's weights remapped into it (no download).

    The TorchScript convolutions (weight, beta, mean, var; BN without scale, eps 1e-3) appear in the
    same order as torch-fidelity's BasicConv2d modules; gamma is 1; the fc (logits) is unused here.
    """
    import tempfile

    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

    class _Shell(FeatureExtractorInceptionV3):  # build the architecture from an empty state dict
        def load_state_dict(self, sd, strict=True, **kw):
            return super().load_state_dict(sd, strict=False)

    with tempfile.TemporaryDirectory() as d:
        empty = os.path.join(d, "empty.pth")
        torch.save({}, empty)
        net = _Shell("inception-v3-compat", ["2048"], feature_extractor_weights_path=empty)
    ours = [n for n, m in net.named_modules() if type(m).__name__ == "BasicConv2d"]
    sd = ts_module.state_dict()
    theirs = list(dict.fromkeys(k.rsplit(".", 1)[0] for k in sd))
    assert len(ours) == len(theirs) == 94
    target = net.state_dict()
    new = {k: torch.zeros_like(v) for k, v in target.items()}
    for a, b in zip(ours, theirs):
        assert target[f"{a}.conv.weight"].shape == sd[f"{b}.weight"].shape, (a, b)
        new[f"{a}.conv.weight"] = sd[f"{b}.weight"]
        new[f"{a}.bn.weight"] = torch.ones_like(sd[f"{b}.beta"])
        new[f"{a}.bn.bias"] = sd[f"{b}.beta"]
        new[f"{a}.bn.running_mean"] = sd[f"{b}.mean"]
        new[f"{a}.bn.running_var"] = sd[f"{b}.var"]
    FeatureExtractorInceptionV3.load_state_dict(net, new, strict=True)
    return net.eval()


@pytest.mark.skipif(not HAS_TORCH_FIDELITY, reason="torch-fidelity is not installed (optional; used only for this cross-check)")
def test_inception_matches_torch_fidelity(shared_weights):
    # torch-fidelity's own weights are a download (not possible offline); its architecture is loaded
    # with the TorchScript file's weights instead, which the shared README says match it to 1e-6.
    # This checks our whole preprocessing (rounding, grey->RGB, TF1 resize, scaling) against theirs.
    inc = inception(shared_weights)
    tf_net = _torch_fidelity_from_torchscript(inc.module)
    x = torch.rand(1, 3, 32, 32)
    g = torch.rand(1, 1, 28, 28)
    with torch.inference_mode(), threadmod.cpu_threads():
        ref = tf_net(quantize_uint8(x))[0].double()
        ref_g = tf_net(quantize_uint8(g).repeat(1, 3, 1, 1))[0].double()
    assert torch.allclose(inc(x), ref, atol=1e-4, rtol=1e-4)
    assert torch.allclose(inc(g), ref_g, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not HAS_TORCH_FIDELITY, reason="torch-fidelity is not installed (optional; used only for this cross-check)")
@pytest.mark.parametrize("n,d", [(600, 64), (300, 512)])
def test_frechet_distance_matches_torch_fidelity(n, d):
    """The hand-written distance (and its exact sample-space form for N < D) gives torch-fidelity's number."""
    from torch_fidelity.metric_fid import fid_statistics_to_metric

    g = np.random.default_rng(n)
    f1, f2 = g.normal(size=(n, d)), 1.1 * g.normal(size=(n, d)) + 0.05
    s1, s2 = feature_statistics(f1), feature_statistics(f2)
    ref = fid_statistics_to_metric(dict(mu=s1[0], sigma=s1[1]), dict(mu=s2[0], sigma=s2[1]), False)
    ref = ref["frechet_inception_distance"]
    for ours in (frechet_distance(*s1, *s2), fid_from_features(f1, f2), fidmod.fid_against_statistics(*s1, f2)):
        assert ours == pytest.approx(ref, rel=1e-3)


# -- statistics cache ---------------------------------------------------------------------------
def test_stats_cache_roundtrip_and_invalidation(tmp_path):
    data = torch.rand(10, 3, 8, 8)
    fp = dataset_fingerprint(data)
    key = StatsKey("cifar10", "test", None, str(tmp_path), fp)
    cache = FIDStatsCache(tmp_path / "fid")
    mu, sigma = np.arange(3.0), np.eye(3)
    assert cache.lookup(key, "w1", 10) is None
    p = cache.save(key, "w1", mu, sigma, num_images=10)
    assert p is not None and p.is_file() and p.suffix == ".npz"
    umask = os.umask(0)
    os.umask(umask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~umask  # the usual mode, not mkstemp's 0600
    assert not [q for q in p.parent.iterdir() if q.suffix == ".tmp"]  # atomic write left no temp file
    got = cache.lookup(key, "w1", 10)
    assert got is not None and np.array_equal(got[0], mu) and np.array_equal(got[1], sigma)
    with pytest.warns(UserWarning, match="holds 10 images' statistics, not 9"):  # another count: a miss
        assert cache.lookup(key, "w1", 9) is None

    # any change of the images (first / last item, count), the limit, root, split or weights: a miss
    changed = data.clone()
    changed[-1, 0, 0, 0] += 0.5
    for other_fp in (dataset_fingerprint(changed), dataset_fingerprint(data[:9]), dataset_fingerprint(data, limit=5)):
        assert other_fp != fp
        assert cache.lookup(StatsKey("cifar10", "test", None, str(tmp_path), other_fp), "w1", 10) is None
    assert dataset_fingerprint(data.clone()) == fp
    assert cache.lookup(key, "w2", 10) is None
    assert cache.lookup(StatsKey("cifar10", "test", 5, str(tmp_path), fp), "w1", 10) is None
    assert cache.lookup(StatsKey("cifar10", "train", None, str(tmp_path), fp), "w1", 10) is None
    assert cache.lookup(StatsKey("cifar10", "test", None, str(tmp_path / "other"), fp), "w1", 10) is None

    # a corrupt file is a miss (with a warning), not a crash
    p.write_bytes(b"not an npz")
    with pytest.warns(UserWarning, match="unreadable"):
        assert cache.lookup(key, "w1", 10) is None
    cache.save(key, "w1", mu, sigma, num_images=10)  # what a caller does after a miss: the file is replaced
    assert cache.lookup(key, "w1", 10) is not None


def test_stats_cache_default_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("VQWAE_CACHE", str(tmp_path))
    assert FIDStatsCache().cache_dir == tmp_path / "fid"
    monkeypatch.delenv("VQWAE_CACHE")
    assert FIDStatsCache().cache_dir == Path.home() / ".cache" / "vqwae" / "fid"
