"""The codebook's shape and the latents' layout, what every quantizer's config starts with (``vqwae.quantizers.base``),
declared without torch (a training config and the command line's help read them)."""
from __future__ import annotations

from dataclasses import dataclass

from vqwae.options import check_fields, option


@dataclass(frozen=True)
class CodebookShape:
    """The codebook's size, shared by every quantizer's config (the method's own options come from a
    second base class, e.g. ``WassersteinOptions``, which is what a training config holds)."""

    # at most 2^20: 2^20 codes of dimension 64 are 256 MB with as much again for their transport state, beyond any
    # setting measured; 10^12 would fail deep in the allocator
    num_codes: int = option(512, "K, the number of codewords", min=1, max=1 << 20)
    dim: int = option(64, "D, the codeword (and latent) dimension", min=1)

    def __post_init__(self):
        check_fields(self)


@dataclass(frozen=True)
class LatentShape(CodebookShape):
    """The codebook's size and how the latents are laid out: what every quantizer's config starts with (the
    layout is the caller's, not a training option: the paper's networks are channel-first)."""

    channel_last: bool | None = option(None, "latents are (B, *positions, D), e.g. a sequence (B, N, D) (True), or "
                                       "channel-first (B, D, *positions) (False); None: channel-first, and latents "
                                       "whose second and last axes both have D features are refused as ambiguous")
