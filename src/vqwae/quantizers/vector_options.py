"""VQ-VAE's options (``vqwae.quantizers.vector``), declared once, without torch (the command line's help reads them):
``VectorOptions``, a training config's ``vqvae`` section, and ``VectorConfig``, what a ``VectorQuantizer`` is built
from."""
from __future__ import annotations

from dataclasses import dataclass

from vqwae.options import check_fields, option
from vqwae.quantizers.shape import LatentShape

INITS = ("normal", "kmeans", "uniform")


@dataclass(frozen=True)
class VectorOptions:
    """VQ-VAE's options (a training config's ``vqvae`` section)."""

    beta: float = option(0.25, "vqvae: commitment weight beta", min=0)
    legacy_beta: bool = option(False, "vqvae: beta on the codebook term, as in the authors' code",
                               negative="paper-beta")
    ema: bool = option(False, "vqvae: EMA codebook updates instead of the codebook loss")
    decay: float = option(0.99, "vqvae --ema: EMA decay", min=0, below=1, flat="vq_decay")
    ema_epsilon: float = option(1e-5, "vqvae --ema: Laplace smoothing of the EMA cluster sizes", min=0,
                                flat="vq_ema_epsilon")
    init: str = option("normal", "vqvae: codebook start: normal (N(0, 1), the authors), kmeans (k-means of the "
                       "first training batch's latents, the field's) or uniform (in (-1/K, 1/K), taming's VQGAN)",
                       choices=INITS, flat="vq_init")
    kmeans_iters: int = option(10, "vqvae --vq-init kmeans: Lloyd iterations", min=1, flat="vq_kmeans_iters")
    dead_code_threshold: float = option(0.0, "vqvae --ema: a code whose EMA count falls below this is replaced by "
                                        "a latent of the current batch (0: never; the field's: 2)", min=0)
    rotation_trick: bool = option(False, "vqvae: the decoder's gradient rotated onto the latent instead of copied "
                                  "(Fifty et al. 2025; vector-quantize-pytorch's default, the field-vq preset's)")

    def __post_init__(self):
        check_fields(self)
        if self.dead_code_threshold and not self.ema:
            raise ValueError("dead_code_threshold needs ema=True (the expiry reads the EMA counts)")

    def unread(self) -> tuple[str, ...]:
        """The options this configuration never reads, or holds at the value that does what vqwae did before
        the option existed (a run's identity leaves them out)."""
        off = ("init", "kmeans_iters") if self.init == "normal" else ("kmeans_iters",) if self.init != "kmeans" else ()
        return off + (("dead_code_threshold",) if not self.dead_code_threshold else ()) + (
            ("rotation_trick",) if not self.rotation_trick else ())


@dataclass(frozen=True)
class VectorConfig(VectorOptions, LatentShape):
    """Everything a ``VectorQuantizer`` is built from."""

    def __post_init__(self):
        LatentShape.__post_init__(self)
        VectorOptions.__post_init__(self)
