"""Image files on disk -> one uint8 tensor: folder scanning, decoding, crop/resize and caching.

Decoding uses ``torchvision.io.decode_image`` (libjpeg-turbo / libpng; bit-identical to PIL on
the CIFAR-10 JPEGs and about 4x faster, ~2.5 s for 60,000 32x32 JPEGs on one core), falling
back to PIL for formats torchvision cannot read, and entirely once torchvision drops these
(deprecated) decoders. Decoding is sequential: a thread pool was measured slower for small
JPEGs (the per-file work is mostly Python overhead under the GIL).
A fully decoded file list is cached on disk (see :mod:`vqwae.data.cache`); when only a subset
is asked for (``train_limit`` / ``eval_limit``) and no cache exists, only that subset is
decoded and nothing is written.
"""
from __future__ import annotations

import contextlib
import functools
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset
from PIL import Image

from .base import CorruptImageError, center_crop, to_uint8
from .cache import cache_path, load_cache, save_cache, signature

__all__ = ["IMG_EXTENSIONS", "list_images", "scan_class_tree", "interleave", "decode_file", "ImageFileDataset",
           "decode_files", "decode_cached"]

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff", ".ppm", ".pgm")


def is_image(name: str) -> bool:
    """Whether a file name is an image vqwae reads (by extension; hidden files are not)."""
    return name.lower().endswith(IMG_EXTENSIONS) and not name.startswith(".")


def list_images(folder) -> list[str]:
    """All image files under ``folder`` (recursive, hidden entries skipped), sorted by path.

    Links to folders are followed, each folder once: a folder reached again (a link ``again -> .`` or to a
    folder above, two links to one folder) is not walked again, so a loop cannot multiply the data.
    Paths are plain strings (``folder`` joined with the relative path): tens of thousands of
    ``pathlib.Path`` objects cost seconds.
    """
    out: list[str] = []
    seen = _folder_ids(folder)  # the folder and those above it: a link up to one of them is a loop
    for dirpath, dirnames, filenames in os.walk(str(folder), followlinks=True):
        kept = []
        for d in sorted(dirnames):
            if d.startswith("."):
                continue
            try:
                st = os.stat(os.path.join(dirpath, d))
            except OSError:  # a dangling link
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                kept.append(d)
        dirnames[:] = kept
        out.extend(os.path.join(dirpath, f) for f in filenames if is_image(f))
    out.sort()
    return out


def _folder_ids(folder) -> set[tuple[int, int]]:
    """(device, inode) of ``folder`` and of every folder above it."""
    ids = set()
    real = Path(os.path.realpath(folder))
    for d in (real, *real.parents):
        with contextlib.suppress(OSError):
            st = os.stat(d)
            ids.add((st.st_dev, st.st_ino))
    return ids


def _distinct_folders(folder, names: Sequence[str]) -> list[str]:
    """``names`` (subfolders of ``folder``) without links back to ``folder`` or above and without a second name
    of a folder already listed."""
    seen, out = _folder_ids(folder), []
    for name in names:
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append(name)
    return out


def interleave(groups: Sequence[Sequence]) -> list:
    """Round-robin merge: ``[[a0, a1], [b0, b1, b2]] -> [a0, b0, a1, b1, b2]``.

    Used on per-class file lists so that the first N items of a split (``train_limit``) and
    its last items (the validation carve-out) are class-balanced.
    """
    out = []
    longest = max((len(g) for g in groups), default=0)
    for i in range(longest):
        for g in groups:
            if i < len(g):
                out.append(g[i])
    return out


def scan_class_tree(folder: Path, classes: Sequence[str] | None = None,
                    ) -> tuple[list[str], list[int], list[str] | None]:
    """Files and labels of an image folder.

    If ``folder`` has subfolders holding images, each is a class: classes are the subfolder
    names in alphabetical order (or the given ``classes``, which fixes the index of each name;
    a subfolder not in it is an error), files are sorted within a class and the classes are
    interleaved round-robin (see :func:`interleave`). Otherwise all images under ``folder``
    get label 0 and the returned classes are ``None``.
    """
    subdirs = _distinct_folders(folder, sorted(d.name for d in os.scandir(folder)
                                                if d.is_dir() and not d.name.startswith(".")))
    per_class = {d: list_images(folder / d) for d in subdirs}
    per_class = {d: fs for d, fs in per_class.items() if fs}
    top = [f.name for f in os.scandir(folder) if f.is_file() and is_image(f.name)]
    if not per_class or top:
        files = list_images(folder)
        return files, [0] * len(files), None
    if classes is None:
        classes = sorted(per_class)
    index = {c: i for i, c in enumerate(classes)}
    unknown = sorted(set(per_class) - set(index))
    if unknown:
        raise ValueError(f"class folders {unknown} under {folder} are not among the expected "
                         f"classes {list(classes)}")
    names = [c for c in classes if c in per_class]
    pairs = interleave([[(f, index[c]) for f in per_class[c]] for c in names])
    return [p for p, _ in pairs], [y for _, y in pairs], list(classes)


