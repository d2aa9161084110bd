"""What both VQ-WAE quantizers (``WassersteinQuantizer``, ``PaperWassersteinQuantizer``) are made of beyond their
training step: the codebook and pi = softmax(beta) with the KL of the paper's Eq. (7), the data start's flags, the
WS term's weighting, the semidiscrete transport map, the runtime settings and the reading of older state dicts."""
from __future__ import annotations

import warnings

import torch
from torch import nn

from vqwae.options import check_int
from vqwae.ot.semidiscrete import SemiDiscreteSolver
from vqwae.quantizers.base import Quantizer
from vqwae.quantizers.data_start import draw_codebook
from vqwae.quantizers.pi import check_positions, checked_pi, initial_pi, kl_to_uniform
from vqwae.quantizers.transport_map import fit_transport, transport_map
from vqwae.quantizers.upgrade import upgrade_state_dict
from vqwae.quantizers.wasserstein_options import default_kl_weight


#: training calls after which pi's logits that take gradients but have not moved draw a warning (``_watch_pi``)
PI_WATCH_CALLS = 50

class WassersteinBase(Quantizer):
    """Base of the VQ-WAE quantizers; a subclass builds ``self.solver`` after this constructor (the parameters'
    order, embedding then beta, is the optimiser state's) and writes ``forward``."""

    #: In a stack the WS pull (~50x the field's commitment) erased what the later levels encode
    #: (docs/lab/17-29.md#residual-pull).
    residual_pull = 0.01
    #: State-dict layout: 1 the solver's state on the quantizer; 2 in the solver module; 3 the transport codebook's
    #: EMAs in ``transport`` and the data start's count always present (``upgrade_state_dict`` reads 1 and 2).
    _version = 3
    #: whether the optimiser steps the codebook (the paper) or the transport places it
    trains_codebook = False

    def __init__(self, config=None, **options):
        super().__init__(config, **options)
        cfg = self.config
        self.groups = 1 if cfg.num_positions is None else cfg.num_positions
        self.kl_weight = default_kl_weight(cfg.num_positions is None) if cfg.kl_weight is None else cfg.kl_weight
        self.embedding = nn.Parameter(torch.randn(cfg.num_codes, cfg.dim), requires_grad=self.trains_codebook)
        beta = initial_pi(cfg.pi_init, self.groups, cfg.num_codes).log()
        if cfg.learn_pi:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)
        # set once every codeword has been drawn from training latents, and how many have been so far
        self.register_buffer("codebook_initialized", torch.zeros((), dtype=torch.bool))
        self.register_buffer("codes_drawn", torch.zeros((), dtype=torch.long))
        self.compile_update, self.graph_update = False, True  # runtime settings (set_runtime)
        # (training calls, pi's logits at the first, whether a gradient has reached them) until the check ran
        self._pi_watch: list | None = [0, None, False]

    def _watch_pi(self) -> None:
        """Warn once when pi's logits take gradients for ``PI_WATCH_CALLS`` training calls but never move: they are
        not in the optimiser (a drop-in user's optimiser over the encoder and decoder only), so pi stays frozen.
        That a gradient reached them is seen by a hook on the forward's log pi (``log_pi``), not by reading
        ``beta.grad``, which a loop that zeroes gradients with ``set_to_none`` before each forward has cleared."""
        if self._pi_watch is None or not self.config.learn_pi:
            return
        self._pi_watch[0] += 1
        calls, start, reached = self._pi_watch
        if calls == 1:
            self._pi_watch[1] = self.beta.detach().clone()
        elif calls >= PI_WATCH_CALLS:
            if (reached or self.beta.grad is not None) and torch.equal(self.beta.detach(), start):  # one read, once
                warnings.warn(f"pi's logits ({type(self).__name__}.beta) have taken gradients for {calls} training "
                              "calls without moving: put the quantizer's parameters in your optimizer (a model's "
                              "parameters() includes them), or pass learn_pi=False to keep pi fixed", stacklevel=3)
            self._pi_watch = None

    def _pi_reached(self, grad: torch.Tensor) -> None:
        """The hook ``log_pi`` puts on its output while pi is watched: a gradient has reached pi's logits."""
        if self._pi_watch is not None:
            self._pi_watch[2] = True

    @property
    def codebook(self) -> torch.Tensor:
        """The codewords (K, D)."""
        return self.embedding

    def set_runtime(self, *, graph_update: bool | None = None, compile_update: bool | None = None,
                    chunk_entries: int | None = None):
        """How the training step's no-grad work runs (a saved model does not carry these): replayed as a CUDA graph on
        a GPU (``graph_update``, the default), through torch.compile (``compile_update``), and how many (latent, code)
        distances the semidiscrete search materialises at once (``chunk_entries``, default 2^24)."""
        if chunk_entries is not None:
            check_int(chunk_entries, "set_runtime: chunk_entries", minimum=1)
        for name, value in (("graph_update", graph_update), ("compile_update", compile_update)):
            if value is None:
                continue
            if not isinstance(value, bool):
                raise ValueError(f"set_runtime: {name} must be True or False, got {value!r}")
            setattr(self, name, value)
            setattr(self.solver, name, value)
        if chunk_entries is not None:
            self.solver.chunk_entries = chunk_entries
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        upgrade_state_dict(state_dict, prefix, self)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)

    # ---- pi ----------------------------------------------------------------------------------------------------
    def log_pi(self) -> torch.Tensor:
        """log pi^m = log softmax(beta^m), shape (M, K) (M = 1 when shared), differentiable w.r.t. beta."""
        log_pi = torch.log_softmax(self.beta, dim=-1)
        # the first training calls only (_watch_pi); a compiled graph takes no hook that writes outside it
        if self._pi_watch is not None and log_pi.requires_grad and not torch.compiler.is_compiling():
            log_pi.register_hook(self._pi_reached)
        return log_pi

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
        """sum_m KL(pi^m || U_K) (Eq. (7), third term; divided by K with the paper's kl_reduction="mean")."""
        return kl_to_uniform(self.log_pi(), getattr(self.config, "kl_reduction", "sum"))

    # ---- the step's pieces -------------------------------------------------------------------------------------
    def _scaled(self, value: torch.Tensor, positions) -> torch.Tensor:
        """The WS term's value x ws_weight, and with one shared pi x the positions per sample (M, or a mask's mean
        count, a tensor), so that ws_weight means the same in both modes."""
        weight = self.config.ws_weight
        if self.config.num_positions is not None:
            return value * weight if weight != 1 else value
        return value * (weight * positions) if isinstance(positions, int) else value * (positions * weight)

    @torch.no_grad()
    def _draw_codebook(self, flat: torch.Tensor, keep: torch.Tensor | None = None) -> bool:
        """The data start (``draw_codebook``), then the state of the codes drawn forgotten (``_forget``)."""
        if not draw_codebook(self.embedding, self.codes_drawn, flat, keep):
            return False  # a batch of padding only: nothing drawn
        self._forget()
        return int(self.codes_drawn) >= self.num_codes

    @torch.no_grad()
    def _forget(self) -> None:
        """Forget what was learned of the codebook's earlier codes (the solver's state)."""
        self.solver.reset()

    def _check_positions(self, flat: torch.Tensor) -> None:
        check_positions(flat, self.config.num_positions)

    # ---- the transport map -------------------------------------------------------------------------------------
    def _semidiscrete(self, what: str) -> SemiDiscreteSolver:
        if not isinstance(self.solver, SemiDiscreteSolver):
            raise ValueError(f"{what} needs solver='semidiscrete' (the map of its potential), got "
                             f"{self.config.solver!r}")
        return self.solver

    def transport_map(self, flat: torch.Tensor) -> torch.Tensor:
        """(B, M, D) -> (B, M) indices under the semidiscrete transport map argmin_k ||z - c_k||^2 - g_k."""
        self._check_positions(flat)
        return transport_map(self._semidiscrete("the transport map"), self.embedding, flat)

    def fit_transport(self, z: torch.Tensor, steps: int, generator: torch.Generator | None = None) -> dict:
        """Solve the transport map on the latents ``z`` (a training set's encoder outputs, in the input layout) with
        the codebook and pi held: see :func:`vqwae.quantizers.transport_map.fit_transport`."""
        solver = self._semidiscrete("fit_transport")
        check_int(steps, "fit_transport: steps")
        self.check_input(z)  # the layout, the dim, not empty; NaN latents would leave a NaN potential
        flat = self.flatten(z)
        self._check_positions(flat)
        return fit_transport(solver, self.embedding, self.pi, flat, steps, generator)
