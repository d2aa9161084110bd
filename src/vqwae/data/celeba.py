"""CelebA (aligned & cropped faces): center crop 140, resize to 64 -> 3x64x64, unlabelled.

Layout: torchvision's, ``ROOT/celeba/img_align_celeba/*.jpg`` plus
``ROOT/celeba/list_eval_partition.txt`` (``000001.jpg 0`` lines; the Kaggle
``list_eval_partition.csv`` with an ``image_id,partition`` header is read too); ``ROOT`` may
also be the ``celeba`` folder itself. torchvision's ``CelebA`` class verifies the md5 of all six
annotation files, so it is used only for ``download=True``; the partition file and the images
are read here directly, and only the partition file (not the attribute / identity / bbox /
landmark files) is needed.

Splits: the official partitions, train 0 (162,770) / valid 1 (19,867) / test 2 (19,962), each
in partition-file order. Labels are all 0 (``num_classes=None``). Decoded images are cached on
disk (:mod:`vqwae.data.cache`, about 2.5 GB at 64x64); with limits and no cache only the needed
files are decoded.
"""
from __future__ import annotations

import os
from pathlib import Path


import torch

from .base import DatasetInfo, ImageTensorDataset, Splits, limit, not_found
from .images import decode_cached
from vqwae.extras import require

NAME = "celeba"
CROP = 140
PARTITION_FILES = ("list_eval_partition.txt", "list_eval_partition.csv")
LAYOUTS = [
    "ROOT/celeba/img_align_celeba/*.jpg + ROOT/celeba/list_eval_partition.txt "
    "(torchvision.datasets.CelebA), or ROOT = the celeba folder itself",
]
HOW = ("pass download=True when online (torchvision fetches it from Google Drive, needs the "
       "gdown package), or --data-root / root pointing at a folder with that layout "
       "(img_align_celeba.zip and list_eval_partition.txt from the CelebA website)")


def _dir(root: Path) -> Path | None:
    for cand in (root / "celeba", root):
        if (cand / "img_align_celeba").is_dir() and any((cand / p).is_file() for p in PARTITION_FILES):
            return cand
    return None


def read_partition(folder: Path) -> tuple[list[str], list[int]]:
    """File names and partition ids (0 train, 1 valid, 2 test) from the partition file."""
    path = next(folder / p for p in PARTITION_FILES if (folder / p).is_file())
    names, parts = [], []
    try:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                fields = line.replace(",", " ").split()
                if not fields or (line_no == 1 and fields[0] == "image_id"):
                    continue
                if len(fields) != 2 or fields[1] not in ("0", "1", "2"):
                    raise ValueError(f"line {line_no}: expected '<file> <0|1|2>', got {line.strip()!r}")
                names.append(fields[0])
                parts.append(int(fields[1]))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise not_found(NAME, folder, LAYOUTS, HOW, f"unreadable partition file {path}: {e}") from e
    if not names:
        raise not_found(NAME, folder, LAYOUTS, HOW, f"partition file {path} lists no images")
    return names, parts


def load(root, *, train_limit=None, eval_limit=None, download=False, image_size=None,
         seed=0) -> Splits:
    """Load CelebA splits (see the module docstring); ``seed`` is unused (official splits)."""
    size = int(image_size or 64)
    root = Path(root).expanduser()
    folder = _dir(root)
    if folder is None and download:
        CelebA = require("torchvision.datasets").CelebA

        try:
            CelebA(str(root), split="all", target_type=[], download=True)
        except Exception as e:
            raise not_found(NAME, root, LAYOUTS, HOW, f"download failed: {e}") from e
        folder = _dir(root)
    if folder is None:
        raise not_found(NAME, root / "celeba", LAYOUTS, HOW,
                        "path does not exist" if not root.exists()
                        else "img_align_celeba/ or list_eval_partition.txt missing")
    names, parts = read_partition(folder)
    img_dir = folder / "img_align_celeba"
    files = [os.path.join(str(img_dir), n) for n in names]
    rows = {p: [i for i, q in enumerate(parts) if q == p] for p in (0, 1, 2)}
    keep = {0: limit(len(rows[0]), train_limit), 1: limit(len(rows[1]), eval_limit),
            2: limit(len(rows[2]), eval_limit)}
    full = all(keep[p] == len(rows[p]) for p in rows)
    subset = [i for p in (0, 1, 2) for i in rows[p][:keep[p]]]
    try:
        x = decode_cached(files, root=img_dir, tag=f"celeba-c{CROP}-s{size}", crop=CROP, size=size,
                          subset=None if full else subset)
    except FileNotFoundError as e:
        raise not_found(NAME, img_dir, LAYOUTS, HOW, str(e)) from e
    if full:
        x = x[torch.as_tensor(subset, dtype=torch.long)] if subset != list(range(len(files))) else x
    out, start = [], 0
    for p in (0, 1, 2):
        out.append(ImageTensorDataset(x[start:start + keep[p]]))
        start += keep[p]
    return Splits(*out, info=DatasetInfo(NAME, 3, size, None))
