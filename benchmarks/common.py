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

The comparisons (``hosts.py``, ``controllability_toy.py``) share
their harness here too: the FSQ levels per K, the ``--variant`` settings' syntax (``parse_settings``), each model's
own random numbers (``OwnRandomness``), the batches every model of a comparison trains on (``training_batches``)
and the curves' plot.

The scripts import it as ``from common import ...``: Python puts a script's own folder first on the path.
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

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


# ---- the comparison harness shared by hosts.py and controllability_toy.py
# FSQ levels per codebook size: the FSQ paper's recommendations (Mentzer et al. 2023, Table 1) where it gives
# one, else the product of levels of 8 and 4 that equals K.
FSQ_LEVELS = {512: (8, 8, 8), 1024: (8, 5, 5, 5), 4096: (7, 5, 5, 5, 5), 8192: (8, 8, 8, 4, 4),
              16384: (8, 8, 8, 6, 5), 65536: (8, 8, 8, 5, 5, 5)}


def parse_settings(text: str) -> dict:
    """'a=1,b=x' -> {'a': 1, 'b': 'x'} (numbers, true/false and null parsed as JSON, the rest as strings)."""
    out = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, _, value = item.partition("=")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value.strip()
    return out


class OwnRandomness:
    """Swaps a model's own global-RNG state in around its steps: PyTorch's global generator is shared, so without
    this a model's random draws (e.g. the data start's randperm) would depend on what the models before it drew.
    The state is seeded by ``seed`` and the model's ``name``; ``stream`` N > 0 draws another run's numbers for the
    same seed and name (``hosts.py --stream``; stream 0 is every run made before streams existed)."""

    def __init__(self, seed: int, name: str, cuda: bool = False, stream: int = 0):
        self.cuda = cuda  # also swap the current CUDA device's generator (draws made on the GPU)
        if stream:
            name = f"{name} (stream {stream})"
        with torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else []):
            torch.manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            self.state = self._get()

    def _get(self):
        return torch.get_rng_state(), (torch.cuda.get_rng_state() if self.cuda else None)

    def _set(self, state):
        torch.set_rng_state(state[0])
        if self.cuda:
            torch.cuda.set_rng_state(state[1])

    def __enter__(self):
        self.outer = self._get()
        self._set(self.state)

    def __exit__(self, *exc):
        self.state = self._get()
        self._set(self.outer)


@torch.no_grad()
def blank_positions(ink: torch.Tensor, factor: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The code grid's blank positions, one per ``factor`` x ``factor`` pixels of images whose ink map is ``ink``
    (B, 1, H, W) bool: ``(blank, far)``, each (B, H / factor, W / factor) bool. blank: the patch holds no ink; far: it
    and its 8 neighbours are blank (the grid's edge counts as blank), so the encoder sees (nearly) only background."""
    import torch.nn.functional as F

    blank = F.max_pool2d(ink.float(), factor).squeeze(1) == 0
    far = -F.max_pool2d(-blank.float().unsqueeze(1), 3, stride=1, padding=1).squeeze(1) > 0
    return blank, far


def training_batches(train, steps: int, seed: int, batch: int = 32):
    """(step, images) for steps 1..steps: a seeded shuffle, reshuffled when it runs out. Every model of a
    comparison trains on these same batches."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(train), generator=gen)
    for step in range(1, steps + 1):
        idx = perm[((step - 1) * batch) % len(train):][:batch]
        if len(idx) < batch:
            perm = torch.randperm(len(train), generator=gen)
            idx = perm[:batch]
        yield step, torch.stack([train[int(i)][0] for i in idx])


def plot(curves: dict, path: Path, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for n, c in curves.items():
        steps = [p["step"] for p in c]
        axes[0].plot(steps, [p["perplexity"] for p in c], marker="o", label=n)
        axes[1].plot(steps, [p["mse"] for p in c], marker="o", label=n)
    axes[0].set(xlabel="training step", ylabel="test perplexity", title=f"{dataset}: codebook use")
    axes[1].set(xlabel="training step", ylabel="test MSE", yscale="log", title=f"{dataset}: reconstruction")
    for a in axes:
        a.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
