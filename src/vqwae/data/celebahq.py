"""CelebA-HQ (Karras et al. 2018): 30,000 high-resolution faces, as two distributions lay them out.

Layouts (``ROOT``), the first found is used:

* ``ROOT/CelebA-HQ-img/0.jpg ... 29999.jpg`` (CelebAMask-HQ's distribution, 1024x1024). Splits by number:
  train 0-23,999, val 24,000-26,999, test 27,000-29,999 (80 / 10 / 10). When
  ``ROOT/CelebA-HQ-to-CelebA-mapping.txt`` and CelebA's ``list_eval_partition.txt`` (in ``ROOT`` or
  ``ROOT/celeba/``) are both there, each image takes instead the official CelebA partition of the photo it
  was made from (train 24,183 / val 2,993 / test 2,824), so no identity crosses splits. Unlabelled.
* ``ROOT/celeba_hq/{train,val}/{female,male}/*.jpg`` (StarGAN v2's distribution, 28,000 / 2,000), or ROOT
  being that ``celeba_hq`` folder. train/ is the train split; val/'s images, classes interleaved, are halved:
  the first half is val, the second test. Labels: female 0, male 1.

Images are center-cropped, resized (antialiased bilinear) to ``image_size`` (default 256) and read from disk
on each access (:class:`~vqwae.data.images.ImageFileDataset`).
"""
from __future__ import annotations

from pathlib import Path

from .base import DatasetInfo, Splits, limit, not_found
from .ffhq import numbered, split_by_number
from .images import ImageFileDataset, list_images, scan_class_tree

NAME = "celebahq"
DEFAULT_SIZE = 256
SPLIT_STARTS = (0, 24_000, 27_000, 30_000)
MAPPING = "CelebA-HQ-to-CelebA-mapping.txt"
LAYOUTS = [
    "ROOT/CelebA-HQ-img/N.jpg, N = 0..29999 (CelebAMask-HQ; + optional ROOT/" + MAPPING + " and "
    "list_eval_partition.txt for CelebA's official partitions)",
    "ROOT/celeba_hq/{train,val}/{female,male}/*.jpg (StarGAN v2), or ROOT = that celeba_hq folder",
]
HOW = ("download CelebAMask-HQ (https://github.com/switchablenorms/CelebAMask-HQ) or StarGAN v2's celeba_hq "
       "(https://github.com/clovaai/stargan-v2, download.sh celeba-hq-dataset) and pass its folder as --data-root")


def _official_partition(root: Path, files: dict[int, str]) -> list[list[str]] | None:
    """Files per CelebA partition (0 train, 1 val, 2 test) via the HQ -> CelebA mapping, or None without it."""
    from .celeba import read_partition  # the one reader of CelebA's partition file

    mapping = root / MAPPING
    part_dir = next((d for d in (root, root / "celeba") if (d / "list_eval_partition.txt").is_file()
                     or (d / "list_eval_partition.csv").is_file()), None)
    if not mapping.is_file() or part_dir is None:
        return None
    names, parts = read_partition(part_dir)
    partition = dict(zip(names, parts))
    out: list[list[str]] = [[], [], []]
    line_no = 1
    try:
        lines = mapping.read_text(encoding="utf-8").splitlines()
        for line_no, line in enumerate(lines[1:], 2):  # header: idx orig_idx orig_file
            fields = line.split()
            if not fields:
                continue
            idx, orig_file = int(fields[0]), fields[2]
            if idx in files:
                out[partition[orig_file]].append(files[idx])
    except (ValueError, IndexError, KeyError, OSError, UnicodeDecodeError) as e:
        raise not_found(NAME, root, LAYOUTS, HOW, f"unreadable {mapping} near line {line_no}: {e!r}") from e
    return out


def _stargan_dir(root: Path) -> Path | None:
    for cand in (root / "celeba_hq", root):
        if (cand / "train").is_dir() and (cand / "val").is_dir():
            return cand
    return None


def load(root, *, train_limit=None, eval_limit=None, download=False, image_size=None, seed=0) -> Splits:
    """CelebA-HQ splits (see the module docstring); ``seed`` and ``download`` are unused."""
    size = int(image_size or DEFAULT_SIZE)
    root = Path(root).expanduser()
    if not root.is_dir():
        raise not_found(NAME, root, LAYOUTS, HOW, "path does not exist" if not root.exists() else "not a folder")
    labels: list[list[int]] | None = None
    classes = None
    if (root / "CelebA-HQ-img").is_dir():
        folder = root / "CelebA-HQ-img"
        files = numbered(list_images(folder), NAME, folder, LAYOUTS, HOW)
        splits = _official_partition(root, files) or split_by_number(files, SPLIT_STARTS)
    elif (folder := _stargan_dir(root)) is not None:
        try:
            tr_files, tr_labels, classes = scan_class_tree(folder / "train")
            va_files, va_labels, _ = scan_class_tree(folder / "val", classes)
        except ValueError as e:
            raise not_found(NAME, folder, LAYOUTS, HOW, str(e)) from e
        half = len(va_files) // 2
        splits = [tr_files, va_files[:half], va_files[half:]]
        labels = [tr_labels, va_labels[:half], va_labels[half:]]
    else:
        raise not_found(NAME, root, LAYOUTS, HOW, "neither CelebA-HQ-img/ nor celeba_hq/train + val/ found")
    for name, part in zip(("train", "val", "test"), splits):
        if not part:
            raise not_found(NAME, folder, LAYOUTS, HOW, f"the {name} split has no images")
    keep = [limit(len(splits[0]), train_limit), limit(len(splits[1]), eval_limit), limit(len(splits[2]), eval_limit)]
    out = [ImageFileDataset(part[:k], size, labels=None if labels is None else lab[:k], classes=classes)
           for part, k, lab in zip(splits, keep, labels or [None] * 3)]
    return Splits(*out, info=DatasetInfo(NAME, 3, size, len(classes) if classes else None))
