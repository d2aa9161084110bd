"""FID: InceptionV3 pool3 features, Gaussian statistics, the Frechet distance.

The network is the TensorFlow 2015-12-05 InceptionV3 graph every published FID uses, here as the
TorchScript file ``fid_inception_v3_tf2015_torchscript.pt`` (NVIDIA's conversion; input (N, 3, 299,
299) float holding (x - 128) / 128 of uint8 x, output (N, 2048) pool3 features).

Preprocessing (:func:`preprocess_for_inception`), identical to torch-fidelity's
``FeatureExtractorInceptionV3`` and hence to the original TensorFlow FID graph:

1. images in [0, 1] are quantised to uint8 by rounding, ``floor(255 x + 0.5)`` (round half up, as
   ``torchvision.utils.save_image`` does -- so FID of tensors equals FID of the PNGs you would
   save), never by truncation;
2. greyscale is repeated to 3 channels;
3. resize to 299x299 with **TensorFlow 1.x ``tf.image.resize_bilinear(align_corners=False)``**
   semantics (source coordinate = destination index * in/out, no half-pixel offset, edge clamp),
   the resize inside the original FID graph; torch-fidelity implements the same thing as
   ``interpolate_bilinear_2d_like_tensorflow1x`` (its "slow", CPU bit-exact method), which
   :func:`resize_bilinear_tf1` follows. It is *not* ``F.interpolate(mode="bilinear")``, which uses
   half-pixel centres: its samples are shifted by up to half a source pixel, i.e. by tens of grey
   levels at edges when upsampling 32 -> 299;
4. (x - 128) / 128.

Weight resolution (:func:`load_inception`): explicit path -> ``$VQWAE_INCEPTION_WEIGHTS`` (the file,
or a folder holding it, or a folder holding ``inception/`` with it) -> when ``download=True`` and
torch-fidelity is installed, torch-fidelity's own InceptionV3 (it downloads its converted weights
and applies the same preprocessing internally) -> ``(None, reason)``.
On a 2-core CPU the network costs about 0.1-0.2 s per image (more if the cores are oversubscribed,
see :func:`vqwae.threads.default_num_threads`).

Why not torch-fidelity's FID itself (it is a test dependency, and the tests check that its InceptionV3 gives these
features and its distance these numbers, to 1e-3): its feature extractor loads only its own weights file (a
download), not the TorchScript file a machine offline is given; it takes a data set of images, where vqwae feeds
the network the real images and their reconstructions batch by batch in one pass; and its distance takes the
square root of the 2048 x 2048 product, slow on a CPU and least accurate when there are fewer images than
features, where :func:`fid_from_features` and :func:`fid_against_statistics` compute the same value exactly.
The real images' statistics are cached by :mod:`vqwae.metrics.fid_cache`.
"""
from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import numpy as np
import torch

from vqwae.threads import cpu_threads
from vqwae.metrics._weights import PathLike, env_path, file_sha256
from vqwae.extras import require

__all__ = [
    "INCEPTION_ENV",
    "INCEPTION_FILENAME",
    "PREPROCESS_VERSION",
    "InceptionFeatures",
    "load_inception",
    "resolve_inception_weights",
    "quantize_uint8",
    "resize_bilinear_tf1",
    "preprocess_for_inception",
    "feature_statistics",
    "frechet_distance",
    "fid_from_features",
    "fid_against_statistics",
]

INCEPTION_ENV = "VQWAE_INCEPTION_WEIGHTS"
INCEPTION_FILENAME = "fid_inception_v3_tf2015_torchscript.pt"
INCEPTION_SIZE = 299
FEATURE_DIM = 2048
# Bumped whenever preprocessing changes, so cached statistics computed the old way are not reused.
PREPROCESS_VERSION = "uint8-round-half-up/gray-to-rgb/tf1-bilinear-299/(x-128)/128/v1"


# -- preprocessing ------------------------------------------------------------------------------
def quantize_uint8(images: torch.Tensor) -> torch.Tensor:
    """[0, 1] floats -> uint8 by rounding (``floor(255 x + 0.5)``, clamped); uint8 passes through."""
    if images.dtype == torch.uint8:
        return images
    return torch.floor(images.clamp(0.0, 1.0) * 255.0 + 0.5).clamp_(0, 255).to(torch.uint8)


