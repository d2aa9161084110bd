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
  (``kl_reduction="mean"``, which ``--preset paper`` sets).

The solvers of W (``vqwae.ot``): "exact", POT's network simplex per position, as the authors run it (64 host solves
a step); "sinkhorn", the entropic OT (Cuturi 2013) in the log domain; "dual", the paper's entropic semi-dual with a
Kantorovich potential network (Eq. (6), App. B); "semidiscrete", the semi-dual with a warm-started code potential
(the product's solver, here with the paper's gradient-trained codebook: ``--preset paper-fast``). The codebook starts
at N(0, 1), as the authors' (``codebook_init="normal"``), or from the data.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.distributed.nn.functional import all_gather
import torch.nn.functional as F

from vqwae.distributed import is_distributed
from vqwae.ot import SemiDiscreteSolver, build_solver
from vqwae.ot.transport import latents_by_group
from vqwae.quantizers.base import Quantizer, QuantizerOutput, fp32
from vqwae.quantizers.data_start import draw_codebook
from vqwae.quantizers.pi import check_positions, checked_pi, initial_pi, kl_to_uniform
from vqwae.quantizers.transport_map import fit_transport, transport_map
from vqwae.quantizers.upgrade import upgrade_state_dict
from vqwae.quantizers.wasserstein_options import PaperWassersteinConfig, default_kl_weight


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous. all_gather's backward exchanges gradients with
    an all-to-all that (on gloo, torch 2.x) sends raw memory: a strided gradient view arrives scrambled."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


class PaperWassersteinQuantizer(Quantizer):
    """The paper's VQ-WAE quantizer (see the module docstring), for latents (B, D, *positions) or, with
    ``channel_last=True``, (B, *positions, D).

    >>> q = PaperWassersteinQuantizer(num_codes=512, dim=64, num_positions=64, solver="exact",
    ...                               codebook_init="normal", kl_reduction="mean", ws_weight=1e-3)

    Options (``PaperWassersteinConfig``), beyond the shape (num_codes, dim, channel_last, num_positions) and the
    ones ``WassersteinQuantizer`` shares (ws_weight, kl_weight, pi_init, learn_pi, quantize): solver; kl_reduction;
    epsilon, sinkhorn_iters, sinkhorn_tol, warm_start (sinkhorn); phi_iterations, phi_lr, phi_hidden (dual);
    global_batch (DDP: one OT over every rank's latents); codebook_init (normal or data).
    """

    kind = "paper-wasserstein"
    config_class = PaperWassersteinConfig
    #: In a stack the WS pull (~50x the field's commitment) erased what the later levels encode
    #: (docs/lab/17-29.md#residual-pull).
    residual_pull = 0.01
    #: State-dict layout (``upgrade_state_dict``): 2 the solver's state in ``solver``; 3 the data start's count
    #: always present.
    _version = 3

    def __init__(self, config: PaperWassersteinConfig | None = None, **options):
        super().__init__(config, **options)
        cfg = self.config
        self.groups = 1 if cfg.num_positions is None else cfg.num_positions
        self.kl_weight = default_kl_weight(cfg.num_positions is None) if cfg.kl_weight is None else cfg.kl_weight
        self.embedding = nn.Parameter(torch.randn(cfg.num_codes, cfg.dim))  # N(0, 1), as the authors'
        beta = initial_pi(cfg.pi_init, self.groups, cfg.num_codes).log()
        if cfg.learn_pi:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)
        # codebook_init="data": set once every codeword has been drawn from training latents, and how many have been
        self.register_buffer("codebook_initialized", torch.zeros((), dtype=torch.bool))
        self.register_buffer("codes_drawn", torch.zeros((), dtype=torch.long))
        self.solver = build_solver(cfg, self.groups)

    @property
    def codebook(self) -> torch.Tensor:
        return self.embedding

    def set_runtime(self, *, graph_update: bool | None = None, compile_update: bool | None = None,
                    chunk_entries: int | None = None) -> "PaperWassersteinQuantizer":
        """As ``WassersteinQuantizer.set_runtime``; only the semidiscrete solver has such settings."""
        if isinstance(self.solver, SemiDiscreteSolver):
            for name, value in (("graph_update", graph_update), ("compile_update", compile_update),
                                ("chunk_entries", chunk_entries)):
                if value is not None:
                    setattr(self.solver, name, type(getattr(self.solver, name))(value))
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        upgrade_state_dict(state_dict, prefix, self)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)

    def log_pi(self) -> torch.Tensor:
        """log pi^m = log softmax(beta^m), shape (M, K) (M = 1 when shared)."""
        return torch.log_softmax(self.beta, dim=-1)

    @property
    def pi(self) -> torch.Tensor:
        return self.log_pi().detach().exp()

    @torch.no_grad()
    def set_pi(self, probs: torch.Tensor) -> None:
        """Set pi to given probabilities, (K,) or (M, K) (e.g. a known prior, with learn_pi=False)."""
        probs = checked_pi(probs, self.groups, self.num_codes, self.beta.device)
        self.beta.copy_(probs.clamp_min(1e-12).log().expand_as(self.beta))

    def kl_to_uniform(self) -> torch.Tensor:
        """sum_m KL(pi^m || U_K), divided by K with kl_reduction="mean" (Eq. (7), third term)."""
        return kl_to_uniform(self.log_pi(), self.config.kl_reduction)

    def _gathered(self) -> bool:
        return self.config.global_batch and is_distributed()

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

    def _scaled(self, value: torch.Tensor, positions: int) -> torch.Tensor:
        """The WS term x ws_weight, and with one shared pi x the positions M (ws_weight means the same in both)."""
        weight = self.config.ws_weight
        if self.config.num_positions is not None:
            return value * weight if weight != 1 else value
        return value * (weight * positions)

    @torch.no_grad()
    def _draw_codebook(self, flat: torch.Tensor) -> bool:
        """codebook_init="data" (``draw_codebook``), then a fresh solver state for the drawn codes."""
        if not draw_codebook(self.embedding, self.codes_drawn, flat):
            return False
        self.solver.reset()
        return int(self.codes_drawn) >= self.num_codes

    def _check_positions(self, flat: torch.Tensor) -> None:
        check_positions(flat, self.config.num_positions)

    def _semidiscrete(self, what: str):
        if self.config.solver != "semidiscrete":
            raise ValueError(f"{what} needs solver='semidiscrete' (the map of its potential), got "
                             f"{self.config.solver!r}")
        return self.solver

    def transport_map(self, flat: torch.Tensor) -> torch.Tensor:
        """(B, M, D) -> (B, M) codes under the semidiscrete solver's transport map."""
        self._check_positions(flat)
        return transport_map(self._semidiscrete("the transport map"), self.embedding, flat)

    def fit_transport(self, z: torch.Tensor, steps: int, generator: torch.Generator | None = None) -> dict:
        """Solve the semidiscrete transport map on the latents z with the codebook and pi held
        (:func:`vqwae.quantizers.transport_map.fit_transport`)."""
        solver = self._semidiscrete("fit_transport")
        self.check_finite(z)  # NaN latents would leave a NaN potential
        flat = self.flatten(z)
        self._check_positions(flat)
        return fit_transport(solver, self.embedding, self.pi, flat, steps, generator)
