"""Gated PixelCNN prior over grids of code indices (van den Oord et al., 2016, "Conditional Image
Generation with PixelCNN Decoders"), the stage-two model the paper fits to the frozen autoencoder's codes.

Architecture
------------
* Input: a (B, H, W) grid of code indices, embedded by ``nn.Embedding(K, C)``.
* Two stacks, so there is no blind spot:

  - the *vertical* stack sees only rows strictly above the current row (all columns within its growing
    receptive field). The first (mask A) layer uses a (k//2, k) kernel on rows i-k//2 .. i-1; later
    (mask B) layers use a (k//2 + 1, k) kernel on rows i-k//2 .. i of the vertical features, which by
    induction depend only on input rows < i.
  - the *horizontal* stack sees the current row to the left: mask A uses a (1, k//2) kernel on columns
    j-k//2 .. j-1 (the current position excluded), mask B a (1, k//2 + 1) kernel on columns j-k//2 .. j.
    It receives the vertical stack's pre-activation through a 1x1 convolution (the "V->H" link), and has
    a 1x1 output convolution with a residual connection in every layer except the first (a residual
    there would feed the current input position forward).

  Masking is done with asymmetric padding and cropping, not with weight masks, so no multiplication is
  wasted on zeroed weights. Convolutions only ever look up and left (plus right in the vertical stack),
  never down, which is what lets :func:`vqwae.prior.sampling.sample` run the network on the first i+1
  rows only when it samples row i.
* Gates: ``tanh(a) * sigmoid(b)`` on both stacks; with ``num_classes`` set, a learned per-layer class
  embedding is added to the gate pre-activations of both stacks (the paper's h-conditioning with a
  one-hot h).
* Output head: ReLU, 1x1 conv (C -> C), ReLU, 1x1 conv (C -> K) on the horizontal stack: logits
  (B, K, H, W). Works for any grid size (8x8, 16x16, non-square).

The default width is 64 channels per stack (the widely used "pytorch-vqvae" gated PixelCNN: 64
channels, 15 layers; 1.5M parameters with K = 512). Measured on this project's 2-core CPU: about 0.3 s
per batch of 128 8x8 grids, i.e. about 2 minutes per epoch of 50k grids when the cores are idle (5 minutes
when they are shared); ``hidden_channels=32`` (0.4M parameters) is about 3x faster for quick experiments.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vqwae.models.pretrained import PretrainedMixin
from vqwae.options import check_fields, option

CONFIG_NAME = "config.json"
MODEL_TYPE = "gated_pixelcnn"


@dataclass(frozen=True)
class PixelCNNConfig:
    """What a ``GatedPixelCNN`` prior over code grids is built from."""

    num_codes: int = option(512, "K: categories per grid position, the autoencoder's codebook size (the paper: 512)",
                            min=2)
    num_classes: int | None = option(None, "None: an unconditional prior; n: class-conditional (a class embedding "
                                     "added to every gate)", min=1)
    hidden_channels: int = option(64, "channels per stack (~2 min per epoch of 50k 8x8 grids on 2 CPU cores)", min=1)
    num_layers: int = option(15, "gated layers: 1 mask-A layer, then num_layers - 1 mask-B layers (the paper: 15)",
                             min=1)
    first_kernel_size: int = option(7, "the mask-A layer's kernel side (odd, >= 3)", min=3)
    kernel_size: int = option(3, "every later mask-B layer's kernel side (odd)", min=1)

    def __post_init__(self):
        check_fields(self)
        if self.first_kernel_size % 2 == 0:
            raise ValueError(f"first_kernel_size must be odd and >= 3, got {self.first_kernel_size}")
        if self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd and >= 1, got {self.kernel_size}")

    def to_dict(self) -> dict:
        """The configuration as ``config.json`` holds it, with the model type."""
        return {"model_type": MODEL_TYPE, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "PixelCNNConfig":
        """The configuration from ``config.json``'s dict (keys it does not know, such as the model type, ignored)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


def _gate(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=1)
    return torch.tanh(a) * torch.sigmoid(b)


