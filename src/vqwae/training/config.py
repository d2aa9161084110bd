"""``TrainConfig``: every knob of a training run, with the paper's defaults, and how it is resolved.

Resolution order (later wins): the dataclass defaults (the paper's setting), a ``--preset``, a ``--config``
file (YAML or JSON), then explicit command-line options. The resolved config is written to RUN_DIR/config.json.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from vqwae.quantizers.wasserstein import CODEBOOK_INITS, CODEBOOK_UPDATES, PI_INITS, SOLVERS
from vqwae.quantizers.wasserstein import SAVED_BEFORE as WASSERSTEIN_SAVED_BEFORE

MODELS = ("vqwae", "vqvae", "sqvae")
PRECISIONS = ("fp32", "bf16", "fp16")

# Named bundles of settings. "paper" is the authors' configuration exactly as their code runs it.
PRESETS: dict[str, dict] = {
    "paper": dict(solver="exact", shared_pi=False, ws_weight=1e-3, kl_weight=1.0, kl_reduction="mean",
                  pi_init="uniform", learn_pi=True, codebook_init="normal", codebook_update="gradient", lr=1e-3, batch_size=32, epochs=100),
}


# Fields added after runs were first saved, with the value that reproduces what such a run did: a config.json
# without the key was trained this way (the current default may differ). Today all are quantizer options.
SAVED_BEFORE: dict = dict(WASSERSTEIN_SAVED_BEFORE)


@dataclass(frozen=True)
class TrainConfig:
    # --- what to train -------------------------------------------------------------------------------
    model: str = "vqwae"  # "vqwae" | "vqvae" | "sqvae"
    dataset: str = "mnist"  # a name from vqwae.data.DATASETS
    data_root: str | None = None  # local copy of the dataset (None: torchvision's default + download)
    download: bool = False  # let torchvision download the dataset when online
    out: str = "runs/run"  # RUN_DIR
    image_size: int | None = None  # None: the dataset's native size (32; 64 for CelebA / image folders)
    # --- quantizer -------------------------------------------------------------------------------------
    num_codes: int = 512  # K
    dim: int = 64  # D, the latent and codeword dimension
    solver: str = "semidiscrete"  # vqwae: "semidiscrete" (fast, BENCHMARKS.md) | "exact" | "sinkhorn" | "dual"
    codebook_init: str = "data"  # vqwae: "data" (K latents of the first batch) | "normal" (N(0,1), the authors)
    codebook_update: str = "transport"  # vqwae: "transport" (EMA of the plan's barycentres) | "gradient" (the paper)
    codebook_decay: float = 0.99  # vqwae, codebook_update="transport": EMA decay
    shared_pi: bool = False  # vqwae: one pi for all positions (the authors' "global" variant)
    ws_weight: float = 3e-3  # vqwae: lambda (the paper, and --preset paper: 1e-3)
    kl_weight: float = 1.0  # vqwae: lambda_r
    kl_reduction: str = "sum"  # vqwae: "sum" (the paper) | "mean" (/K, the authors' code)
    pi_init: str = "uniform"  # vqwae: "uniform" | "peaked" | "gaussian"
    learn_pi: bool = True  # vqwae: learn pi (False keeps its initial value)
    epsilon: float = 0.05  # vqwae sinkhorn/dual: entropic regularisation relative to the mean cost
    sinkhorn_iters: int = 50  # vqwae sinkhorn: iteration cap
    phi_iterations: int = 5  # vqwae dual: inner steps on the Kantorovich potential
    global_batch: bool = False  # vqwae under DDP: OT over the latents of all ranks
    beta: float = 0.25  # vqvae: commitment weight
    legacy_beta: bool = False  # vqvae: beta on the codebook term, as in the authors' code
    ema: bool = False  # vqvae: EMA codebook updates
    sq_log_var_init: float | None = None  # sqvae: initial s (None: log 10 for MNIST, log 20 otherwise)
    sq_temperature_decay: float = 1e-5  # sqvae: tau = exp(-decay * step)
    authors_quirks: bool = False  # networks: the authors' shared residual weights and in-place ReLU
    # --- optimisation ----------------------------------------------------------------------------------
    epochs: int = 100
    batch_size: int = 32  # per process; the global batch under DDP is world_size times this
    lr: float = 1e-3  # Adam
    lr_factor: float = 0.5  # ReduceLROnPlateau on validation MSE
    lr_patience: int = 3
    max_steps: int | None = None  # stop after this many optimiser steps (short runs)
    train_limit: int | None = None  # first N training images
    eval_limit: int | None = None  # first N validation (and test) images
    seed: int = 0
    device: str = "auto"  # "auto" (CUDA when present), "cpu", "cuda", "cuda:1", ...
    precision: str = "fp32"  # "fp32" | "bf16" | "fp16" autocast; quantization always runs in fp32
    num_workers: int = 0  # DataLoader workers (the datasets are in memory; 0 is usually fastest)
    preset: str | None = None  # name of the preset applied (recorded for provenance)

    def __post_init__(self):
        from vqwae.data import DATASETS

        checks = {"model": MODELS, "precision": PRECISIONS, "dataset": DATASETS,
                  "solver": SOLVERS, "pi_init": PI_INITS, "codebook_init": CODEBOOK_INITS,
                  "codebook_update": CODEBOOK_UPDATES, "kl_reduction": ("sum", "mean")}
        for name, valid in checks.items():
            value = getattr(self, name)
            if name == "dataset":
                value = value.lower().replace("-", "").replace("_", "")
            if value not in valid:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid: {', '.join(valid)}")
        for name in ("epochs", "batch_size", "num_codes", "dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def resolve(cls, *, preset: str | None = None, config_file: str | Path | None = None, **overrides) -> "TrainConfig":
        """defaults < preset < config file < overrides (None values in overrides are ignored)."""
        values: dict = {}
        if preset is not None:
            if preset not in PRESETS:
                raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
            values.update(PRESETS[preset], preset=preset)
        if config_file is not None:
            values.update(load_config_file(config_file))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(values)

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; valid keys: {', '.join(sorted(known))}")
        return cls(**values)

    @classmethod
    def from_saved(cls, values: dict) -> "TrainConfig":
        """A run's config.json: keys it lacks because it predates them take the behaviour of its time."""
        return cls.from_dict({**SAVED_BEFORE, **values})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    # ---- derived settings ---------------------------------------------------------------------------
    def quantizer_kind_and_kwargs(self, latent_positions: int) -> tuple[str, dict]:
        """The quantizer registry name and its constructor arguments for this run."""
        common = dict(num_codes=self.num_codes, dim=self.dim)
        if self.model == "vqwae":
            return "wasserstein", dict(
                common, num_positions=None if self.shared_pi else latent_positions, solver=self.solver,
                ws_weight=self.ws_weight, kl_weight=self.kl_weight, kl_reduction=self.kl_reduction,
                pi_init=self.pi_init, learn_pi=self.learn_pi, epsilon=self.epsilon,
                sinkhorn_iters=self.sinkhorn_iters, phi_iterations=self.phi_iterations,
                global_batch=self.global_batch, codebook_init=self.codebook_init, codebook_update=self.codebook_update,
                codebook_decay=self.codebook_decay,
            )
        if self.model == "vqvae":
            return "vector", dict(common, beta=self.beta, legacy_beta=self.legacy_beta, ema=self.ema)
        log_var = self.sq_log_var_init
        if log_var is None:  # the authors' initial values
            log_var = math.log(10.0) if self.dataset == "mnist" else math.log(20.0)
        return "stochastic", dict(common, log_var_init=log_var, temperature_decay=self.sq_temperature_decay)


def load_config_file(path: str | Path) -> dict:
    """Read a YAML or JSON mapping of TrainConfig fields."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {p} not found")
    text = p.read_text()
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"config file {p} could not be parsed: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"config file {p} must hold a mapping of option names to values")
    return {k.replace("-", "_"): v for k, v in data.items()}
