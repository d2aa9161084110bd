"""VQ-WAE's quantizer, as vqwae ships it: nearest-code quantization whose codebook is placed by optimal transport.

Loss (the paper's Eq. (7), with the semi-dual of the WS term, Eq. (8) at eps -> 0):

    ws_weight * sum_m W(z^m, P_{c, pi^m})  +  kl_weight * sum_m KL(pi^m || U_K),   pi^m = softmax(beta^m)

* "ws": the Wasserstein distance, squared-Euclidean cost, between the batch's latents (at position m, or all of
  them with one shared pi) and the codewords weighted by pi, as the batch's semi-discrete semi-dual (Genevay et al.
  2016): mean_i (||z_i - c_{a(i)}||^2 - g_{a(i)}) + sum_k pi_k g_k, where a(z) = argmin_k ||z - c_k||^2 - g_k is the
  transport map of the code potential g (``vqwae.ot.semidiscrete``). Its gradient pulls each latent toward the code
  the map sends it to (x ``pull``) and moves pi by g. With one shared pi the value is x M (positions per sample), so
  that ws_weight means the same in both modes. The authors' code puts lambda, not lambda / M, on the sum: we follow it.
* "kl": KL(pi^m || U_K) summed over positions, the paper's regulariser (Eq. (7), third term).

The weights' convention, one for both terms: each term is a plain sum over positions (and the KL over codes), with
no division. Against the authors' code, which divides the KL sum by K: ``ws_weight`` is their lambda as it is
(ratio 1), and ``kl_weight`` is their lambda_r / K, so kl_weight = 1 with one pi per position (the default there)
pulls pi K times (512x at K = 512) as hard as their lambda_r = 1, and the shared pi's default 0.01 is 0.01 K = 5.12x
their global variant's at K = 512 (``wasserstein_options.default_kl_weight`` gives the measurements behind both).
``PaperWassersteinQuantizer`` takes the authors' reduction with ``kl_reduction="mean"`` (``--preset paper``).

One training step, top to bottom in ``forward``: flatten the latents -> on the first batches, draw the codebook from
them -> one no-grad update (``_step``: the nearest-code search and the transport assignment from one distance
computation, one ascent step on g, the codebook's EMA move to the transported latents' barycentres and the split of
dead cells, ``TransportCodebook``) -> the semi-dual loss and the KL -> straight-through to the decoder. On a GPU the
no-grad update is replayed as one CUDA graph (``vqwae.fused``).

The paper's own forms (exact OT with POT, Sinkhorn, the dual network, the gradient-trained codebook, the N(0, 1)
start, the KL's mean reduction) are ``PaperWassersteinQuantizer`` (``vqwae.quantizers.paper``).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from vqwae.fused import fused_update
from vqwae.ot.semidiscrete import SemiDiscreteSolver, semi_dual_from, semi_dual_weights
from vqwae.ot.transport import keep_by_group, latents_by_group
from vqwae.quantizers.base import QuantizerOutput, fp32, scale_gradient
from vqwae.quantizers.pi import kl_to_uniform
from vqwae.quantizers.transport_codebook import TransportCodebook
from vqwae.quantizers.wasserstein_base import WassersteinBase
from vqwae.quantizers.wasserstein_options import WassersteinConfig, latents_per_code_pull


class WassersteinQuantizer(WassersteinBase):
    """Drop-in VQ-WAE quantizer for latents of any shape: channel-first (B, D, *positions) or, with
    ``channel_last=True``, (B, *positions, D) such as a sequence (B, N, D).

    >>> q = WassersteinQuantizer(num_codes=512, dim=64)                      # one pi shared by all positions
    >>> out = q(torch.randn(32, 64, 8, 8)); out.loss.backward()
    >>> q = WassersteinQuantizer(num_codes=512, dim=64, num_positions=64)    # the paper: one pi per position

    Args:
        num_codes: K, the number of codewords.
        dim: D, the latents' and codewords' dimension.
        channel_last: latents are (B, *positions, D) instead of (B, D, *positions); None: channel-first, and an
            ambiguous shape (D features on both the second and the last axis) is refused.
        num_positions: M for one pi per latent position (the paper); None: one pi shared by any number of positions.
        ws_weight: lambda, the WS term's weight.
        kl_weight: lambda_r, the weight of KL(pi || uniform); None: 0.01 with a shared pi, 1 with one per position.
        pi_init: pi's start: uniform, or peaked / gaussian (bumps at K / 2; the controllability experiment).
        learn_pi: learn pi; False keeps the start (or what ``set_pi`` gives), and usage then follows it. Pi's logits
            are a parameter: pass ``q.parameters()`` to the optimizer, or pi stays where it started (a warning
            says so after 50 training calls).
        pull: the scale of the WS gradient on the latents (None: from the latents per code of each step).
        quantize: nearest (the nearest code), or transport (the code of the transport map: usage follows pi).
        codebook_decay: the EMA decay of the transported counts and sums that place the codes.
        split_unused: codes nearest to fewer than this share of pi_k split the worst cells (sequences with crowds).

    The first training batches draw the codebook from the latents (K of them); ``set_codebook`` sets it instead.
    Runtime settings, not saved with the model: ``set_runtime(graph_update=..., compile_update=...,
    chunk_entries=...)`` (``vqwae.fused``).
    """

    kind = "wasserstein"
    config_class = WassersteinConfig
    _options_elsewhere = (" (the paper's forms, solver, kl_reduction, codebook_init, global_batch and the solvers' "
                          "own, are PaperWassersteinQuantizer's)")

    def __init__(self, config: WassersteinConfig | None = None, **options):
        super().__init__(config, **options)  # the codebook (N(0, 1) until drawn from the data; placed by transport), pi
        self.transport = TransportCodebook(self.config.num_codes, self.config.dim)
        self.solver = SemiDiscreteSolver(self.groups, self.config.num_codes, shared=self.config.num_positions is None)

    @torch.no_grad()
    def set_codebook(self, codes: torch.Tensor) -> None:
        """Set the codewords (K, D) (e.g. k-means centres of your latents): training then skips the data start, and
        the potential and the EMAs start afresh from them."""
        codes = torch.as_tensor(codes, dtype=self.embedding.dtype, device=self.embedding.device)
        if tuple(codes.shape) != tuple(self.embedding.shape):
            raise ValueError(f"codes must have shape {tuple(self.embedding.shape)}, got {tuple(codes.shape)}")
        if not torch.isfinite(codes).all():
            raise ValueError("codes must be finite (got NaN or Inf)")
        self.embedding.copy_(codes)
        self.codes_drawn.fill_(self.num_codes)
        self.codebook_initialized.fill_(True)
        self._forget()

    # ---- the training step -------------------------------------------------------------------------------------
    @fp32
    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, *,
                compute_loss: bool | None = None) -> QuantizerOutput:
        """Quantize z: (B, D, *positions), or (B, *positions, D) with channel_last. The loss terms are computed
        in training mode (or when asked); in training mode the codebook, pi's potential and the EMAs move.

        ``mask`` (B, *positions) bool, True = a real latent (e.g. not padding): masked latents are quantized but
        take no part in the WS term, the solver's step, the codebook update, pi's gradient or the perplexity.
        It needs one shared pi (num_positions=None)."""
        self.check_input(z, mask)
        cfg = self.config
        flat = self.flatten(z).contiguous()  # (B, M, D) float32
        keep = None
        if mask is not None:
            if cfg.num_positions is not None:
                raise ValueError("a mask needs one shared pi (num_positions=None): a per-position pi assumes every "
                                 "position holds a latent in every sample")
            keep = mask.reshape(flat.shape[0], -1)
        if self.training:
            self._once_per_run("codebook_initialized", self._draw_codebook, flat, keep)
            self._watch_pi()
        if not (self.training if compute_loss is None else compute_loss):
            indices = self.transport_map(flat) if cfg.quantize == "transport" else self.nearest(flat)  # (B, M)
            return self._output(z, self.straight_through(flat, F.embedding(indices, self.embedding)), indices, {},
                                mask)
        self._check_positions(flat)
        log_pi = self.log_pi()  # one log-softmax for both terms
        indices, codes, c_a, g, g_at, perplexity, *masked = self._step(flat.detach(), log_pi.detach(), keep,
                                                                        self.training)
        flat_q = self.straight_through(flat, codes)
        pulled = latents_by_group(self._pulled(flat, keep), self.solver.shared)  # (N, G, D)
        # "ws": lambda * sum_m W(z^m, P_{c, pi^m}), the batch's semi-dual (Eq. (8) at eps -> 0) at the step's potential
        losses = {}
        if keep is None:
            losses["ws"] = self._scaled(semi_dual_from(pulled, c_a, g_at, g, log_pi), flat.shape[1])
        else:
            weights, per_sample, any_real = masked
            losses["ws"] = self._scaled(semi_dual_from(pulled, c_a, g_at, g, log_pi, weights), per_sample)
        if cfg.learn_pi and self.kl_weight:  # "kl": lambda_r * sum_m KL(pi^m || U_K), Eq. (7)'s third term
            kl = self.kl_weight * kl_to_uniform(log_pi)
            losses["kl"] = kl if keep is None else kl * any_real  # a batch of padding only has no loss
        return self._output(z, flat_q, indices, losses, perplexity=perplexity)

    @fused_update(transient=(1, 4))
    def _step(self, x: torch.Tensor, log_pi: torch.Tensor, keep: torch.Tensor | None, update: bool):
        """The step's no-grad work, which a GPU replays as one CUDA graph: the search of the latents x (B, M, D) (their
        nearest codes and transport assignment from one distance computation); what the loss needs of the codebook
        and the potential before they move; the batch's perplexity; then, with ``update``, the potential's ascent step
        and the codebook's move. ``keep`` (B, M) bool: a mask's real latents.

        Returns the indices (B, M), their codes (B, M, D), the assigned codes c_a (N, G, D), the potential g (G, K),
        g at the assignment (its sum; per latent with a mask), the perplexity, and with a mask the semi-dual's weights,
        the real positions per sample and whether the batch holds any real latent."""
        solver = self.solver
        xg, kg = latents_by_group(x, solver.shared), keep_by_group(keep, solver.shared)  # (N, G, D), (N, G)
        nearest, assigned, min_sum, g = solver.assign_batch(xg, self.embedding, kg)
        indices = (assigned if self.config.quantize == "transport" else nearest).view(x.shape[:2])
        codes = F.embedding(indices, self.embedding)  # (B, M, D), before the update below
        c_a = F.embedding(assigned, self.embedding)  # (N, G, D)
        g_at = g.gather(1, assigned.t()).t()  # (N, G)
        perplexity = self.batch_perplexity(indices, keep)
        if update:
            counts = solver.update_state(xg, assigned, kg, min_sum, log_pi)
            self.transport.update(self.embedding, xg, assigned, counts, kg, nearest, decay=self.config.codebook_decay,
                                  potential=solver.potential, scale=solver.scale, pi=log_pi.exp(), beta=self.beta,
                                  split_unused=self.config.split_unused if self.config.learn_pi else 0.0,
                                  all_reduce=solver.per_rank_batches())
        if kg is None:
            return indices, codes, c_a, g, g_at.sum(), perplexity
        weights, g = semi_dual_weights(kg, g)
        return indices, codes, c_a, g, g_at, perplexity, weights, keep.sum() / keep.shape[0], keep.any().to(x.dtype)

    def _pulled(self, flat: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """The latents handed to the WS term: their value, their gradient x ``pull`` (with pull=None
        ``latents_per_code_pull`` of this step's real latents, counted on the device; under DDP those of every rank,
        which the codebook's update sees: this rank's count x the world size, no collective)."""
        pull = self.config.pull
        if pull is None:
            real = flat.numel() // flat.shape[-1] if keep is None else keep.sum()
            if self.solver.per_rank_batches():
                real = real * dist.get_world_size()
            pull = latents_per_code_pull(real, self.num_codes)
        return scale_gradient(flat, pull)

    @torch.no_grad()
    def _forget(self) -> None:
        """A fresh potential and fresh EMAs (the codes were drawn or set anew)."""
        self.solver.reset()
        self.transport.reset()
