"""A trained model as a tokenizer: a data set's codes into a codes file (``vqwae encode``), and a codes file back
to images (``vqwae decode``). The file format is :mod:`vqwae.data.codes`; ``CodesDataset`` reads it.

    encode_to_file("runs/m1", "codes/test.safetensors", split="test")            # a split of the run's data
    encode_to_file("runs/m1", "codes/mine.safetensors", images=["photos/"])       # any images (a model folder will do)
    images, meta = decode_file("runs/m1", "codes/test.safetensors")               # (N, C, S, S) in [0, 1]

The source is a run folder (``vqwae train``) or any folder ``save_pretrained`` wrote (then only ``images``). Under
``torchrun`` each rank encodes its own contiguous share and rank 0 gathers them and writes the file, which is
identical to a single process's.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch
from torch.utils.data import DataLoader, Subset

from vqwae import distributed
from vqwae.data import DatasetNotFoundError
from vqwae.data.codes import CodesMeta, load_codes, save_codes
from vqwae.data.images import ImageFileDataset, is_image, list_images
from vqwae.files import taken
from vqwae.models import VQAutoencoder
from vqwae.quantizers import ResidualQuantizer
from vqwae.progress import progress_bar
from vqwae.runs import layout

PathLike = str | os.PathLike


def describe_model(model: VQAutoencoder) -> str:
    arch = model.network_config.arch if model.network_config is not None else "custom"
    return f"{arch}/{model.quantizer.kind}"


def image_files(paths: Sequence[PathLike]) -> list[str]:
    """The image files that ``paths`` name: files as given, folders searched recursively (sorted)."""
    files: list[str] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = list_images(p)
            if not found:
                raise FileNotFoundError(f"no image files under {p}")
            files += found
        elif p.is_file():
            if not is_image(p.name):
                raise ValueError(f"{p} is not an image file (expected one of .png, .jpg, .jpeg, ...)")
            files.append(str(p))
        else:
            raise FileNotFoundError(f"{p} not found")
    return files


def _dataset(source: Path, model: VQAutoencoder, *, split: str, limit: int | None, images, data_root):
    """(dataset of (image, label), its number of classes (None: no labels), a description of the data)."""
    if images:
        if model.image_size is None:
            raise ValueError(f"{source}'s model records no image size: encode its images in Python")
        files = image_files(images)
        files = files[:limit] if limit is not None else files
        where = f"{len(files)} image file(s) under {', '.join(map(str, images))}"
        return ImageFileDataset(files, model.image_size, channels=model.network_config.in_channels), None, where
    if not (source / layout.CONFIG).is_file():
        raise FileNotFoundError(f"{source} is a model folder, not a run (no {layout.CONFIG}): it knows no data "
                                "set; give the images with --images")
    cfg = layout.read_config(source)
    if limit is None and split != "test":  # train and val as the run trained on them (and `prior train` reads them)
        limit = cfg.data.train_limit if split == "train" else cfg.data.eval_limit
    try:
        ds, info = layout.load_run_split(source, split, limit=limit, data_root=data_root, cfg=cfg)
    except DatasetNotFoundError as e:
        raise FileNotFoundError(str(e).splitlines()[0]) from None
    where = f"{cfg.data.dataset} {split}" + (f"[:{limit}]" if limit is not None else "")
    return ds, info.num_classes, where


@torch.no_grad()
def encode_dataset(model: VQAutoencoder, dataset, *, batch_size: int = 256, device="cpu", num_workers: int = 0,
                   progress: bool = False, dist_info: distributed.DistInfo | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices (N, *grid) int64, labels (N,) int64) of a data set of (image, label), on the CPU, in order.
    With ``dist_info`` of several ranks (torchrun), each rank encodes a contiguous share and every rank returns
    the whole, gathered."""
    info = dist_info or distributed.DistInfo()
    n = len(dataset)
    share = -(-n // info.world_size)
    mine = Subset(dataset, range(min(n, info.rank * share), min(n, (info.rank + 1) * share)))
    model.eval()
    codes, labels = [], []
    loader = DataLoader(mine, batch_size=batch_size, num_workers=num_workers)
    bar = progress_bar(total=len(mine), desc="encode" if progress and info.is_main else None, unit="img")
    for x, y in loader:
        codes.append(model.encode(x.to(device)).cpu())
        labels.append(torch.as_tensor(y).long().reshape(-1))
        bar.update(x.shape[0])
    bar.close()
    grid = tuple(model.encode(dataset[0][0].unsqueeze(0).to(device)).shape[1:]) if not codes else None
    idx = torch.cat(codes) if codes else torch.empty((0, *grid), dtype=torch.long)
    lab = torch.cat(labels) if labels else torch.empty(0, dtype=torch.long)
    if info.enabled:
        import torch.distributed as dist

        parts: list = [None] * info.world_size
        dist.all_gather_object(parts, (idx, lab))
        idx, lab = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    return idx, lab


def encode_to_file(source: PathLike, out: PathLike, *, split: str = "test", limit: int | None = None,
                   images: Sequence[PathLike] | None = None, batch_size: int = 256, device="cpu",
                   data_root: str | None = None, num_workers: int = 0, progress: bool = False,
                   force: bool = False) -> tuple[Path, CodesMeta, int]:
    """Encode a split of a run's data (or ``images``: files and folders) with the model in ``source`` and write
    the codes file ``out`` (rank 0 under torchrun). ``limit``: the first N images (None: train and val as the run
    trained on them, its train_limit / eval_limit, as ``vqwae prior train`` reads them; the whole test split, as
    ``vqwae eval`` reads it). Returns (the file, its metadata, the number of items).
    An existing ``out`` is replaced only with ``force``."""
    source, out = Path(source), Path(out)
    if taken(out) and not force:
        what = "is a symbolic link" if out.is_symlink() else "exists"
        raise FileExistsError(f"{out} {what}; pass --force to replace it")
    if out.is_dir():
        raise IsADirectoryError(f"--out {out} is a folder: name the codes file (e.g. {out / 'codes.safetensors'})")
    device = torch.device(device)
    dist_info = distributed.setup(device)
    try:
        model = layout.load_model(source, device)
        dataset, num_classes, where = _dataset(source, model, split=split, limit=limit, images=images,
                                               data_root=data_root)
        if len(dataset) == 0:
            raise ValueError(f"nothing to encode: {where} holds no images")
        idx, lab = encode_dataset(model, dataset, batch_size=batch_size, device=device, num_workers=num_workers,
                                  progress=progress, dist_info=dist_info)
        levels = model.quantizer.num_levels if isinstance(model.quantizer, ResidualQuantizer) else None
        meta = CodesMeta(fingerprint=layout.model_fingerprint(source), num_codes=model.num_codes,
                         grid=tuple(idx.shape[1:]), image_size=model.image_size,
                         channels=model.network_config.in_channels if model.network_config is not None else None,
                         model=describe_model(model), source=where, num_classes=num_classes,
                         levels=levels)
        if dist_info.is_main:
            save_codes(out, idx, meta, labels=lab if num_classes is not None else None)
        return out, meta, idx.shape[0]
    finally:
        if dist_info.enabled:
            distributed.teardown()


def check_codes_match(meta: CodesMeta, codes_path: PathLike, fingerprint: str, source: PathLike,
                      num_codes: int | None = None) -> None:
    """A ValueError naming both sides when the codes were not written by the weights whose ``fingerprint``
    (``layout.model_fingerprint(source)``) is given, or (``num_codes``) for another K."""
    if meta.fingerprint != fingerprint or (num_codes is not None and meta.num_codes != num_codes):
        raise ValueError(f"{codes_path} was encoded by weights {meta.fingerprint[:12]} (K {meta.num_codes}), but "
                         f"{source} holds weights {fingerprint[:12]}"
                         + (f" (K {num_codes})" if num_codes is not None else "")
                         + ": decode codes with the model that wrote them")


@torch.no_grad()
def model_grid(model: VQAutoencoder) -> tuple[int, ...] | None:
    """The code grid of one image of the model's size ((h, w), or (h, w, L) for a residual quantizer); None
    when the model records no image size."""
    if model.image_size is None or model.network_config is None:
        return None
    device = next(model.parameters()).device
    x = torch.zeros(1, model.network_config.in_channels, model.image_size, model.image_size, device=device)
    return tuple(model.encode(x).shape[1:])


def check_codes_fit(meta: CodesMeta, codes_path: PathLike, model: VQAutoencoder, source: PathLike) -> None:
    """A ValueError naming the network's grid and image size when the codes' grid (or image size) is not the one the
    model in ``source`` makes (a file whose metadata was edited, or written by hand)."""
    grid = model_grid(model)
    if grid is not None and (tuple(meta.grid) != grid or (meta.image_size not in (None, model.image_size))):
        raise ValueError(f"{codes_path} holds {'x'.join(map(str, meta.grid))} code grids"
                         + (f" of {meta.image_size}x{meta.image_size} images" if meta.image_size else "")
                         + f", but the network in {source} makes {'x'.join(map(str, grid))} grids from "
                         f"{model.image_size}x{model.image_size} images")


@torch.no_grad()
def decode_file(source: PathLike, codes_path: PathLike, *, limit: int | None = None, batch_size: int = 256,
                device="cpu", progress: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, CodesMeta]:
    """(images (N, C, S, S) float32 in [0, 1] on the CPU, labels or None, metadata) of the first ``limit`` items of a
    codes file, decoded by the model in ``source``; codes that other weights wrote are refused."""
    indices, labels, meta = load_codes(codes_path)
    device = torch.device(device)
    model = layout.load_model(source, device)
    check_codes_match(meta, codes_path, layout.model_fingerprint(source), source, model.num_codes)
    check_codes_fit(meta, codes_path, model, source)
    if limit is not None:
        indices = indices[:limit]
        labels = labels[:limit] if labels is not None else None
    out = []
    bar = progress_bar(total=indices.shape[0], desc="decode" if progress else None, unit="img")
    for s in range(0, indices.shape[0], batch_size):
        out.append(model.decode_indices(indices[s:s + batch_size].to(device)).float().clamp(0, 1).cpu())
        bar.update(out[-1].shape[0])
    bar.close()
    return torch.cat(out), labels, meta
