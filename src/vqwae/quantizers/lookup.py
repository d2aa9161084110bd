"""The field's two lookup features around any vqwae quantizer (ViT-VQGAN, Yu et al. ICLR 2022, Sec. 3.2 "factorized
and l2-normalized codes"; vector-quantize-pytorch's ``codebook_dim`` and ``use_cosine_sim``):

* a low-dimensional lookup: the latents z (D features) are projected to d < D by a learned linear map, the code is
  searched (and, for VQ-WAE, the transport solved and the codebook placed) in d dimensions, and the code goes back
  to D by a second learned linear map before the decoder;
* l2-normalised codes (``cosine=True``): the projected latents and the codewords lie on the unit sphere, so the
  squared Euclidean cost every vqwae quantizer uses is 2 - 2 cos(z, c), the cosine cost: the nearest code is the most
  similar one, and VQ-WAE's transport is the transport on the sphere. The codewords are put back on the sphere (in
  place, no gradient) before every call: an EMA or transport barycentre of unit vectors lies inside the ball, a
  gradient step leaves it; what the decoder receives is always a unit code (through ``project_out``).

    >>> q = Lookup(WassersteinQuantizer(num_codes=512, dim=16, channel_last=True), dim=64, cosine=True)
    >>> out = q(torch.randn(8, 100, 64))          # (B, N, 64) in, out.quantized (B, N, 64); the codes are 16-d

The inner quantizer keeps its own loss terms (commitment, WS, ...), layout and mask rule; they act on the projected
latents, and train ``project_in`` and the encoder through them. With ``dim`` equal to the inner quantizer's, there is
no projection (``cosine=True`` alone). This is written here rather than taken from vector-quantize-pytorch because it
wraps vqwae's own quantizers (the transport, pi, the masks) and its core needs torch alone.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vqwae.quantizers.base import Quantizer, QuantizerOutput


class Lookup(nn.Module):
    """``quantizer`` (d features) searched on latents of ``dim`` features through learned projections d <-> D,
    optionally on the unit sphere (``cosine``). Returns the inner quantizer's ``QuantizerOutput`` with ``quantized``
    in the latents' D features.

    Args:
        quantizer: a vqwae quantizer whose ``dim`` is the lookup's d (its ``channel_last`` is the latents' layout).
        dim: D, the latents' features (the encoder's output and the decoder's input).
        cosine: l2-normalise the projected latents and the codewords (the cosine cost).
    """

    kind = "lookup"

    def __init__(self, quantizer: Quantizer, dim: int, *, cosine: bool = False):
        super().__init__()
        if not isinstance(quantizer, Quantizer):
            raise TypeError(f"quantizer must be a vqwae quantizer, got {type(quantizer).__name__}")
        if not (isinstance(dim, int) and dim >= quantizer.dim):
            raise ValueError(f"dim must be an int >= the quantizer's dim ({quantizer.dim}): the lookup projects the "
                             f"latents down to it, got {dim!r}")
        self.q, self.dim, self.cosine = quantizer, dim, bool(cosine)
        self.num_codes, self.codebook_dim = quantizer.num_codes, quantizer.dim
        projected = dim != quantizer.dim
        self.project_in = nn.Linear(dim, quantizer.dim) if projected else nn.Identity()
        self.project_out = nn.Linear(quantizer.dim, dim) if projected else nn.Identity()

    @property
    def config(self):
        """The inner quantizer's config (its layout: ``channel_last``)."""
        return self.q.config

    @property
    def codebook(self) -> torch.Tensor:
        """The codewords (K, d) as the search sees them (on the sphere with ``cosine``)."""
        c = self.q.codebook
        return F.normalize(c, dim=-1) if self.cosine else c

    def _features_last(self, z: torch.Tensor) -> torch.Tensor:
        return z if self.q.config.channel_last or z.dim() < 3 else z.movedim(1, -1)

    def _inner_layout(self, z: torch.Tensor) -> torch.Tensor:
        return z if self.q.config.channel_last or z.dim() < 3 else z.movedim(-1, 1)

    def from_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes of d features in the latents' layout (or flat (N, d)) -> what the decoder receives: D features
        through ``project_out``, in the same layout."""
        return self._inner_layout(self.project_out(self._features_last(codes)))

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, *,
                compute_loss: bool | None = None) -> QuantizerOutput:
        """Quantize z of D features (the inner quantizer's layout and mask rule)."""
        if not isinstance(z, torch.Tensor) or z.dim() < 3:
            raise ValueError(f"expected latents of shape {self.q.layout} with D = {self.dim}, got "
                             f"{tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
        channels = z.shape[-1] if self.q.config.channel_last else z.shape[1]
        if channels != self.dim:
            raise ValueError(f"latents of shape {tuple(z.shape)} have {channels} features, but the lookup takes "
                             f"dim = {self.dim} ({self.q.layout})")
        h = self.project_in(self._features_last(z))
        if self.cosine:
            h = F.normalize(h, dim=-1)
            with torch.no_grad():  # the codes back on the sphere: a projected step (no host read)
                self.q.codebook.copy_(F.normalize(self.q.codebook, dim=-1))
        out = self.q(self._inner_layout(h), mask, compute_loss=compute_loss)
        out.quantized = self.from_codes(out.quantized)
        return out

    def indices_to_latents(self, indices: torch.Tensor) -> torch.Tensor:
        """Codes (B, *positions) -> what the decoder receives for them, D features in the latents' layout (equal to
        ``quantized`` at eval time)."""
        codes = self._features_last(self.q.indices_to_latents(indices))
        return self.from_codes(self._inner_layout(F.normalize(codes, dim=-1) if self.cosine else codes))

    def reconstruction_loss(self, x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The inner quantizer's data term."""
        return self.q.reconstruction_loss(x_hat, x)

    def config_dict(self) -> dict:
        """What rebuilds the lookup (``from_config_dict``): D, the cosine switch and the inner quantizer's config."""
        return {"kind": self.kind, "dim": self.dim, "cosine": self.cosine, "quantizer": self.q.config_dict()}

    @classmethod
    def from_config_dict(cls, config: dict, build: Callable[[str, dict], Quantizer]) -> "Lookup":
        """The lookup ``config_dict`` describes; ``build(kind, options)`` makes the inner quantizer."""
        inner = dict(config["quantizer"])
        return cls(build(inner.pop("kind"), inner), int(config["dim"]), cosine=bool(config.get("cosine", False)))
