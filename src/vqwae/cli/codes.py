"""``vqwae encode`` and ``vqwae decode``: a trained model as a tokenizer (``vqwae.runs.codes``).

    vqwae encode RUN_DIR --out codes.safetensors [--split test] [--limit N] [--images DIR_OR_FILE ...]
    vqwae decode RUN_DIR codes.safetensors --out DIR [--limit N]
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import typer

from vqwae.cli.common import (DataRoot, Device, Threads, at_least, device_or_fail, fail, nonempty_path,
                              out_folder_or_fail, print_wall, threads_on)

Opt = typer.Option
Arg = typer.Argument
Source = Arg(..., help="A run folder (`vqwae train`), or with --images any folder `save_pretrained` wrote.")


def encode_command(
    run_dir: Path = Source,
    out: Path = Opt(..., "--out", parser=nonempty_path,
                    help="The codes file to write (safetensors: indices, labels, metadata)."),
    split: str | None = Opt(None, help="train | val | test (default test): the split of the run's data set."),
    limit: int | None = Opt(None, help="The first N images only (default: train and val as the run trained on them; all of test)."),
    images: list[Path] | None = Opt(None, "--images", help="Encode these image files / folders (recursive) "
                                                            "instead of a split; repeat for several."),
    batch_size: int = Opt(256, help="Images per batch."),
    num_workers: int = Opt(0, help="DataLoader workers (decoding image files)."),
    device: Device = "auto",
    threads: Threads = None,
    data_root: DataRoot = None,
    force: bool = Opt(False, "--force", help="Replace --out if it exists."),
) -> None:
    """Write the code indices of a data set (or of any images) to one file, for a second stage; torchrun shards it."""
    from vqwae.runs.codes import encode_to_file

    t0 = time.perf_counter()
    if images and split is not None:
        fail("--split names a split of the run's data set; with --images the images are given: leave one out")
    split = split or "test"
    if split not in ("train", "val", "test"):
        fail(f"unknown --split {split!r}; valid: train, val, test")
    at_least("--limit", limit)
    at_least("--batch-size", batch_size)
    at_least("--num-workers", num_workers, 0)
    at_least("--threads", threads)
    if not run_dir.is_dir():
        fail(f"no such run folder: {run_dir} (a run folder or a model folder)")
    dev = device_or_fail(device)
    try:
        with threads_on(dev, threads):
            path, meta, n = encode_to_file(run_dir, out, split=split, limit=limit, images=images or None,
                                           batch_size=batch_size, device=dev, data_root=data_root,
                                           num_workers=num_workers, progress=True, force=force)
    except (FileNotFoundError, FileExistsError, IsADirectoryError, ValueError) as e:
        fail(str(e))
    if int(os.environ.get("RANK", "0")) == 0:
        size = path.stat().st_size
        typer.echo(f"{n} x {tuple(meta.grid)} codes (K {meta.num_codes}, {meta.model}, {meta.source}) -> {path} "
                   f"({size / 1e6:.2f} MB)")
        print_wall(t0)


def decode_command(
    run_dir: Path = Arg(..., help="The run (or model folder) whose weights wrote the codes."),
    codes: Path = Arg(..., help="A codes file written by `vqwae encode`."),
    out: Path = Opt(..., "--out", parser=nonempty_path,
                    help="Folder for the images: image_00000.png, ... and grid.png, with a hidden manifest "
                         "(.vqwae-images.json) of what it wrote: a later run replaces only those files."),
    limit: int | None = Opt(None, help="The first N codes only."),
    grid: int = Opt(64, help="Images in grid.png (the first N)."),
    batch_size: int = Opt(256, help="Code grids per batch."),
    device: Device = "auto",
    threads: Threads = None,
) -> None:
    """Decode a codes file back to images (one PNG each and a grid); codes of other weights are refused."""
    from vqwae.figures.image_folder import check_image_folder, save_image_folder
    from vqwae.runs.codes import decode_file

    t0 = time.perf_counter()
    at_least("--limit", limit)
    at_least("--grid", grid)
    at_least("--batch-size", batch_size)
    at_least("--threads", threads)
    out_folder_or_fail(out)
    if not run_dir.is_dir():
        fail(f"no such run folder: {run_dir} (a run folder or a model folder)")
    dev = device_or_fail(device)
    try:
        check_image_folder(out, "image")  # before the work: a user's file of a name it writes stops it
        with threads_on(dev, threads):
            images, labels, meta = decode_file(run_dir, codes, limit=limit, batch_size=batch_size, device=dev,
                                               progress=True)
    except (FileNotFoundError, FileExistsError, NotADirectoryError, ValueError) as e:
        fail(str(e))
    suffixes = [f"_class{int(c)}" for c in labels] if labels is not None else None
    try:
        save_image_folder(images, out, prefix="image", suffixes=suffixes, grid_count=grid, progress=True)
    except (FileExistsError, NotADirectoryError) as e:
        fail(str(e))
    typer.echo(f"{images.shape[0]} images ({meta.source}) -> {out}/ (+ grid.png)")
    print_wall(t0)
