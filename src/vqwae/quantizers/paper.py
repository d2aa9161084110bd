"""VQ-WAE exactly as the paper writes it (Vuong et al., ICML 2023), to be read beside its equations, not to be fast:
``PaperWassersteinQuantizer``, which ``--preset paper`` and the reproduction's ablations train.

Loss (Eq. (7), with the per-batch WS term of Eq. (8)):

    ws_weight * sum_m W(z^m_{1..B}, P_{c, pi^m})  +  kl_weight * sum_m KL(pi^m || U_K),   pi^m = softmax(beta^m)

* W: for each latent position m (one pi per position, ``num_positions=M``, as the paper) the Wasserstein distance,
  squared-Euclidean cost, between the batch's B latents at m (weights 1/B) and the codewords weighted by pi^m; with
  ``num_positions=None`` one pi and one OT over all B*M latents (the authors' "global" variant), its value x M so
  that ws_weight means the same. The paper writes lambda / M in front of the sum; the authors' code, which produced
  its numbers, uses lambda: we follow the code (ws_weight = 1e-3 = the paper's lambda of 1e-3 x M).
* Gradients (the envelope theorem): the optimal plan P moves the latents and the codewords (dW/dc_k = sum_i P_ik
  2 (c_k - z_i)), the centred dual potential moves pi. The codebook learns only through W, by the optimiser
  (there is no VQ-VAE codebook or commitment loss).
* KL(pi^m || U_K): the regulariser, Eq. (7)'s third term; the authors' code divides it by K
  (``kl_reduction="mean"``, which ``--preset paper`` sets). The convention: ws_weight on the plain sum of W over
  positions, as the authors' lambda (ratio 1); kl_weight on the KL summed over positions and, with "mean", divided by
  K, as the authors' lambda_r (ratio 1); with "sum" (the paper's text) kl_weight weighs K times what theirs does.

The solvers of W (``vqwae.ot``): "exact", POT's network simplex per position, as the authors run it (64 host solves
a step); "sinkhorn", the entropic OT (Cuturi 2013) in the log domain; "dual", the paper's entropic semi-dual with a
Kantorovich potential network (Eq. (6), App. B); "semidiscrete", the semi-dual with a warm-started code potential
(the product's solver, here with the paper's gradient-trained codebook: ``--preset paper-fast``). The codebook starts
at N(0, 1), as the authors' (``codebook_init="normal"``), or from the data.
"""
from __future__ import annotations

import torch
from torch.distributed.nn.functional import all_gather
import torch.nn.functional as F

from vqwae.distributed import is_distributed
from vqwae.ot import build_solver
from vqwae.ot.transport import latents_by_group
from vqwae.quantizers.base import QuantizerOutput, fp32
from vqwae.quantizers.pi import kl_to_uniform
from vqwae.quantizers.wasserstein_base import WassersteinBase
from vqwae.quantizers.wasserstein_options import PaperWassersteinConfig


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous. all_gather's backward exchanges gradients with
    an all-to-all that (on gloo, torch 2.x) sends raw memory: a strided gradient view arrives scrambled."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


