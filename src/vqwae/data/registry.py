"""The dataset registry and :func:`load_splits`, the one entry point of :mod:`vqwae.data`.

Each dataset is a module with a ``load(root, *, train_limit, eval_limit, download, image_size,
seed) -> Splits`` function; :func:`register_dataset` adds more.
"""
from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from typing import Callable

from torch.utils.data import Subset

from .base import ImageTensorDataset, Splits, not_found
from .catalog import DATASETS, LOADER_MODULES, normalise_name

__all__ = ["DATASETS", "load_splits", "load_split", "register_dataset", "LOADERS", "normalise_name"]

Loader = Callable[..., Splits]


def _module(where: str):
    """The loader's module of ``vqwae.data``, or the object in it (``module.OBJECT``), that ``LOADER_MODULES`` names."""
    module, _, obj = where.partition(".")
    found = importlib.import_module(f"{__package__}.{module}")
    return getattr(found, obj) if obj else found


_MODULES = {name: _module(where) for name, where in LOADER_MODULES.items()}
LOADERS: dict[str, Loader] = {name: m.load for name, m in _MODULES.items()}
"""Every data set's loader by its name (``vqwae train --dataset``): ``load(root, *, train_limit, eval_limit,
download, image_size, seed) -> Splits``; :func:`register_dataset` adds one."""
NEEDS_NO_ROOT = {"digits"}


def register_dataset(name: str, loader: Loader) -> None:
    """Register ``loader`` (same signature as :func:`load_splits` minus ``name``) under ``name``."""
    key = normalise_name(name)
    LOADERS[key] = loader
    if key not in DATASETS:
        DATASETS.append(key)


def _cap(ds, n: int | None):
    """Enforce a limit on a returned split (loaders already apply it; this is a safety net)."""
    if n is None or len(ds) <= n:
        return ds
    if isinstance(ds, ImageTensorDataset):
        return ImageTensorDataset(ds.images[:n], ds.labels[:n], ds.classes)
    return Subset(ds, range(n))


def load_splits(name: str, root: str | os.PathLike | None, *, train_limit: int | None = None,
                eval_limit: int | None = None, download: bool = False,
                image_size: int | None = None, seed: int = 0, skip_unreadable: bool = False) -> Splits:
    """Load the train / val / test splits of dataset ``name`` stored under ``root``.

    Args:
        name: one of :data:`DATASETS` (``mnist``, ``cifar10``, ``svhn``, ``celeba``,
            ``imagefolder``, ``digits``).
        root: folder holding the data in one of the layouts documented in the dataset's module
            (ignored, may be ``None``, for ``digits``).
        train_limit: keep only the first N training images (``None``: all).
        eval_limit: keep only the first N images of val and of test.
        download: let torchvision download the data into ``root`` if it is missing (needs
            network; mnist, cifar10, svhn, celeba).
        image_size: side of the served square images; default per dataset (32 for mnist,
            cifar10, svhn, digits; 64 for celeba and imagefolder; 256 for ffhq and celebahq). Resized in bulk when set.
        seed: seed of the permutation splits (digits, imagefolder); official splits ignore it.
        skip_unreadable: leave out (and count, on stderr) image files that cannot be decoded
            instead of raising CorruptImageError (imagefolder).

    Returns:
        :class:`~vqwae.data.base.Splits` with ``train``, ``val``, ``test`` datasets of
        ``(float32 image (C, H, W) in [0, 1], int64 label)`` items and ``info``.

    Raises:
        ValueError: unknown ``name`` (the message lists the valid ones) or bad limits.
        DatasetNotFoundError: the data is missing or unreadable under ``root``.
        CorruptImageError: an image file cannot be decoded (the message names it).
    """
    key = normalise_name(name)
    if key not in LOADERS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(LOADERS)}")
    for what, v in (("train_limit", train_limit), ("eval_limit", eval_limit)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise ValueError(f"{what} must be a non-negative int or None, got {v!r}")
    if image_size is not None and (not isinstance(image_size, int) or image_size < 1):
        raise ValueError(f"image_size must be a positive int or None, got {image_size!r}")
    if root is None and key not in NEEDS_NO_ROOT:
        mod = _MODULES.get(key)
        if mod is not None and hasattr(mod, "LAYOUTS"):
            raise not_found(key, None, mod.LAYOUTS, mod.HOW)
        raise ValueError(f"dataset {key!r} needs a root folder")
    extra = {}
    if skip_unreadable:
        if "skip_unreadable" not in inspect.signature(LOADERS[key]).parameters:
            raise ValueError(f"skip_unreadable applies to folders of image files (imagefolder), not to {key!r}")
        extra["skip_unreadable"] = True
    s = LOADERS[key](Path(root) if root is not None else None, train_limit=train_limit,
                     eval_limit=eval_limit, download=download, image_size=image_size, seed=seed, **extra)
    s.train = _cap(s.train, train_limit)
    s.val = _cap(s.val, eval_limit)
    s.test = _cap(s.test, eval_limit)
    return s


SPLITS = ("train", "val", "test")


def load_split(name: str, root: str | os.PathLike | None, split: str, *, limit: int | None = None,
               download: bool = False, image_size: int | None = None, seed: int = 0,
               skip_unreadable: bool = False):
    """One split ("train", "val" or "test") of dataset ``name``: (dataset, :class:`DatasetInfo`), the first
    ``limit`` images (None: all). The other splits are not decoded (their limit is 0)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(map(repr, SPLITS))}")
    train_limit, eval_limit = (limit, 0) if split == "train" else (0, limit)
    s = load_splits(name, root, train_limit=train_limit, eval_limit=eval_limit, download=download,
                    image_size=image_size, seed=seed, skip_unreadable=skip_unreadable)
    return getattr(s, split), s.info
