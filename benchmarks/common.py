"""What the benchmarks share: the quantizer configurations they compare, by name, built in one place.

Every script that times or profiles "the default", "the paper's exact solver" or "VQ-VAE" builds it here, so a
configuration means the same thing in every table, and a change of the quantizers' API is followed once:

    from common import CONFIGURATIONS, build_quantizer, build_autoencoder
    q = build_quantizer("semidiscrete", num_codes=512, dim=64)               # the drop-in default
    q = build_quantizer("exact", num_codes=512, dim=64, num_positions=64)    # the paper's exact OT per position
    model = build_autoencoder("sinkhorn", NetworkConfig(...), num_codes=512)

A configuration is (the quantizer's registry kind, its options, its runtime settings). The paper's solvers
(``exact``, ``sinkhorn``, ``dual``) and the gradient-trained codebook are ``PaperWassersteinQuantizer``'s forms
(kind ``"paper-wasserstein"``); BENCHMARKS.md's tables of 2026-11-21 measured them, before issue #56 (commit
c3f1090), as ``WassersteinQuantizer`` options with the transport codebook update, the default of the time. Runtime
settings (``graph_update``, ``compile_update``) are ``set_runtime`` calls.

The scripts import it as ``from common import ...``: Python puts a script's own folder first on the path.
"""
from __future__ import annotations

import os

import torch

from vqwae import quantizers

#: name -> (kind, options, runtime settings, what it is)
CONFIGURATIONS: dict[str, tuple[str, dict, dict, str]] = {
    "vqvae": ("vector", {}, {}, "VQ-VAE: VectorQuantizer, beta 0.25, N(0, 1) codebook"),
    "semidiscrete": ("wasserstein", {}, {}, "WassersteinQuantizer's defaults: the drop-in VQ-WAE"),
    "semidiscrete-compiled-update": ("wasserstein", {}, dict(compile_update=True),
                                     "the default, its own no-grad update fused by torch.compile"),
    "semidiscrete-eager-update": ("wasserstein", {}, dict(graph_update=False),
                                  "the default, its no-grad update launched op by op (no CUDA graph)"),
    "semidiscrete-gradient": ("paper-wasserstein", dict(solver="semidiscrete", codebook_init="data"), {},
                              "the semidiscrete solver with the codebook trained by Adam, as the paper"),
    "sinkhorn": ("paper-wasserstein", dict(solver="sinkhorn"), {}, "the paper's entropic OT (log-domain Sinkhorn)"),
    "sinkhorn-fast": ("paper-wasserstein", dict(solver="sinkhorn", sinkhorn_iters=5, sinkhorn_tol=0.0), {},
                      "Sinkhorn, 5 iterations, no convergence check"),
    "dual": ("paper-wasserstein", dict(solver="dual"), {}, "the paper's semi-dual with an MLP potential"),
    "exact": ("paper-wasserstein", dict(solver="exact"), {}, "the paper's exact OT (POT network simplex) per position"),
    "sqvae": ("stochastic", dict(log_var_init=2.995732), {}, "SQ-VAE's Gaussian stochastic quantizer"),
}


def resolve(name: str) -> tuple[str, dict, dict]:
    """(kind, options, runtime) of a configuration."""
    if name not in CONFIGURATIONS:
        raise SystemExit(f"error: unknown configuration {name!r}; choose from {', '.join(CONFIGURATIONS)}")
    kind, options, runtime, _ = CONFIGURATIONS[name]
    return kind, dict(options), dict(runtime)


def set_runtime(quantizer: torch.nn.Module, runtime: dict) -> None:
    """Apply runtime settings (``graph_update``, ``compile_update``) to a built quantizer."""
    if runtime:
        quantizer.set_runtime(**runtime)


def build_quantizer(name: str, num_codes: int, dim: int, **shape) -> torch.nn.Module:
    """The named configuration as a quantizer; ``shape``: ``num_positions``, ``channel_last``."""
    kind, options, runtime = resolve(name)
    q = quantizers.build_quantizer(kind, num_codes=num_codes, dim=dim, **options, **shape)
    set_runtime(q, runtime)
    return q


def build_autoencoder(name: str, network, num_codes: int, **shape):
    """The paper's networks (``vqwae.models.VQAutoencoder``) around the named configuration."""
    from vqwae.models import VQAutoencoder

    kind, options, runtime = resolve(name)
    model = VQAutoencoder.from_config(network, kind, num_codes=num_codes, **options, **shape)
    set_runtime(model.quantizer, runtime)
    return model


def sync(device: torch.device) -> None:
    """Wait for the device (a step's time on a GPU ends when its kernels do)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def loadavg() -> str:
    """The machine's 1, 5 and 15 minute load averages, as a string for a result's metadata."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"
