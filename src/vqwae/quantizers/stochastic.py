"""SQ-VAE's Gaussian stochastic quantizer (Takida et al. 2022), the paper's strongest baseline.

Posterior over codes: logits_k = -||z - c_k||^2 / (2 sigma^2), sigma^2 = 1 + exp(s), s learnable.
Training feeds the decoder the SOFT mixture sum_k p~_k c_k of a Gumbel-softmax sample p~ at temperature
tau = exp(-temperature_decay * step); evaluation feeds the argmax code (= the nearest codeword).

Loss terms (the ELBO of sony/sqvae's Gaussian variant, per image):
    "kl_discrete":   sum_{m,k} p_k log p_k / B                   (negative entropy of the code posterior)
    "kl_continuous": sum_m ||z^m - z_q^m||^2 / (2 sigma^2) / B
and the data term (D_x / 2) log MSE (``reconstruction_loss``), which replaces the plain MSE.

The posterior's variance has a floor, sigma^2 >= 1, in the latents' own units (sony/sqvae's "gaussian_1" adds
exp(0) for the encoder variance it does not model), so the method assumes latents of about unit scale, which
their batch-normalised encoder gives at every step. The paper's 32x32 network ends in a 1x1 convolution with
N(0, 0.02) weights: its latents start about 400x (CIFAR-10) to 1,400x (MNIST) smaller than the N(0, 1) codebook,
every posterior is uniform and every latent's nearest code is the same one, and the method spends its first
thousands of steps growing the encoder. ``latent_scale`` runs the method on g z, with the learned parameters
(codebook, s) in those unit-scale coordinates; what it returns is back in z's units (the codewords c / g), so it
stays a drop-in layer:

* ``"batch"`` (the default): g = 1 / RMS of each training batch's latents, differentiable, as batch norm does
  (without its per-channel statistics and affine); evaluation uses an EMA of the batch RMS (a saved buffer).
  The loss cannot depend on the encoder's overall scale, whatever it does during training.
* ``"data"``: g fixed on the first training batch. The encoder can then shrink its latents under the fixed g,
  and on MNIST it did: within 250 steps the method saw them at RMS 0.05, where every posterior is uniform and
  the decoder receives the codebook's mean; the run never left one code (docs/lab/09-16.md#sqvae-latent-scale).
* ``"none"`` (g = 1): sony/sqvae's quantizer exactly.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vqwae.distributed import all_reduce_sum
from vqwae.ot.cost import squared_distances
from vqwae.quantizers.base import Quantizer, QuantizerOutput, fp32, masked_square_sum
from vqwae.quantizers.stochastic_options import StochasticConfig, initial_log_var
from vqwae.quantizers.stochastic_options import StochasticOptions  # noqa: F401 (its home before)


# latent_scale="batch": the decay of the EMA of the batch RMS that evaluation uses (batch norm's momentum 0.1; a
# constant, not an option: the scale settles within tens of steps and the EMA only has to follow it).
SCALE_DECAY = 0.9


class StochasticQuantizer(Quantizer):
    """SQ-VAE's Gaussian stochastic quantizer: a Gumbel-softmax mixture of codewords in training, the nearest code
    in evaluation; the same layouts as ``WassersteinQuantizer``. Its ``reconstruction_loss`` (D_x / 2) log MSE
    replaces the plain MSE, so train it through ``VQAutoencoder`` or call that method for the data term.

    >>> sq = StochasticQuantizer(num_codes=512, dim=64)
    >>> out = sq(torch.randn(32, 64, 8, 8)); out.loss.backward()

    Args:
        num_codes: K, the number of codewords.
        dim: D, the latents' and codewords' dimension.
        channel_last: latents are (B, *positions, D) instead of (B, D, *positions).
        log_var_init: the start of s in sigma^2 = 1 + exp(s) (None: log 20, the authors' value off MNIST).
        temperature_decay: the Gumbel-softmax temperature is exp(-temperature_decay * step).
        min_temperature: the temperature's floor.
        latent_scale: batch (divide by each batch's RMS; an EMA of it in evaluation), data (a gain fixed on the
            first batch) or none (sony/sqvae exactly).
    """

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
        # g: the latents are quantized as g z. 1 until latent_scale="data" sets it on the first training batch.
        self.register_buffer("latent_gain", torch.ones(()))
        self.register_buffer("gain_initialized", torch.tensor(cfg.latent_scale == "none"))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, *args, **kwargs):
        # Runs saved before latent_scale existed quantized z itself: load them with g = 1, already set.
        for name, value in (("latent_gain", torch.ones(())), ("gain_initialized", torch.tensor(True))):
            state_dict.setdefault(prefix + name, value)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, *args, **kwargs)

    def _gain(self, flat: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """The gain g of this forward pass (a 0-dim tensor; no host read after the first training step);
        ``keep``: (B, M) weights, 1 for a real latent, or None."""
        mode = self.config.latent_scale
        if mode == "data" and self.training:
            self._once_per_run("gain_initialized", self._init_gain, flat, keep)
        if mode != "batch" or not self.training:
            return self.latent_gain
        # "batch": g = 1 / RMS of this batch's (real) latents, differentiable (like batch norm, the loss cannot
        # depend on the encoder's overall scale); evaluation uses an EMA of the batch RMS (latent_gain = 1 / it).
        if keep is None:
            mean_square = flat.pow(2).mean()
        else:  # over the real latents; a batch of padding only takes the running gain and leaves it alone
            total, count = masked_square_sum(flat, keep)
            live = count > 0  # a tensor: no host read
            mean_square = torch.where(live, total / count.clamp_min(1), self.latent_gain.detach() ** -2)
        rms = mean_square.sqrt().clamp_min(torch.finfo(flat.dtype).tiny)
        with torch.no_grad():
            running = torch.lerp(1 / self.latent_gain, rms, 1 - SCALE_DECAY)
            gain = 1 / torch.where(self.gain_initialized, running, rms)
            ok = torch.isfinite(gain) & (gain > 0)  # an overflowing batch leaves the gain as it was
            if keep is None:
                self.latent_gain.copy_(torch.where(ok, gain, self.latent_gain))
                self.gain_initialized.fill_(True)
            else:
                self.latent_gain.copy_(torch.where(live & ok, gain, self.latent_gain))
                self.gain_initialized.logical_or_(live)
        return 1 / rms

    @torch.no_grad()
    def _init_gain(self, flat: torch.Tensor, keep: torch.Tensor | None) -> None:
        """g = 1 / RMS of this (first training) batch's real latents, over all ranks under DDP."""
        stats = all_reduce_sum(torch.stack(masked_square_sum(flat, keep)).double())  # padding does not set the scale
        if float(stats[1]) == 0:  # only padding so far (a host read, on the first steps only): wait for latents
            return False
        rms = (stats[0] / stats[1]).sqrt().float()
        self.latent_gain.copy_(1.0 / rms.clamp_min(1e-12))
        return True

    @property
    def codebook(self) -> torch.Tensor:
        """The codewords in the latents' units (c / g)."""
        return self.embedding / self.latent_gain

    @property
    def variance(self) -> torch.Tensor:
        """sigma^2 = 1 + exp(s), the posterior's variance in the quantizer's unit-scale coordinates."""
        return 1.0 + self.log_var.exp()

    def _temperature(self) -> torch.Tensor:
        """tau = max(exp(-decay * step), min_temperature), a tensor (no host read in the training step)."""
        tau = torch.exp(-self.config.temperature_decay * self.step.double())
        return tau.clamp_min(self.config.min_temperature).float()

    @property
    def temperature(self) -> float:
        """The Gumbel-softmax temperature at the current step (a host read)."""
        return float(self._temperature())

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
        # the mask as weights: products rather than boolean indexing, which reads the host
        keep = None if mask is None else mask.reshape(flat.shape[:2]).to(flat.dtype)  # (B, M)
        gain = self._gain(flat, keep)
        flat = flat * gain  # g z: the method's unit-scale coordinates
        logits = -squared_distances(flat, self.embedding) / (2 * self.variance)  # (B, M, K)
        indices = logits.detach().argmax(-1)  # the nearest codeword
        if self.training:
            soft = F.gumbel_softmax(logits, tau=self._temperature(), hard=False)
            flat_q = soft @ self.embedding  # (B, M, D): the soft mixture
            self.step += 1 if keep is None else (keep.sum() > 0).long()  # a padding-only batch is not a step
        else:
            flat_q = F.embedding(indices, self.embedding)
        losses = {}
        if self.training if compute_loss is None else compute_loss:
            log_p = torch.log_softmax(logits, dim=-1)
            kl_discrete = (log_p.exp() * log_p).sum(-1)  # (B, M)
            kl_continuous = (flat - flat_q).pow(2).sum(-1) / (2 * self.variance)  # (B, M)
            if keep is not None:
                kl_discrete, kl_continuous = kl_discrete * keep, kl_continuous * keep
            losses["kl_discrete"] = kl_discrete.sum() / b
            losses["kl_continuous"] = kl_continuous.sum() / b
        return self._output(z, flat_q / gain, indices, losses, mask)  # back in z's units
