"""SVHN (cropped digits): 3x32x32, 10 classes (the .mat label 10 means digit 0, mapped to 0
as torchvision does).

Layout: torchvision's, ``ROOT/train_32x32.mat`` and ``ROOT/test_32x32.mat`` (``ROOT/svhn/`` or
``ROOT/SVHN/`` also accepted). The .mat files are read here with ``scipy.io.loadmat``
(torchvision's class checks the official md5 sums and would reject other copies);
``download=True`` fetches them through ``torchvision.datasets.SVHN``. The ``extra`` set is
not used.

Splits: val = the LAST 10% of the official training set (``n // 10``: 7,325 of 73,257),
train = the rest (65,932), test = the official 26,032 test images.
"""
from __future__ import annotations

from pathlib import Path


import numpy as np
import torch

from .base import DatasetInfo, ImageTensorDataset, Splits, limit, not_found, resize_uint8
from vqwae.extras import require

NAME = "svhn"
FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}
LAYOUTS = ["ROOT/{train,test}_32x32.mat (torchvision.datasets.SVHN), or ROOT/svhn/... or ROOT/SVHN/..."]
HOW = ("pass download=True when online (torchvision fetches the .mat files into ROOT), or "
       "--data-root / root pointing at the folder holding train_32x32.mat and test_32x32.mat "
       "(from http://ufldl.stanford.edu/housenumbers/)")


def _dir(root: Path) -> Path | None:
    for cand in (root, root / "svhn", root / "SVHN"):
        if all((cand / f).is_file() for f in FILES.values()):
            return cand
    return None


def read_mat(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``X`` (32, 32, 3, N) and ``y`` (N, 1) of an SVHN .mat -> uint8 (N, 3, 32, 32), int64 (N,)."""

    loadmat = require("scipy.io").loadmat  # here: only SVHN's files need scipy
    try:
        m = loadmat(str(path), variable_names=["X", "y"])
        x = np.asarray(m["X"], dtype=np.uint8)
        y = np.asarray(m["y"], dtype=np.int64).reshape(-1)
        if x.ndim != 4 or x.shape[2] != 3 or x.shape[3] != y.shape[0]:
            raise ValueError(f"unexpected shapes X {x.shape}, y {y.shape}")
    except Exception as e:
        raise not_found(NAME, path.parent, LAYOUTS, HOW, f"unreadable file {path}: {e}") from e
    x = np.ascontiguousarray(np.transpose(x, (3, 2, 0, 1)))
    y = np.where(y == 10, 0, y)
    return torch.from_numpy(x), torch.from_numpy(y)


def load(root, *, train_limit=None, eval_limit=None, download=False, image_size=None,
         seed=0) -> Splits:
    """Load SVHN splits (see the module docstring); ``seed`` is unused (fixed splits)."""
    size = int(image_size or 32)
    root = Path(root).expanduser()
    folder = _dir(root)
    if folder is None and download:
        SVHN = require("torchvision.datasets").SVHN

        try:
            for split in ("train", "test"):
                SVHN(str(root), split=split, download=True)
        except Exception as e:
            raise not_found(NAME, root, LAYOUTS, HOW, f"download failed: {e}") from e
        folder = _dir(root)
    if folder is None:
        missing = [f for f in FILES.values() if not (root / f).is_file()]
        raise not_found(NAME, root, LAYOUTS, HOW, f"missing {missing}")
    x, y = read_mat(folder / FILES["train"])
    n_val = x.shape[0] // 10
    n_tr = x.shape[0] - n_val
    k_tr, k_val = limit(n_tr, train_limit), limit(n_val, eval_limit)
    mk = lambda a, b: ImageTensorDataset(resize_uint8(a, size), b)  # noqa: E731
    train, val = mk(x[:k_tr], y[:k_tr]), mk(x[n_tr:n_tr + k_val], y[n_tr:n_tr + k_val])
    del x, y
    tx, ty = read_mat(folder / FILES["test"])
    k_te = limit(tx.shape[0], eval_limit)
    return Splits(train, val, mk(tx[:k_te], ty[:k_te]), DatasetInfo(NAME, 3, size, 10))
