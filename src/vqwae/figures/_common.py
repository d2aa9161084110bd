"""Shared plumbing: Agg figures without pyplot's global state, PNG saving, array conversion."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from vqwae.extras import require

PathLike = str | os.PathLike
DPI = 120


def new_figure(width: float, height: float):
    """A matplotlib Figure bound to an Agg canvas (works headless; never touches pyplot)."""
    # Imported here: matplotlib costs ~0.9 s at import, and most commands draw nothing.
    FigureCanvasAgg = require("matplotlib.backends.backend_agg").FigureCanvasAgg
    Figure = require("matplotlib.figure").Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig, path: PathLike) -> Path:
    """Save ``fig`` as PNG (parent folders created) and return the path."""
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    return p


def to_numpy_1d(values) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64).reshape(-1)


def images_to_numpy(images) -> np.ndarray:
    """(N, C, H, W) tensor/array (or a sequence of (C, H, W)) in [0, 1] -> (N, H, W, C) float in [0, 1]."""
    if isinstance(images, torch.Tensor):
        images = images.detach().cpu().float().numpy()
    elif isinstance(images, Sequence) and images and isinstance(images[0], torch.Tensor):
        images = torch.stack([t.detach().cpu().float() for t in images]).numpy()
    arr = np.asarray(images, dtype=np.float32)
    if arr.ndim == 3:  # (N, H, W) greyscale
        arr = arr[:, None]
    if arr.ndim != 4:
        raise ValueError(f"expected images of shape (N, C, H, W), got {arr.shape}")
    if arr.shape[1] not in (1, 3) and arr.shape[-1] in (1, 3):  # already channels-last
        arr = arr.transpose(0, 3, 1, 2)
    return np.clip(arr, 0.0, 1.0).transpose(0, 2, 3, 1)
