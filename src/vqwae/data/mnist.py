"""MNIST and its drop-in siblings FashionMNIST and KMNIST: 1x32x32 (the 28x28 images resized once, in
bulk, bilinear + antialias).

Layout: torchvision's, ``ROOT/<Folder>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte`` with
<Folder> = ``MNIST``, ``FashionMNIST`` or ``KMNIST`` (``.gz`` files are read too); ``ROOT`` may also
be that folder or its ``raw`` folder.
Splits: train = the first 50,000 official training images, val = the last 10,000 (in general
the last ``min(10000, n // 6)``), test = the official 10,000 test images.
"""
from __future__ import annotations

import gzip
from pathlib import Path


import numpy as np
import torch

from .base import DatasetInfo, ImageTensorDataset, Splits, limit, not_found, resize_uint8
from vqwae.extras import require

NAME = "mnist"
FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


class IdxDataset:
    """One dataset of the MNIST family: its name, torchvision's folder and class, its layouts and loader."""

    def __init__(self, name: str, folder: str):
        self.NAME, self.folder = name, folder
        self.LAYOUTS = [
            f"ROOT/{folder}/raw/{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte[.gz] (torchvision.datasets.{folder})",
            f"ROOT/raw/... or ROOT/... with those four files (ROOT = the {folder} or raw folder itself)",
        ]
        self.HOW = (f"pass download=True when online (torchvision downloads into ROOT/{folder}/raw), or "
                    "--data-root / root pointing at a folder with that layout (e.g. ../shared/data)")

    def load(self, root, *, train_limit=None, eval_limit=None, download=False, image_size=None,
             seed=0) -> Splits:
        """Load the splits (see the module docstring)."""
        return _load(self, root, train_limit=train_limit, eval_limit=eval_limit, download=download,
                     image_size=image_size)


MNIST = IdxDataset("mnist", "MNIST")
FASHION_MNIST = IdxDataset("fashionmnist", "FashionMNIST")
KMNIST = IdxDataset("kmnist", "KMNIST")
FAMILY = (MNIST, FASHION_MNIST, KMNIST)
LAYOUTS, HOW, load = MNIST.LAYOUTS, MNIST.HOW, MNIST.load


def _find(path: Path, stem: str) -> Path | None:
    for p in (path / stem, path / (stem + ".gz")):
        if p.is_file():
            return p
    return None


def _raw_dir(root: Path, folder: str = "MNIST") -> Path | None:
    """The folder holding the four IDX files, or None."""
    for cand in (root / folder / "raw", root / "raw", root):
        if all(_find(cand, s) for s in FILES.values()):
            return cand
    return None


def read_idx(path: Path, ds: IdxDataset = MNIST) -> torch.Tensor:
    """Read an IDX (ubyte) file, optionally gzipped, into a uint8 tensor."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
        if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
            raise ValueError("bad IDX magic number (expected unsigned-byte IDX)")
        ndim = data[3]
        dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
        offset = 4 + 4 * ndim
        count = int(np.prod(dims)) if dims else 0
        if len(data) - offset != count:
            raise ValueError(f"size mismatch: header says {dims}, file has {len(data) - offset} bytes")
        arr = np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)
    except (OSError, ValueError, EOFError) as e:
        raise not_found(ds.NAME, path.parent, ds.LAYOUTS, ds.HOW, f"unreadable file {path}: {e}") from e
    return torch.from_numpy(arr.copy())


def _load(ds: IdxDataset, root, *, train_limit=None, eval_limit=None, download=False,
          image_size=None) -> Splits:
    size = int(image_size or 32)
    root = Path(root).expanduser()
    raw = _raw_dir(root, ds.folder)
    if raw is None and download:
        datasets = require("torchvision.datasets")
        try:
            for train in (True, False):
                getattr(datasets, ds.folder)(str(root), train=train, download=True)
        except Exception as e:
            raise not_found(ds.NAME, root, ds.LAYOUTS, ds.HOW, f"download failed: {e}") from e
        raw = _raw_dir(root, ds.folder)
    if raw is None:
        missing = [s for s in FILES.values() if not _find(root / ds.folder / "raw", s)]
        raise not_found(ds.NAME, root / ds.folder / "raw", ds.LAYOUTS, ds.HOW, f"missing {missing}")

    tr_x, tr_y = read_idx(_find(raw, FILES["train_images"]), ds), read_idx(_find(raw, FILES["train_labels"]), ds)
    te_x, te_y = read_idx(_find(raw, FILES["test_images"]), ds), read_idx(_find(raw, FILES["test_labels"]), ds)
    for x, y, what in ((tr_x, tr_y, "train"), (te_x, te_y, "test")):
        if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise not_found(ds.NAME, raw, ds.LAYOUTS, ds.HOW,
                            f"{what} images {tuple(x.shape)} and labels {tuple(y.shape)} disagree")

    n_val = min(10000, tr_x.shape[0] // 6)
    n_tr = tr_x.shape[0] - n_val
    k_tr, k_val, k_te = limit(n_tr, train_limit), limit(n_val, eval_limit), limit(te_x.shape[0], eval_limit)

    def make(x: torch.Tensor, y: torch.Tensor) -> ImageTensorDataset:
        return ImageTensorDataset(resize_uint8(x.unsqueeze(1), size), y.long())

    return Splits(
        train=make(tr_x[:k_tr], tr_y[:k_tr]),
        val=make(tr_x[n_tr:n_tr + k_val], tr_y[n_tr:n_tr + k_val]),
        test=make(te_x[:k_te], te_y[:k_te]),
        info=DatasetInfo(ds.NAME, channels=1, image_size=size, num_classes=10),
    )
