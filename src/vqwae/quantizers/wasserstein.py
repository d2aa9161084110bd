"""VQ-WAE's quantizer: nearest-code quantization whose codebook is learned by optimal transport.

Loss (the paper's Eq. (7), with the per-batch WS term of Eq. (8)):

    ws_weight * sum_m W(z^m_{1..B}, P_{c, pi^m})  +  kl_weight * sum_m KL(pi^m || U_K),   pi^m = softmax(beta^m)

* "ws": the Wasserstein distance, squared-Euclidean cost, between the batch's latents at position m
  (uniform weights 1/B) and the codewords weighted by pi^m. The paper writes lambda/M in front of the sum;
  the authors' code, which produced the paper's numbers, uses lambda alone: we follow the code, so
  ws_weight = 1e-3 matches their runs (= the paper's lambda = 1e-3 * M).
  Gradients: the optimal plan P moves latents and codewords (dW/dC = P), the centred dual potential moves pi.
  There is no VQ-VAE codebook or commitment loss: the codebook learns only through this term.
* "kl": KL(pi^m || U_K) summed over positions, the paper's regulariser (Eq. (7), third term). The authors'
  code divides it by K (a mean reduction); kl_reduction="mean" (the `paper` preset) reproduces that.

Solvers for W:
* "semidiscrete" (the default): the semi-discrete semi-dual of W between the latent distribution at each
  position and its weighted codebook, with a per-position code potential g kept across steps (warm start)
  and one stochastic ascent step on g per training step (Genevay et al. 2016; ``vqwae.ot.semidiscrete``).
  It shares the nearest-code search's distance matrix and adds no exponentials: VQ-VAE's cost, measured
  in BENCHMARKS.md.
* "exact" (POT network simplex per position, as the authors run it: faithful, 64 host solves per step),
* "sinkhorn" (entropic, all positions batched in log domain on the model's device),
* "dual" (the paper's entropic semi-dual with a Kantorovich potential network, Eq. (8)).
``num_positions=None`` shares one pi across positions and solves one OT between all B*M latents and the
codebook (their "global" variant), its value scaled by M so that ws_weight means the same in both modes.
``codebook_init="data"`` draws the codewords from the first training batch's latents (recommended for
training: with the N(0, 1) codebook and near-zero initial latents, usage starts at one code).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from vqwae.ot.cost import squared_distances, transport_cost
from vqwae.ot.dual import KantorovichPotential, semi_dual
from vqwae.ot.exact import exact_plans
from vqwae.ot.semidiscrete import CHUNK_ENTRIES, ascend_potential, assign, assignment_mass, semi_dual_value
from vqwae.ot.sinkhorn import sinkhorn_log
from vqwae.options import check_fields, option
from vqwae.quantizers.base import CodebookShape, Quantizer, QuantizerOutput, _choice, fp32

SOLVERS = ("semidiscrete", "exact", "sinkhorn", "dual")
PI_INITS = ("uniform", "peaked", "gaussian")
CODEBOOK_INITS = ("normal", "data")
CODEBOOK_UPDATES = ("gradient", "transport")
# Options added after models were first saved, with the value a saved config without them was trained with.
SAVED_BEFORE = {"codebook_update": "gradient"}


@dataclass(frozen=True)
class WassersteinOptions:
    """VQ-WAE's options (a training config's ``vqwae`` section); the sizes come from ``CodebookShape``."""

    solver: str = option("semidiscrete", "vqwae: the OT solver for the WS term", choices=SOLVERS)
    ws_weight: float = option(3e-3, "vqwae: lambda, on sum_m W^m (the paper, --preset paper: 1e-3; "
                              "BENCHMARKS.md section 5 measures both)", min=0)
    kl_weight: float = option(1.0, "vqwae: lambda_r, on sum_m KL(pi^m || U_K)", min=0)
    kl_reduction: str = option("sum", "vqwae: KL over codes: sum (the paper) or mean (/K, the authors' code)",
                               choices=("sum", "mean"))
    pi_init: str = option("uniform", "vqwae: initial pi (peaked, gaussian: the controllability ablation)",
                          choices=PI_INITS)
    learn_pi: bool = option(True, "vqwae: learn pi (--fixed-pi keeps its initial value)", negative="fixed-pi")
    epsilon: float = option(0.05, "vqwae sinkhorn / dual: entropic regularisation, relative to the batch's mean cost",
                            min=0)
    sinkhorn_iters: int = option(50, "vqwae sinkhorn: iteration cap", min=1)
    sinkhorn_tol: float = option(1e-3, "vqwae sinkhorn: marginal-error tolerance (0: run all iterations, no host sync)",
                                 min=0)
    warm_start: bool = option(True, "vqwae sinkhorn: start from the previous step's code potential")
    phi_iterations: int = option(5, "vqwae dual: inner ascent steps on phi per training step", min=0)
    phi_lr: float = option(1e-3, "vqwae dual: inner Adam learning rate", min=0)
    phi_hidden: int = option(64, "vqwae dual: hidden width of each potential MLP", min=1)
    global_batch: bool = option(False, "vqwae under DDP: solve the OT over the latents of all ranks",
                                negative="local-batch")
    potential_lr: float = option(0.01, "vqwae semidiscrete: ascent step on g per step (cost-scale units, x K)", min=0)
    potential_pooling: float = option(4.0, "vqwae semidiscrete: weight of the potential's component shared by "
                                      "positions", min=0)
    scale_decay: float = option(0.9, "vqwae semidiscrete: EMA decay of the cost scale (the quantization error)",
                                min=0, below=1)
    codebook_init: str = option("data", "vqwae: codebook start: data (K latents of the first training batch) or "
                                "normal (N(0, 1), the authors)", choices=CODEBOOK_INITS)
    codebook_update: str = option("transport", "vqwae: transport (each code moves to an EMA of the latents the OT "
                                  "plan sends it) or gradient (the optimiser steps it on the WS term: the paper)",
                                  choices=CODEBOOK_UPDATES)
    codebook_decay: float = option(0.99, "vqwae, transport codebook: EMA decay of the transported counts and sums",
                                   min=0, below=1)
    chunk_entries: int = option(CHUNK_ENTRIES, "vqwae semidiscrete: (latent, code) distances materialised at once",
                                min=1)

    def __post_init__(self):
        check_fields(self)


@dataclass(frozen=True)
class WassersteinConfig(WassersteinOptions, CodebookShape):
    """Everything a ``WassersteinQuantizer`` is built from."""

    num_positions: int | None = option(64, "M = H*W: one pi per latent position; None: one pi shared by all",
                                       min=1)

    def __post_init__(self):
        CodebookShape.__post_init__(self)
        WassersteinOptions.__post_init__(self)
        if self.num_positions is not None and self.num_positions < 1:
            raise ValueError(f"num_positions must be positive or None, got {self.num_positions}")


def initial_pi(kind: str, groups: int, num_codes: int) -> torch.Tensor:
    """Initial code weights (groups, K). "peaked": a sharp Laplace bump (scale K/8) centred on K/2;
    "gaussian": a broad bell (std K/4) centred on K/2; both shapes follow the paper's init figure."""
    _choice("pi_init", kind, PI_INITS)
    k = torch.arange(num_codes, dtype=torch.float64)
    centre = (num_codes - 1) / 2
    if kind == "uniform":
        p = torch.ones(num_codes, dtype=torch.float64)
    elif kind == "peaked":
        p = torch.exp(-(k - centre).abs() / max(num_codes / 8, 1e-3))
    else:
        p = torch.exp(-0.5 * ((k - centre) / max(num_codes / 4, 1e-3)) ** 2)
    return (p / p.sum()).float().expand(groups, num_codes).clone()


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous. all_gather's backward exchanges gradients with
    an all-to-all that (on gloo, torch 2.x) sends raw memory: a strided gradient view arrives scrambled."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


