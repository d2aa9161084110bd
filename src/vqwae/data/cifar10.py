"""CIFAR-10: 3x32x32, 10 classes, in either of two on-disk layouts (detected in this order):

(a) the python batches, ``ROOT/cifar-10-batches-py/{data_batch_1..5,test_batch}`` (what
    ``torchvision.datasets.CIFAR10`` downloads), or ``ROOT`` being that folder. The pickles
    are read here directly (torchvision's class insists on the official md5 sums, which would
    reject re-saved or test copies); ``download=True`` fetches them through torchvision.
(b) a JPEG tree ``ROOT/{train,test}/{class}/*.jpg``, or ``ROOT/cifar10-jpeg/{train,test}/...``.
    Class folders must be CIFAR-10's class names; label = CIFAR-10's index of the name, which
    is also the alphabetical folder order. Files are sorted within a class and the classes
    interleaved round-robin, so any prefix is class-balanced. Decoded images are cached on disk
    (:mod:`vqwae.data.cache`); with limits and no cache only the needed files are decoded.

Splits: train = the first 40,000 training images, val = the last 10,000 (``data_batch_5`` in
layout (a); files ``4000..4999`` of each class in the real layout (b)); in general val is the
last ``min(10000, n // 5)``. test = the official 10,000 test images.
"""
from __future__ import annotations

import pickle
from pathlib import Path


import numpy as np
import torch

from .base import DatasetInfo, ImageTensorDataset, Splits, limit, not_found, resize_uint8
from .images import decode_cached, scan_class_tree
from vqwae.extras import require

NAME = "cifar10"
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
BATCH_DIR = "cifar-10-batches-py"
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_BATCH = "test_batch"
LAYOUTS = [
    f"ROOT/{BATCH_DIR}/{{data_batch_1..5,test_batch}} (python pickles, torchvision.datasets.CIFAR10), "
    f"or ROOT = the {BATCH_DIR} folder itself",
    "ROOT/{train,test}/{airplane,automobile,...,truck}/*.jpg (JPEG tree), "
    "or ROOT/cifar10-jpeg/{train,test}/...",
]
HOW = ("pass download=True when online (torchvision fetches the python batches into ROOT), or "
       "--data-root / root pointing at a folder with one of these layouts "
       "(e.g. ../shared/data, which holds cifar10-jpeg/)")


def _batch_dir(root: Path) -> Path | None:
    for cand in (root / BATCH_DIR, root):
        if all((cand / b).is_file() for b in TRAIN_BATCHES + [TEST_BATCH]):
            return cand
    return None


def _jpeg_dir(root: Path) -> Path | None:
    for cand in (root, root / "cifar10-jpeg"):
        if (cand / "train").is_dir() and (cand / "test").is_dir():
            return cand
    return None


def find_layout(root: Path) -> tuple[str, Path]:
    """``("batches" | "jpeg", folder)`` for the layout found at ``root``, else DatasetNotFoundError."""
    b = _batch_dir(root)
    if b is not None:
        return "batches", b
    j = _jpeg_dir(root)
    if j is not None:
        return "jpeg", j
    detail = "path does not exist" if not root.exists() else "neither layout found"
    raise not_found(NAME, root, LAYOUTS, HOW, detail)


def _read_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        with open(path, "rb") as f:
            d = pickle.load(f, encoding="latin1")
        x = np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        y = np.asarray(d.get("labels", d.get("fine_labels")), dtype=np.int64)
        if y.shape != (x.shape[0],):
            raise ValueError(f"{x.shape[0]} images but labels of shape {y.shape}")
    except Exception as e:
        raise not_found(NAME, path.parent, LAYOUTS, HOW, f"unreadable batch file {path}: {e}") from e
    return torch.from_numpy(x.copy()), torch.from_numpy(y)


def _split_sizes(n_train: int) -> tuple[int, int]:
    n_val = min(10000, n_train // 5)
    return n_train - n_val, n_val


def _load_batches(folder: Path, train_limit, eval_limit, size: int) -> Splits:
    parts = [_read_batch(folder / b) for b in TRAIN_BATCHES]
    x = torch.cat([p[0] for p in parts])
    y = torch.cat([p[1] for p in parts])
    te_x, te_y = _read_batch(folder / TEST_BATCH)
    n_tr, n_val = _split_sizes(x.shape[0])
    k_tr, k_val, k_te = limit(n_tr, train_limit), limit(n_val, eval_limit), limit(te_x.shape[0], eval_limit)
    mk = lambda a, b: ImageTensorDataset(resize_uint8(a.contiguous(), size), b)  # noqa: E731
    return Splits(mk(x[:k_tr], y[:k_tr]), mk(x[n_tr:n_tr + k_val], y[n_tr:n_tr + k_val]),
                  mk(te_x[:k_te], te_y[:k_te]), DatasetInfo(NAME, 3, size, 10))


def _load_jpeg(folder: Path, train_limit, eval_limit, size: int) -> Splits:
    def scan(sub: str):
        try:
            files, labels, classes = scan_class_tree(folder / sub, classes=CLASSES)
        except ValueError as e:
            raise not_found(NAME, folder / sub, LAYOUTS, HOW,
                            f"{e}; use the 'imagefolder' dataset for other class sets") from e
        if not files:
            raise not_found(NAME, folder / sub, LAYOUTS, HOW, "no image files found")
        if classes is None:
            raise not_found(NAME, folder / sub, LAYOUTS, HOW, "images are not in class folders")
        return files, torch.tensor(labels, dtype=torch.int64)

    tr_files, tr_y = scan("train")
    te_files, te_y = scan("test")
    n_tr, n_val = _split_sizes(len(tr_files))
    k_tr, k_val, k_te = limit(n_tr, train_limit), limit(n_val, eval_limit), limit(len(te_files), eval_limit)

    tr_rows = list(range(k_tr)) + list(range(n_tr, n_tr + k_val))
    full_tr = k_tr == n_tr and k_val == n_val
    x = decode_cached(tr_files, root=folder / "train", tag="cifar10-jpeg-train",
                      subset=None if full_tr else tr_rows)
    if full_tr:
        x_tr, x_val = x[:n_tr], x[n_tr:]
    else:
        x_tr, x_val = x[:k_tr], x[k_tr:]
    full_te = k_te == len(te_files)
    x_te = decode_cached(te_files, root=folder / "test", tag="cifar10-jpeg-test",
                         subset=None if full_te else list(range(k_te)))
    mk = lambda a, b: ImageTensorDataset(resize_uint8(a, size), b)  # noqa: E731
    return Splits(mk(x_tr, tr_y[:k_tr]), mk(x_val, tr_y[n_tr:n_tr + k_val]),
                  mk(x_te, te_y[:k_te]), DatasetInfo(NAME, 3, size, 10))


def load(root, *, train_limit=None, eval_limit=None, download=False, image_size=None,
         seed=0) -> Splits:
    """Load CIFAR-10 splits (see the module docstring); ``seed`` is unused (fixed splits)."""
    size = int(image_size or 32)
    root = Path(root).expanduser()
    if download and _batch_dir(root) is None and _jpeg_dir(root) is None:
        CIFAR10 = require("torchvision.datasets").CIFAR10

        try:
            CIFAR10(str(root), train=True, download=True)
        except Exception as e:
            raise not_found(NAME, root, LAYOUTS, HOW, f"download failed: {e}") from e
    kind, folder = find_layout(root)
    if kind == "batches":
        return _load_batches(folder, train_limit, eval_limit, size)
    return _load_jpeg(folder, train_limit, eval_limit, size)