def resize_bilinear_tf1(x: torch.Tensor, size: int = INCEPTION_SIZE) -> torch.Tensor:
    """Bilinear resize of float (N, C, H, W) to (N, C, size, size), TF1 ``align_corners=False``.

    Source coordinate of output pixel i: ``i * in / out`` (no half-pixel shift); interpolate
    between ``floor`` and ``min(floor + 1, in - 1)``; lerp order as TensorFlow's kernel
    (``top + (bottom - top) * dy``). Same arithmetic as torch-fidelity's
    ``interpolate_bilinear_2d_like_tensorflow1x(method="slow")``.
    """
    if not torch.is_floating_point(x) or x.ndim != 4:
        raise ValueError("resize_bilinear_tf1 expects a floating (N, C, H, W) tensor")
    in_h, in_w = x.shape[-2:]
    if (in_h, in_w) == (size, size):
        return x

    def axis(n_in: int):
        pos = torch.arange(size, dtype=x.dtype, device=x.device) * torch.tensor(n_in / size, dtype=torch.float32)
        lo = pos.long()
        hi = (lo + 1).clamp_max(n_in - 1)
        return lo, hi, (pos - lo.to(pos.dtype)).to(x.dtype)

    ylo, yhi, dy = axis(in_h)
    xlo, xhi, dx = axis(in_w)
    top, bottom = x[:, :, ylo, :], x[:, :, yhi, :]
    dx = dx.view(1, 1, 1, size)
    top = top[..., xlo] + (top[..., xhi] - top[..., xlo]) * dx
    bottom = bottom[..., xlo] + (bottom[..., xhi] - bottom[..., xlo]) * dx
    return top + (bottom - top) * dy.view(1, 1, size, 1)


def preprocess_for_inception(images: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) images in [0, 1] (or uint8) -> (N, 3, 299, 299) float32 of (x - 128) / 128."""
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"expected (N, 1 or 3, H, W) images, got {tuple(images.shape)}")
    x = quantize_uint8(images).to(torch.float32)
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    x = resize_bilinear_tf1(x, INCEPTION_SIZE)
    return (x - 128.0) / 128.0


# -- the network --------------------------------------------------------------------------------
class InceptionFeatures:
    """Callable: images (N, C, H, W) in [0, 1] (or uint8) -> (N, 2048) float64 pool3 features.

    Wraps either the TorchScript file (``backend="torchscript"``: preprocessing done here) or
    torch-fidelity's ``FeatureExtractorInceptionV3`` (``backend="torch-fidelity"``: it is fed
    uint8 and resizes / normalises itself, identically). Batches of ``batch_size`` under
    ``torch.inference_mode``; on CPU it uses ``num_threads`` threads (default:
    :func:`vqwae.threads.default_num_threads`, the allowed CPUs that are not already busy).
    ``identity`` names the weights (sha256 of the file), for cache keys.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        *,
        backend: str = "torchscript",
        identity: str,
        source: str = "",
        device: str | torch.device = "cpu",
        batch_size: int | None = None,
        num_threads: int | None = None,
    ):
        if backend not in ("torchscript", "torch-fidelity"):
            raise ValueError(f"unknown backend {backend!r}")
        self.backend = backend
        self.identity = identity
        self.source = source
        self.device = torch.device(device)
        self.module = module.to(self.device).eval()
        self._batch_size = batch_size
        self.num_threads = num_threads

    @property
    def batch_size(self) -> int:
        """Images per forward: ``batch_size`` if given; else 50 on GPUs and 4 on CPU. On CPU, a batch of 50
        makes activations of ~280 MB (64 x 147 x 147 floats per image); glibc serves blocks over 32 MB with
        fresh mmaps, so every batch page-faults its activations in again. Measured here (1 thread, 50 images):
        batch 50 took 9.0-10.2 s of which 3.4-4.0 s system time (2 million page faults); batch 4 took
        6.2-7.3 s with none. The features do not depend on the batch size."""
        if self._batch_size is not None:
            return int(self._batch_size)
        return 4 if self.device.type == "cpu" else 50

    def to(self, device: str | torch.device) -> "InceptionFeatures":
        """Move the network to ``device``; returns self."""
        self.device = torch.device(device)
        self.module = self.module.to(self.device)
        return self

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        if self.backend == "torchscript":
            out = self.module(preprocess_for_inception(batch.to(self.device)))
        else:
            u8 = quantize_uint8(batch.to(self.device))
            if u8.shape[1] == 1:
                u8 = u8.expand(-1, 3, -1, -1)
            out = self.module(u8)
            out = out[0] if isinstance(out, (tuple, list)) else out
        return out.reshape(out.shape[0], -1).to(torch.float64)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.shape[0] == 0:
            return torch.zeros(0, FEATURE_DIM, dtype=torch.float64)
        threads = cpu_threads(self.num_threads) if self.device.type == "cpu" else contextlib.nullcontext()
        outs = []
        with threads, torch.inference_mode():
            for start in range(0, images.shape[0], self.batch_size):
                outs.append(self._forward(images[start : start + self.batch_size]).cpu())
        return torch.cat(outs)


