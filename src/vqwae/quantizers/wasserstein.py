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
``codebook_init="data"`` draws the codewords from the first training batches' latents (recommended for
training: with the N(0, 1) codebook and near-zero initial latents, usage starts at one code).
``quantize="transport"`` (semidiscrete) replaces each latent by its code under the transport map instead of the
nearest code, so that the decoder's usage follows a fixed pi (BENCHMARKS.md sections 24-26); ``fit_transport`` (the
``fit_steps`` option, which ``vqwae train`` applies to the saved weights) then solves that map on the training
latents with the network held still, which training's one potential step per batch never does (section 29).
"""
from __future__ import annotations

import math
from functools import partial

import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_gather
import torch.nn.functional as F
from torch import nn

from vqwae.distributed import is_distributed
from vqwae.ot import build_solver
from vqwae.fused import fused_update
from vqwae.ot.semidiscrete import assignment_mass, semi_dual_from, semi_dual_weights
from vqwae.ot.transport import keep_by_group, latents_by_group
from vqwae.quantizers.base import Quantizer, QuantizerOutput, _choice, fp32, masked_square_sum, scale_gradient
from vqwae.quantizers.transport_codebook import TransportCodebook
from vqwae.quantizers.upgrade import upgrade_wasserstein_state_dict
from vqwae.quantizers.wasserstein_options import (PI_INITS, PULL_FLOOR, WassersteinConfig, default_kl_weight,
                                                   latents_per_code_pull)

#: fit_transport: latents per ascent step (all groups together; one pi per position: 1,024 rows of 64 positions)
FIT_LATENTS_PER_STEP = 1 << 16


def _per_sample(keep: torch.Tensor) -> torch.Tensor:
    """A mask's (B, M) real positions per sample, on average (a tensor: no host read)."""
    return keep.sum() / keep.shape[0]


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


