"""scikit-learn's embedded 8x8 digits (``sklearn.datasets.load_digits``): the ``make demo``
dataset, needing no files and no network.

1,797 images with 17 grey levels (0..16) scaled to [0, 1] and upsampled bilinearly to 32x32
(``image_size``) -> 1x32x32 float32, 10 classes. Split by a permutation seeded with ``seed``:
the first 1,397 are train, the next 200 val, the last 200 test.
"""
from __future__ import annotations

import torch

from .base import DatasetInfo, ImageTensorDataset, Splits, limit
from vqwae.extras import require

NAME = "digits"
N_VAL = N_TEST = 200


def load(root=None, *, train_limit=None, eval_limit=None, download=False, image_size=None,
         seed=0) -> Splits:
    """Load the digits splits (see the module docstring); ``root`` and ``download`` are ignored."""
    load_digits = require("sklearn.datasets").load_digits

    size = int(image_size or 32)
    d = load_digits()
    x = torch.as_tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                                        antialias=size < 8).clamp_(0.0, 1.0)
    y = torch.as_tensor(d.target, dtype=torch.int64)
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(int(seed)))
    n_tr = x.shape[0] - N_VAL - N_TEST
    parts = (order[:n_tr], order[n_tr:n_tr + N_VAL], order[n_tr + N_VAL:])
    lims = (limit(n_tr, train_limit), limit(N_VAL, eval_limit), limit(N_TEST, eval_limit))
    tr, va, te = (ImageTensorDataset(x[p[:k]].contiguous(), y[p[:k]]) for p, k in zip(parts, lims))
    return Splits(tr, va, te, DatasetInfo(NAME, 1, size, 10))