def _locate(p: Path) -> Path | str:
    if p.is_file():
        return p
    if p.is_dir():
        for cand in (p / INCEPTION_FILENAME, p / "inception" / INCEPTION_FILENAME):
            if cand.is_file():
                return cand
        return f"Inception weights not found in {p}: need {INCEPTION_FILENAME} there"
    return f"Inception weights not found: {p} does not exist (need {INCEPTION_FILENAME})"


def resolve_inception_weights(weights: PathLike | None = None) -> Path | str | None:
    """The TorchScript file from the argument or ``$VQWAE_INCEPTION_WEIGHTS``.

    Returns the path, a reason string if a given location lacks the file, or None if neither is set.
    """
    if weights is not None:
        return _locate(Path(weights).expanduser())
    env = env_path(INCEPTION_ENV)
    if env is not None:
        res = _locate(env)
        return res if not isinstance(res, str) else f"{res} (from ${INCEPTION_ENV})"
    return None


def load_inception(
    weights: PathLike | None = None,
    *,
    download: bool = False,
    device: str | torch.device = "cpu",
    batch_size: int | None = None,
    num_threads: int | None = None,
) -> tuple[InceptionFeatures | None, str | None]:
    """The FID feature extractor: ``(InceptionFeatures, None)`` or ``(None, one-line reason)``."""
    resolved = resolve_inception_weights(weights)
    if isinstance(resolved, str):
        return None, resolved
    kw = dict(device=device, batch_size=batch_size, num_threads=num_threads)
    if resolved is not None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load deprecation notice
                module = torch.jit.load(str(resolved), map_location="cpu")
        except Exception as e:
            return None, f"Inception weights {resolved} could not be loaded: {type(e).__name__}: {e}"
        ident = f"torchscript:{INCEPTION_FILENAME}:sha256={file_sha256(resolved)}"
        return InceptionFeatures(module, backend="torchscript", identity=ident, source=str(resolved), **kw), None

    need = f"set ${INCEPTION_ENV} (or pass a path) to {INCEPTION_FILENAME}"
    if not download:
        return None, f"Inception weights not given and downloads are off: {need}"
    try:
        from torch_fidelity.feature_extractor_inceptionv3 import URL_INCEPTION_V3, FeatureExtractorInceptionV3
    except ImportError:
        return None, f"Inception weights not given and torch-fidelity (which can download them) is not installed: {need}"
    try:
        module = FeatureExtractorInceptionV3("inception-v3-compat", ["2048"])
    except Exception as e:  # offline and not in the torch hub cache
        return None, f"Inception weights could not be downloaded ({type(e).__name__}); {need}"
    ident = f"torch-fidelity:{URL_INCEPTION_V3.rsplit('/', 1)[-1]}"
    return InceptionFeatures(module, backend="torch-fidelity", identity=ident, source=URL_INCEPTION_V3, **kw), None


