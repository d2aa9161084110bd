"""On-disk cache of decoded image folders.

Decoding tens of thousands of JPEGs takes tens of seconds, so a fully decoded folder is saved
once as a ``.pt`` file of uint8 tensors and reused afterwards.

* Location: ``$VQWAE_CACHE`` if set, else ``~/.cache/vqwae``.
* File name: ``{tag}-{hash of the absolute source path}-{hash of the content signature}.pt``.
  The content signature covers every source file's relative path, size and mtime (ns) plus the
  decoding parameters, so any added, removed, renamed, rewritten or touched file, or a change
  of parameters, gives a different name: a stale cache is never read.
* Writing is atomic (a temporary file in the same folder, then ``os.replace``); after a
  successful write, older caches of the same source path and tag are deleted.
* An unreadable cache file is ignored (and rebuilt), never fatal; a cache folder that cannot be
  written only costs the speed-up.
"""
from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path
from typing import Iterable

import torch

from vqwae.files import atomic_torch_save

__all__ = ["cache_dir", "cache_path", "signature", "load_cache", "save_cache"]

CACHE_ENV = "VQWAE_CACHE"


def cache_dir() -> Path:
    """The cache folder: ``$VQWAE_CACHE`` or ``~/.cache/vqwae`` (not created here)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "vqwae"


def _h(text: str, n: int = 16) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]


def signature(root: Path, files: Iterable[Path], params: str = "") -> str:
    """Hash of (relative path, size, mtime_ns) of every file plus ``params``.

    Raises ``FileNotFoundError`` if a file vanished since it was listed.
    """
    h = hashlib.sha1()
    h.update(params.encode())
    prefix = os.path.join(str(root), "")
    n = 0
    for f in files:
        f = str(f)
        try:
            st = os.stat(f)
        except FileNotFoundError as e:
            raise FileNotFoundError(f"image file {f} is listed but missing") from e
        rel = f[len(prefix):] if f.startswith(prefix) else os.path.relpath(f, root)
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
        n += 1
    h.update(f"count={n}".encode())
    return h.hexdigest()[:20]


def cache_path(tag: str, source: Path, sig: str) -> Path:
    """Where the cache of ``source`` (absolute) with content signature ``sig`` lives."""
    return cache_dir() / f"{tag}-{_h(str(Path(source).resolve()))}-{sig}.pt"


def load_cache(path: Path) -> dict | None:
    """The cached dict at ``path``, or ``None`` if absent or unreadable (memory-mapped)."""
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # truncated / foreign file: rebuild rather than fail
        warnings.warn(f"ignoring unreadable dataset cache {path}: {e}", stacklevel=2)
        return None


def save_cache(path: Path, obj: dict) -> bool:
    """Atomically write ``obj`` to ``path``; drop older caches of the same source. True on success."""
    path = Path(path)
    try:
        atomic_torch_save(obj, path)
    except OSError as e:
        warnings.warn(f"could not write dataset cache {path}: {e}", stacklevel=2)
        return False
    # Remove superseded caches of this source (same tag and path hash, other signature).
    prefix = path.name.rsplit("-", 1)[0] + "-"
    for old in path.parent.glob(prefix + "*.pt"):
        if old != path:
            try:
                old.unlink()
            except OSError:
                pass
    return True
