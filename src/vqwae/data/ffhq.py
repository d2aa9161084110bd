"""FFHQ (Karras et al. 2019), the paper's 256x256 faces: 70,000 PNGs numbered 00000-69999, unlabelled.

Layouts (``ROOT``), as distributed; the first that exists is used, preferring the smallest native size that is
at least ``image_size`` (so 256 is read from 1024 rather than upsampled from 128):

* ``ROOT/images1024x1024/`` : the official 1024x1024 images, flat or in the ``00000/ ... 69000/`` subfolders;
* ``ROOT/thumbnails128x128/`` : the official 128x128 thumbnails, likewise;
* any other folder holding numbered images directly (e.g. a 256x256 export such as ``ROOT/ffhq256/``), or
  ``ROOT`` itself holding them;
* any of these under ``ROOT/ffhq/`` (a folder holding every dataset).

Splits, by file number (stated and deterministic): train 00000-59999 (60,000: taming-transformers' FFHQ
training list), val 60000-64999 and test 65000-69999 (taming's 10,000 validation images, halved). A partial
copy keeps whichever numbers it has. Images are center-cropped, resized (antialiased bilinear) to
``image_size`` (default 256) and read from disk on each access (:class:`~vqwae.data.images.ImageFileDataset`):
FFHQ does not fit in memory at 256.
"""
from __future__ import annotations

import os
from pathlib import Path

from PIL import Image

from .base import DatasetInfo, Splits, limit, not_found
from .images import IMG_EXTENSIONS, ImageFileDataset, list_images

NAME = "ffhq"
DEFAULT_SIZE = 256
SPLIT_STARTS = (0, 60_000, 65_000, 70_000)  # train [0, 60000), val [60000, 65000), test [65000, 70000)
KNOWN = {"images1024x1024": 1024, "thumbnails128x128": 128}
LAYOUTS = [
    "ROOT/images1024x1024/[NNN00/]NNNNN.png (the official images; split by number)",
    "ROOT/thumbnails128x128/[NNN00/]NNNNN.png (the official thumbnails)",
    "ROOT/<folder>/NNNNN.{png,jpg} or ROOT/NNNNN.{png,jpg} (e.g. a 256x256 export)",
    "any of these under ROOT/ffhq/",
]
HOW = ("download FFHQ from https://github.com/NVlabs/ffhq-dataset (download_ffhq.py --images or --thumbs) and "
       "pass its folder as --data-root")


def numbered(files: list[str], dataset: str, folder: Path, layouts, how) -> dict[int, str]:
    """{number: path} of files named by their index (``00042.png``); a one-line error names any other file."""
    out: dict[int, str] = {}
    for f in files:
        stem = os.path.splitext(os.path.basename(f))[0]
        if not stem.isdigit():
            raise not_found(dataset, folder, layouts, how, f"{f} is not named by its image number")
        out[int(stem)] = f
    return out


def _native_side(folder: Path, files: list[str]) -> int:
    if folder.name in KNOWN:
        return KNOWN[folder.name]
    with Image.open(files[0]) as im:  # reads the header only
        return min(im.size)


def _own_images(folder: Path) -> list[str]:
    """The image files directly in ``folder`` (not in its subfolders), sorted."""
    return sorted(os.path.join(str(folder), f.name) for f in os.scandir(folder)
                  if f.is_file() and f.name.lower().endswith(IMG_EXTENSIONS) and not f.name.startswith("."))


def _candidates(root: Path) -> list[tuple[Path, list[str]]]:
    """(folder, its images) for each folder that may hold FFHQ: the official ones when present; else any
    subfolder holding numbered images directly (a class tree such as CIFAR-10's is not FFHQ); else ROOT's own."""
    official = [(d, fs) for d in (root / k for k in KNOWN) if d.is_dir() for fs in [list_images(d)] if fs]
    if official:
        return official
    others = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = _own_images(d)
        if files and os.path.splitext(os.path.basename(files[0]))[0].isdigit():
            others.append((d, files))
    own = _own_images(root)
    return others or ([(root, own)] if own else [])


def split_by_number(files: dict[int, str], starts: tuple[int, ...]) -> list[list[str]]:
    """Files of each [starts[i], starts[i + 1]) number range, in number order."""
    return [[files[n] for n in sorted(files) if lo <= n < hi] for lo, hi in zip(starts, starts[1:])]


def load(root, *, train_limit=None, eval_limit=None, download=False, image_size=None, seed=0) -> Splits:
    """FFHQ splits (see the module docstring); ``seed`` and ``download`` are unused (fixed splits, no
    automatic download: FFHQ needs its own script and Google Drive quota)."""
    size = int(image_size or DEFAULT_SIZE)
    root = Path(root).expanduser()
    if not root.is_dir():
        raise not_found(NAME, root, LAYOUTS, HOW, "path does not exist" if not root.exists() else "not a folder")
    if (root / "ffhq").is_dir():  # a folder holding every dataset (--data-root ../data)
        root = root / "ffhq"
    found = _candidates(root)
    if not found:
        raise not_found(NAME, root, LAYOUTS, HOW, "no image files found")
    sides = [(_native_side(d, fs), d, fs) for d, fs in found]
    big_enough = [s for s in sides if s[0] >= size]
    _, folder, files = min(big_enough, key=lambda s: s[0]) if big_enough else max(sides, key=lambda s: s[0])
    splits = split_by_number(numbered(files, NAME, folder, LAYOUTS, HOW), SPLIT_STARTS)
    for name, part, lo, hi in zip(("train", "val", "test"), splits, SPLIT_STARTS, SPLIT_STARTS[1:]):
        if not part:
            raise not_found(NAME, folder, LAYOUTS, HOW, f"no images numbered {lo:05d}-{hi - 1:05d} ({name} split); "
                            "a partial copy can be read as --dataset imagefolder")
    train, val, test = splits
    train = train[:limit(len(train), train_limit)]
    val, test = val[:limit(len(val), eval_limit)], test[:limit(len(test), eval_limit)]
    return Splits(ImageFileDataset(train, size), ImageFileDataset(val, size), ImageFileDataset(test, size),
                  DatasetInfo(NAME, 3, size, None))
