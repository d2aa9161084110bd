"""The real images' FID statistics, computed once per (data set, split, limit, images, Inception weights) and
kept as ``.npz`` files: the one path by which ``vqwae eval`` (rFID), the generation FID and the reproduction
read and write them (:meth:`FIDStatsCache.lookup`, :meth:`FIDStatsCache.save`).

The rule for a hit is one: an entry is used only when its key matches and it was computed on exactly the number
of images the caller is about to compare with; anything else (absent, another key, another count, unreadable)
is a miss, and the caller computes the statistics and saves them over it.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from vqwae.files import atomic_path
from vqwae.metrics._weights import PathLike, env_path
from vqwae.metrics.fid import PREPROCESS_VERSION

__all__ = ["StatsKey", "FIDStatsCache", "dataset_fingerprint", "default_fid_cache_dir"]


def default_fid_cache_dir() -> Path:
    """``$VQWAE_CACHE/fid`` if VQWAE_CACHE is set, else ``~/.cache/vqwae/fid``."""
    root = env_path("VQWAE_CACHE")
    return (root if root is not None else Path.home() / ".cache" / "vqwae") / "fid"


def dataset_fingerprint(dataset, limit: int | None = None) -> str:
    """Cheap content fingerprint of an image dataset (the first ``limit`` items).

    Hashes the item count, and the shape, dtype and bytes of the first and the last image
    (``dataset[i][0]`` for (image, label) datasets, else ``dataset[i]``). Works for map-style
    datasets and for (N, ...) tensors.
    """
    n = len(dataset)
    if limit is not None:
        n = min(n, int(limit))
    h = hashlib.sha256(f"n={n}".encode())
    for i in sorted({0, n - 1}) if n > 0 else []:
        item = dataset[i]
        if isinstance(item, (tuple, list)):
            item = item[0]
        arr = item.detach().cpu().contiguous().numpy() if isinstance(item, torch.Tensor) else np.ascontiguousarray(np.asarray(item))
        h.update(f"|{i}|{arr.shape}|{arr.dtype}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()[:32]


@dataclass(frozen=True)
class StatsKey:
    """What identifies a real-image statistics file (besides the Inception weights).

    ``data_root`` is made absolute; ``fingerprint`` should come from :func:`dataset_fingerprint`
    (or anything that changes when the images do). ``limit`` None means the whole split.
    """

    dataset: str
    split: str
    limit: int | None
    data_root: str
    fingerprint: str

    def __post_init__(self):
        object.__setattr__(self, "data_root", str(Path(self.data_root).expanduser().resolve()))


class FIDStatsCache:
    """Real-image (mu, sigma) stored as ``.npz`` files under ``cache_dir``.

    The file name holds a sha256 of the full key (dataset, split, limit, data root, fingerprint,
    Inception weights identity, preprocessing version); the key is also stored inside the file and
    compared on load, so a changed dataset, root, limit, weights file or preprocessing never reads
    a stale file. Writes are atomic (temporary file in the same folder, then ``os.replace``); an
    unreadable file is treated as a miss; a folder that cannot be written only loses the speed-up.
    """

    def __init__(self, cache_dir: PathLike | None = None):
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_fid_cache_dir()

    @staticmethod
    def _meta(key: StatsKey, weights_identity: str) -> dict:
        return {**asdict(key), "weights": weights_identity, "preprocess": PREPROCESS_VERSION}

    def path(self, key: StatsKey, weights_identity: str) -> Path:
        """The cache file of this key and weights: named by the dataset, split and a digest of both."""
        meta = self._meta(key, weights_identity)
        digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:24]
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in f"{key.dataset}-{key.split}")
        return self.cache_dir / f"{safe}-{digest}.npz"

    def lookup(self, key: StatsKey, weights_identity: str, num_images: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(mu, sigma) stored under this key for exactly ``num_images`` images, or None: a miss (absent, another
        key, another count (with a warning: the key did not describe the images), unreadable)."""
        p = self.path(key, weights_identity)
        if not p.is_file():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                if json.loads(str(z["meta"])) != json.loads(json.dumps(self._meta(key, weights_identity))):
                    return None
                stored = int(z["num_images"]) if "num_images" in z.files else -1
                mu, sigma = z["mu"].astype(np.float64), z["sigma"].astype(np.float64)
        except Exception as e:
            warnings.warn(f"ignoring unreadable FID statistics cache {p}: {type(e).__name__}: {e}")
            return None
        if stored != num_images:
            warnings.warn(f"FID statistics cache {p} holds {stored} images' statistics, not {num_images}: "
                          "recomputing them")
            return None
        return mu, sigma

    def save(self, key: StatsKey, weights_identity: str, mu: np.ndarray, sigma: np.ndarray, *,
             num_images: int) -> Path | None:
        """Store (mu, sigma) of ``num_images`` images under this key; the file written, or None (with a
        warning) where the cache folder cannot be written."""
        p = self.path(key, weights_identity)
        meta = json.dumps(self._meta(key, weights_identity), sort_keys=True)
        try:
            with atomic_path(p) as tmp, open(tmp, "wb") as f:
                np.savez(f, mu=np.asarray(mu, np.float64), sigma=np.asarray(sigma, np.float64), meta=np.array(meta),
                         num_images=np.array(int(num_images)))
            return p
        except OSError as e:
            warnings.warn(f"could not write FID statistics cache {p}: {e}")
            return None
