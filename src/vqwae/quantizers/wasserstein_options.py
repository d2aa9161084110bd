"""VQ-WAE's options: ``WassersteinOptions`` (a training config's ``vqwae`` section, one line per option with its
default and help) and ``WassersteinConfig`` (those options with the codebook's sizes), from which the quantizer
(``vqwae.quantizers.wasserstein``), the command line and config files derive."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vqwae.options import WHERE, check_fields, option
from vqwae.ot import SOLVERS as SOLVER_CLASSES
from vqwae.ot.semidiscrete import CHUNK_ENTRIES, default_potential_lr
from vqwae.quantizers.base import LatentShape

SOLVERS = tuple(SOLVER_CLASSES)
PI_INITS = ("uniform", "peaked", "gaussian")
CODEBOOK_INITS = ("normal", "data")
CODEBOOK_UPDATES = ("gradient", "transport")
QUANTIZE = ("nearest", "transport")


def default_kl_weight(shared: bool) -> float:
    """lambda_r when none is given. One pi per position: 1, the paper's; 0.01 let MNIST's per-position pi
    collapse on one seed (BENCHMARKS.md 8c). One shared pi: 0.01. It never collapsed there (K = 512 and
    8,192, MNIST and CIFAR-10, 2 seeds each); at K = 512 it reconstructs as well as weight 1 (8i) and at
    K = 8,192 better (8d, 8k)."""
    return 0.01 if shared else 1.0


#: latents_per_code_pull (pull=None): the full pull from this many latents per code in a training step, a tenth from one
PULL_FULL_FROM, PULL_FLOOR = 4.0, 0.1


def latents_per_code_pull(latents: int | torch.Tensor, num_codes: int) -> float | torch.Tensor:
    """The pull of ``pull=None``, from r = n / K, the real latents a training step hands the quantizer per code:
    1 (the full WS gradient) from r = 4, as at K = 512 with 32 images of 64 positions, where a lighter pull helped
    some host networks and cost others (BENCHMARKS.md 22, 43); 0.1 from r = 1 down; in between (r / 4)^(log 10 /
    log 4), straight on a log-log scale (K = 1,024 with 2,048 latents: 0.32). At r <= 1, 0.1 reconstructed CIFAR-10
    better than the full pull in two networks (-13% to -26%) and level in the paper's, but MNIST worse in the
    paper's network (+46% / +89% on two seeds at K = 2,048, section 43): an option, not the default. ``latents``
    may be a tensor (a mask's count, on the device: no host read), and so is the pull then."""
    pull = (latents / max(num_codes, 1) / PULL_FULL_FROM) ** (math.log(1 / PULL_FLOOR) / math.log(PULL_FULL_FROM))
    if isinstance(pull, torch.Tensor):
        return pull.clamp(PULL_FLOOR, 1.0)
    return min(1.0, max(PULL_FLOOR, pull))


@dataclass(frozen=True)
class WassersteinOptions:
    """VQ-WAE's options (a training config's ``vqwae`` section); the sizes come from ``CodebookShape``."""

    solver: str = option("semidiscrete", "vqwae: the OT solver for the WS term", choices=SOLVERS)
    ws_weight: float = option(3e-3, "vqwae: lambda, on sum_m W^m (the paper, --preset paper: 1e-3; "
                              "BENCHMARKS.md section 5 measures both)", min=0)
    kl_weight: float | None = option(None, "vqwae: lambda_r, on sum_m KL(pi^m || U_K); None: "
                                     f"{default_kl_weight(shared=False)} with one pi per position (the paper), "
                                     f"{default_kl_weight(shared=True)} with a shared pi (BENCHMARKS.md 8d, 8i, 8k)",
                                     min=0)
    kl_reduction: str = option("sum", "vqwae: KL over codes: sum (the paper) or mean (/K, the authors' code)",
                               choices=("sum", "mean"))
    pi_init: str = option("uniform", "vqwae: initial pi (peaked, gaussian: the controllability ablation)",
                          choices=PI_INITS)
    learn_pi: bool = option(True, "vqwae: learn pi (--fixed-pi keeps its initial value)", negative="fixed-pi")
    pi_floor: float = option(0.0, "vqwae: a, pi = (1 - a) softmax(beta) + a / K: every code keeps at least a / K of "
                             "the mass (0: the paper)", min=0, below=1)
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
    potential_lr: float | None = option(None, "vqwae semidiscrete: ascent step on g per step (cost-scale units, x K); "
                                        f"None: {default_potential_lr(shared=False)} with one pi per position, "
                                        f"{default_potential_lr(shared=True)} with a shared pi (BENCHMARKS.md 8g)",
                                        min=0)
    potential_steps: int = option(1, "vqwae semidiscrete: ascent steps on the potential per training batch, each "
                                  "re-assigning the batch to the stepped potential (1: one step, the shipped solver)",
                                  min=1)
    potential_pooling: float = option(4.0, "vqwae semidiscrete: weight of the potential's component shared by "
                                      "positions", min=0)
    scale_decay: float = option(0.9, "vqwae semidiscrete: EMA decay of the cost scale (the quantization error)",
                                min=0, below=1)
    pull: float | None = option(1.0, "vqwae: the scale of the gradient the WS term sends to the latents (the "
                                "encoder's pull toward the codes; the codebook and pi learn at full weight); None: "
                                "from the step's latents per code r = n / K, 1 from r = 4, 0.1 from r = 1 down "
                                "(better on CIFAR-10 at K >= 2,048, worse on MNIST: BENCHMARKS.md 43; not the default)",
                                min=0, max=1)
    pull_target: float = option(0.0, "vqwae: > 0: the pull adapts, each step, so that the WS gradient on the latents "
                                "is at most this fraction of the decoder's (EMAs of both norms; 0: a fixed pull)",
                                min=0)
    pull_rms: float = option(0.0, "vqwae: > 0: the pull is also x (pull_rms / rms)^2, within [0.1, 1], rms the root "
                             "mean square of the step's real latents: the quantizer is scale-equivariant, so latents "
                             "c times larger get a WS gradient c times larger and a decoder's c times smaller; this "
                             "holds their ratio at what it is at RMS pull_rms, down to a tenth (0: off)", min=0)
    codebook_init: str = option("data", "vqwae: codebook start: data (K latents of the first training batches) or "
                                "normal (N(0, 1), the authors)", choices=CODEBOOK_INITS)
    codebook_update: str = option("transport", "vqwae: transport (each code moves to an EMA of the latents the OT "
                                  "plan sends it) or gradient (the optimiser steps it on the WS term: the paper)",
                                  choices=CODEBOOK_UPDATES)
    codebook_decay: float = option(0.99, "vqwae, transport codebook: EMA decay of the transported counts and sums",
                                   min=0, below=1)
    split_dead: float = option(0.1, "vqwae semidiscrete, transport codebook: a code whose transported share falls "
                               "below this fraction of pi_k takes half of the most overloaded cell (0: never; "
                               "BENCHMARKS.md section 13)", min=0, below=1)
    split_unused: float = option(0.0, "vqwae semidiscrete, transport codebook, learned pi: a code that is the "
                                 "nearest code of less than this fraction of its share pi_k (EMAs) moves to split the "
                                 "nearest-code cell with the largest summed error, and its pi goes to the most used "
                                 "nearest code of the latents the transport sent it: for a crowd of near-identical "
                                 "latents (0: never; not the default: BENCHMARKS.md section 46)", min=0, below=1)
    quantize: str = option("nearest", "vqwae: the code each latent is replaced by: nearest, or transport (semidiscrete: "
                           "the solver's map argmin ||z - c_k||^2 - g_k, whose usage follows pi)", choices=QUANTIZE)
    fit_steps: int = option(0, "vqwae semidiscrete: when training ends, ascent steps that solve the transport map's "
                            "potential on the training latents with the network held still (0: none; vqwae train "
                            "does it to the saved weights: BENCHMARKS.md section 29)", min=0)
    compile_update: bool = option(False, "vqwae: run the quantizer's own no-grad work per training step (the search, "
                                  "the potential's ascent, the transport codebook, the split) through torch.compile "
                                  "(2-15 s of compilation; on an H100 slower than graph_update: BENCHMARKS.md 40)",
                                  role=WHERE)
    graph_update: bool = option(True, "vqwae on a CUDA device: replay that no-grad work as a CUDA graph captured at its "
                                "second step, one launch instead of ~110: a GPU step at 0.97-1.03x VQ-VAE's "
                                "(vqwae.fused; not under DDP; BENCHMARKS.md section 40)", role=WHERE)
    chunk_entries: int = option(CHUNK_ENTRIES, "vqwae semidiscrete: (latent, code) distances materialised at once",
                                min=1)

    def __post_init__(self):
        check_fields(self)
        if self.quantize == "transport" and self.solver != "semidiscrete":
            raise ValueError(f"quantize='transport' needs solver='semidiscrete' (the map of its potential), got "
                             f"solver={self.solver!r}")
        if self.fit_steps and self.solver != "semidiscrete":
            raise ValueError(f"fit_steps needs solver='semidiscrete' (it fits that solver's potential), got "
                             f"solver={self.solver!r}")

    @property
    def splits_dead_cells(self) -> bool:
        """Whether split_dead acts: it splits the transport codebook's EMAs and the semidiscrete potential."""
        return bool(self.split_dead) and self._moves_codes_by_transport_map

    @property
    def _moves_codes_by_transport_map(self) -> bool:
        """The transport codebook under the semidiscrete solver's map: what both splits act on."""
        return (self.codebook_update, self.solver) == ("transport", "semidiscrete")

    @property
    def splits_unused_cells(self) -> bool:
        """Whether split_unused acts (with a fixed pi a code nobody's nearest is the user's choice, and stays)."""
        return bool(self.split_unused) and self.learn_pi and self._moves_codes_by_transport_map

    def unread(self) -> tuple[str, ...]:
        """The options this configuration never reads, or holds at the value that does what vqwae did before the
        option existed (a run's identity leaves them out, so that adding one does not change the identity of
        runs it cannot affect)."""
        unread = () if self.splits_dead_cells else ("split_dead",)
        if self.potential_steps == 1:
            unread += ("potential_steps",)
        if self.pull == 1:
            unread += ("pull",)
        if not self.pull_target:
            unread += ("pull_target",)
        if not self.pull_rms:
            unread += ("pull_rms",)
        if not self.splits_unused_cells:
            unread += ("split_unused",)
        if self.quantize == "nearest":
            unread += ("quantize",)
        if not self.fit_steps:
            unread += ("fit_steps",)
        return unread


@dataclass(frozen=True)
class WassersteinConfig(WassersteinOptions, LatentShape):
    """Everything a ``WassersteinQuantizer`` is built from."""

    num_positions: int | None = option(None, "M = H*W: one pi per latent position (the paper); None: one pi shared "
                                       "by all, any number of positions", min=1)

    def __post_init__(self):
        LatentShape.__post_init__(self)
        WassersteinOptions.__post_init__(self)  # checks every field, num_positions included
