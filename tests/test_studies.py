"""Representation studies: linear probe on frozen features, t-SNE with silhouette score."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn


from vqwae.studies import (
    Standardizer,
    extract_features,
    linear_probe,
    probe_autoencoder,
    silhouette_2d,
    tsne_plot,
)



def _blobs(n_per, num_classes=4, dim=20, spread=0.5, seed=0):
    """Gaussian blobs around well separated centres, then a random affine map with wildly scaled axes."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(num_classes, dim, generator=g) * 4
    y = torch.arange(num_classes).repeat_interleave(n_per)
    x = centres[y] + spread * torch.randn(len(y), dim, generator=g)
    A = torch.randn(dim, dim, generator=torch.Generator().manual_seed(99)) * torch.logspace(-2, 2, dim)
    return x @ A + 1000.0, y


# ---- linear probe -------------------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
def test_probe_separable_toy_set(optimizer):
    x, y = _blobs(150)  # 600 points, 4 classes; 400 train / 200 held out
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    tr, te = perm[:400], perm[400:]
    res = linear_probe(x[tr], y[tr], x[te], y[te], optimizer=optimizer, epochs=20, lr=1e-2, seed=0)
    assert res.test_accuracy >= 0.98 and res.train_accuracy >= 0.98, res.as_dict()
    assert res.num_features == 20 and res.num_classes == 4 and res.iterations > 0
    # deterministic with a seed
    again = linear_probe(x[tr], y[tr], x[te], y[te], optimizer=optimizer, epochs=20, lr=1e-2, seed=0)
    assert again.test_accuracy == res.test_accuracy and torch.equal(again.probe.weight, res.probe.weight)


def test_probe_flattens_and_standardises_on_train_only():
    x, y = _blobs(60, num_classes=3, dim=12)
    x = x.reshape(-1, 3, 2, 2)  # (N, D, h, w) features are flattened
    res = linear_probe(x[:120], y[:120], x[120:] + 5.0, y[120:])
    assert res.num_features == 12
    torch.testing.assert_close(res.standardizer.mean, x[:120].flatten(1).mean(0), rtol=1e-5, atol=1e-3)
    z = res.standardizer(x[:120].flatten(1))
    torch.testing.assert_close(z.mean(0), torch.zeros(12), atol=1e-3, rtol=0)
    torch.testing.assert_close(z.std(0, unbiased=False), torch.ones(12), atol=1e-3, rtol=0)
    # a constant feature does not blow up
    s = Standardizer.fit(torch.ones(5, 2))
    assert torch.isfinite(s(torch.ones(3, 2))).all()
    with pytest.raises(ValueError):
        linear_probe(x[:10], y[:10], x[:10], y[:10], optimizer="sgd")


def test_probe_chance_on_random_labels():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(600, 10, generator=g)
    y = torch.randint(0, 2, (600,), generator=g)
    res = linear_probe(x[:400], y[:400], x[400:], y[400:])
    assert 0.35 < res.test_accuracy < 0.65


@dataclass
class _Out:
    quantized: torch.Tensor


class _FakeAE(nn.Module):
    """encoder: fixed random 1x1 conv + 2x2 pooling (B, 3, 8, 8) -> (B, 4, 4, 4); quantized: rounded."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 4, 1), nn.AvgPool2d(2))

    def forward(self, x):
        z = self.encoder(x)
        zq = torch.round(z * 4) / 4
        return x, _Out(quantized=zq)


def _class_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    x = 0.1 * torch.rand(n, 3, 8, 8, generator=g)
    x[torch.arange(n), y] += 1.0  # class c: channel c lit
    return x, y


def test_extract_features_and_probe_autoencoder():
    torch.manual_seed(0)
    ae = _FakeAE().train()
    mk = lambda n, s: torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*_class_images(n, s)), batch_size=16)
    feats, labels = extract_features(ae, mk(50, 0))
    assert set(feats) == {"quantized", "continuous"}
    assert feats["quantized"].shape == feats["continuous"].shape == (50, 64) and labels.shape == (50,)
    assert ae.training  # mode restored
    res = probe_autoencoder(ae, mk(90, 0), mk(45, 1))
    assert set(res) == {"quantized", "continuous"}
    for r in res.values():
        assert r.test_accuracy >= 0.95 and r.num_features == 64
    only = probe_autoencoder(ae, mk(30, 0), mk(15, 1), kinds=("continuous",))
    assert set(only) == {"continuous"}
    with pytest.raises(ValueError):
        extract_features(ae, mk(4, 0), kinds=("pixels",))


# ---- t-SNE --------------------------------------------------------------------------------------------
def test_tsne_clusters_png_and_silhouette(tmp_path):
    x, y = _blobs(40, num_classes=3, dim=10, spread=0.3)
    res = tsne_plot(x, y, out_png=tmp_path / "tsne.png", title="toy blobs", class_names=["a", "b", "c"],
                    perplexity=15, max_iter=500, seed=0)
    assert res.embedding.shape == (120, 2) and res.png_path.is_file()
    assert res.png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and res.png_path.stat().st_size > 5000
    assert res.silhouette > 0.7, res.silhouette
    again = tsne_plot(x, y, perplexity=15, max_iter=500, seed=0)  # no PNG; deterministic with a seed
    assert again.png_path is None and np.allclose(again.embedding, res.embedding)
    # subsampling, tiny-set perplexity capping and the score on mixed labels
    sub = tsne_plot(x, y, max_points=30, max_iter=250, seed=1)
    assert sub.embedding.shape == (30, 2) and len(sub.indices) == 30
    mixed = silhouette_2d(res.embedding, np.random.default_rng(0).integers(0, 3, 120))
    assert mixed < 0.1
    assert np.isnan(silhouette_2d(res.embedding, np.zeros(120)))


def test_tsne_survives_coincident_points(tmp_path):
    """A collapsed codebook gives many identical latents; scikit-learn's Barnes-Hut t-SNE used to segfault on
    them (the whole process died). 800 points in two exact duplicates: both the exact and BH paths."""
    import numpy as np

    from vqwae.studies import tsne_plot

    for n in (40, 800):
        x = np.zeros((n, 64), dtype=np.float32)
        x[n // 2:] = 1.0
        y = np.r_[np.zeros(n // 2), np.ones(n - n // 2)].astype(int)
        res = tsne_plot(x, y, out_png=tmp_path / f"dup{n}.png")
        assert np.isfinite(res.embedding).all() and res.silhouette > 0.5
