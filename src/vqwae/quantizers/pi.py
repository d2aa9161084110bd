"""The pieces of pi both VQ-WAE quantizers share: its initial shapes, its check when a user sets it, and the
regulariser KL(pi || U_K) of the paper's Eq. (7)."""
from __future__ import annotations

import math

import torch

PI_INITS = ("uniform", "peaked", "gaussian")


def initial_pi(kind: str, groups: int, num_codes: int) -> torch.Tensor:
    """Initial code weights (groups, K). "peaked": a sharp Laplace bump (scale K/8) centred on K/2;
    "gaussian": a broad bell (std K/4) centred on K/2; both shapes follow the paper's init figure."""
    if kind not in PI_INITS:
        raise ValueError(f"unknown pi_init {kind!r}; valid: {', '.join(map(repr, PI_INITS))}")
    k = torch.arange(num_codes, dtype=torch.float64)
    centre = (num_codes - 1) / 2
    if kind == "uniform":
        p = torch.ones(num_codes, dtype=torch.float64)
    elif kind == "peaked":
        p = torch.exp(-(k - centre).abs() / max(num_codes / 8, 1e-3))
    else:
        p = torch.exp(-0.5 * ((k - centre) / max(num_codes / 4, 1e-3)) ** 2)
    return (p / p.sum()).float().expand(groups, num_codes).clone()


def checked_pi(probs, groups: int, num_codes: int, device) -> torch.Tensor:
    """A user's pi, (K,) or (G, K), as normalised float32 probabilities; a one-line error for a wrong shape or a
    value that is not a distribution."""
    probs = torch.as_tensor(probs, dtype=torch.float32, device=device)
    if probs.shape[-1] != num_codes or probs.dim() > 2 or (probs.dim() == 2 and probs.shape[0] not in (1, groups)):
        raise ValueError(f"pi must have shape ({num_codes},) or ({groups}, {num_codes}), got {tuple(probs.shape)}")
    if not torch.isfinite(probs).all() or (probs < 0).any() or (probs.sum(-1) <= 0).any():
        raise ValueError("pi must be finite and non-negative with a positive sum (got NaN, Inf, a negative "
                         "or an all-zero row)")
    return probs / probs.sum(-1, keepdim=True)


def kl_to_uniform(log_pi: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """sum_m KL(pi^m || U_K) = sum_m sum_k pi_k log(K pi_k) for log pi (M, K), the paper's regulariser (Eq. (7), third
    term); divided by K with reduction "mean" (the authors' code)."""
    num_codes = log_pi.shape[-1]
    kl = torch.dot(log_pi.exp().flatten(), (log_pi + math.log(num_codes)).flatten())
    return kl / num_codes if reduction == "mean" else kl


def check_positions(flat: torch.Tensor, num_positions: int | None) -> None:
    """One pi per position (``num_positions`` = M) needs latents (B, M, D) of exactly M positions; a one-line error
    otherwise (one shared pi, None, takes any number)."""
    m = flat.shape[1]
    if num_positions is not None and m != num_positions:
        raise ValueError(f"latents have {m} positions but the quantizer was built with num_positions={num_positions} "
                         "(one pi per position); num_positions=None shares one pi and takes any number")
