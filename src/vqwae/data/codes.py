"""A codes file: a data set's code indices, written once by ``vqwae encode`` and read by a second stage.

    from vqwae.data import CodesDataset
    codes = CodesDataset("test_codes.safetensors")
    idx, label = codes[0]          # int64 (h, w) (or (h, w, L) for a residual quantizer), int64 label (-1: none)
    codes.meta.num_codes, codes.meta.grid, codes.meta.fingerprint
    loader = torch.utils.data.DataLoader(codes, batch_size=128, shuffle=True)

The file is safetensors (no code runs when it is read), with

* ``indices``: (N, *grid) in the smallest unsigned integer type that holds K (uint8 up to K = 256, uint16 up to
  65,536, int32 beyond); a residual quantizer's codes carry a trailing level axis, (N, h, w, L);
* ``labels``: (N,) int64, where the data have classes;
* metadata (safetensors' string map), :class:`CodesMeta`: the format and its version, the autoencoder's weights
  fingerprint (``vqwae.models.pretrained.weights_fingerprint`` of its ``model.safetensors``: sha256 over the file's
  name, ``|`` and its bytes), K, the grid, the levels, the image size and channels, the
  model's kind (network / quantizer) and where the images came from.

A second stage that decodes codes checks the fingerprint: codes are only meaningful with the weights that made
them.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset

from vqwae.files import atomic_path

FORMAT = "vqwae-codes"
VERSION = 1
NO_LABEL = -1  # the label CodesDataset gives an item of a data set without classes


@dataclass(frozen=True)
class CodesMeta:
    """What a codes file says about its codes: the model that wrote them and their shape (in the file's header)."""

    fingerprint: str  # the autoencoder weights' vqwae.models.pretrained.weights_fingerprint (64 hex digits)
    num_codes: int  # K: every index lies in [0, K)
    grid: tuple[int, ...]  # one item's index shape: (h, w), or (h, w, L) with L residual levels
    image_size: int | None  # the side of the images the codes decode to
    channels: int | None  # their channels
    model: str  # "<network arch>/<quantizer kind>", e.g. "conv32/wasserstein", "vqgan/residual"
    source: str  # where the images came from: "mnist test[:1000]", "images: 12 files under /data/x", ...
    num_classes: int | None = None  # classes of the labels (None: no labels)
    levels: int | None = None  # residual levels (the grid's last axis), None for a single quantizer

    def to_strings(self) -> dict[str, str]:
        """The metadata as the safetensors header's string values (``from_strings`` reads them back)."""
        return {"format": FORMAT, "version": str(VERSION),
                **{k: json.dumps(v) for k, v in dataclasses.asdict(self).items()}}

    @classmethod
    def from_strings(cls, meta: dict[str, str] | None, where: str) -> "CodesMeta":
        """The metadata from a codes file's header; ``where`` (the file) names it in the one-line errors."""
        meta = meta or {}
        if meta.get("format") != FORMAT:
            raise ValueError(f"{where} is not a vqwae codes file (written by `vqwae encode`)")
        if not str(meta.get("version", "0")).isdigit():
            raise ValueError(f"{where}: damaged codes metadata (version {meta.get('version')!r})")
        if int(meta.get("version", 0)) > VERSION:
            raise ValueError(f"{where} is a codes file of version {meta['version']}: this vqwae reads up to "
                             f"{VERSION}; upgrade vqwae")
        try:
            values = {f.name: json.loads(meta[f.name]) for f in dataclasses.fields(cls) if f.name in meta}
            values["grid"] = tuple(values["grid"])
            return cls(**values)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{where}: damaged codes metadata ({e})") from None


def index_dtype(num_codes: int, signed: bool = False) -> torch.dtype:
    """The smallest integer type that holds every index of a codebook of ``num_codes`` codes (``signed``: and -1, a
    residual level not used)."""
    if signed:
        return torch.int8 if num_codes <= 1 << 7 else torch.int16 if num_codes <= 1 << 15 else torch.int32
    if num_codes <= 1 << 8:
        return torch.uint8
    if num_codes <= 1 << 16:
        return torch.uint16
    return torch.int32


# ---- the one validation every reader and the writer go through -------------------------------------------
def _count(value, name: str, where: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: damaged codes metadata: {name} must be a positive integer, got {value!r}")


def check_meta(meta: CodesMeta, where: str) -> None:
    """That a codes file's metadata is whole: a sha256 fingerprint, K >= 1, a grid (h, w) or (h, w, L) of positive
    sides whose L is ``levels``, and counts (image size, channels, classes) that are positive or absent."""
    fp = meta.fingerprint
    if not isinstance(fp, str) or len(fp) != 64 or any(c not in "0123456789abcdef" for c in fp):
        raise ValueError(f"{where}: damaged codes metadata: the weights fingerprint must be 64 hex digits, got {fp!r}")
    _count(meta.num_codes, "num_codes", where)
    for name in ("image_size", "channels", "num_classes", "levels"):
        _count(getattr(meta, name), name, where, optional=True)
    grid = meta.grid
    if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in grid) or len(grid) not in (2, 3):
        raise ValueError(f"{where}: damaged codes metadata: the grid must be (h, w), or (h, w, levels) for a residual "
                         f"quantizer, of positive sides; got {grid}")
    if (len(grid) == 3) != (meta.levels is not None) or (meta.levels is not None and grid[2] != meta.levels):
        raise ValueError(f"{where}: damaged codes metadata: the grid {grid} does not agree with levels {meta.levels}")
    if not isinstance(meta.model, str) or not isinstance(meta.source, str):
        raise ValueError(f"{where}: damaged codes metadata: model and source must be text")


def check_codes(indices: torch.Tensor, meta: CodesMeta, labels: torch.Tensor | None, where: str
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The one validation of codes, for the writer (:func:`save_codes`) and every reader (:func:`load_codes`, so
    ``vqwae decode``, ``prior train --codes`` and :class:`CodesDataset`): the metadata (:func:`check_meta`);
    integer indices (no float or bool: 3.7 is no code) of shape (N, *grid), N >= 1, every one in [0, K) (a residual
    code may end in -1s, levels not used: ``residual_index_error``); labels absent, or (N,) integers in
    [0, num_classes) with ``num_classes`` set.
    Returns (indices int64, labels int64 or None); raises a ValueError naming ``where`` and the problem."""
    check_meta(meta, where)
    if not isinstance(indices, torch.Tensor):
        raise ValueError(f"{where}: indices must be a tensor, got {type(indices).__name__}")
    if indices.dtype.is_floating_point or indices.dtype.is_complex or indices.dtype == torch.bool:
        raise ValueError(f"{where}: indices must be integers, got {indices.dtype} (codes are indices into the "
                         "codebook: round or argmax them first)")
    if indices.dim() == 0 or tuple(indices.shape[1:]) != tuple(meta.grid):
        raise ValueError(f"{where}: indices of shape {tuple(indices.shape)} do not match the grid {meta.grid} "
                         f"(expected (N, {', '.join(map(str, meta.grid))}))")
    if indices.shape[0] == 0:
        raise ValueError(f"{where} holds no codes (0 items): encode at least one image")
    indices = indices.to(torch.int64)  # (uint16 and uint32 lack min / max in torch)
    if meta.levels is not None:  # residual codes: -1 marks the levels a call did not use
        from vqwae.quantizers.residual import residual_index_error

        error = residual_index_error(indices, meta.num_codes)
        if error:
            raise ValueError(f"{where}: {error}")
    else:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= meta.num_codes:
            raise ValueError(f"{where}: indices must lie in [0, {meta.num_codes}) (K {meta.num_codes}), "
                             f"got [{lo}, {hi}]")
    if labels is None:
        return indices, None
    if meta.num_classes is None:
        raise ValueError(f"{where}: labels without num_classes in the metadata")
    if not isinstance(labels, torch.Tensor) or labels.dtype.is_floating_point or labels.dtype.is_complex \
            or labels.dtype == torch.bool:
        raise ValueError(f"{where}: labels must be integers, got "
                         f"{labels.dtype if isinstance(labels, torch.Tensor) else type(labels).__name__}")
    if tuple(labels.shape) != (indices.shape[0],):
        raise ValueError(f"{where}: labels of shape {tuple(labels.shape)} for {indices.shape[0]} items (expected "
                         f"({indices.shape[0]},))")
    labels = labels.to(torch.int64)
    if int(labels.min()) < 0 or int(labels.max()) >= meta.num_classes:
        raise ValueError(f"{where}: labels must lie in [0, {meta.num_classes}) ({meta.num_classes} classes), got "
                         f"[{int(labels.min())}, {int(labels.max())}]")
    return indices, labels


def save_codes(path: str | os.PathLike, indices: torch.Tensor, meta: CodesMeta,
               labels: torch.Tensor | None = None) -> Path:
    """Write a codes file (atomically: a reader never sees half a file). ``indices`` (N, *meta.grid) integers in
    [0, K); ``labels`` (N,) integers in [0, meta.num_classes) or None. Checked by :func:`check_codes`."""
    from safetensors.torch import save_file

    indices, labels = check_codes(indices, meta, labels, f"codes for {path}")
    signed = bool((indices < 0).any())  # residual codes with levels not used
    tensors = {"indices": indices.to(index_dtype(meta.num_codes, signed)).contiguous().cpu()}
    if labels is not None:
        tensors["labels"] = labels.contiguous().cpu()
    path = Path(path)
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta.to_strings())
    return path


def _unreadable(path, e: Exception) -> ValueError:
    return ValueError(f"{path} is not a readable codes file (truncated, empty or not safetensors?): "
                      f"{str(e).splitlines()[0] if str(e) else type(e).__name__}")


def read_meta(path: str | os.PathLike) -> CodesMeta:
    """A codes file's metadata (checked, :func:`check_meta`), without reading its indices."""
    from safetensors import safe_open

    try:
        with safe_open(str(_existing(path)), "pt") as f:
            raw = f.metadata()
    except (FileNotFoundError, IsADirectoryError):
        raise
    except Exception as e:  # safetensors' own error type: a truncated, empty, random or oversized header
        raise _unreadable(path, e) from None
    meta = CodesMeta.from_strings(raw, str(path))
    check_meta(meta, str(path))
    return meta


def load_codes(path: str | os.PathLike) -> tuple[torch.Tensor, torch.Tensor | None, CodesMeta]:
    """(indices (N, *grid) int64, labels (N,) int64 or None, metadata) of a codes file, checked by
    :func:`check_codes` (every reader goes through here)."""
    from safetensors.torch import load_file

    meta = read_meta(path)
    try:
        tensors = load_file(str(path))
    except Exception as e:
        raise _unreadable(path, e) from None
    if "indices" not in tensors:
        raise ValueError(f"{path} holds no indices")
    indices, labels = check_codes(tensors["indices"], meta, tensors.get("labels"), str(path))
    return indices, labels, meta


def _existing(path) -> Path:
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{p} is a folder, not a codes file")
    if not p.is_file():
        raise FileNotFoundError(f"codes file {p} not found (write one with `vqwae encode RUN --out {p}`)")
    return p


class CodesDataset(Dataset):
    """The items of a codes file, ``(indices int64 (*grid), label int64)``, for a second stage (a prior, a
    transformer over codes). The label is -1 (``NO_LABEL``) where the data have no classes. ``codes`` and
    ``labels`` hold the whole file (int64 and (N,) or None); ``meta`` its :class:`CodesMeta`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.codes, self.labels, self.meta = load_codes(path)

    def __len__(self) -> int:
        return self.codes.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        label = self.labels[index] if self.labels is not None else torch.tensor(NO_LABEL)
        return self.codes[index], label

    def __repr__(self) -> str:
        m = self.meta
        return (f"CodesDataset({str(self.path)!r}, n={len(self)}, grid={m.grid}, K={m.num_codes}, model={m.model!r}, "
                f"labels={'yes' if self.labels is not None else 'no'})")