class GatedMaskedLayer(nn.Module):
    """One gated layer with a vertical and a horizontal stack.

    ``mask_a=True`` (first layer): neither stack sees the current position; the vertical stack sees rows
    strictly above, the horizontal stack columns strictly to the left. ``mask_a=False``: the vertical
    stack also reads its own features of the current row (which depend on rows above only) and the
    horizontal stack reads its own features at the current position.
    """

    def __init__(self, channels: int, kernel_size: int, *, mask_a: bool, residual: bool,
                 num_classes: int | None = None):
        super().__init__()
        self.channels, self.kernel_size, self.mask_a, self.residual = channels, kernel_size, mask_a, residual
        r = self.r = kernel_size // 2
        reach = r if mask_a else r + 1  # rows above (+ current) / columns left (+ current)
        if reach < 1:
            raise ValueError("a mask-A layer needs kernel_size >= 3")
        self.v_conv = nn.Conv2d(channels, 2 * channels, (reach, kernel_size))
        self.h_conv = nn.Conv2d(channels, 2 * channels, (1, reach))
        self.v_to_h = nn.Conv2d(2 * channels, 2 * channels, 1)
        self.h_out = nn.Conv2d(channels, channels, 1)
        self.class_embed = nn.Embedding(num_classes, 4 * channels) if num_classes else None

    def forward(self, v: torch.Tensor, h: torch.Tensor, labels: torch.Tensor | None = None):
        """One gated layer on the vertical and horizontal stacks (B, C, H, W): the vertical stack sees the rows
        above, the horizontal one the pixels to the left in the row; returns both, updated."""
        H, W = v.shape[-2:]
        r = self.r
        # vertical: pad top by r (no bottom padding: never look down), left/right by r
        v_pre = self.v_conv(F.pad(v, (r, r, r, 0)))[:, :, :H]  # mask A: H+1 rows -> row i sees i-r..i-1
        # horizontal: pad left by r (never look right)
        h_pre = self.h_conv(F.pad(h, (r, 0, 0, 0)))[:, :, :, :W]  # mask A: W+1 cols -> col j sees j-r..j-1
        h_pre = h_pre + self.v_to_h(v_pre)
        if self.class_embed is not None:
            if labels is None:
                raise ValueError("this layer is class-conditional: labels are required")
            cv, ch = self.class_embed(labels).chunk(2, dim=1)
            v_pre = v_pre + cv[:, :, None, None]
            h_pre = h_pre + ch[:, :, None, None]
        v_out = _gate(v_pre)
        h_out = self.h_out(_gate(h_pre))
        if self.residual:
            h_out = h_out + h
        return v_out, h_out


class GatedPixelCNN(PretrainedMixin, nn.Module):
    """Gated PixelCNN over (B, H, W) code grids; ``forward`` returns logits (B, K, H, W).

    The logits at raster position (i, j) depend only on codes at raster positions before (i, j)."""

    config_name = CONFIG_NAME
    format_version = 1  # the layout has not changed since the first release

    def __init__(self, config: PixelCNNConfig):
        super().__init__()
        self.config = config
        C = config.hidden_channels
        self.embedding = nn.Embedding(config.num_codes, C)
        layers = [GatedMaskedLayer(C, config.first_kernel_size, mask_a=True, residual=False,
                                   num_classes=config.num_classes)]
        for _ in range(config.num_layers - 1):
            layers.append(GatedMaskedLayer(C, config.kernel_size, mask_a=False, residual=True,
                                           num_classes=config.num_classes))
        self.layers = nn.ModuleList(layers)
        self.head = nn.Sequential(nn.ReLU(), nn.Conv2d(C, C, 1), nn.ReLU(), nn.Conv2d(C, config.num_codes, 1))

    @property
    def num_codes(self) -> int:
        """K, the number of codes the prior models."""
        return self.config.num_codes

    @property
    def device(self) -> torch.device:
        """The device the prior's weights are on."""
        return next(self.parameters()).device

    def _check_labels(self, labels, batch: int) -> torch.Tensor | None:
        if self.config.num_classes is None:
            if labels is not None:
                raise ValueError("labels given to an unconditional prior (config.num_classes is None)")
            return None
        if labels is None:
            raise ValueError("this prior is class-conditional: pass labels (B,) long")
        labels = torch.as_tensor(labels, device=self.device).long().reshape(-1)
        if labels.numel() != batch:
            raise ValueError(f"expected {batch} labels, got {labels.numel()}")
        return labels

    def embed(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, H, W) long -> (B, C, H, W) embedded input."""
        if codes.dim() != 3:
            raise ValueError(f"expected codes of shape (B, H, W), got {tuple(codes.shape)}")
        return self.embedding(codes.long()).permute(0, 3, 1, 2).contiguous()

    def features(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """The horizontal stack's output (B, C, H, W) for an embedded input (B, C, H, W), before the head."""
        labels = self._check_labels(labels, x.shape[0])
        v = h = x
        for layer in self.layers:
            v, h = layer(v, h, labels)
        return h

    def forward_embedded(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Logits from an already embedded input (B, C, H, W); used by the causality tests."""
        return self.head(self.features(x, labels))

    def forward(self, codes: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """(B, H, W) long codes [+ (B,) long labels] -> logits (B, K, H, W)."""
        return self.forward_embedded(self.embed(codes), labels)

    def nll(self, codes: torch.Tensor, labels: torch.Tensor | None = None, reduction: str = "mean") -> torch.Tensor:
        """Negative log-likelihood in nats per code (``reduction='mean'``) or per grid (``'none'``: (B,))."""
        logits = self(codes, labels)
        ce = F.cross_entropy(logits, codes.long(), reduction="none")  # (B, H, W)
        if reduction == "mean":
            return ce.mean()
        if reduction == "none":
            return ce.flatten(1).sum(1)
        raise ValueError(f"unknown reduction {reduction!r}")

    # ---- persistence (PretrainedMixin: model.safetensors + config.json) ----------------------------------
    def config_dict(self) -> dict:
        """The configuration, as ``save_pretrained`` writes it."""
        return self.config.to_dict()

    @classmethod
    def _from_config_dict(cls, config: dict, version: int) -> "GatedPixelCNN":
        if config.get("model_type", MODEL_TYPE) != MODEL_TYPE:
            raise ValueError(f"the config describes a {config.get('model_type')!r}, not a {MODEL_TYPE!r}")
        return cls(PixelCNNConfig.from_dict(config))
