"""SQ-VAE's options (``vqwae.quantizers.stochastic``), declared once, without torch (the command line's help reads
them): ``StochasticOptions``, a training config's ``sqvae`` section, and ``StochasticConfig``, what a
``StochasticQuantizer`` is built from."""
from __future__ import annotations

import math
from dataclasses import dataclass

from vqwae.options import check_fields, option
from vqwae.quantizers.shape import LatentShape


@dataclass(frozen=True)
class StochasticOptions:
    """SQ-VAE's options (a training config's ``sqvae`` section)."""

    log_var_init: float | None = option(
        None, "sqvae: initial s, sigma^2 = 1 + exp(s) (None: the authors' log 10 for MNIST, log 20 otherwise)",
        flat="sq_log_var_init")
    temperature_decay: float = option(1e-5, "sqvae: tau = exp(-decay * step)", min=0, flat="sq_temperature_decay")
    min_temperature: float = option(1e-3, "sqvae: floor on tau (keeps the Gumbel-softmax finite on long runs)",
                                    min=0, flat="sq_min_temperature")
    latent_scale: str = option("batch", "sqvae: scale the latents to unit RMS (the scale sony/sqvae's batch-"
                               "normalised encoder gives). batch: by each training batch's RMS (an EMA of it in "
                               "evaluation) | data: by a gain fixed on the first training batch | none: as "
                               "sony/sqvae", choices=("batch", "data", "none"), flat="sq_latent_scale")

    def __post_init__(self):
        check_fields(self)


@dataclass(frozen=True)
class StochasticConfig(StochasticOptions, LatentShape):
    """Everything a ``StochasticQuantizer`` is built from."""

    def __post_init__(self):
        LatentShape.__post_init__(self)
        StochasticOptions.__post_init__(self)


def initial_log_var(dataset: str | None) -> float:
    """The authors' initial s: log 10 on MNIST, log 20 otherwise."""
    return math.log(10.0) if dataset == "mnist" else math.log(20.0)
