"""Figures: each function writes a non-empty PNG of a sensible size; inputs in the documented forms."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vqwae.figures import (
    read_metrics_jsonl,
    reconstruction_grid,
    side_by_side_usage,
    training_curves,
    usage_histogram,
    usage_summary,
)
from vqwae.figures.curves import group_metric_keys

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 2000
    with Image.open(path) as im:
        return im.size


def test_reconstruction_grid_rgb_and_grey(tmp_path):
    x = torch.rand(12, 3, 32, 32)
    xr = (x + 0.1 * torch.randn_like(x))  # out of range: clipped for display
    p = reconstruction_grid(x, xr, tmp_path / "sub" / "grid.png", nrow=8)
    w, h = _png_size(p)
    assert w > h > 200  # 2 pairs of rows of 8
    g = np.random.default_rng(0).random((4, 1, 28, 28))
    w2, h2 = _png_size(reconstruction_grid(g, g, tmp_path / "grey.png", nrow=4))
    assert w2 > 200 and h2 > 100
    with pytest.raises(ValueError):
        reconstruction_grid(x, xr[:, :, :16], tmp_path / "bad.png")


def test_usage_histogram_with_pi(tmp_path):
    rng = np.random.default_rng(0)
    k = 64
    pi = rng.dirichlet(np.ones(k))
    counts = rng.multinomial(5000, pi)
    counts[:3] = 0
    p = usage_histogram(counts, tmp_path / "usage.png", pi=torch.tensor(pi))
    w, h = _png_size(p)
    assert w > h
    _png_size(usage_histogram(torch.tensor(counts), tmp_path / "sorted.png", sort=True, title="sorted"))
    freq, ppl, used = usage_summary(counts)
    assert freq.sum() == pytest.approx(1.0) and used == int((counts > 0).sum()) <= k - 3 and 1 < ppl <= used
    with pytest.raises(ValueError):
        usage_histogram(counts, tmp_path / "bad.png", pi=pi[:10])


def test_usage_summary_matches_code_usage():
    from vqwae.metrics.usage import CodeUsage

    idx = torch.randint(0, 32, (5, 8, 8))
    u = CodeUsage(32)
    u.update(idx)
    _, ppl, used = usage_summary(u.counts)
    assert ppl == pytest.approx(u.perplexity) and used == u.codes_used


def test_side_by_side_usage(tmp_path):
    rng = np.random.default_rng(1)
    k = 128
    counts = {
        "VQ-WAE": rng.multinomial(10000, np.ones(k) / k),
        "VQ-VAE": np.concatenate([rng.multinomial(10000, np.ones(20) / 20), np.zeros(k - 20)]),
        "dual": list(rng.multinomial(10000, rng.dirichlet(np.ones(k)))),
        "fourth": rng.multinomial(10000, np.ones(k) / k),
    }
    w, h = _png_size(side_by_side_usage(counts, tmp_path / "side.png"))
    assert w > h  # 3 columns, 2 rows
    with pytest.raises(ValueError):
        side_by_side_usage({}, tmp_path / "none.png")


def test_training_curves(tmp_path):
    log = tmp_path / "metrics.jsonl"
    with log.open("w") as f:
        for e in range(1, 11):
            rec = {"epoch": e, "train/loss": -100.0 - e, "train/ws": 1.0 / e, "train/kl": 2.0 - 0.1 * e,
                   "train/mse": 0.01 / e, "lr": 3e-4 * 0.9**e, "note": "text is ignored", "flag": True}
            if e % 2 == 0:
                rec.update({"val/mse": 0.012 / e, "val/perplexity": 50.0 + e, "val/loss": -100.0 - e})
            f.write(json.dumps(rec) + "\n")
        f.write("\n")
        f.write('{"epoch": 11, "train/lo')  # a line cut short by an interrupted run
    assert len(read_metrics_jsonl(log)) == 10
    w, h = _png_size(training_curves(log, tmp_path / "curves.png"))
    assert w > 800 and h > 400


def test_metric_key_grouping():
    panels = dict(group_metric_keys(["train/loss", "val/loss", "train/ws", "train/kl", "train/mse", "val/mse",
                                     "val/perplexity", "lr", "seconds", "images_per_second", "step"]))
    assert panels["loss"] == ["train/loss", "val/loss"]
    assert panels["loss term: ws"] == ["train/ws"] and panels["loss term: kl"] == ["train/kl"]
    assert panels["reconstruction MSE"] == ["train/mse", "val/mse"]
    assert panels["codebook perplexity / usage"] == ["val/perplexity"]
    assert panels["learning rate"] == ["lr"]
    # quantities of different units each get their own panel; a step counter is an x axis, not a curve
    assert panels["training time per epoch (s)"] == ["seconds"]
    assert panels["throughput (images / s)"] == ["images_per_second"]
    assert not any("step" in keys for keys in panels.values())
    assert list(panels)[0] == "loss"


def test_training_curves_without_epoch_key(tmp_path):
    log = tmp_path / "m.jsonl"
    log.write_text("\n".join(json.dumps({"train/loss": float(i)}) for i in range(5)) + "\n")
    _png_size(training_curves(log, tmp_path / "c.png"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError):
        training_curves(empty, tmp_path / "e.png")


def test_side_by_side_usage_scales_each_panel(tmp_path, monkeypatch):
    """A collapsed codebook's tall bar must not flatten a fully used one: each panel has its own y range."""
    import vqwae.figures.usage as usage

    figures = []
    real_save = usage.save_png
    monkeypatch.setattr(usage, "save_png", lambda fig, path: (figures.append(fig), real_save(fig, path))[1])
    k = 64
    counts = {"uniform": np.full(k, 100), "collapsed": np.concatenate([[100 * k], np.zeros(k - 1)])}
    side_by_side_usage(counts, tmp_path / "side.png")
    tops = [ax.get_ylim()[1] for ax in figures[0].axes if ax.get_visible()][:2]
    assert tops[1] > 20 * tops[0]  # the uniform panel is scaled to its own bars
