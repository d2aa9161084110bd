"""VQGAN's loss options (``vqwae.training.adversarial``), declared once, without torch (the command line's help reads
them): ``AdversarialOptions``, a training config's ``gan`` section."""
from __future__ import annotations

from dataclasses import dataclass

from vqwae.options import WHERE, check_fields, option


@dataclass(frozen=True)
class AdversarialOptions:
    """The ``gan`` section: VQGAN's loss weights and its discriminator (used with ``--arch vqgan``)."""

    perceptual_weight: float = option(1.0, "vqgan: weight of LPIPS-VGG in the reconstruction term", min=0)
    disc_weight: float = option(0.8, "vqgan: scale of the adaptive adversarial weight lambda", min=0)
    disc_start: int = option(30001, "vqgan: optimiser step from which the discriminator trains and the "
                             "generator sees it (taming's faces configuration: 30001)", min=0)
    disc_layers: int = option(3, "vqgan: strided layers of the PatchGAN discriminator (3: 70x70 patches)", min=1)
    disc_channels: int = option(64, "vqgan: channels of the discriminator's first layer", min=1)
    lpips_weights: str | None = option(None, "vqgan: folder with vgg16_features.pth and v0.1/vgg.pth (env "
                                       "VQWAE_LPIPS_WEIGHTS; None: download when online)", role=WHERE)

    def __post_init__(self):
        check_fields(self)