# -- statistics and distance --------------------------------------------------------------------
def feature_statistics(features: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean (D,) and covariance (D, D) (unbiased, rows are samples) of (N, D) features, float64."""
    f = _as_2d_float64(features)
    return f.mean(axis=0), np.cov(f, rowvar=False)


def frechet_distance(
    mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray, eps: float = 1e-6
) -> float:
    """||mu1 - mu2||^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2)), in float64 with ``scipy.linalg.sqrtm``.

    As in the reference FID code: if the square root is not finite (singular product), ``eps`` is
    added to both diagonals and it is retried; a complex result whose imaginary part is numerical
    noise (diagonal within 1e-3 of real) is replaced by its real part, larger imaginary parts are
    an error.
    """
    linalg = require("scipy.linalg")

    mu1, mu2 = np.atleast_1d(np.asarray(mu1, np.float64)), np.atleast_1d(np.asarray(mu2, np.float64))
    s1, s2 = np.atleast_2d(np.asarray(sigma1, np.float64)), np.atleast_2d(np.asarray(sigma2, np.float64))
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (mu1.size, mu1.size):
        raise ValueError(f"shape mismatch: mu {mu1.shape}/{mu2.shape}, sigma {s1.shape}/{s2.shape}")
    diff = mu1 - mu2

    def sqrtm(a: np.ndarray) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "matrix is singular" for N < D is expected
            return linalg.sqrtm(a)

    covmean = sqrtm(s1 @ s2)
    if not np.isfinite(covmean).all():
        offset = np.eye(s1.shape[0]) * eps
        covmean = sqrtm((s1 + offset) @ (s2 + offset))
    if np.iscomplexobj(covmean):
        if not np.allclose(np.diagonal(covmean).imag, 0, atol=1e-3):
            raise ValueError(f"imaginary component {np.max(np.abs(covmean.imag)):.3g} in sqrtm(S1 S2)")
        covmean = covmean.real
    return float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * np.trace(covmean))


def _as_2d_float64(features) -> np.ndarray:
    f = features.detach().cpu().numpy() if isinstance(features, torch.Tensor) else np.asarray(features)
    f = f.astype(np.float64, copy=False)
    if f.ndim != 2 or f.shape[0] < 2:
        raise ValueError(f"need (N >= 2, D) features, got shape {f.shape}")
    return f


def fid_against_statistics(mu, sigma, features) -> float:
    """FID between Gaussian statistics (mu (D,), sigma (D, D)) and a set of (n, D) features.

    With n >= D this is :func:`frechet_distance` of the features' statistics. With fewer
    samples than dimensions (1,000 generated images, 2,048 Inception features) the features' covariance
    S2 = A^T A / (n - 1) (A: centred features) has rank < n and the non-zero eigenvalues of sigma S2 are
    those of the n x n PSD matrix A sigma A^T / (n - 1), so tr (sigma S2)^(1/2) is the sum of the square
    roots of its eigenvalues: the same quantity, exact, without a 2048 x 2048 matrix square root."""
    f = features.detach().cpu().double().numpy() if isinstance(features, torch.Tensor) else np.asarray(features, np.float64)
    mu, sigma = np.asarray(mu, np.float64), np.asarray(sigma, np.float64)
    if f.ndim != 2 or f.shape[0] < 2 or f.shape[1] != mu.shape[0] or sigma.shape != (mu.shape[0],) * 2:
        raise ValueError(f"features {f.shape} do not match statistics mu {mu.shape}, sigma {sigma.shape}")
    n, d = f.shape
    if n >= d:
        return frechet_distance(mu, sigma, *feature_statistics(f))
    mu2 = f.mean(axis=0)
    a = f - mu2
    m = a @ sigma @ a.T / (n - 1)
    eig = np.linalg.eigvalsh((m + m.T) / 2.0).clip(min=0.0)
    diff = mu - mu2
    return float(diff @ diff + np.trace(sigma) + float((a * a).sum()) / (n - 1) - 2.0 * np.sqrt(eig).sum())


def fid_from_features(features1, features2) -> float:
    """FID between two (N, D) feature sets.

    With fewer samples than feature dimensions (``max(N1, N2) < D``, e.g. a quick run on a few
    hundred images) the covariances are singular and ``sqrtm`` of a 2048x2048 product is both slow
    (tens of seconds on 2 CPU cores) and at its least accurate, so the same quantity is computed
    exactly in sample space: with centred features A1, A2, the non-zero eigenvalues of S1 S2 are
    the squared singular values of A1 A2^T / sqrt((N1-1)(N2-1)), hence
    tr (S1 S2)^(1/2) = ||A1 A2^T||_* / sqrt((N1-1)(N2-1)). Otherwise: :func:`feature_statistics` +
    :func:`frechet_distance`.
    """
    f1, f2 = _as_2d_float64(features1), _as_2d_float64(features2)
    if f1.shape[1] != f2.shape[1]:
        raise ValueError(f"feature dimensions differ: {f1.shape[1]} vs {f2.shape[1]}")
    (n1, d), n2 = f1.shape, f2.shape[0]
    if max(n1, n2) >= d:
        return frechet_distance(*feature_statistics(f1), *feature_statistics(f2))
    mu1, mu2 = f1.mean(axis=0), f2.mean(axis=0)
    a1, a2 = f1 - mu1, f2 - mu2
    diff = mu1 - mu2
    tr1 = float((a1 * a1).sum()) / (n1 - 1)
    tr2 = float((a2 * a2).sum()) / (n2 - 1)
    nuclear = float(np.linalg.svd(a1 @ a2.T, compute_uv=False).sum())
    return float(diff @ diff + tr1 + tr2 - 2.0 * nuclear / np.sqrt((n1 - 1) * (n2 - 1)))