@functools.lru_cache(maxsize=None)
def _tv_io():
    """torchvision's libjpeg-turbo / libpng decoders, or None where unavailable (they are
    deprecated since torchvision 0.29 in favour of TorchCodec; PIL is the fallback)."""
    try:
        from torchvision.io import ImageReadMode, decode_image, read_file
        from torchvision.io.image import _has_image_ops
    except Exception:
        return None
    try:
        if not _has_image_ops():
            return None
    except Exception:
        return None
    return decode_image, read_file, ImageReadMode


@contextlib.contextmanager
def _quiet_tv():
    """Silence torchvision.io's per-call DeprecationWarning (one warning per image otherwise)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities",
                                category=DeprecationWarning)
        yield


DECODERS = ("auto", "pil")


def _decode(path, channels: int, decoder: str = "auto") -> torch.Tensor:
    tv = _tv_io() if decoder == "auto" else None
    tv_err: Exception | None = None
    if tv is not None:
        decode_image, read_file, mode = tv
        try:
            t = decode_image(read_file(str(path)), mode=mode.RGB if channels == 3 else mode.GRAY)
            if t.ndim == 4:  # an animated GIF / WebP: its first frame
                t = t[0]
            if t.dtype == torch.uint16:  # a 16-bit PNG
                t = (t.to(torch.int32) >> 8).to(torch.uint8)
            if t.dtype == torch.uint8 and t.ndim == 3 and t.shape[0] == channels:
                return t
            # else (a GIF decoded to RGB whatever the mode asked): PIL converts it below
        except Exception as e:  # a format torchvision lacks (tiff, ...) or a corrupt file
            tv_err = e
    try:
        with Image.open(path) as im:  # the first frame; palette, alpha, 1-bit, CMYK... converted to the channels
            if im.mode.startswith("I;16"):
                im = Image.fromarray((np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8))
            arr = np.array(im.convert("RGB" if channels == 3 else "L"))
    except Exception as pil_err:
        # PIL's reason is the readable one (torchvision's names its C++ source line); both are chained.
        reason = str(pil_err).replace(f"'{path}'", "").strip() or type(pil_err).__name__
        raise CorruptImageError(f"cannot decode image file {path} ({reason}); delete or replace it (image folders: "
                                "--skip-unreadable leaves such files out)") from (tv_err or pil_err)
    t = torch.from_numpy(arr)
    return t.permute(2, 0, 1).contiguous() if t.ndim == 3 else t.unsqueeze(0)


def decode_file(path, channels: int = 3, decoder: str = "auto") -> torch.Tensor:
    """Decode one image file to a uint8 ``(channels, H, W)`` tensor (RGB or grey). ``decoder``: "auto" (torchvision's
    libjpeg-turbo / libpng where it has them, PIL otherwise) or "pil" (PIL alone: the two give the same pixels).

    Raises :class:`CorruptImageError` naming the file if it cannot be decoded.
    """
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder {decoder!r}; valid: {', '.join(DECODERS)}")
    with _quiet_tv():
        return _decode(path, channels, decoder)


def _transform(img: torch.Tensor, crop: int | str | None, size: int | None) -> torch.Tensor:
    """Center-crop (``"square"``: the largest centered square; int: that side, or less for a
    smaller image) then resize
    (bilinear, antialiased) to ``size`` x ``size``."""
    if crop == "square":
        img = center_crop(img, min(img.shape[-2:]))
    elif crop is not None:
        img = center_crop(img, min(int(crop), *img.shape[-2:]))
    if size is not None and tuple(img.shape[-2:]) != (size, size):
        x = img.unsqueeze(0).to(torch.float32)
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear",
                                            align_corners=False, antialias=True)
        img = to_uint8(x[0])
    return img


def decode_files(files: Sequence, channels: int = 3, crop: int | str | None = None,
                 size: int | None = None, skipped: list | None = None) -> torch.Tensor:
    """Decode ``files`` into one uint8 ``(N, channels, S, S)`` tensor.

    Each image is center-cropped (``crop``) and resized (``size``) first. Without ``size`` all
    images must share the first one's size, else the error names the odd file.
    An unreadable file raises :class:`CorruptImageError` naming it; when a list ``skipped`` is
    given, its position in ``files`` and the reason are appended there instead, and the result
    has a row for each readable file only (in order).
    """
    out: torch.Tensor | None = None
    row = 0
    with _quiet_tv():
        for i, f in enumerate(files):
            try:
                img = _transform(_decode(f, channels), crop, size)
            except CorruptImageError as e:
                if skipped is None:
                    raise
                skipped.append((i, str(e)))
                continue
            if out is None:
                out = torch.empty((len(files),) + tuple(img.shape), dtype=torch.uint8)
            elif img.shape != out.shape[1:]:
                raise CorruptImageError(
                    f"image {f} has shape {tuple(img.shape)}, expected {tuple(out.shape[1:])} "
                    f"like {files[0]}; pass image_size to resize")
            out[row] = img
            row += 1
    if out is None:
        shape = (0, channels, size or 0, size or 0)
        out = torch.empty(shape, dtype=torch.uint8)
    return out[:row] if row < out.shape[0] else out


def decode_cached(files: Sequence, *, root: Path, tag: str, channels: int = 3,
                  crop: int | str | None = None, size: int | None = None,
                  subset: Sequence[int] | None = None, use_cache: bool = True,
                  skipped: list | None = None) -> torch.Tensor:
    """Decode ``files`` (all, or the rows ``subset`` in that order) with the on-disk cache.

    * cache valid (same files, sizes, mtimes and parameters): read from it (memory-mapped,
      then copied), whatever ``subset`` is;
    * no valid cache, ``subset is None``: decode everything and write the cache;
    * no valid cache, ``subset`` given: decode only those files and write nothing.

    ``skipped``: see :func:`decode_files` (positions are in the requested rows' order); a decode
    that skipped files writes no cache.
    """
    params = f"v1|channels={channels}|crop={crop}|size={size}"
    path = None
    if use_cache and len(files) > 0:
        path = cache_path(tag, root, signature(root, files, params))
        cached = load_cache(path)
        if cached is not None and cached.get("images") is not None \
                and cached["images"].shape[0] == len(files):
            imgs = cached["images"]
            return (imgs[torch.as_tensor(list(subset), dtype=torch.long)] if subset is not None
                    else imgs.clone())
    if subset is not None:
        return decode_files([files[i] for i in subset], channels, crop, size, skipped)
    imgs = decode_files(files, channels, crop, size, skipped)
    if path is not None and imgs.shape[0] == len(files):
        save_cache(path, {"images": imgs, "count": len(files), "params": params})
    return imgs


class ImageFileDataset(Dataset):
    """Images read from their files on each access: center-cropped to a square and resized to ``size``.

    For the high-resolution datasets (FFHQ, CelebA-HQ), which do not fit in memory at the sizes they train at
    (FFHQ's 70,000 images are 13.8 GB as uint8 at 256x256): the decoding runs in the DataLoader's workers
    (``--num-workers``). Items are ``(float32 (C, size, size) in [0, 1], int64 label)`` like
    :class:`~vqwae.data.base.ImageTensorDataset`'s."""

    def __init__(self, files: Sequence[str], size: int, *, channels: int = 3, labels: Sequence[int] | None = None,
                 classes: Sequence[str] | None = None):
        self.files, self.size, self.channels = list(files), int(size), channels
        self.labels = torch.as_tensor(labels if labels is not None else [0] * len(self.files), dtype=torch.int64)
        if self.labels.shape != (len(self.files),):
            raise ValueError(f"{len(self.labels)} labels for {len(self.files)} files")
        self.classes = list(classes) if classes is not None else None

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        with _quiet_tv():
            img = _transform(_decode(self.files[index], self.channels), "square", self.size)
        return img.to(torch.float32).div_(255.0), self.labels[index]

    def __repr__(self) -> str:
        return f"ImageFileDataset(n={len(self)}, size={self.size}, first={self.files[0] if self.files else None!r})"
