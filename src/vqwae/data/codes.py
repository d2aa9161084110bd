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
  fingerprint (sha256 of its ``model.safetensors``), K, the grid, the levels, the image size and channels, the
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
    fingerprint: str  # sha256 of the autoencoder's model.safetensors (vqwae.models.pretrained.weights_fingerprint)
    num_codes: int  # K: every index lies in [0, K)
    grid: tuple[int, ...]  # one item's index shape: (h, w), or (h, w, L) with L residual levels
    image_size: int | None  # the side of the images the codes decode to
    channels: int | None  # their channels
    model: str  # "<network arch>/<quantizer kind>", e.g. "conv32/wasserstein", "vqgan/residual"
    source: str  # where the images came from: "mnist test[:1000]", "images: 12 files under /data/x", ...
    num_classes: int | None = None  # classes of the labels (None: no labels)
    levels: int | None = None  # residual levels (the grid's last axis), None for a single quantizer

    def to_strings(self) -> dict[str, str]:
        return {"format": FORMAT, "version": str(VERSION),
                **{k: json.dumps(v) for k, v in dataclasses.asdict(self).items()}}

    @classmethod
    def from_strings(cls, meta: dict[str, str] | None, where: str) -> "CodesMeta":
        meta = meta or {}
        if meta.get("format") != FORMAT:
            raise ValueError(f"{where} is not a vqwae codes file (written by `vqwae encode`)")
        if int(meta.get("version", 0)) > VERSION:
            raise ValueError(f"{where} is a codes file of version {meta['version']}: this vqwae reads up to "
                             f"{VERSION}; upgrade vqwae")
        try:
            values = {f.name: json.loads(meta[f.name]) for f in dataclasses.fields(cls) if f.name in meta}
            values["grid"] = tuple(values["grid"])
            return cls(**values)
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"{where}: damaged codes metadata ({e})") from None


def index_dtype(num_codes: int) -> torch.dtype:
    """The smallest integer type that holds every index of a codebook of ``num_codes`` codes."""
    if num_codes <= 1 << 8:
        return torch.uint8
    if num_codes <= 1 << 16:
        return torch.uint16
    return torch.int32


def save_codes(path: str | os.PathLike, indices: torch.Tensor, meta: CodesMeta,
               labels: torch.Tensor | None = None) -> Path:
    """Write a codes file (atomically: a reader never sees half a file). ``indices`` (N, *meta.grid) in [0, K)."""
    from safetensors.torch import save_file

    if tuple(indices.shape[1:]) != tuple(meta.grid):
        raise ValueError(f"indices of shape {tuple(indices.shape)} do not match the grid {meta.grid}")
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= meta.num_codes):
        raise ValueError(f"indices must lie in [0, {meta.num_codes}) (all residual levels used), got "
                         f"[{int(indices.min())}, {int(indices.max())}]")
    tensors = {"indices": indices.to(index_dtype(meta.num_codes)).contiguous().cpu()}
    if labels is not None:
        if labels.shape != (indices.shape[0],):
            raise ValueError(f"{tuple(labels.shape)} labels for {indices.shape[0]} items")
        tensors["labels"] = labels.to(torch.int64).contiguous().cpu()
    path = Path(path)
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta.to_strings())
    return path


def read_meta(path: str | os.PathLike) -> CodesMeta:
    """A codes file's metadata, without reading its indices."""
    from safetensors import safe_open

    with safe_open(str(_existing(path)), "pt") as f:
        return CodesMeta.from_strings(f.metadata(), str(path))


def load_codes(path: str | os.PathLike) -> tuple[torch.Tensor, torch.Tensor | None, CodesMeta]:
    """(indices (N, *grid) int64, labels (N,) int64 or None, metadata) of a codes file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    meta = read_meta(path)
    try:
        tensors = load_file(str(path))
    except SafetensorError as e:
        raise ValueError(f"{path} could not be read (corrupt or truncated?): {e}") from None
    if "indices" not in tensors:
        raise ValueError(f"{path} holds no indices")
    indices = tensors["indices"].to(torch.int64)
    if tuple(indices.shape[1:]) != meta.grid:
        raise ValueError(f"{path}: indices of shape {tuple(indices.shape)} do not match its grid {meta.grid}")
    return indices, tensors.get("labels"), meta


def _existing(path) -> Path:
    p = Path(path)
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