class PaperWassersteinQuantizer(WassersteinBase):
    """The paper's VQ-WAE quantizer (see the module docstring), for latents (B, D, *positions) or, with
    ``channel_last=True``, (B, *positions, D).

    >>> q = PaperWassersteinQuantizer(num_codes=512, dim=64, num_positions=64, solver="exact",
    ...                               codebook_init="normal", kl_reduction="mean", ws_weight=1e-3)

    Args:
        num_codes: K, the number of codewords.
        dim: D, the latents' and codewords' dimension.
        channel_last: latents are (B, *positions, D) instead of (B, D, *positions).
        num_positions: M for one pi per latent position (the paper); None: one pi shared by all positions.
        ws_weight: lambda, the WS term's weight (the paper: 1e-3).
        kl_weight: lambda_r, the weight of KL(pi || uniform) (None: as ``WassersteinQuantizer``).
        pi_init: pi's start: uniform, peaked or gaussian.
        learn_pi: learn pi (its logits must be in the optimizer).
        quantize: nearest, or transport (the semidiscrete solver's map).
        solver: the OT solver: semidiscrete, exact (the paper's, per position; POT), sinkhorn or dual.
        kl_reduction: sum over codes (the paper's text) or mean (the authors' code, ``--preset paper``).
        epsilon: sinkhorn's entropic regularisation, relative to the batch's mean cost.
        sinkhorn_iters: sinkhorn's iteration cap.
        sinkhorn_tol: sinkhorn's marginal-error tolerance (0: every iteration, no host read).
        warm_start: sinkhorn starts from the previous step's potential.
        phi_iterations: the dual form's inner ascent steps per training step.
        phi_lr: the dual form's inner learning rate.
        phi_hidden: the dual form's potential MLP width.
        dual_epsilon: the dual form's absolute entropic regularisation (None: the authors' per dataset).
        global_batch: under DDP, one OT over every rank's latents.
        codebook_init: normal (N(0, 1), the authors') or data (K latents of the first batches).

    The codebook is a parameter the optimizer steps on the WS term (the paper), so it must be in the optimizer.
    """

    kind = "paper-wasserstein"
    config_class = PaperWassersteinConfig
    trains_codebook = True  # the optimiser steps it on the WS term (and it starts at N(0, 1), as the authors')

    def __init__(self, config: PaperWassersteinConfig | None = None, **options):
        super().__init__(config, **options)
        self.solver = build_solver(self.config, self.groups)

    def _gathered(self) -> bool:
        """One OT over every rank's latents: a training step's only (its ranks run the same steps); an evaluation's
        loss is each rank's own, since its shares may differ in length."""
        return self.config.global_batch and self.training and is_distributed()

    @fp32
    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, *,
                compute_loss: bool | None = None) -> QuantizerOutput:
        """Quantize z; the loss terms in training mode (or when asked). The paper's quantizer takes no mask
        (``WassersteinQuantizer`` does)."""
        if mask is not None:
            raise ValueError("PaperWassersteinQuantizer takes no mask: the paper's OT has every latent; "
                             "WassersteinQuantizer takes one")
        self.check_input(z)
        cfg = self.config
        flat = self.flatten(z).contiguous()  # (B, M, D) float32
        if self.training and cfg.codebook_init == "data":
            self._once_per_run("codebook_initialized", self._draw_codebook, flat)
        if self.training:
            self._watch_pi()
        want_loss = self.training if compute_loss is None else compute_loss
        assignment = None
        if want_loss and cfg.solver == "semidiscrete" and not self._gathered():
            # the semidiscrete solver's one distance computation gives the nearest codes and the transport map
            self._check_positions(flat)
            assignment = self.solver.assign_batch(latents_by_group(flat.detach(), self.solver.shared),
                                                  self.embedding.detach())
            indices = (assignment.assigned if cfg.quantize == "transport" else assignment.nearest).view(flat.shape[:2])
        else:
            indices = self.transport_map(flat) if cfg.quantize == "transport" else self.nearest(flat)  # (B, M)
        flat_q = self.straight_through(flat, F.embedding(indices, self.embedding))
        if not want_loss:
            return self._output(z, flat_q, indices, {})
        self._check_positions(flat)
        log_pi = self.log_pi()  # one log-softmax for both terms
        losses = {"ws": self._scaled(self._solve(flat, log_pi, assignment).value, flat.shape[1])}
        if cfg.learn_pi and self.kl_weight:
            losses["kl"] = self.kl_weight * kl_to_uniform(log_pi, cfg.kl_reduction)
        return self._output(z, flat_q, indices, losses)

    def _solve(self, flat: torch.Tensor, log_pi: torch.Tensor, assignment=None):
        """sum_m W(z^m, P_{c, pi^m}) for latents (B, M, D), differentiable w.r.t. the latents, the codebook and pi
        (a ``vqwae.ot.Transport``); in training the solver takes its step on its own state. ``assignment``: the
        semidiscrete solver's search of these latents, made already. Under DDP with global_batch, one OT over every
        rank's latents, whose gradients flow back to each rank."""
        if self._gathered():
            flat = torch.cat([_ContiguousGrad.apply(t) for t in all_gather(flat)], dim=0)  # (world * B, M, D)
        if assignment is not None:
            return self.solver(flat, self.embedding, log_pi, update=self.training, assignment=assignment)
        return self.solver(flat, self.embedding, log_pi, update=self.training)