class WassersteinQuantizer(TransportCodebook, Quantizer):
    """Drop-in VQ-WAE quantizer for latents of any shape: channel-first (B, D, *positions) or, with
    ``channel_last=True``, (B, *positions, D) such as a sequence (B, N, D).

    >>> q = WassersteinQuantizer(num_codes=512, dim=64)                      # one pi shared by all positions
    >>> out = q(torch.randn(32, 64, 8, 8)); out.loss.backward()
    >>> q = WassersteinQuantizer(num_codes=512, dim=64, num_positions=64)    # the paper: one pi per position

    It holds the paper's learned quantities (the codebook, pi = softmax(beta)) and its loss; the OT solver
    (``self.solver``, a module of ``vqwae.ot`` with its own state) is called once per step for the WS term.
    """

    kind = "wasserstein"
    config_class = WassersteinConfig
    #: In a stack the WS pull (~50x the field's commitment) erased what the later levels encode (BENCHMARKS.md 21).
    residual_pull = 0.01
    #: State-dict layout. 1: the solvers' state on the quantizer itself (code_potential, potential_scale,
    #: potential.*); 2: in the solver module (solver.potential, solver.scale, solver.phi.*).
    _version = 2

    def __init__(self, config: WassersteinConfig | None = None, **options):
        super().__init__(config, **options)
        cfg = self.config
        num_codes, dim = cfg.num_codes, cfg.dim
        self.groups = 1 if cfg.num_positions is None else cfg.num_positions
        self.kl_weight = default_kl_weight(cfg.num_positions is None) if cfg.kl_weight is None else cfg.kl_weight
        # N(0, 1), as the authors. With codebook_update="transport" the optimiser does not step it (see _transport_update).
        self.embedding = nn.Parameter(torch.randn(num_codes, dim), requires_grad=cfg.codebook_update == "gradient")
        beta = initial_pi(cfg.pi_init, self.groups, num_codes).log()
        if cfg.learn_pi:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)
        if cfg.codebook_init == "data":
            # Set once every codeword has been drawn from training latents, and how many have been so far
            # (saved, so a resumed run keeps them; see _init_codebook_from).
            self.register_buffer("codebook_initialized", torch.zeros((), dtype=torch.bool))
            self.register_buffer("codes_drawn", torch.zeros((), dtype=torch.long))
        if cfg.codebook_update == "transport":
            # EMAs of the mass the plan sends to each code and of the latents it sends there, summed over
            # positions (zero-initialised: their ratio, the codeword, needs no debiasing).
            self.register_buffer("transport_mass", torch.zeros(num_codes))
            self.register_buffer("transport_sum", torch.zeros(num_codes, dim))
            # transport updates since the codebook was drawn (split_dead waits for the EMAs to fill)
            self.register_buffer("transport_steps", torch.zeros((), dtype=torch.long))
        if cfg.splits_unused_cells:
            # EMAs of each code's nearest-code count and of its nearest-code cell's squared error (split_unused)
            self.register_buffer("nearest_mass", torch.zeros(num_codes))
            self.register_buffer("nearest_error", torch.zeros(num_codes))
            self.register_buffer("nearest_of", torch.full((num_codes,), -1, dtype=torch.long))
        if cfg.pull_target:
            # EMAs of the squared norms of the gradients reaching the latents: the decoder's (through the
            # straight-through estimator) and the WS term's at pull 1 (recorded by backward hooks: no host sync)
            self.register_buffer("pull_grads", torch.zeros(2))
        self.solver = build_solver(cfg, self.groups)

    @property
    def codebook(self) -> torch.Tensor:
        return self.embedding

    @property
    def compile_update(self) -> bool:
        """Whether the transport codebook's update runs through torch.compile (``vqwae.fused``)."""
        return self.config.compile_update

    @property
    def graph_update(self) -> bool:
        """Whether the training step's no-grad work is replayed as a CUDA graph on CUDA (``vqwae.fused``)."""
        return self.config.graph_update

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        upgrade_wasserstein_state_dict(state_dict, prefix, self.config)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)

    def log_pi(self) -> torch.Tensor:
        """log pi^m, shape (M, K), differentiable w.r.t. beta: pi^m = softmax(beta^m), mixed with the uniform
        distribution when pi_floor = a > 0: pi = (1 - a) softmax(beta) + a / K, so no code's mass falls below a / K."""
        log_pi = torch.log_softmax(self.beta, dim=-1)
        a = self.config.pi_floor
        if a:
            log_pi = torch.logaddexp(log_pi + math.log1p(-a), torch.full_like(log_pi, math.log(a / self.num_codes)))
        return log_pi

    @property
    def pi(self) -> torch.Tensor:
        """Current code weights pi^m (softmax(beta^m), floored by pi_floor), shape (M, K) (M = 1 when shared)."""
        return self.log_pi().detach().exp()

    @torch.no_grad()
    def set_pi(self, probs: torch.Tensor) -> None:
        """Set pi to given probabilities, (K,) or (M, K) (e.g. a known prior, with learn_pi=False)."""
        probs = torch.as_tensor(probs, dtype=torch.float32, device=self.beta.device)
        a = self.config.pi_floor
        if probs.shape[-1] != self.num_codes or probs.dim() > 2 or (probs.dim() == 2 and probs.shape[0] not in (1, self.groups)):
            raise ValueError(f"pi must have shape ({self.num_codes},) or ({self.groups}, {self.num_codes}), "
                             f"got {tuple(probs.shape)}")
        if not torch.isfinite(probs).all() or (probs < 0).any() or (probs.sum(-1) <= 0).any():
            raise ValueError("pi must be finite and non-negative with a positive sum (got NaN, Inf, a negative "
                             "or an all-zero row)")
        probs = probs / probs.sum(-1, keepdim=True)
        if a and (probs < a / self.num_codes * (1 - 1e-4)).any():
            raise ValueError(f"pi must be at least pi_floor / K = {a / self.num_codes:.3g} everywhere (pi_floor={a})")
        probs = ((probs - a / self.num_codes) / (1 - a)).clamp_min(1e-12)  # the softmax part
        self.beta.copy_(probs.log().expand_as(self.beta))

    def _check_positions(self, flat: torch.Tensor) -> None:
        m = flat.shape[1]
        if self.config.num_positions is not None and m != self.config.num_positions:
            raise ValueError(
                f"latents have {m} positions but the quantizer was built with num_positions={self.config.num_positions} "
                "(one pi per position); num_positions=None shares one pi and takes any number"
            )

    def _gathered(self) -> bool:
        return self.config.global_batch and is_distributed()

    def wasserstein(self, flat: torch.Tensor, search=None, per_sample: torch.Tensor | None = None,
                    keep: torch.Tensor | None = None, log_pi: torch.Tensor | None = None,
                    weight: float = 1.0) -> torch.Tensor:
        """sum_m W(z^m, P_{c,pi^m}) for latents (B, M, D), differentiable w.r.t. latents, codebook and pi.

        ``search`` reuses the solver's assignment computed with the nearest-code search in ``forward``
        (semidiscrete). In training mode the solver takes its step on its own state, and with
        codebook_update="transport" the codebook moves to the plan's barycentres. With one shared pi the
        value is scaled by the positions per sample (M, or ``per_sample`` for a masked batch). ``keep`` (B, M)
        bool marks the real latents, for a solver that weighs them (``solver.weighs_latents``); for the others
        a masked batch comes as its real latents alone, (N, 1, D). ``log_pi``: ``self.log_pi()`` when the caller has it
        (one log-softmax a step); ``weight`` multiplies the value (the loss's lambda, in the same multiplication)."""
        self._check_positions(flat)
        if self._gathered():
            # (world * B, M, D); gradients flow back to each rank, summed over ranks by all_gather's backward.
            flat = torch.cat([_ContiguousGrad.apply(t) for t in all_gather(flat)], dim=0)
        transport_update = self.training and self.config.codebook_update == "transport"
        # Updated in place below, the transported codebook enters the value detached, as a snapshot when the solver's
        # backward reads it (the semidiscrete value's does not: its squared error saves z - c_a, taken before).
        c = self.embedding if not transport_update else (
            self.embedding.detach().clone() if self.solver.value_reads_codebook else self.embedding.detach())
        log_pi = self.log_pi() if log_pi is None else log_pi  # (G, K)
        transport = self.solver(flat, c, log_pi, update=self.training, want_plan=transport_update, search=search,
                                keep=keep)
        if transport_update:
            self._transport_update(transport.x, transport.assigned, transport.counts, transport.keep, transport.plan,
                                   transport.nearest)
        return self._scaled(transport.value, flat, per_sample, weight)

    def _scaled(self, value: torch.Tensor, flat: torch.Tensor, per_sample: torch.Tensor | None, weight: float):
        """The WS term's value x ``weight``, and with one shared pi x the positions per sample (M, or ``per_sample``
        for a masked batch), so that ws_weight means the same in both modes."""
        if self.config.num_positions is not None:
            return value * weight if weight != 1 else value
        if per_sample is None:
            return value * (weight * flat.shape[1])
        return value * (per_sample * weight)

    def _one_piece_step(self) -> bool:
        """Whether this training step's no-grad work runs as one piece (``_step_state``): the shipped configuration
        (semidiscrete, transport codebook) on one process's batch, with or without a mask."""
        cfg = self.config
        return (self.training and cfg.solver == "semidiscrete" and cfg.codebook_update == "transport"
                and not self._gathered())

    @fused_update(transient=(1, 4))
    def _step_state(self, x: torch.Tensor, log_pi: torch.Tensor, keep: torch.Tensor | None):
        """The training step's no-grad work in one piece, which a GPU replays as one CUDA graph (``vqwae.fused``): the
        search of the latents x (B, M, D) (nearest codes and the transport assignment, one distance computation);
        what the loss needs of the codebook and the potential before they move; the batch's perplexity; then the
        solver's ascent and the transport codebook's update. ``keep`` (B, M) bool: a mask's real latents.

        Returns the indices (B, M), their codes (B, M, D), the assigned codes c_a (N, G, D), the potential (G, K), the
        potential at the assignment (its sum; per latent with a mask), the perplexity, and with a mask
        ``semi_dual_weights``' weights, the real positions per sample and whether the batch holds any real latent."""
        solver, cfg = self.solver, self.config
        xg, kg = latents_by_group(x, solver.shared), keep_by_group(keep, solver.shared)  # (N, G, D), (N, G)
        nearest, assigned, min_sum, g = solver.assign_batch(xg, self.embedding, kg)
        indices = (assigned if cfg.quantize == "transport" else nearest).view(x.shape[:2])  # the search's, as forward
        assigned, g = solver.inner_steps(xg, self.embedding, kg, assigned, min_sum, g, log_pi)
        codes = F.embedding(indices, self.embedding)  # (B, M, D), before the update below
        c_a = F.embedding(assigned, self.embedding)  # (N, G, D)
        g_at = g.gather(1, assigned.t()).t()  # (N, G)
        perplexity = self.batch_perplexity(indices, keep)
        counts = solver.update_state(xg, assigned, kg, min_sum, log_pi, True)  # part of this graph
        self._transport_update(xg, assigned, counts, kg, None, nearest)
        if kg is None:
            return indices, codes, c_a, g, g_at.sum(), perplexity
        weights, g = semi_dual_weights(kg, g)
        return indices, codes, c_a, g, g_at, perplexity, weights, _per_sample(keep), keep.any().to(x.dtype)

    @torch.no_grad()
    def _init_codebook_from(self, flat: torch.Tensor, keep: torch.Tensor | None = None) -> bool:
        """codebook_init="data": the codewords become latents drawn from the first training batches; returns
        whether all K have been drawn. The first batch fills the codebook: K of its latents, or, when it holds
        N < K latents, all of them and K - N copies with a little noise. Each of the next batches then replaces
        N of those copies with its own latents, until all K codes are distinct latents (ceil(K / N) batches).

        Why not copies alone: a copy and its original share one transport cell, and the plan splits that cell
        between them only as fast as the potential learns to, which took about 2,500 steps to spread 8,192
        codes drawn from one batch of 2,048 latents (BENCHMARKS.md 8m, 8n). Under DDP rank 0's batch decides:
        its count and its choice are broadcast, so ranks whose masks hold other counts draw in step. With ``keep``
        (B, M) only the real latents are drawn (a batch of padding draws nothing)."""
        x = flat.detach().reshape(-1, self.dim)
        if keep is not None:
            x = x[keep.reshape(-1)]  # a host read, only while the codebook is being drawn
        n, k = x.shape[0], self.num_codes
        drawing = not is_distributed() or dist.get_rank() == 0
        if is_distributed():  # rank 0's batch decides for every rank (ranks with masks hold different counts)
            size = torch.tensor([n], device=x.device)
            dist.broadcast(size, src=0)
            n = int(size)
        if n == 0:
            return False
        start = int(self.codes_drawn)  # a host read, only while the codebook is being drawn
        count = min(n, k - start)
        rows = k if start == 0 and count < k else count
        if drawing:
            chosen = x[torch.randperm(n, device=x.device)[:count]]
            if rows > count:  # the first batch: fill the rest with noisy copies, replaced later
                copies = x[torch.randint(0, n, (k - count,), device=x.device)]
                chosen = torch.cat([chosen, copies + 0.01 * x.std() * torch.randn_like(copies)])
        else:
            chosen = x.new_empty(rows, self.dim)
        if is_distributed():
            dist.broadcast(chosen, src=0)
        self.embedding[start:start + chosen.shape[0]] = chosen
        self.codes_drawn.fill_(start + count)
        self.solver.reset()
        if self.config.codebook_update == "transport":
            self.transport_mass.zero_()
            self.transport_sum.zero_()
            self.transport_steps.zero_()
        if self.config.splits_unused_cells:
            self.nearest_mass.zero_()
            self.nearest_error.zero_()
            self.nearest_of.fill_(-1)
        return start + count >= k

    def _padding_only(self, z, flat, mask, compute_loss) -> QuantizerOutput:
        """A batch with no real latent (all padding): quantized, and a step that changes nothing: no codebook
        draw, no solver step, no codebook update, and zero loss terms (kept in the graph, so that every
        parameter still receives a gradient, of zero, as DDP expects). Under DDP with per-rank batches the
        rank takes part in the solver's all-reduces instead, with no latents (``SemiDiscreteSolver._ascend``)."""
        indices = self.nearest(flat)
        losses = {}
        if self.training if compute_loss is None else compute_loss:
            losses["ws"] = 0.0 * (flat.sum() + self.embedding.sum())
            if self.config.learn_pi and self.kl_weight:
                losses["kl"] = 0.0 * self.kl_to_uniform()
        return self._output(z, self.straight_through(flat, F.embedding(indices, self.embedding)), indices, losses,
                            mask)

    def _pulled(self, latents: torch.Tensor, flat_q: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """The latents handed to the WS term: their value, their gradient x the pull (with pull=None
        ``latents_per_code_pull`` of this step's real latents, which ``keep`` marks, counted on the device), x
        clamp((pull_rms / their RMS)^2, 0.1, 1) when pull_rms is set. With pull_target = t the pull is
        min(1, t |g_dec| / |g_ws|) x ``pull``, from the EMAs (decay 0.99) of the squared norms of the decoder's
        gradient on the quantized output and of the WS term's on these latents, which backward hooks record for the
        next step (on the device: no host sync). Under DDP each rank follows its own gradients (its EMAs are not
        all-reduced, so they differ between ranks)."""
        cfg = self.config
        pull = cfg.pull
        if pull is None:
            real = latents.numel() // latents.shape[-1] if keep is None else keep.sum()
            pull = latents_per_code_pull(real, self.num_codes)
        if cfg.pull_rms and self.training:  # on the device: a tensor pull, no host read
            square_sum, count = masked_square_sum(latents.detach(), keep)
            # floored: with no floor the latents, pulled less as they grow, grew without bound (BENCHMARKS.md 45)
            pull = pull * (cfg.pull_rms ** 2 * count / square_sum.clamp_min(1e-30)).clamp(PULL_FLOOR, 1.0)
        if not (cfg.pull_target and self.training and latents.requires_grad):
            return scale_gradient(latents, pull)
        dec, ws = self.pull_grads.unbind()
        adaptive = (cfg.pull_target * (dec / ws.clamp_min(1e-30)).sqrt()).clamp(max=1.0)
        pulled = scale_gradient(latents, torch.where(ws > 0, adaptive, 1.0) * pull)  # 1 until the EMAs have data
        flat_q.register_hook(partial(self._record_gradient, 0))
        pulled.register_hook(partial(self._record_gradient, 1))  # the gradient reaching pulled: the WS term's at pull 1
        return pulled

    @torch.no_grad()
    def _record_gradient(self, which: int, grad: torch.Tensor) -> None:
        """A backward hook of pull_target: feeds pull_grads[which] (0: the decoder's, 1: the WS term's)."""
        self.pull_grads[which].mul_(0.99).add_(0.01 * grad.float().pow(2).sum())

    def transport_map(self, flat: torch.Tensor) -> torch.Tensor:
        """(B, M, D) -> (B, M) indices under the semidiscrete solver's transport map, argmin_k ||z - c_k||^2 - g_k
        (g: its potential, per position or shared; a latent's cell needs no batch)."""
        self._check_positions(flat)
        return self.solver.search(flat, self.embedding)[1][0].view(flat.shape[:2])

    @torch.no_grad()
    def fit_transport(self, z: torch.Tensor, steps: int | None = None, generator: torch.Generator | None = None
                      ) -> dict:
        """Solve the semidiscrete transport map on the latents ``z`` (a batch in the quantizer's input layout, e.g.
        a training set's encoder outputs) with the codebook and pi held: ``steps`` (default: the ``fit_steps``
        option) ascent steps on the potential, warm-started from training's, on batches of about
        FIT_LATENTS_PER_STEP latents. Training steps the potential once per batch while the encoder and the codebook
        move under it, so its cells lag pi; held still, they converge. Returns the total variation between the
        map's cell masses on ``z`` and pi, before and after (``tv_before``, ``tv_after``)."""
        if self.config.solver != "semidiscrete":
            raise ValueError(f"fit_transport needs solver='semidiscrete', got {self.config.solver!r}")
        steps = self.config.fit_steps if steps is None else steps
        flat = self.flatten(z)  # (B, M, D)
        self._check_positions(flat)
        x = latents_by_group(flat, self.solver.shared)  # (N, G, D)
        pi = self.pi

        def tv() -> float:  # the map's cells on z against pi, averaged over groups
            cells = self.transport_map(flat)  # (B, M) -> (N, G), as x
            mass = assignment_mass(cells.reshape(-1, 1) if self.solver.shared else cells, self.groups, self.num_codes)
            return float(0.5 * (mass - pi).abs().sum(-1).mean())

        before = tv()
        batch = max(1, min(x.shape[0], FIT_LATENTS_PER_STEP // x.shape[1]))
        self.solver.fit(x, self.embedding.detach(), pi, steps, batch, generator=generator)
        return dict(tv_before=before, tv_after=tv(), steps=steps, latents=x.shape[0] * x.shape[1])

    def kl_to_uniform(self, log_pi: torch.Tensor | None = None) -> torch.Tensor:
        """sum_m KL(pi^m || U_K) = sum_m sum_k pi_k log(K pi_k) (divided by K with kl_reduction="mean"); ``log_pi``:
        ``self.log_pi()`` when the caller has it."""
        log_pi = self.log_pi() if log_pi is None else log_pi
        kl = torch.dot(log_pi.exp().flatten(), (log_pi + math.log(self.num_codes)).flatten())
        return kl / self.num_codes if self.config.kl_reduction == "mean" else kl

    @fp32
    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, *,
                compute_loss: bool | None = None) -> QuantizerOutput:
        """Quantize z: (B, D, *positions), or (B, *positions, D) with channel_last. The loss terms are computed
        in training mode (or when asked).

        ``mask`` (B, *positions) bool, True = a real latent (e.g. not padding): masked latents are quantized but
        take no part in the WS term, the solver's step, the codebook update, pi's gradient or the perplexity.
        It needs one shared pi (num_positions=None)."""
        self.check_input(z, mask)
        cfg = self.config
        flat = self.flatten(z).contiguous()  # (B, M, D) float32; one copy here, none in each regrouping below
        b = flat.shape[0]
        keep = ot_keep = None  # the mask; and, for a solver that weighs latents, what it is handed instead of indexing
        if mask is not None:
            if cfg.num_positions is not None:
                raise ValueError("a mask needs one shared pi (num_positions=None): a per-position pi assumes every "
                                 "position holds a latent in every sample")
            if self._gathered():
                raise ValueError("a mask cannot be combined with global_batch (ranks would gather different counts)")
            keep = mask.reshape(b, -1)
            if self.solver.weighs_latents:
                ot_flat, ot_keep = flat, keep
            else:  # the real latents, in order, as one shared-pi batch (N, 1, D): its size is a host read
                ot_flat = flat[keep].unsqueeze(1)
                if ot_flat.shape[0] == 0 and not self.solver.per_rank_batches():
                    return self._padding_only(z, flat, mask, compute_loss)
        else:
            ot_flat = flat
        if self.training and self.config.codebook_init == "data":
            self._once_per_run("codebook_initialized", self._init_codebook_from, ot_flat, ot_keep)
        want_loss = self.training if compute_loss is None else compute_loss
        if want_loss and self._one_piece_step():
            return self._forward_one_piece(z, flat, keep)
        per_sample = None if keep is None else _per_sample(keep)
        search = None
        if want_loss and self.solver.shares_search and not self._gathered():
            self._check_positions(ot_flat)  # before the search, whose grouping assumes the positions
            # One distance computation serves quantization (nearest codes) and the OT (transport assignment).
            ot_indices, search = self.solver.search(ot_flat, self.embedding, keep=ot_keep)
            if cfg.quantize == "transport":
                ot_indices = search[0].view(ot_indices.shape)
            # every latent, the padding included, is quantized in the same search (unless the mask selected them)
            indices = ot_indices if mask is None or ot_keep is not None else self.nearest(flat)
        else:
            indices = self.transport_map(flat) if cfg.quantize == "transport" else self.nearest(flat)  # (B, M)
        flat_q = self.straight_through(flat, F.embedding(indices, self.embedding))
        losses = {}
        if want_loss:
            log_pi = self.log_pi()  # one log-softmax for both terms
            pulled = self._pulled(ot_flat, flat_q, ot_keep)
            losses["ws"] = self.wasserstein(pulled, search, per_sample=per_sample, keep=ot_keep,
                                            log_pi=log_pi, weight=cfg.ws_weight)
            if cfg.learn_pi and self.kl_weight:
                kl = self.kl_weight * self.kl_to_uniform(log_pi)
                # a batch of padding only has no loss (as _padding_only), told on the device
                losses["kl"] = kl if ot_keep is None else kl * ot_keep.any()
        return self._output(z, flat_q, indices, losses, mask)

    def _forward_one_piece(self, z: torch.Tensor, flat: torch.Tensor, keep: torch.Tensor | None) -> QuantizerOutput:
        """The training forward of the shipped configuration (``_one_piece_step``): the same computation as the
        general path, with the no-grad work in ``_step_state`` (on a GPU one graph launch instead of ~110 kernels:
        BENCHMARKS.md section 40). ``keep`` (B, M): a mask's real latents."""
        cfg = self.config
        self._check_positions(flat)
        log_pi = self.log_pi()  # one log-softmax for both terms
        indices, codes, c_a, g, g_at, perplexity, *masked = self._step_state(flat.detach(), log_pi.detach(), keep)
        flat_q = self.straight_through(flat, codes)
        pulled = latents_by_group(self._pulled(flat, flat_q, keep), self.solver.shared)  # (N, G, D)
        losses = {}
        if keep is None:
            losses["ws"] = self._scaled(semi_dual_from(pulled, c_a, g_at, g, log_pi), flat, None, cfg.ws_weight)
        else:
            weights, per_sample, any_real = masked
            losses["ws"] = self._scaled(semi_dual_from(pulled, c_a, g_at, g, log_pi, weights), flat, per_sample,
                                        cfg.ws_weight)
        if cfg.learn_pi and self.kl_weight:
            kl = self.kl_weight * self.kl_to_uniform(log_pi)
            losses["kl"] = kl if keep is None else kl * any_real  # a batch of padding only has no loss
        return self._output(z, flat_q, indices, losses, perplexity=perplexity)  # the mask's perplexity: _step_state's
