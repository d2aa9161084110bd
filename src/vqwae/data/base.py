"""Core types of the dataset layer: :class:`DatasetInfo`, :class:`Splits`, the in-memory
:class:`ImageTensorDataset`, the error types and small tensor helpers shared by the loaders.

Every loader returns images as one in-memory tensor per split (uint8 ``(N, C, H, W)`` for
8-bit sources, float32 for the ``digits`` demo set), so ``__getitem__`` is a slice plus a
division and an epoch costs no decoding at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch.utils.data import Dataset

__all__ = [
    "DatasetInfo",
    "Splits",
    "ImageTensorDataset",
    "DatasetNotFoundError",
    "CorruptImageError",
    "resize_uint8",
    "to_uint8",
    "center_crop",
    "not_found",
]


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are missing or unreadable at the given root.

    The message names the path that was looked at, the on-disk layouts accepted and how to
    obtain the data.
    """


class CorruptImageError(OSError, ValueError):
    """An image file exists but cannot be decoded; the message names the file. (A ValueError too: bad input
    data, reported like any other bad value.)"""


@dataclass(frozen=True)
class DatasetInfo:
    """Static description of a dataset as served by :func:`vqwae.data.load_splits`.

    ``image_size`` is the (square) side length of the served images; ``num_classes`` is
    ``None`` for unlabelled data (labels are then all 0).
    """

    name: str
    channels: int
    image_size: int
    num_classes: int | None


@dataclass
class Splits:
    """The three splits of a dataset plus its :class:`DatasetInfo`."""

    train: Dataset
    val: Dataset
    test: Dataset
    info: DatasetInfo

    def __iter__(self):
        """Allows ``train, val, test = splits``."""
        return iter((self.train, self.val, self.test))


class ImageTensorDataset(Dataset):
    """A dataset held as one image tensor and one label tensor.

    ``images`` is ``(N, C, H, W)``, uint8 (served divided by 255) or float32 in [0, 1]
    (served as is); ``labels`` is int64 ``(N,)``. Items are ``(float32 image (C, H, W) in
    [0, 1], int64 0-dim label tensor)``. :meth:`get_batch` serves many items with one
    vectorised index, which is faster than a ``DataLoader`` for small images.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor | None = None,
                 classes: Sequence[str] | None = None):
        if images.ndim != 4:
            raise ValueError(f"images must be (N, C, H, W), got shape {tuple(images.shape)}")
        if images.dtype not in (torch.uint8, torch.float32):
            raise ValueError(f"images must be uint8 or float32, got {images.dtype}")
        if labels is None:
            labels = torch.zeros(images.shape[0], dtype=torch.int64)
        labels = torch.as_tensor(labels, dtype=torch.int64)
        if labels.shape != (images.shape[0],):
            raise ValueError(f"labels shape {tuple(labels.shape)} does not match {images.shape[0]} images")
        # A view into a larger tensor (a limited slice of a split) would keep the whole
        # buffer alive: copy it to its own compact storage.
        if (not images.is_contiguous()
                or images.untyped_storage().nbytes() > images.numel() * images.element_size()):
            images = images.clone(memory_format=torch.contiguous_format)
        self.images = images
        self.labels = labels.clone() if labels.untyped_storage().nbytes() > labels.numel() * 8 else labels
        self.classes = list(classes) if classes is not None else None

    def __len__(self) -> int:
        return self.images.shape[0]

    def _as_float(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            return x.to(torch.float32).div_(255.0)
        return x.to(torch.float32)

    def __getitem__(self, index: int):
        return self._as_float(self.images[index]), self.labels[index]

    def get_batch(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        """Images (float32 in [0, 1]) and labels of many items at once (a slice, list or tensor)."""
        if isinstance(indices, (list, tuple)):
            indices = torch.as_tensor(indices, dtype=torch.long)
        return self._as_float(self.images[indices]), self.labels[indices]

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the stored image tensor ``(N, C, H, W)``."""
        return tuple(self.images.shape)

    def __repr__(self) -> str:
        n, c, h, w = self.images.shape
        return f"ImageTensorDataset(n={n}, shape=({c}, {h}, {w}), dtype={self.images.dtype})"


def limit(n: int, lim: int | None) -> int:
    """Number of items kept from ``n`` under the limit ``lim`` (``None`` = all)."""
    if lim is None:
        return n
    if lim < 0:
        raise ValueError(f"limits must be >= 0 or None, got {lim}")
    return min(n, int(lim))


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """Float images in [0, 255] -> uint8 (rounded, clamped)."""
    return x.round_().clamp_(0, 255).to(torch.uint8)


def resize_uint8(images: torch.Tensor, size: int, chunk: int = 4096) -> torch.Tensor:
    """Resize uint8 ``(N, C, H, W)`` images to ``size`` x ``size`` in bulk.

    Bilinear with antialiasing (matters when shrinking), done in float in chunks of ``chunk``
    images to bound memory, then rounded back to uint8. A no-op when already that size.
    """
    if images.shape[-2:] == (size, size):
        return images
    out = torch.empty((images.shape[0], images.shape[1], size, size), dtype=torch.uint8)
    for s in range(0, images.shape[0], chunk):
        x = images[s:s + chunk].to(torch.float32)
        y = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear",
                                            align_corners=False, antialias=True)
        out[s:s + chunk] = to_uint8(y)
    return out


def center_crop(images: torch.Tensor, size: int) -> torch.Tensor:
    """Center-crop ``(..., H, W)`` to ``size`` x ``size`` (torchvision's CenterCrop convention)."""
    h, w = images.shape[-2:]
    if size > h or size > w:
        raise ValueError(f"cannot center-crop {h}x{w} images to {size}")
    top = int(round((h - size) / 2.0))
    left = int(round((w - size) / 2.0))
    return images[..., top:top + size, left:left + size]


def not_found(dataset: str, root, layouts: Sequence[str], how: str,
              detail: str = "") -> DatasetNotFoundError:
    """Build the :class:`DatasetNotFoundError` every loader raises.

    It names the path looked at (absolute), what was wrong (``detail``), the accepted on-disk
    ``layouts`` (``ROOT`` standing for that path) and ``how`` to obtain the data.
    """

    where = Path(root).expanduser().resolve() if root is not None else None
    head = f"{dataset}: no usable dataset at {str(where)!r}" if where is not None else \
        f"{dataset}: no root folder given"
    lines = [head + (f" ({detail})" if detail else ""),
             "Accepted layouts (ROOT = the root you passed):"]
    lines += [f"  - {layout}" for layout in layouts]
    lines.append(f"How to get it: {how}")
    return DatasetNotFoundError("\n".join(lines))
