"""LPIPS (Zhang et al. 2018) with the AlexNet or VGG16 trunk and the v0.1 linear heads, from local weight files.

Why not torchmetrics' LPIPS: its public ``LearnedPerceptualImagePatchSimilarity`` always builds a
*pretrained* torchvision trunk in its constructor (a network download, or a hit in the torch hub
cache) and takes no path for the trunk; the only way to inject local trunk weights would be its
private ``_LPIPS`` class and its internal ``net.slice*`` layout, which are not a stable API. The
networks are plain, so they are written out here: torchvision's ``alexnet().features`` or
``vgg16().features`` (weights from a state dict with torchvision key names), taps after five ReLUs
(AlexNet: the five; VGG16: relu1_2, relu2_2, relu3_3, relu4_3, relu5_3), unit-normalisation over
channels, squared difference, the 1x1 linear heads, spatial mean, sum over the five layers --
exactly the ``lpips`` package's ``LPIPS(net=..., version="0.1")`` forward. With the shared weights
it gives, on the ``lpips`` package's example images, LPIPS(ex_ref, ex_p0) = 0.7219 and
LPIPS(ex_ref, ex_p1) = 0.1376 for AlexNet (the values that package reports) and 0.5686 / 0.4217
for VGG16.

``LPIPS(net="vgg")`` is also VQGAN's perceptual training loss: its weights are frozen and it never
leaves eval mode, but gradients flow to its inputs.

Weight resolution (:func:`resolve_lpips_weights`, used by :func:`load_lpips` and
:func:`require_lpips`); one folder serves both trunks:

1. an explicit ``weights`` path: a folder laid out like the shared ``lpips`` folder
   (``alexnet_features.pth`` + ``v0.1/alex.pth``, ``vgg16_features.pth`` + ``v0.1/vgg.pth``), or a
   folder holding such an ``lpips`` folder, or a trunk file itself (the heads then come from
   ``v0.1/<net>.pth`` beside it, else from a package that ships them; a file named like the other
   net's trunk stands for its folder);
2. the environment variable ``VQWAE_LPIPS_WEIGHTS`` (same forms);
3. when ``download=True``: the ImageNet trunk from torchvision (``AlexNet_Weights.IMAGENET1K_V1`` /
   ``VGG16_Weights.IMAGENET1K_V1``, read from the torch hub cache or downloaded) and the v0.1 heads
   shipped inside the ``lpips`` or ``torchmetrics`` package (no download needed for those);
4. otherwise: ``(None, reason)``, the reason naming the files needed.

An explicit path (argument or environment) that does not hold the files is reported as such; it
never silently falls back to a download.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from vqwae.metrics._weights import PathLike, env_path
from vqwae.extras import require

__all__ = [
    "LPIPS",
    "LPIPS_ENV",
    "NETS",
    "NetSpec",
    "TRUNK_FILENAME",
    "HEADS_RELPATH",
    "net_spec",
    "resolve_lpips_weights",
    "load_lpips",
    "require_lpips",
    "packaged_lpips_heads",
]

LPIPS_ENV = "VQWAE_LPIPS_WEIGHTS"

# Where the lpips / torchmetrics wheels keep the v0.1 heads, ``<net>.pth`` in each.
_PACKAGED_HEADS_DIRS = (
    ("lpips", Path("weights") / "v0.1"),
    ("torchmetrics", Path("functional") / "image" / "lpips_models"),
)


@dataclass(frozen=True)
class NetSpec:
    """What differs between the LPIPS trunks."""

    name: str  # the ``net`` argument
    label: str  # the metric, for messages
    title: str  # the trunk, for messages
    trunk_filename: str  # torchvision ``features.*`` state dict
    heads_relpath: Path  # v0.1 heads, relative to the folder holding the trunk
    channels: tuple[int, ...]
    taps: tuple[int, ...]  # indices in the torchvision ``features`` of the ReLUs LPIPS reads
    constructor: str  # in torchvision.models
    imagenet_weights: str  # its weights enum in torchvision.models (member IMAGENET1K_V1)
    min_size: int  # smallest H and W the trunk reaches its last tap with

    @property
    def packaged_heads(self) -> tuple[tuple[str, Path], ...]:
        """(package, path inside it) of these heads in the wheels that ship them."""
        return tuple((pkg, d / self.heads_relpath.name) for pkg, d in _PACKAGED_HEADS_DIRS)


NETS: dict[str, NetSpec] = {
    "alex": NetSpec(
        name="alex", label="LPIPS", title="AlexNet",
        trunk_filename="alexnet_features.pth", heads_relpath=Path("v0.1") / "alex.pth",
        channels=(64, 192, 384, 256, 256), taps=(1, 4, 7, 9, 11),
        constructor="alexnet", imagenet_weights="AlexNet_Weights", min_size=31,
    ),
    "vgg": NetSpec(
        name="vgg", label="LPIPS-VGG", title="VGG16",
        trunk_filename="vgg16_features.pth", heads_relpath=Path("v0.1") / "vgg.pth",
        channels=(64, 128, 256, 512, 512), taps=(3, 8, 15, 22, 29),  # relu1_2, relu2_2, relu3_3, relu4_3, relu5_3
        constructor="vgg16", imagenet_weights="VGG16_Weights", min_size=16,
    ),
}

# The AlexNet names, kept for existing callers.
TRUNK_FILENAME = NETS["alex"].trunk_filename
HEADS_RELPATH = NETS["alex"].heads_relpath


def net_spec(net: str) -> NetSpec:
    """The :class:`NetSpec` of ``net`` ("alex" or "vgg"); ValueError for any other value."""
    try:
        return NETS[net]
    except (KeyError, TypeError):
        raise ValueError(f"unknown LPIPS net {net!r}; valid: {', '.join(map(repr, NETS))}") from None


def _trunk(spec: NetSpec) -> nn.Sequential:
    """torchvision's ``features`` of the net up to its last tap (the max-pool after it is never used).

    Built on the meta device: initialising the whole network only to drop its classifier costs seconds
    for VGG16 (124M parameters there). The convolutions get PyTorch's default initialisation as
    placeholders until :meth:`LPIPS.load_trunk`.
    """
    models = require("torchvision.models")

    with torch.device("meta"):
        features = getattr(models, spec.constructor)(weights=None).features[: spec.taps[-1] + 1]
    features = features.to_empty(device="cpu")
    for m in features:
        if isinstance(m, nn.Conv2d):
            m.reset_parameters()
        elif isinstance(m, nn.ReLU):
            m.inplace = False  # the tapped activations must survive the next layer
    return features


class LPIPS(nn.Module):
    """LPIPS distance with the AlexNet (``net="alex"``) or VGG16 (``net="vgg"``) trunk.
    ``forward(x, y)`` -> (B,) per-image distances.

    Inputs are (B, 3, H, W) in [-1, 1] (``normalize=True``: in [0, 1], mapped to [-1, 1]);
    single-channel images are repeated to 3 channels. Always in eval mode, no gradients to the
    weights; gradients do flow to the inputs.
    """

    def __init__(self, net: str = "alex") -> None:
        super().__init__()
        self.spec = net_spec(net)
        self.features = _trunk(self.spec)
        self.lins = nn.ModuleList(nn.Conv2d(c, 1, kernel_size=1, bias=False) for c in self.spec.channels)
        # LPIPS' ScalingLayer: ImageNet mean/std expressed for inputs in [-1, 1].
        self.register_buffer("shift", torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1), persistent=False)
        self.source = ""  # where the weights came from (set by load_lpips)
        self.requires_grad_(False)
        self.eval()

    @property
    def net(self) -> str:
        """The trunk's name: alex or vgg."""
        return self.spec.name

    def extra_repr(self) -> str:
        """The trunk's name in the module's repr."""
        return f"net={self.net!r}"

    def train(self, mode: bool = True) -> "LPIPS":
        """A metric never leaves eval mode: ``train()`` keeps it there."""
        return super().train(False)

    # -- weights ---------------------------------------------------------------------------
    def load_trunk(self, state: dict) -> None:
        """Load the trunk's conv weights from a state dict with torchvision key names.

        Accepts ``features.N.weight`` keys (the shared files, or a full torchvision AlexNet / VGG16
        state dict, whose ``classifier.*`` keys are ignored) or bare ``N.weight`` keys.
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
            if i in self.spec.taps:
                out.append(h)
        return out

    @staticmethod
    def _unit(f: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
        # as lpips.normalize_tensor: f / (sqrt(sum_c f^2) + eps). Where all channels are 0 the sqrt's
        # gradient is not finite, but the taps follow a ReLU, whose backward zeroes exactly those places.
        return f / (f.pow(2).sum(dim=1, keepdim=True).sqrt() + eps)

    def forward(self, x: torch.Tensor, y: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        """The LPIPS distance per image pair (B,) between two (B, C, H, W) batches in [-1, 1], or in [0, 1] with
        ``normalize=True``; one-channel images are repeated to three."""
        if x.shape != y.shape or x.ndim != 4:
            raise ValueError(f"LPIPS expects two (B, C, H, W) tensors of the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
        if x.shape[1] == 1:
            x, y = x.expand(-1, 3, -1, -1), y.expand(-1, 3, -1, -1)
        elif x.shape[1] != 3:
            raise ValueError(f"LPIPS expects 1 or 3 channels, got {x.shape[1]}")
        if min(x.shape[-2:]) < self.spec.min_size:
            n, (h, w) = self.spec.min_size, x.shape[-2:]
            raise ValueError(f"{self.spec.label} needs images of at least {n}x{n}, got {h}x{w}")
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
def packaged_lpips_heads(net: str = "alex") -> Path | None:
    """The v0.1 heads of ``net`` shipped in an installed ``lpips`` or ``torchmetrics`` wheel, if any."""
    for pkg, rel in net_spec(net).packaged_heads:
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


def _from_location(p: Path, spec: NetSpec) -> tuple[Path, Path] | str:
    """(trunk, heads) of ``spec`` from a user-given path, or the reason it does not hold them."""
    trunk_file, heads_file = spec.trunk_filename, spec.heads_relpath.as_posix()
    if p.is_file():
        trunk = p
        if p.name != trunk_file and p.name in {s.trunk_filename for s in NETS.values()}:
            trunk = p.parent / trunk_file  # another net's trunk: its folder serves this net too
            if not trunk.is_file():
                return f"{spec.label} weights not found: need {trunk_file} beside {p}"
        heads = trunk.parent / spec.heads_relpath
        if not heads.is_file():
            packaged = packaged_lpips_heads(spec.name)
            if packaged is None:
                return f"{spec.label} heads not found: need {heads} beside the trunk file {trunk}"
            heads = packaged
        return trunk, heads
    if p.is_dir():
        for d in (p, p / "lpips"):
            if (d / trunk_file).is_file() and (d / spec.heads_relpath).is_file():
                return d / trunk_file, d / spec.heads_relpath
        return f"{spec.label} weights not found in {p}: need {trunk_file} and {heads_file} there"
    return f"{spec.label} weights not found: {p} does not exist (need a folder with {trunk_file} and {heads_file})"


def resolve_lpips_weights(weights: PathLike | None = None, net: str = "alex") -> tuple[Path, Path] | str | None:
    """Local (trunk, heads) files of ``net`` from the argument or ``$VQWAE_LPIPS_WEIGHTS``.

    Returns the two paths, a reason string when a given location lacks the files, or None when
    neither the argument nor the environment variable is set (the caller may then download).
    """
    spec = net_spec(net)
    if weights is not None:
        return _from_location(Path(weights).expanduser(), spec)
    env = env_path(LPIPS_ENV)
    if env is not None:
        res = _from_location(env, spec)
        return res if not isinstance(res, str) else f"{res} (from ${LPIPS_ENV})"
    return None


def _torch_load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _one_line(e: Exception, limit: int = 300) -> str:
    text = " ".join(str(e).split())  # load_state_dict's errors span several lines
    return f"{type(e).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


def _build(weights: PathLike | None, spec: NetSpec, download: bool, device: str | torch.device) -> LPIPS:
    """The loaded network; FileNotFoundError when its files are not there (or cannot be downloaded),
    ValueError when they are there but do not load."""
    resolved = resolve_lpips_weights(weights, spec.name)
    if isinstance(resolved, str):
        raise FileNotFoundError(resolved)
    net = LPIPS(spec.name)
    if resolved is not None:
        trunk, heads = resolved
        try:
            net.load_trunk(_torch_load(trunk))
            net.load_heads(_torch_load(heads))
        except Exception as e:  # corrupt or foreign file
            raise ValueError(f"{spec.label} weights {trunk} + {heads} could not be loaded: {_one_line(e)}") from None
        net.source = f"{trunk} + {heads}"
        return net.to(device)

    need = (
        f"set ${LPIPS_ENV} (or pass a path) to a folder with {spec.trunk_filename} (torchvision "
        f"{spec.title} 'features.*' state dict) and {spec.heads_relpath.as_posix()} (LPIPS v0.1 heads)"
    )
    if not download:
        raise FileNotFoundError(f"{spec.label} weights not given and downloads are off: {need}")
    heads = packaged_lpips_heads(spec.name)
    if heads is None:
        raise FileNotFoundError(f"{spec.label} v0.1 heads not found (install 'lpips' or 'torchmetrics', or {need})")
    models = require("torchvision.models")  # a missing torchvision is its own line, not a failed download
    try:
        imagenet = getattr(models, spec.imagenet_weights).IMAGENET1K_V1
        trunk_sd = getattr(models, spec.constructor)(weights=imagenet).features.state_dict()
    except Exception as e:  # offline, no hub cache
        raise FileNotFoundError(f"{spec.title} weights could not be downloaded ({type(e).__name__}); {need}") from None
    net.load_trunk(trunk_sd)
    net.load_heads(_torch_load(heads))
    net.source = f"torchvision {spec.imagenet_weights}.IMAGENET1K_V1 + {heads}"
    return net.to(device)


def load_lpips(
    weights: PathLike | None = None,
    *,
    net: str = "alex",
    download: bool = False,
    device: str | torch.device = "cpu",
) -> tuple[LPIPS | None, str | None]:
    """Build the LPIPS network of ``net``. Returns ``(net, None)`` or ``(None, one-line reason)``.

    Resolution order: ``weights`` -> ``$VQWAE_LPIPS_WEIGHTS`` -> torchvision ImageNet download +
    packaged heads (only when ``download``) -> ``(None, reason)``. See the module docstring. A bad
    ``net`` raises ValueError.
    """
    spec = net_spec(net)
    try:
        return _build(weights, spec, download, device), None
    except (FileNotFoundError, ValueError) as e:  # an evaluation skips the metric rather than crash
        return None, str(e)


def require_lpips(
    weights: PathLike | None = None,
    *,
    net: str = "alex",
    download: bool = False,
    device: str | torch.device = "cpu",
) -> LPIPS:
    """:func:`load_lpips` for work that cannot go on without the network (a training loss).

    Raises FileNotFoundError (one line, naming the missing file(s) and ``$VQWAE_LPIPS_WEIGHTS``) when
    the weights are not there, ValueError when they are there but do not load.
    """
    spec = net_spec(net)
    try:
        return _build(weights, spec, download, device)
    except FileNotFoundError as e:
        msg = str(e)
        if LPIPS_ENV not in msg:
            msg += (f" (set ${LPIPS_ENV} or pass a path to a folder with {spec.trunk_filename} and "
                    f"{spec.heads_relpath.as_posix()})")
        raise FileNotFoundError(msg) from None
