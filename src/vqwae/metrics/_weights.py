"""Small helpers shared by the metric-weight loaders (LPIPS, Inception)."""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path


PathLike = str | os.PathLike


def env_path(var: str) -> Path | None:
    """The path in environment variable ``var`` (``~`` expanded), or None if unset/empty."""
    value = os.environ.get(var, "").strip()
    return Path(value).expanduser() if value else None


@lru_cache(maxsize=32)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: PathLike) -> str:
    """sha256 of a file, memoised per (path, size, mtime) within the process."""
    p = Path(path).resolve()
    st = p.stat()
    return _sha256_cached(str(p), st.st_size, st.st_mtime_ns)
