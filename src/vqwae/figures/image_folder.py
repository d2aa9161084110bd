"""A folder of images, one PNG each plus ``grid.png``: what ``vqwae sample`` and ``vqwae decode`` write.

    save_image_folder(images, "out/", prefix="sample", suffixes=[f"_class{c}" for c in labels])
    # out/sample_000_class0.png, out/sample_001_class1.png, ..., out/grid.png
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import torch

from vqwae.progress import progress_bar

GRID = "grid.png"


def save_image_folder(images: torch.Tensor, out: str | os.PathLike, *, prefix: str,
                      suffixes: Sequence[str] | None = None, nrow: int | None = None,
                      grid_count: int | None = None, progress: bool = False) -> Path:
    """One PNG per image of ``images`` (N, C, S, S) in [0, 1], named ``{prefix}_{i}{suffix}.png`` with i zero-padded
    to N's width, and ``grid.png`` of the first ``grid_count`` images (None: all), ``nrow`` per row (default about
    sqrt). PNGs of an earlier, larger call with the same prefix are removed first, so the folder holds exactly
    these images. ``progress``: a bar (or log lines) over the images written."""
    # Imported here: torchvision costs ~1.6 s at import (it loads torch._dynamo), and only these commands need it.
    from torchvision.utils import save_image

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(f"{prefix}_*.png"):
        stale.unlink()
    n = images.shape[0]
    width = len(str(n - 1))
    for i in progress_bar(range(n), desc="write PNGs" if progress else None, unit="img"):
        save_image(images[i], out / f"{prefix}_{i:0{width}d}{suffixes[i] if suffixes else ''}.png")
    shown = images if grid_count is None else images[:grid_count]
    if nrow is None:
        nrow = max(1, math.ceil(math.sqrt(shown.shape[0])))
    save_image(shown, out / GRID, nrow=nrow, padding=2, pad_value=1.0)
    return out
