"""A folder of images, one PNG each plus ``grid.png``: what ``vqwae sample`` and ``vqwae decode`` write.

    save_image_folder(images, "out/", prefix="sample", suffixes=[f"_class{c}" for c in labels])
    # out/sample_000_class0.png, out/sample_001_class1.png, ..., out/grid.png

The folder may hold anything else (it is often the user's own): the writer keeps a manifest of what it wrote,
``.vqwae-images.json`` (each file's name and sha256), and replaces or removes only files the manifest names with
the content it recorded. A file of the same name that it did not write (or that was changed since) is never
touched: the write is refused, naming it, before any file is written.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Sequence

import torch

from vqwae.files import atomic_path, atomic_write_text, taken
from vqwae.progress import progress_bar
from vqwae.extras import require

GRID = "grid.png"
MANIFEST = ".vqwae-images.json"
_FORMAT = "vqwae-image-folder"


class ForeignFileError(FileExistsError):
    """A file the image-folder writer would replace, but did not write."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def written_files(out: str | os.PathLike) -> dict[str, str]:
    """{name: sha256} of the files the writer recorded in ``out``'s manifest ({} when none, or unreadable)."""
    p = Path(out) / MANIFEST
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("format") == _FORMAT else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str) and "/" not in k}


def _ours(out: Path, name: str, manifest: dict[str, str]) -> bool:
    """Whether ``out/name`` is a file this writer wrote and nobody changed since."""
    p = out / name
    return name in manifest and p.is_file() and not p.is_symlink() and _sha256(p) == manifest[name]


def _foreign_error(out: Path, foreign: list[str]) -> ForeignFileError:
    return ForeignFileError(f"{out / foreign[0]} exists and was not written by vqwae"
                            + (f" ({len(foreign)} such files)" if len(foreign) > 1 else "")
                            + ": nothing was written; choose another --out, or move the file(s) away")


def _our_names(prefix: str):
    """The names ``save_image_folder`` writes with ``prefix``: ``{prefix}_7.png``, ``{prefix}_07_class3.png``,
    grid.png."""
    import re

    return re.compile(rf"{re.escape(prefix)}_\d+(_class\d+)?\.png|{re.escape(GRID)}")


def _manifest(out: Path, prefix: str, legacy: bool) -> dict[str, str]:
    """``out``'s manifest; with ``legacy``, a folder that has none (written before the manifest, by vqwae: a run's
    own samples/ folder) has its files of the writer's names adopted as the writer's."""
    manifest = written_files(out)
    if legacy and not manifest and not (out / MANIFEST).exists() and out.is_dir():
        names = _our_names(prefix)
        manifest = {p.name: _sha256(p) for p in out.iterdir()
                    if names.fullmatch(p.name) and p.is_file() and not p.is_symlink()}
    return manifest


def _refuse_non_folder(out: Path) -> None:
    """Anything at ``out`` that is not a folder (a file, a link to nowhere or to itself) is refused."""
    if taken(out) and not out.is_dir():
        what = "a symbolic link that leads to no folder" if out.is_symlink() else "a file"
        raise NotADirectoryError(f"{out} is {what}, not a folder")


def check_image_folder(out: str | os.PathLike, prefix: str, *, legacy: bool = False) -> None:
    """Before the work: raise :class:`ForeignFileError` when ``out`` holds a file of a name ``save_image_folder``
    may write with ``prefix`` (``{prefix}_7.png``, ``{prefix}_07_class3.png``, grid.png) that it did not write; a
    file that is not a folder raises NotADirectoryError. ``legacy``: see :func:`save_image_folder`."""
    out = Path(out)
    _refuse_non_folder(out)
    if not out.is_dir():
        return
    pattern = _our_names(prefix)
    manifest = _manifest(out, prefix, legacy)
    foreign = sorted(p.name for p in out.iterdir() if pattern.fullmatch(p.name) and not _ours(out, p.name, manifest))
    if foreign:
        raise _foreign_error(out, foreign)


def save_image_folder(images: torch.Tensor, out: str | os.PathLike, *, prefix: str,
                      suffixes: Sequence[str] | None = None, nrow: int | None = None,
                      grid_count: int | None = None, progress: bool = False, legacy: bool = False) -> Path:
    """One PNG per image of ``images`` (N, C, S, S) in [0, 1], named ``{prefix}_{i}{suffix}.png`` with i zero-padded
    to N's width, and ``grid.png`` of the first ``grid_count`` images (None: all), ``nrow`` per row (default about
    sqrt). PNGs an earlier call with the same prefix wrote (and the manifest records, unchanged) are removed first,
    so the folder holds exactly these images among the writer's own; every other file stays. A name to be written
    that holds a file the writer did not write raises :class:`ForeignFileError` before anything is written.
    ``progress``: a bar (or log lines) over the images written. ``legacy``: a folder vqwae owns (a run's samples/)
    written before the manifest existed: its files of the writer's names count as the writer's."""
    # Imported here: torchvision costs ~1.6 s at import (it loads torch._dynamo), and only these commands need it.
    save_image = require("torchvision.utils").save_image

    out = Path(out)
    _refuse_non_folder(out)
    n = images.shape[0]
    width = len(str(n - 1))
    names = [f"{prefix}_{i:0{width}d}{suffixes[i] if suffixes else ''}.png" for i in range(n)]
    manifest = _manifest(out, prefix, legacy) if out.is_dir() else {}
    foreign = [name for name in (*names, GRID) if taken(out / name)]
    foreign = [name for name in foreign if not _ours(out, name, manifest)]
    if foreign:
        raise _foreign_error(out, foreign)
    out.mkdir(parents=True, exist_ok=True)
    new = set(names) | {GRID}
    for name in sorted(manifest):  # the writer's own PNGs of an earlier, larger call with this prefix
        if name.startswith(f"{prefix}_") and name.endswith(".png") and name not in new:
            if _ours(out, name, manifest):
                (out / name).unlink()
            del manifest[name]

    def write(tensor: torch.Tensor, name: str, **kwargs) -> None:
        with atomic_path(out / name) as tmp:
            save_image(tensor, tmp, format="png", **kwargs)
        manifest[name] = _sha256(out / name)

    try:
        for i in progress_bar(range(n), desc="write PNGs" if progress else None, unit="img"):
            write(images[i], names[i])
        shown = images if grid_count is None else images[:grid_count]
        if nrow is None:
            nrow = max(1, math.ceil(math.sqrt(shown.shape[0])))
        write(shown, GRID, nrow=nrow, padding=2, pad_value=1.0)
    finally:  # what was written, even when interrupted, is recorded as the writer's own
        atomic_write_text(out / MANIFEST, json.dumps({"format": _FORMAT, "files": manifest}, indent=1) + "\n")
    return out