class WassersteinQuantizer(Quantizer):
    """Drop-in VQ-WAE quantizer for latents z of shape (B, D, H, W).

    >>> q = WassersteinQuantizer(num_codes=512, dim=64, num_positions=64)
    >>> out = q(torch.randn(32, 64, 8, 8)); out.loss.backward()
    """

    kind = "wasserstein"
    config_class = WassersteinConfig

    def __init__(self, config: WassersteinConfig | None = None, **options):
        super().__init__(config, **options)
        cfg = self.config
        num_codes, dim = cfg.num_codes, cfg.dim
        self.groups = 1 if cfg.num_positions is None else cfg.num_positions
        # N(0, 1), as the authors. With codebook_update="transport" the optimiser does not step it (see _transport_update).
        self.embedding = nn.Parameter(torch.randn(num_codes, dim), requires_grad=cfg.codebook_update == "gradient")
        beta = initial_pi(cfg.pi_init, self.groups, num_codes).log()
        if cfg.learn_pi:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)
        # The code potential, one row per group: the Sinkhorn warm start (absolute cost units), or the
        # semidiscrete solver's state in units of ``potential_scale`` (g = potential_scale * code_potential),
        # an EMA of the quantization error, so that g follows the latents' scale as the encoder rescales them
        # (early training inflates and deflates the latents by orders of magnitude).
        self.register_buffer("code_potential", torch.zeros(self.groups, num_codes))
        self.register_buffer("potential_scale", torch.zeros(()))
        if cfg.codebook_init == "data":
            # Set once the codebook has been drawn from a training batch (saved, so a resumed run keeps it).
            self.register_buffer("codebook_initialized", torch.zeros((), dtype=torch.bool))
        self._codebook_ready = cfg.codebook_init != "data"  # host-side cache: no sync once initialised
        if cfg.codebook_update == "transport":
            # EMAs of the mass the plan sends to each code and of the latents it sends there, summed over
            # positions (zero-initialised: their ratio, the codeword, needs no debiasing).
            self.register_buffer("transport_mass", torch.zeros(num_codes))
            self.register_buffer("transport_sum", torch.zeros(num_codes, dim))
        self.potential = (
            KantorovichPotential(self.groups, dim, cfg.phi_hidden, cfg.phi_lr) if cfg.solver == "dual" else None
        )

    @property
    def codebook(self) -> torch.Tensor:
        return self.embedding

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._codebook_ready = self.config.codebook_init != "data"  # re-read the loaded flag on the next step

    @property
    def pi(self) -> torch.Tensor:
        """Current code weights pi^m = softmax(beta^m), shape (M, K) (M = 1 when shared)."""
        return torch.softmax(self.beta.detach(), dim=-1)

    @torch.no_grad()
    def set_pi(self, probs: torch.Tensor) -> None:
        """Set pi to given probabilities, (K,) or (M, K) (e.g. a known prior, with learn_pi=False)."""
        probs = torch.as_tensor(probs, dtype=torch.float32, device=self.beta.device)
        if probs.shape[-1] != self.num_codes or (probs < 0).any():
            raise ValueError(f"pi must be non-negative with last dimension {self.num_codes}, got shape {tuple(probs.shape)}")
        self.beta.copy_((probs / probs.sum(-1, keepdim=True)).clamp_min(1e-12).log().expand_as(self.beta))

    def _groups(self, flat: torch.Tensor) -> torch.Tensor:
        """(B, M, D) -> (G, N, D): positions as groups of B latents, or one group of B*M latents."""
        b, m, d = flat.shape
        if self.config.num_positions is None:
            return flat.reshape(1, b * m, d)
        if m != self.config.num_positions:
            raise ValueError(
                f"latents have H*W = {m} positions but the quantizer was built with num_positions={self.config.num_positions}"
            )
        return flat.transpose(0, 1)  # (M, B, D)

    def _gathered(self) -> bool:
        return self.config.global_batch and dist.is_available() and dist.is_initialized()

    def _per_rank_batches(self) -> bool:
        """Under DDP without ``global_batch`` each rank sees its own latents: statistics are all-reduced."""
        return dist.is_available() and dist.is_initialized() and not self.config.global_batch

    def _by_group(self, flat: torch.Tensor) -> torch.Tensor:
        """(B, M, D) -> (N, G, D) without copying: rows of a group are its latents (semidiscrete layout)."""
        b, m, d = flat.shape
        if self.config.num_positions is None:
            return flat.reshape(b * m, 1, d)
        self._groups(flat)  # shape check
        return flat

    def wasserstein(self, flat: torch.Tensor, assigned: torch.Tensor | None = None,
                    quant_err: torch.Tensor | None = None) -> torch.Tensor:
        """sum_m W(z^m, P_{c,pi^m}) for latents (B, M, D), differentiable w.r.t. latents, codebook and pi.

        ``assigned`` / ``quant_err`` (semidiscrete only) reuse the OT assignment computed with the nearest-code
        search in ``forward``; without them it is computed here. In training mode the semidiscrete solver
        also takes its ascent step on the code potential."""
        cfg = self.config
        if self._gathered():
            from torch.distributed.nn.functional import all_gather

            # (world * B, M, D); gradients flow back to each rank, summed over ranks by all_gather's backward.
            flat = torch.cat([_ContiguousGrad.apply(t) for t in all_gather(flat)], dim=0)
        transport_update = self.training and cfg.codebook_update == "transport"
        # A snapshot when the codebook is updated in place below: the backward uses the codes of the assignment.
        c = self.embedding.detach().clone() if transport_update else self.embedding
        log_pi = torch.log_softmax(self.beta, dim=-1)  # (G, K)
        scale = float(flat.shape[1]) if cfg.num_positions is None else 1.0

        if cfg.solver == "semidiscrete":
            xg = self._by_group(flat)  # (N, G, D)
            g = self.potential_scale * self.code_potential  # (G, K), cost units, a new tensor
            if assigned is None:
                _, assigned, quant_err = assign(xg.detach(), c.detach(), g, cfg.chunk_entries)
            value = semi_dual_value(xg, c, assigned, g, log_pi)
            if self.training:
                n, groups = assigned.shape
                mass = assignment_mass(assigned, groups, self.num_codes)  # (G, K), shared by both updates
                self._ascend(mass, quant_err, log_pi.detach().exp())
                if transport_update:
                    self._transport_update(xg.detach().reshape(-1, self.dim), assigned=assigned.reshape(-1),
                                           counts=mass.sum(0) * n)
            return scale * value

        x = self._groups(flat)  # (G, N, D)

        if cfg.solver == "dual":
            cost = squared_distances(x, c)  # (G, N, K), differentiable
            eps = cfg.epsilon * cost.detach().mean()
            if self.training:
                self.potential.ascend(cost, log_pi, c, eps, cfg.phi_iterations)
            phi = self.potential(c)
            if transport_update:
                with torch.no_grad():  # the semi-dual's primal plan: P_ik = softmax_k(log pi_k + (phi_k - C_ik) / eps) / N
                    plan = torch.softmax(log_pi.unsqueeze(1) + (phi.unsqueeze(1) - cost) / eps, dim=-1) / cost.shape[1]
                self._transport_update(x.detach(), plan=plan)
            return scale * semi_dual(cost, log_pi, phi, eps).sum()

        with torch.no_grad():
            cost = squared_distances(x.detach(), c.detach())
            if cfg.solver == "exact":
                plan, v = exact_plans(cost, log_pi.exp())
            else:
                eps = cfg.epsilon * cost.mean()
                init = self.code_potential if cfg.warm_start else None
                res = sinkhorn_log(cost, log_pi, eps, max_iter=cfg.sinkhorn_iters, tol=cfg.sinkhorn_tol, init_g=init)
                plan, v = res.plan, res.g - res.g.mean(-1, keepdim=True)
                if self.training and cfg.warm_start:
                    self.code_potential.copy_(res.g)
            if transport_update:
                self._transport_update(x.detach(), plan=plan)
        pi = log_pi.exp()
        # Value <P, C>; gradient P to (latents, codebook) and the centred potential v to pi.
        potential_term = (pi * v).sum()
        return scale * (transport_cost(plan, x, c) + potential_term - potential_term.detach())

    @torch.no_grad()
    def _ascend(self, mass: torch.Tensor, quant_err: torch.Tensor, pi: torch.Tensor) -> None:
        """One stochastic ascent step on the (normalised) potential, given this rank's assignment ``mass``
        (G, K), and the EMA of the cost scale. Under DDP with per-rank batches, the mass and the scale are
        averaged over ranks (one small all-reduce) so every rank keeps the same potential."""
        cfg = self.config
        err = quant_err.detach().reshape(()).to(pi.dtype)
        g, k = mass.shape
        if self._per_rank_batches():
            packed = torch.cat([mass.reshape(-1), err.reshape(1)])
            dist.all_reduce(packed)
            packed /= dist.get_world_size()
            mass, err = packed[:-1].view(g, k), packed[-1]
        ascend_potential(self.code_potential, None, pi, cfg.potential_lr, cfg.potential_pooling, mass=mass)
        # First step: the scale starts at this batch's error (no sync: torch.where on device).
        ema = self.potential_scale * cfg.scale_decay + err * (1 - cfg.scale_decay)
        self.potential_scale.copy_(torch.where(self.potential_scale > 0, ema, err))

    @torch.no_grad()
    def _transport_update(self, x: torch.Tensor, assigned: torch.Tensor | None = None,
                          counts: torch.Tensor | None = None, plan: torch.Tensor | None = None) -> None:
        """codebook_update="transport": move every code to the (EMA) barycentre of the latents transported to it.

        For a fixed plan P, argmin_C sum_ik P_ik ||z_i - c_k||^2 is c_k = sum_i P_ik z_i / sum_i P_ik: this is the
        exact minimisation of the WS term over the codebook (a Lloyd step with the transport plan in place of
        the nearest-code assignment), smoothed over steps by an EMA of the plan's counts and sums, as VQ-VAE's
        EMA variant does with nearest codes. Because the plan sends every code its share pi_k of each position's
        latents, no code is left without data (VQ-VAE's EMA starves codes no latent is nearest to).

        Args: either ``assigned`` (N,) codes of the latents x (N, D) under the transport map and their
        ``counts`` per code (K,) (semidiscrete), or the ``plan`` (G, N, K) between x (G, N, D) and the codebook
        (exact, sinkhorn, dual; rows sum to 1/N).
        """
        k, decay = self.num_codes, self.config.codebook_decay
        if plan is None:
            mass = counts.to(x.dtype)
            sums = torch.zeros(k, self.dim, dtype=x.dtype, device=x.device).index_add_(0, assigned, x)
        else:
            n = plan.shape[1]  # latents per group: counts in units of latents, as the assignment's
            mass = plan.sum((0, 1)) * n
            sums = torch.einsum("gnk,gnd->kd", plan.to(x.dtype), x) * n
        if self._per_rank_batches():
            packed = torch.cat([mass[:, None], sums], dim=1)  # one all-reduce: every rank keeps the same codebook
            dist.all_reduce(packed)
            mass, sums = packed[:, 0], packed[:, 1:]
        self.transport_mass.mul_(decay).add_(mass, alpha=1 - decay)
        self.transport_sum.mul_(decay).add_(sums, alpha=1 - decay)
        seen = self.transport_mass > 0  # a code the plan never reached keeps its place
        centroid = self.transport_sum / self.transport_mass.clamp_min(torch.finfo(x.dtype).tiny).unsqueeze(1)
        self.embedding.copy_(torch.where(seen.unsqueeze(1), centroid, self.embedding))

    @torch.no_grad()
    def _init_codebook_from(self, flat: torch.Tensor) -> None:
        """codebook_init="data": the codewords become K latents drawn from this (first training) batch, with a
        little noise when the batch holds fewer than K latents; rank 0's choice is broadcast under DDP."""
        x = flat.detach().reshape(-1, self.dim)
        n = x.shape[0]
        if n >= self.num_codes:
            chosen = x[torch.randperm(n, device=x.device)[: self.num_codes]]
        else:
            chosen = x[torch.randint(0, n, (self.num_codes,), device=x.device)]
            chosen = chosen + 0.01 * x.std() * torch.randn_like(chosen)
        if dist.is_available() and dist.is_initialized():
            dist.broadcast(chosen, src=0)
        self.embedding.copy_(chosen)
        self.code_potential.zero_()
        self.potential_scale.zero_()
        if self.config.codebook_update == "transport":
            self.transport_mass.zero_()
            self.transport_sum.zero_()
        self.codebook_initialized.fill_(True)

    def kl_to_uniform(self) -> torch.Tensor:
        """sum_m KL(pi^m || U_K) = sum_m sum_k pi_k log(K pi_k) (divided by K with kl_reduction="mean")."""
        log_pi = torch.log_softmax(self.beta, dim=-1)
        kl = (log_pi.exp() * (log_pi + math.log(self.num_codes))).sum()
        return kl / self.num_codes if self.config.kl_reduction == "mean" else kl

    @fp32
    def forward(self, z: torch.Tensor, compute_loss: bool | None = None) -> QuantizerOutput:
        """Quantize z (B, D, H, W). The loss terms are computed in training mode (or when asked)."""
        self.check_input(z)
        cfg = self.config
        flat = self.flatten(z)  # (B, M, D) float32
        if self.training and not self._codebook_ready:
            if not bool(self.codebook_initialized):  # one host read, until the codebook is set
                self._init_codebook_from(flat)
            self._codebook_ready = True
        want_loss = self.training if compute_loss is None else compute_loss
        assigned = quant_err = None
        if want_loss and cfg.solver == "semidiscrete" and not self._gathered():
            # One distance computation serves quantization (nearest codes) and the OT (power assignment).
            nearest, assigned, quant_err = assign(
                self._by_group(flat.detach()), self.embedding.detach(), self.potential_scale * self.code_potential,
                cfg.chunk_entries,
            )
            indices = nearest.view(flat.shape[:2])
        else:
            indices = self.nearest(flat)  # (B, M)
        flat_q = self.straight_through(flat, F.embedding(indices, self.embedding))
        losses = {}
        if want_loss:
            losses["ws"] = cfg.ws_weight * self.wasserstein(flat, assigned, quant_err)
            if self.config.learn_pi and self.config.kl_weight:
                losses["kl"] = self.config.kl_weight * self.kl_to_uniform()
        return self._output(z, flat_q, indices, losses)
