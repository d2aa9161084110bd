"""SQ-VAE's Gaussian stochastic quantizer (Takida et al. 2022), the paper's strongest baseline.

Posterior over codes: logits_k = -||z - c_k||^2 / (2 sigma^2), sigma^2 = 1 + exp(s), s learnable.
Training feeds the decoder the SOFT mixture sum_k p~_k c_k of a Gumbel-softmax sample p~ at temperature
tau = exp(-temperature_decay * step); evaluation feeds the argmax code (= the nearest codeword).

Loss terms (the ELBO of sony/sqvae's Gaussian variant, per image):
    "kl_discrete":   sum_{m,k} p_k log p_k / B                   (negative entropy of the code posterior)
    "kl_continuous": sum_m ||z^m - z_q^m||^2 / (2 sigma^2) / B
and the data term (D_x / 2) log MSE (``reconstruction_loss``), which replaces the plain MSE.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vqwae.ot.cost import squared_distances
from vqwae.options import check_fields, option
from vqwae.quantizers.base import LatentShape, Quantizer, QuantizerOutput, fp32


@dataclass(frozen=True)
class StochasticOptions:
    """SQ-VAE's options (a training config's ``sqvae`` section)."""

    log_var_init: float | None = option(
        None, "sqvae: initial s, sigma^2 = 1 + exp(s) (None: the authors' log 10 for MNIST, log 20 otherwise)",
        flat="sq_log_var_init")
    temperature_decay: float = option(1e-5, "sqvae: tau = exp(-decay * step)", min=0, flat="sq_temperature_decay")
    min_temperature: float = option(1e-3, "sqvae: floor on tau (keeps the Gumbel-softmax finite on long runs)",
                                    min=0, flat="sq_min_temperature")

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


class StochasticQuantizer(Quantizer):
    kind = "stochastic"
    config_class = StochasticConfig

    def __init__(self, config: StochasticConfig | None = None, **options):
        super().__init__(config, **options)
        cfg = self.config
        num_codes, dim = cfg.num_codes, cfg.dim
        self.embedding = nn.Parameter(torch.randn(num_codes, dim))
        log_var = initial_log_var(None) if cfg.log_var_init is None else cfg.log_var_init
        self.log_var = nn.Parameter(torch.tensor(float(log_var)))
        self.register_buffer("step", torch.zeros((), dtype=torch.long))  # drives the temperature

    @property
    def codebook(self) -> torch.Tensor:
        return self.embedding

    @property
    def variance(self) -> torch.Tensor:
        return 1.0 + self.log_var.exp()

    @property
    def temperature(self) -> float:
        return max(math.exp(-self.config.temperature_decay * int(self.step)), self.config.min_temperature)

    def reconstruction_loss(self, x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(D_x / 2) log MSE, the Gaussian decoder's likelihood with the variance profiled out."""
        d_x = x[0].numel()
        return 0.5 * d_x * torch.log(F.mse_loss(x_hat, x))

    @fp32
    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, *,
                compute_loss: bool | None = None) -> QuantizerOutput:
        """Quantize z (either layout); ``mask`` (B, *positions), True = a real latent: masked latents are
        quantized but left out of the loss terms and the perplexity."""
        self.check_input(z, mask)
        b = z.shape[0]
        flat = self.flatten(z)  # (B, M, D)
        logits = -squared_distances(flat, self.embedding) / (2 * self.variance)  # (B, M, K)
        indices = logits.detach().argmax(-1)  # the nearest codeword
        if self.training:
            soft = F.gumbel_softmax(logits, tau=self.temperature, hard=False)
            flat_q = soft @ self.embedding  # (B, M, D): the soft mixture
            self.step += 1
        else:
            flat_q = F.embedding(indices, self.embedding)
        losses = {}
        if self.training if compute_loss is None else compute_loss:
            log_p = torch.log_softmax(logits, dim=-1)
            kl_discrete = (log_p.exp() * log_p).sum(-1)  # (B, M)
            kl_continuous = (flat - flat_q).pow(2).sum(-1) / (2 * self.variance)  # (B, M)
            if mask is not None:
                keep = mask.reshape(flat.shape[:2])
                kl_discrete, kl_continuous = kl_discrete[keep], kl_continuous[keep]
            losses["kl_discrete"] = kl_discrete.sum() / b
            losses["kl_continuous"] = kl_continuous.sum() / b
        return self._output(z, flat_q, indices, losses, mask)
