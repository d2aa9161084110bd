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
import torch.nn.functional as F
from torch import nn

from vqwae.fused import fused_update
from vqwae.ot.semidiscrete import CHUNK_ENTRIES, SemiDiscreteSolver, semi_dual_from, semi_dual_weights
from vqwae.ot.transport import keep_by_group, latents_by_group
from vqwae.quantizers.base import Quantizer, QuantizerOutput, fp32, scale_gradient
from vqwae.quantizers.data_start import draw_codebook
from vqwae.quantizers.pi import check_positions, checked_pi, initial_pi, kl_to_uniform
from vqwae.quantizers.transport_codebook import TransportCodebook
from vqwae.quantizers.transport_map import fit_transport, transport_map
from vqwae.quantizers.upgrade import upgrade_state_dict
from vqwae.quantizers.wasserstein_options import WassersteinConfig, default_kl_weight, latents_per_code_pull


class WassersteinQuantizer(Quantizer):
    """Drop-in VQ-WAE quantizer for latents of any shape: channel-first (B, D, *positions) or, with
    ``channel_last=True``, (B, *positions, D) such as a sequence (B, N, D).

    >>> q = WassersteinQuantizer(num_codes=512, dim=64)                      # one pi shared by all positions
    >>> out = q(torch.randn(32, 64, 8, 8)); out.loss.backward()
    >>> q = WassersteinQuantizer(num_codes=512, dim=64, num_positions=64)    # the paper: one pi per position

    Options (``WassersteinConfig``):

    - num_codes: K, the number of codewords.
    - dim: D, the latents' and codewords' dimension.
    - channel_last: latents are (B, *positions, D) instead of (B, D, *positions).
    - num_positions: M for one pi per latent position (the paper); None: one pi shared by any number of positions.
    - ws_weight: lambda, the WS term's weight.
    - kl_weight: lambda_r, the weight of KL(pi || uniform); None: 0.01 with a shared pi, 1 with one per position.
    - pi_init: pi's start: uniform, or peaked / gaussian (bumps at K / 2; the controllability experiment).
    - learn_pi: learn pi; False keeps the start (or what ``set_pi`` gives), and usage then follows it.
    - pull: the scale of the WS gradient on the latents (None: from the latents per code of each step).
    - quantize: nearest (the nearest code), or transport (the code of the transport map: usage follows pi).
    - codebook_decay: the EMA decay of the transported counts and sums that place the codes.
    - split_unused: codes nearest to fewer than this share of pi_k split the worst cells (sequences with crowds).

    Runtime settings, not saved with the model: ``set_runtime(graph_update=..., compile_update=...,
    chunk_entries=...)`` (``vqwae.fused``).
    """

    kind = "wasserstein"
    config_class = WassersteinConfig
    _options_elsewhere = (" (the paper's forms, solver, kl_reduction, codebook_init, global_batch and the solvers' "
                          "own, are PaperWassersteinQuantizer's)")
    #: In a stack the WS pull (~50x the field's commitment) erased what the later levels encode
    #: (docs/lab/17-29.md#residual-pull).
    residual_pull = 0.01
    #: State-dict layout. 1: solver state on the quantizer; 2: in the solver module; 3: the transport codebook's
    #: EMAs in ``transport`` (``upgrade_state_dict`` reads the older ones).
    _version = 3

    def __init__(self, config: WassersteinConfig | None = None, **options):
        super().__init__(config, **options)
        cfg = self.config
        self.groups = 1 if cfg.num_positions is None else cfg.num_positions
        self.kl_weight = default_kl_weight(cfg.num_positions is None) if cfg.kl_weight is None else cfg.kl_weight
        # N(0, 1) until the first batches are drawn; the optimiser never steps it (the transport places it)
        self.embedding = nn.Parameter(torch.randn(cfg.num_codes, cfg.dim), requires_grad=False)
        beta = initial_pi(cfg.pi_init, self.groups, cfg.num_codes).log()
        if cfg.learn_pi:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)
        # set once every codeword has been drawn from training latents, and how many have been so far
        self.register_buffer("codebook_initialized", torch.zeros((), dtype=torch.bool))
        self.register_buffer("codes_drawn", torch.zeros((), dtype=torch.long))
        self.transport = TransportCodebook(cfg.num_codes, cfg.dim)
        self.solver = SemiDiscreteSolver(self.groups, cfg.num_codes, shared=cfg.num_positions is None)
        self.compile_update, self.graph_update = False, True  # runtime settings (set_runtime)

    def set_runtime(self, *, graph_update: bool | None = None, compile_update: bool | None = None,
                    chunk_entries: int | None = None) -> "WassersteinQuantizer":
        """How the training step's no-grad work runs (a saved model does not carry these): replayed as a CUDA graph on
        a GPU (``graph_update``, the default), through torch.compile (``compile_update``), and how many (latent, code)
        distances the search materialises at once (``chunk_entries``, default 2^24)."""
        if graph_update is not None:
            self.graph_update = self.solver.graph_update = bool(graph_update)
        if compile_update is not None:
            self.compile_update = self.solver.compile_update = bool(compile_update)
        if chunk_entries is not None:
            if int(chunk_entries) < 1:
                raise ValueError(f"chunk_entries must be >= 1, got {chunk_entries}")
            self.solver.chunk_entries = int(chunk_entries)
        return self

    @property
    def codebook(self) -> torch.Tensor:
        return self.embedding

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        upgrade_state_dict(state_dict, prefix, self)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)

    # ---- pi ----------------------------------------------------------------------------------------------------
    def log_pi(self) -> torch.Tensor:
        """log pi^m, shape (M, K) (M = 1 when shared), differentiable w.r.t. beta."""
        return torch.log_softmax(self.beta, dim=-1)

    @property
    def pi(self) -> torch.Tensor:
        """The code weights pi^m = softmax(beta^m), shape (M, K)."""
        return self.log_pi().detach().exp()

    @torch.no_grad()
    def set_pi(self, probs: torch.Tensor) -> None:
        """Set pi to given probabilities, (K,) or (M, K) (e.g. a known prior, with learn_pi=False)."""
        probs = checked_pi(probs, self.groups, self.num_codes, self.beta.device)
        self.beta.copy_(probs.clamp_min(1e-12).log().expand_as(self.beta))

    def kl_to_uniform(self) -> torch.Tensor:
        """sum_m KL(pi^m || U_K) (the paper's Eq. (7), third term)."""
        return kl_to_uniform(self.log_pi())

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
        self.solver.reset()
        self.transport.reset()

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
        ``latents_per_code_pull`` of this step's real latents, counted on the device)."""
        pull = self.config.pull
        if pull is None:
            real = flat.numel() // flat.shape[-1] if keep is None else keep.sum()
            pull = latents_per_code_pull(real, self.num_codes)
        return scale_gradient(flat, pull)

    def _scaled(self, value: torch.Tensor, positions) -> torch.Tensor:
        """The WS term's value x ws_weight, and with one shared pi x the positions per sample (M, or a mask's mean
        count), so that ws_weight means the same in both modes."""
        weight = self.config.ws_weight
        if self.config.num_positions is not None:
            return value * weight if weight != 1 else value
        return value * (weight * positions) if isinstance(positions, int) else value * (positions * weight)

    @torch.no_grad()
    def _draw_codebook(self, flat: torch.Tensor, keep: torch.Tensor | None) -> bool:
        """The data start (``draw_codebook``), then a fresh potential and fresh EMAs for the drawn codes."""
        if not draw_codebook(self.embedding, self.codes_drawn, flat, keep):
            return False  # a batch of padding only: nothing drawn
        self.solver.reset()
        self.transport.reset()
        return int(self.codes_drawn) >= self.num_codes

    def _check_positions(self, flat: torch.Tensor) -> None:
        check_positions(flat, self.config.num_positions)

    # ---- the transport map -------------------------------------------------------------------------------------
    def transport_map(self, flat: torch.Tensor) -> torch.Tensor:
        """(B, M, D) -> (B, M) indices under the transport map argmin_k ||z - c_k||^2 - g_k."""
        self._check_positions(flat)
        return transport_map(self.solver, self.embedding, flat)

    def fit_transport(self, z: torch.Tensor, steps: int, generator: torch.Generator | None = None) -> dict:
        """Solve the transport map on the latents ``z`` (a training set's encoder outputs) with the codebook and pi
        held: see :func:`vqwae.quantizers.transport_map.fit_transport`."""
        self.check_finite(z)  # NaN latents would leave a NaN potential
        flat = self.flatten(z)
        self._check_positions(flat)
        return fit_transport(self.solver, self.embedding, self.pi, flat, steps, generator)
