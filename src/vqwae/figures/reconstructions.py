"""Originals above their reconstructions."""
from __future__ import annotations

from pathlib import Path


import numpy as np

from vqwae.figures._common import DPI, PathLike, images_to_numpy, new_figure, save_png

__all__ = ["reconstruction_grid", "reconstruction_rows"]


def _strip(images: np.ndarray, nrow: int, pad: int) -> np.ndarray:
    """(n <= nrow, H, W, C) -> one (H, nrow*(W+pad)-pad, C) strip, white padding and empty slots."""
    n, h, w, c = images.shape
    out = np.ones((h, nrow * (w + pad) - pad, c), dtype=np.float32)
    for i in range(n):
        out[:, i * (w + pad) : i * (w + pad) + w] = images[i]
    return out


def _draw_strip(ax, strip: np.ndarray, label: str, **label_style) -> None:
    """One strip (H, W, C) in ``ax``, grey or colour, without ticks or frame, labelled on its left."""
    if strip.shape[-1] == 1:
        ax.imshow(strip[..., 0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    else:
        ax.imshow(strip, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_ylabel(label, rotation=0, ha="right", va="center", **label_style)


def reconstruction_grid(
    originals,
    reconstructions,
    path: PathLike,
    nrow: int = 8,
    *,
    title: str | None = "Reconstructions",
    max_images: int = 64,
) -> Path:
    """Save a PNG with rows of ``nrow`` originals, each followed by the row of their reconstructions.

    ``originals`` / ``reconstructions``: (N, C, H, W) in [0, 1] (tensors or arrays; clipped). At most
    ``max_images`` pairs are drawn. Rows are labelled "original" / "reconstruction".
    """
    orig, rec = images_to_numpy(originals), images_to_numpy(reconstructions)
    if orig.shape != rec.shape:
        raise ValueError(f"originals {orig.shape} and reconstructions {rec.shape} differ in shape")
    n = min(len(orig), max_images)
    if n == 0:
        raise ValueError("no images to draw")
    nrow = max(1, min(int(nrow), n))
    orig, rec = orig[:n], rec[:n]
    h, w = orig.shape[1:3]
    pad = max(1, w // 16)
    chunks = [(orig[i : i + nrow], rec[i : i + nrow]) for i in range(0, n, nrow)]

    strip_w_px = nrow * (w + pad) - pad
    # inches for one strip: 1.1 per image up to 10, but never fewer pixels than the images have (256x256 VQGAN
    # reconstructions are drawn at full resolution, not shrunk)
    strip_in = max(min(10.0, 1.1 * nrow), strip_w_px / DPI)
    row_h = strip_in * h / strip_w_px
    head = 0.55 if title else 0.1  # inches above the first row
    fig_h = head + 2 * len(chunks) * row_h * 1.12 + 0.05
    fig_w = strip_in + 1.6  # 1.5 in on the left for the row labels
    fig = new_figure(fig_w, fig_h)
    axes = fig.subplots(2 * len(chunks), 1, squeeze=False)[:, 0]
    for k, (o, r) in enumerate(chunks):
        for j, (imgs, label) in enumerate(((o, "original"), (r, "reconstruction"))):
            _draw_strip(axes[2 * k + j], _strip(imgs, nrow, pad), label, fontsize=10,
                        color="black" if j == 0 else "tab:blue")
    if title:
        sep = "\n" if nrow < 6 else " "
        fig.suptitle(f"{title}:{sep}originals above reconstructions ({n} images)", fontsize=11,
                     y=1 - 0.08 / fig_h, va="top")
    fig.subplots_adjust(top=1 - head / fig_h, bottom=0.05 / fig_h, left=1.5 / fig_w, right=1 - 0.1 / fig_w, hspace=0.12)
    return save_png(fig, path)


def reconstruction_rows(rows: dict[str, np.ndarray], path: PathLike, *, title: str | None = None) -> Path:
    """One labelled strip per entry of ``rows`` {label: images (N, H, W, C) uint8 or in [0, 1]}, in order: e.g. the
    originals, then each model's reconstructions of the same images."""
    strips = {k: images_to_numpy(v) if not isinstance(v, np.ndarray) or v.dtype != np.uint8 else v / 255.0
              for k, v in rows.items()}
    if not strips:
        raise ValueError("no images to draw")
    n, h, w, c = next(iter(strips.values())).shape
    pad = max(1, w // 16)
    strip_w_px = n * (w + pad) - pad
    strip_in = max(min(10.0, 0.65 * n), strip_w_px / DPI)
    row_h = strip_in * h / strip_w_px
    head = 0.45 if title else 0.1
    fig_h = head + len(strips) * row_h * 1.15 + 0.05
    fig_w = strip_in + 2.3
    fig = new_figure(fig_w, fig_h)
    axes = fig.subplots(len(strips), 1, squeeze=False)[:, 0]
    for ax, (label, images) in zip(axes, strips.items()):
        if images.shape != (n, h, w, c):
            raise ValueError(f"{label}: images of shape {images.shape}, the first row's are {(n, h, w, c)}")
        _draw_strip(ax, _strip(images.astype(np.float32), n, pad), label, fontsize=9)
    if title:
        fig.suptitle(title, fontsize=11, y=1 - 0.06 / fig_h, va="top")
    fig.subplots_adjust(top=1 - head / fig_h, bottom=0.05 / fig_h, left=2.2 / fig_w, right=1 - 0.1 / fig_w,
                        hspace=0.1)
    return save_png(fig, path)
