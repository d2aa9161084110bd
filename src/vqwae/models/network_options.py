"""The networks' options (``vqwae.models.networks``), declared once, without torch (the command line's help reads
them): ``NetworkOptions``, a training config's ``network`` section, and ``NetworkConfig``, what ``build_networks``
builds from; ``VQGANSizes``, VQGAN's sizes, both hold."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from vqwae.options import check_fields, option

ARCHITECTURES = ("conv32", "conv64", "vqgan")


def int_list(text: str, name: str) -> tuple[int, ...]:
    """'1,1,2,2,4' -> (1, 1, 2, 2, 4); '' -> (). A one-line error naming the option otherwise."""
    try:
        values = tuple(int(v) for v in str(text).replace(" ", "").split(",") if v)
    except ValueError:
        raise ValueError(f"{name} must be comma-separated integers, got {text!r}") from None
    if any(v < 1 for v in values):
        raise ValueError(f"{name} must hold positive integers, got {text!r}")
    return values


@dataclass(frozen=True)
class VQGANSizes:
    """The taming-transformers encoder / decoder's sizes (taming's defaults: the paper's FFHQ network, f = 16),
    declared once for the run's options and the model's config."""

    ch: int = option(128, "vqgan: channels of the first level", min=1)
    ch_mult: str = option("1,1,2,2,4", "vqgan: channel multiplier per level; f = 2^(levels - 1)")
    num_res_blocks: int = option(2, "vqgan: residual blocks per level", min=1)
    attn_resolutions: str = option("16", "vqgan: feature-map sides with self-attention ('' for none)")
    z_channels: int = option(256, "vqgan: channels before the 1x1 projection to D", min=1)

    def __post_init__(self):
        check_fields(self)
        int_list(self.attn_resolutions, "attn_resolutions")
        if not int_list(self.ch_mult, "ch_mult"):
            raise ValueError("ch_mult needs at least one level")


@dataclass(frozen=True)
class NetworkOptions(VQGANSizes):
    """The network options a training run sets (its ``network`` section); the rest follows from the data."""

    arch: str = option("auto", "auto: the paper's conv32 / conv64 by image size | vqgan: the taming-transformers "
                       "encoder / decoder (any size its factor divides)", choices=("auto", "vqgan"))
    authors_quirks: bool = option(False, "conv32: the authors' shared residual weights and in-place ReLU")

    def unread(self) -> tuple[str, ...]:
        """The options this configuration never reads: VQGAN's sizes unless the network is VQGAN's."""
        return () if self.arch == "vqgan" else tuple(f.name for f in dataclasses.fields(VQGANSizes))


@dataclass(frozen=True)
class NetworkConfig(VQGANSizes):
    """Everything the encoder and decoder are built from (a saved model's ``model_config.json`` holds it)."""

    arch: str = option("conv32", "conv32 (latent 8x8) | conv64 (CelebA, latent 16x16) | vqgan", choices=ARCHITECTURES)
    in_channels: int = option(3, "image channels (1 for MNIST)", min=1)
    hidden: int = option(128, "channels of the trunk", min=1)
    res_hidden: int = option(32, "bottleneck channels inside a residual layer", min=1)
    num_res_layers: int = option(2, "2 for conv32, 6 for conv64 (the paper's CelebA encoder)", min=0)
    latent_dim: int = option(64, "D, must equal the quantizer's dim", min=1)
    authors_quirks: bool = option(False, "conv32: the authors' shared residual weights and in-place ReLU")
    image_size: int | None = option(None, "vqgan: image side (sets where attention sits)", min=1)

    def __post_init__(self):
        super().__post_init__()
        if self.arch == "vqgan" and self.image_size is None:
            raise ValueError("a vqgan network needs image_size")

    @property
    def image_side(self) -> int:
        """The image side S the network takes: 32 (conv32), 64 (conv64) or ``image_size`` (vqgan)."""
        return {"conv32": 32, "conv64": 64}.get(self.arch, self.image_size)

    @property
    def factor(self) -> int:
        """Downsampling factor f: image side / latent side."""
        return 2 ** (len(int_list(self.ch_mult, "ch_mult")) - 1) if self.arch == "vqgan" else 4

    def latent_side(self, image_size: int) -> int:
        """The code grid's side for images of ``image_size`` (refused unless the network's factor divides it)."""
        if image_size % self.factor:
            raise ValueError(f"image size {image_size} is not divisible by the network's factor {self.factor}")
        return image_size // self.factor
