"""Any folder of images (FFHQ, LSUN exports, ...): center crop to a square, resize to
``image_size`` (default 64, the paper's FFHQ / CelebA resolution) -> 3 x S x S RGB.

Layouts (``ROOT``):

* with split folders ``ROOT/train/`` and ``ROOT/test/`` (and optionally ``ROOT/val/`` or
  ``ROOT/valid/``): used as given. Without a val folder, val is carved from train: a
  permutation seeded by ``seed``, its last 10% (``n // 10``) is val, the rest (in permuted
  order) is train.
* otherwise all images under ``ROOT`` (recursive) sorted by path, permuted with ``seed`` and
  split 80 / 10 / 10 (val and test ``n // 10`` each, train the rest).

Labels: if a split folder (or ``ROOT`` in the second layout) has class subfolders, their names
in alphabetical order (taken from train) give the label, and files of the classes are
interleaved round-robin; else every label is 0 and ``num_classes`` is ``None``.
Decoded images are cached on disk per folder (:mod:`vqwae.data.cache`); with limits and no
cache only the needed files are decoded.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from .base import DatasetInfo, ImageTensorDataset, Splits, limit, not_found
from .images import IMG_EXTENSIONS, decode_cached, scan_class_tree

NAME = "imagefolder"
DEFAULT_SIZE = 64
LAYOUTS = [
    "ROOT/train/ + ROOT/test/ (+ optional ROOT/val/ or ROOT/valid/), each holding images, "
    "optionally in class subfolders",
    "ROOT/**/*.{" + ",".join(e.lstrip(".") for e in IMG_EXTENSIONS) + "} (split 80/10/10 by a seeded permutation)",
]
HOW = "point root / --data-root at a folder of images (e.g. FFHQ's images1024x1024/)"


def _perm(n: int, seed: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))


def _scan(folder: Path, classes=None):
    try:
        files, labels, cls = scan_class_tree(folder, classes=classes)
    except ValueError as e:
        raise not_found(NAME, folder, LAYOUTS, HOW, str(e)) from e
    if not files:
        raise not_found(NAME, folder, LAYOUTS, HOW, "no image files found")
    return files, torch.tensor(labels, dtype=torch.int64), cls


class _Source:
    """A scanned folder whose rows are decoded (or read from cache) on demand, all at once. With
    ``skip_unreadable`` a file that cannot be decoded is left out of its split (and counted) instead of
    stopping the load."""

    def __init__(self, folder: Path, files, labels, size: int, skip_unreadable: bool = False):
        self.folder, self.files, self.labels, self.size = folder, files, labels, size
        self.skip_unreadable = skip_unreadable

    def take(self, rows: list[int]) -> ImageTensorDataset:
        return self.take_many([rows])[0]

    def take_many(self, parts: list[list[int]]) -> list[ImageTensorDataset]:
        """Several row lists decoded in one pass (one cache read / write)."""
        flat = [r for p in parts for r in p]
        full = sorted(flat) == list(range(len(self.files)))
        skipped = [] if self.skip_unreadable else None
        x = decode_cached(self.files, root=self.folder, tag=f"imagefolder-s{self.size}",
                          crop="square", size=self.size, subset=None if full else flat, skipped=skipped)
        readable = torch.ones(len(self.files) if full else len(flat), dtype=torch.bool)
        if skipped:
            readable[[i for i, _ in skipped]] = False
            first = skipped[0][1].split("; delete")[0]
            print(f"skipped {len(skipped)} unreadable image file(s) under {self.folder}, e.g. {first}",
                  file=sys.stderr, flush=True)
        if full:  # x holds the readable files in file order: file row -> x row
            x_row = torch.cumsum(readable.long(), 0) - 1
            rows = torch.as_tensor(flat, dtype=torch.long)
            keep = readable[rows]
            x = x[x_row[rows[keep]]]
        else:  # x holds the readable requested rows in request order
            keep = readable
        out, start, xs = [], 0, 0
        for p in parts:
            k = keep[start:start + len(p)]
            n = int(k.sum())
            out.append(ImageTensorDataset(x[xs:xs + n], self.labels[torch.as_tensor(p, dtype=torch.long)[k]]))
            start += len(p)
            xs += n
        return out


def _split_dirs(root: Path) -> tuple[Path, Path | None, Path] | None:
    if (root / "train").is_dir() and (root / "test").is_dir():
        val = next((root / v for v in ("val", "valid") if (root / v).is_dir()), None)
        return root / "train", val, root / "test"
    return None


def load(root, *, train_limit=None, eval_limit=None, download=False, image_size=None,
         seed=0, skip_unreadable=False) -> Splits:
    """Load an image folder (see the module docstring); ``download`` is ignored. ``skip_unreadable``:
    leave out (and count) files that cannot be decoded instead of stopping at the first."""
    size = int(image_size or DEFAULT_SIZE)
    root = Path(root).expanduser()
    if not root.is_dir():
        raise not_found(NAME, root, LAYOUTS, HOW, "path does not exist" if not root.exists()
                        else "not a folder")
    dirs = _split_dirs(root)
    if dirs is not None:
        tr_dir, val_dir, te_dir = dirs
        tr_f, tr_y, classes = _scan(tr_dir)
        tr = _Source(tr_dir, tr_f, tr_y, size, skip_unreadable)
        te_f, te_y, _ = _scan(te_dir, classes)
        te = _Source(te_dir, te_f, te_y, size, skip_unreadable)
        if val_dir is not None:
            va_f, va_y, _ = _scan(val_dir, classes)
            va = _Source(val_dir, va_f, va_y, size, skip_unreadable)
            train = tr.take(list(range(limit(len(tr_f), train_limit))))
            val = va.take(list(range(limit(len(va_f), eval_limit))))
        else:
            order = _perm(len(tr_f), seed).tolist()
            n_val = len(order) // 10
            tr_rows, va_rows = order[:len(order) - n_val], order[len(order) - n_val:]
            train, val = tr.take_many([tr_rows[:limit(len(tr_rows), train_limit)],
                                       va_rows[:limit(len(va_rows), eval_limit)]])
        test = te.take(list(range(limit(len(te_f), eval_limit))))
    else:
        files, labels, classes = _scan(root)
        src = _Source(root, files, labels, size, skip_unreadable)
        order = _perm(len(files), seed).tolist()
        n_hold = len(order) // 10
        n_tr = len(order) - 2 * n_hold
        tr_rows, va_rows, te_rows = order[:n_tr], order[n_tr:n_tr + n_hold], order[n_tr + n_hold:]
        train, val, test = src.take_many([tr_rows[:limit(n_tr, train_limit)],
                                          va_rows[:limit(n_hold, eval_limit)],
                                          te_rows[:limit(n_hold, eval_limit)]])
    num_classes = len(classes) if classes is not None else None
    return Splits(train, val, test, DatasetInfo(NAME, 3, size, num_classes))
