"""LPIPS (Zhang et al. 2018), AlexNet trunk with the v0.1 linear heads, from local weight files.

Why not torchmetrics' LPIPS: its public ``LearnedPerceptualImagePatchSimilarity`` always builds a
*pretrained* torchvision AlexNet in its constructor (a network download, or a hit in the torch hub
cache) and takes no path for the trunk; the only way to inject local trunk weights would be its
private ``_LPIPS`` class and its internal ``net.slice*`` layout, which are not a stable API. The
network is small, so it is written out here: torchvision's ``alexnet().features`` (weights from a
state dict with torchvision key names), taps after the five ReLUs, unit-normalisation over
channels, squared difference, the 1x1 linear heads, spatial mean, sum over the five layers --
exactly the ``lpips`` package's ``LPIPS(net="alex", version="0.1")`` forward. With the shared
weights it gives LPIPS(ex_ref, ex_p0) = 0.7219 and LPIPS(ex_ref, ex_p1) = 0.1376, the values the
``lpips`` package reports for its example images.

Weight resolution (:func:`resolve_lpips_weights`, used by :func:`load_lpips`):

1. an explicit ``weights`` path: a folder laid out like the shared ``lpips`` folder
   (``alexnet_features.pth`` and ``v0.1/alex.pth``), or a folder holding such an ``lpips`` folder,
   or the trunk file itself (the heads then come from ``v0.1/alex.pth`` beside it, else from a
   package that ships them);
2. the environment variable ``VQWAE_LPIPS_WEIGHTS`` (same forms);
3. when ``download=True``: the ImageNet AlexNet from torchvision (``AlexNet_Weights.IMAGENET1K_V1``,
   read from the torch hub cache or downloaded) and the v0.1 heads shipped inside the ``lpips`` or
   ``torchmetrics`` package (no download needed for those);
4. otherwise: ``(None, reason)``, the reason naming the files needed.

An explicit path (argument or environment) that does not hold the files is reported as such; it
never silently falls back to a download.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path


import torch
import torch.nn as nn

from vqwae.metrics._weights import PathLike, env_path

__all__ = [
    "LPIPS",
    "LPIPS_ENV",
    "TRUNK_FILENAME",
    "HEADS_RELPATH",
    "resolve_lpips_weights",
    "load_lpips",
    "packaged_lpips_heads",
]

LPIPS_ENV = "VQWAE_LPIPS_WEIGHTS"
TRUNK_FILENAME = "alexnet_features.pth"
HEADS_RELPATH = Path("v0.1") / "alex.pth"

_ALEX_CHANNELS = (64, 192, 384, 256, 256)
_ALEX_TAPS = (1, 4, 7, 9, 11)  # indices in alexnet().features of the ReLUs LPIPS reads


class LPIPS(nn.Module):
    """LPIPS distance with the AlexNet trunk. ``forward(x, y)`` -> (B,) per-image distances.

    Inputs are (B, 3, H, W) in [-1, 1] (``normalize=True``: in [0, 1], mapped to [-1, 1]);
    single-channel images are repeated to 3 channels. Always in eval mode, no gradients to the
    weights.
    """

    def __init__(self) -> None:
        super().__init__()
        from torchvision.models import alexnet

        features = alexnet(weights=None).features
        for m in features:
            if isinstance(m, nn.ReLU):
                m.inplace = False
        self.features = features
        self.lins = nn.ModuleList(nn.Conv2d(c, 1, kernel_size=1, bias=False) for c in _ALEX_CHANNELS)
        # LPIPS' ScalingLayer: ImageNet mean/std expressed for inputs in [-1, 1].
        self.register_buffer("shift", torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1), persistent=False)
        self.source = ""  # where the weights came from (set by load_lpips)
        self.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> "LPIPS":  # never leaves eval mode
        return super().train(False)

    # -- weights ---------------------------------------------------------------------------
    def load_trunk(self, state: dict) -> None:
        """Load AlexNet conv weights from a state dict with torchvision key names.

        Accepts ``features.N.weight`` keys (the shared file, or a full torchvision AlexNet state
        dict, whose ``classifier.*`` keys are ignored) or bare ``N.weight`` keys.
        """
        sd = {}
        for k, v in state.items():
            if k.startswith("features."):
                sd[k[len("features."):]] = v
            elif k.split(".", 1)[0].isdigit():
                sd[k] = v
        self.features.load_state_dict(sd, strict=True)

    def load_heads(self, state: dict) -> None:
        """Load the five 1x1 heads from an ``lpips`` v0.1 state dict (``lin{k}.model.1.weight``)."""
        for k, lin in enumerate(self.lins):
            cands = [key for key in state if key.startswith(f"lin{k}.") and key.endswith("weight")]
            if len(cands) != 1:
                raise KeyError(f"LPIPS heads: expected one lin{k}.*weight entry, found {cands}")
            w = state[cands[0]]
            if tuple(w.shape) != tuple(lin.weight.shape):
                raise ValueError(f"LPIPS head lin{k}: shape {tuple(w.shape)}, expected {tuple(lin.weight.shape)}")
            with torch.no_grad():
                lin.weight.copy_(w)

    # -- forward ---------------------------------------------------------------------------
    def _taps(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = []
        h = (x - self.shift) / self.scale
        for i, layer in enumerate(self.features):
            h = layer(h)
            if i in _ALEX_TAPS:
                out.append(h)
            if i == _ALEX_TAPS[-1]:
                break
        return out

    @staticmethod
    def _unit(f: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
        # as lpips.normalize_tensor: f / (sqrt(sum_c f^2) + eps)
        return f / (f.pow(2).sum(dim=1, keepdim=True).sqrt() + eps)

    def forward(self, x: torch.Tensor, y: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        if x.shape != y.shape or x.ndim != 4:
            raise ValueError(f"LPIPS expects two (B, C, H, W) tensors of the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
        if x.shape[1] == 1:
            x, y = x.expand(-1, 3, -1, -1), y.expand(-1, 3, -1, -1)
        elif x.shape[1] != 3:
            raise ValueError(f"LPIPS expects 1 or 3 channels, got {x.shape[1]}")
        dtype = self.shift.dtype
        x, y = x.to(dtype), y.to(dtype)
        if normalize:
            x, y = 2 * x - 1, 2 * y - 1
        fx, fy = self._taps(x), self._taps(y)
        total = x.new_zeros(x.shape[0])
        for lin, a, b in zip(self.lins, fx, fy):
            d = (self._unit(a) - self._unit(b)).pow(2)
            total = total + lin(d).mean(dim=(1, 2, 3))
        return total


# -- weight resolution ---------------------------------------------------------------------------
def packaged_lpips_heads() -> Path | None:
    """The v0.1 AlexNet heads shipped in an installed ``lpips`` or ``torchmetrics`` wheel, if any."""
    for pkg, rel in (
        ("lpips", Path("weights") / "v0.1" / "alex.pth"),
        ("torchmetrics", Path("functional") / "image" / "lpips_models" / "alex.pth"),
    ):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        for loc in spec.submodule_search_locations:
            p = Path(loc) / rel
            if p.is_file():
                return p
    return None


def _from_location(p: Path) -> tuple[Path, Path] | str:
    """(trunk, heads) from a user-given path, or the reason it does not hold them."""
    if p.is_file():
        heads = p.parent / HEADS_RELPATH
        if not heads.is_file():
            packaged = packaged_lpips_heads()
            if packaged is None:
                return f"LPIPS heads not found: need {heads} beside the trunk file {p}"
            heads = packaged
        return p, heads
    if p.is_dir():
        for d in (p, p / "lpips"):
            if (d / TRUNK_FILENAME).is_file() and (d / HEADS_RELPATH).is_file():
                return d / TRUNK_FILENAME, d / HEADS_RELPATH
        return f"LPIPS weights not found in {p}: need {TRUNK_FILENAME} and {HEADS_RELPATH.as_posix()} there"
    return f"LPIPS weights not found: {p} does not exist (need a folder with {TRUNK_FILENAME} and {HEADS_RELPATH.as_posix()})"


def resolve_lpips_weights(weights: PathLike | None = None) -> tuple[Path, Path] | str | None:
    """Local (trunk, heads) files from the argument or ``$VQWAE_LPIPS_WEIGHTS``.

    Returns the two paths, a reason string when a given location lacks the files, or None when
    neither the argument nor the environment variable is set (the caller may then download).
    """
    if weights is not None:
        return _from_location(Path(weights).expanduser())
    env = env_path(LPIPS_ENV)
    if env is not None:
        res = _from_location(env)
        return res if not isinstance(res, str) else f"{res} (from ${LPIPS_ENV})"
    return None


def _torch_load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def load_lpips(
    weights: PathLike | None = None,
    *,
    download: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[LPIPS | None, str | None]:
    """Build the LPIPS network. Returns ``(net, None)`` or ``(None, one-line reason)``.

    Resolution order: ``weights`` -> ``$VQWAE_LPIPS_WEIGHTS`` -> torchvision AlexNet download +
    packaged heads (only when ``download``) -> ``(None, reason)``. See the module docstring.
    """
    resolved = resolve_lpips_weights(weights)
    if isinstance(resolved, str):
        return None, resolved
    net = LPIPS()
    if resolved is not None:
        trunk, heads = resolved
        try:
            net.load_trunk(_torch_load(trunk))
            net.load_heads(_torch_load(heads))
        except Exception as e:  # corrupt or foreign file: report, don't crash the evaluation
            return None, f"LPIPS weights in {trunk.parent} could not be loaded: {type(e).__name__}: {e}"
        net.source = f"{trunk} + {heads}"
        return net.to(device), None

    need = (
        f"set ${LPIPS_ENV} (or pass a path) to a folder with {TRUNK_FILENAME} "
        f"(torchvision AlexNet 'features.*' state dict) and {HEADS_RELPATH.as_posix()} (LPIPS v0.1 heads)"
    )
    if not download:
        return None, f"LPIPS weights not given and downloads are off: {need}"
    heads = packaged_lpips_heads()
    if heads is None:
        return None, f"LPIPS v0.1 heads not found (install 'lpips' or 'torchmetrics', or {need})"
    try:
        from torchvision.models import AlexNet_Weights, alexnet

        trunk_sd = alexnet(weights=AlexNet_Weights.IMAGENET1K_V1).features.state_dict()
    except Exception as e:  # offline, no hub cache
        return None, f"AlexNet weights could not be downloaded ({type(e).__name__}); {need}"
    net.load_trunk(trunk_sd)
    net.load_heads(_torch_load(heads))
    net.source = f"torchvision AlexNet_Weights.IMAGENET1K_V1 + {heads}"
    return net.to(device), None
