"""VQ-WAE's options, declared once, from which the two quantizers, the command line and config files derive:

* ``WassersteinConfig``: the product quantizer's (``WassersteinQuantizer``): the codebook's shape and 8 options.
* ``PaperWassersteinConfig``: the reference quantizer's (``PaperWassersteinQuantizer``): the paper's forms.
* ``VQWAEOptions``: a training config's ``vqwae`` section, the union of both, plus ``codebook_update`` (which of
  the two quantizers a run trains) and the training-time settings a saved model does not carry (``fit_steps``,
  ``chunk_entries``, ``compile_update``, ``graph_update``).
* ``RETIRED``: the options removed when the product quantizer was cut to a dozen (issue #56), with the one value
  every run of today's code holds, so that run identities (the reproduction's cache keys) made before are kept.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from vqwae.options import SCHEDULE, WHERE, check_fields, option
from vqwae.ot.catalog import CHUNK_ENTRIES, SOLVER_CLASSES, authors_dual_epsilon
from vqwae.quantizers.shape import LatentShape

if TYPE_CHECKING:
    import torch

SOLVERS = tuple(SOLVER_CLASSES)
PI_INITS = ("uniform", "peaked", "gaussian")
CODEBOOK_INITS = ("normal", "data")
CODEBOOK_UPDATES = ("gradient", "transport")
QUANTIZE = ("nearest", "transport")


def default_kl_weight(shared: bool) -> float:
    """lambda_r when none is given, on sum_m KL(pi^m || U_K) without the authors' division by K (their effective
    weight is lambda_r / K: at K = 512 the defaults are 512x theirs per position and 5.12x their global variant's).
    One pi per position: 1, the paper's text; 0.01 let MNIST's per-position pi
    collapse on one seed (docs/lab/08.md#rd-k512-mnist). One shared pi: 0.01. It never collapsed there (K = 512 and
    8,192, MNIST and CIFAR-10, 2 seeds each); at K = 512 it reconstructs as well as weight 1
    (docs/lab/08.md#rotation-off-vectorquantize) and at K = 8,192 better (docs/lab/08.md#rd-k8192-shared-pi,
    docs/lab/08.md#shared-pi-kl-weight)."""
    return 0.01 if shared else 1.0


#: latents_per_code_pull (pull=None): the full pull from PULL_FULL_FROM latents per code in a training step, PULL_FLOOR
#: from PULL_FLOOR_FROM down (one latent per eight codes: 2,048 latents at K = 16,384)
PULL_FULL_FROM, PULL_FLOOR, PULL_FLOOR_FROM = 4.0, 0.02, 0.125
#: the line's slope on a log-log scale (computed once: the rule runs at every training step)
_PULL_SLOPE = math.log(1 / PULL_FLOOR) / math.log(PULL_FULL_FROM / PULL_FLOOR_FROM)


def latents_per_code_pull(latents: int | torch.Tensor, num_codes: int) -> float | torch.Tensor:
    """The pull of ``pull=None`` (the default), from r = n / K, the real latents a training step hands the codebook per
    code: 1 (the full WS gradient) from r = 4, as at K = 512 with 32 images of 64 positions, where a lighter pull
    helped some host networks and cost others (docs/lab/17-29.md#single-quantizer-pull); 0.02 from r = 1/8 down
    (K = 16,384 with 2,048 latents), where it was below the full pull in every paired run on today's code (median
    -17% at 1,000 steps, 6 runs; -31% at 3,000, 2 runs; docs/lab/48-.md#pull-rule); in between a straight line on a
    log-log scale (K = 2,048 with 2,048 latents: 0.21), measured at r = 1 and 1/4 in the same lab entry. ``latents``
    may be a tensor (a mask's count, on the device: no host read), and so is the pull then."""
    pull = (latents / max(num_codes, 1) / PULL_FULL_FROM) ** _PULL_SLOPE
    if isinstance(latents, (int, float)):  # a count (under torch.compile's dynamic shapes a symbolic int, which
        return min(1.0, max(PULL_FLOOR, pull))  # Dynamo takes as an int here)
    return pull.clamp(PULL_FLOOR, 1.0)  # a tensor (torch is not imported here: the command line's help reads this module)


@dataclass(frozen=True)
class _SharedOptions:
    """The options both quantizers read: the loss's weights and pi."""

    ws_weight: float = option(3e-3, "vqwae: lambda, on sum_m W^m (the paper, --preset paper: 1e-3; "
                              "docs/lab/01-07.md#ablation-departures measures both); a shared pi's W counts x M "
                              "positions (the authors' global exact form: x1, their dual form: / B)", min=0)
    kl_weight: float | None = option(None, "vqwae: lambda_r, on sum_m KL(pi^m || U_K) (the authors' code divides by "
                                     "K: this is K x their weight); None: "
                                     f"{default_kl_weight(shared=False)} with one pi per position (the paper), "
                                     f"{default_kl_weight(shared=True)} with a shared pi "
                                     "(docs/lab/08.md#shared-pi-kl-weight)", min=0)
    pi_init: str = option("uniform", "vqwae: initial pi (peaked, gaussian: the controllability ablation)",
                          choices=PI_INITS)
    learn_pi: bool = option(True, "vqwae: learn pi (--fixed-pi keeps its initial value)", negative="fixed-pi")
    quantize: str = option("nearest", "vqwae: the code each latent is replaced by: nearest, or transport (the "
                           "semidiscrete solver's map argmin ||z - c_k||^2 - g_k, whose usage follows pi)",
                           choices=QUANTIZE)


@dataclass(frozen=True)
class WassersteinOptions(_SharedOptions):
    """The product quantizer's method options (its config adds the codebook's shape and ``num_positions``)."""

    pull: float | None = option(None, "vqwae: the scale of the gradient the WS term sends to the latents (the "
                                "encoder's pull toward the codes; the codebook and pi learn at full weight); None: "
                                "from the step's latents per code r = n / K (all ranks'), 1 from r = 4 (K = 512 with "
                                "32 x 8 x 8 latents), 0.02 from r = 1/8 down (K = 16,384), log-log between "
                                "(docs/lab/48-.md#pull-rule)", min=0, max=1)
    codebook_decay: float = option(0.99, "vqwae: EMA decay of the transported counts and sums that place each code",
                                   min=0, below=1)
    split_unused: float = option(0.0, "vqwae, learned pi: a code that is the nearest code of less than this fraction "
                                 "of its share pi_k moves to split the nearest-code cell with the largest error: for "
                                 "crowds of identical latents such as a sequence's blank tokens (0: never; the "
                                 "sequence recipe: docs/lab/40-47.md#split-unused)", min=0, below=1)

    def __post_init__(self):
        check_fields(self)


@dataclass(frozen=True)
class PaperOptions(_SharedOptions):
    """The reference quantizer's method options: the paper's solvers, codebook start and KL reduction."""

    solver: str = option("semidiscrete", "vqwae: the OT solver for the WS term (the paper's: exact, per position; "
                         "sinkhorn and dual, its entropic forms)", choices=SOLVERS)
    kl_reduction: str = option("sum", "vqwae: KL over codes: sum (the paper's text; kl_weight is then K x the "
                               "authors' effective weight) or mean (/K, the authors' code: --preset paper)",
                               choices=("sum", "mean"))
    epsilon: float = option(0.05, "vqwae sinkhorn: entropic regularisation, relative to the batch's mean cost",
                            min=0)
    sinkhorn_iters: int = option(50, "vqwae sinkhorn: iteration cap", min=1)
    sinkhorn_tol: float = option(1e-3, "vqwae sinkhorn: marginal-error tolerance (0: run all iterations, no host sync)",
                                 min=0)
    warm_start: bool = option(True, "vqwae sinkhorn: start from the previous step's code potential")
    phi_iterations: int = option(5, "vqwae dual: inner ascent steps on phi per training step", min=0)
    phi_lr: float = option(1e-3, "vqwae dual: inner Adam learning rate", min=0)
    phi_hidden: int = option(64, "vqwae dual: hidden width of each potential MLP", min=1)
    dual_epsilon: float | None = option(None, "vqwae dual: entropic regularisation, absolute, as the authors' "
                                        f"(None: their {authors_dual_epsilon('mnist')} on MNIST, "
                                        f"{authors_dual_epsilon(None)} otherwise)", min=0)
    global_batch: bool = option(False, "vqwae under DDP: solve the OT over the latents of all ranks",
                                negative="local-batch")
    codebook_init: str = option("data", "vqwae: codebook start: data (K latents of the first training batches) or "
                                "normal (N(0, 1), the authors)", choices=CODEBOOK_INITS)

    def __post_init__(self):
        check_fields(self)
        if self.quantize == "transport" and self.solver != "semidiscrete":
            raise ValueError(f"quantize='transport' needs solver='semidiscrete' (the map of its potential), got "
                             f"solver={self.solver!r}")
        if self.solver == "sinkhorn" and not self.epsilon > 0:
            raise ValueError(f"solver='sinkhorn' needs epsilon > 0, got {self.epsilon}")
        if self.dual_epsilon is not None and not self.dual_epsilon > 0:
            raise ValueError(f"dual_epsilon must be > 0, got {self.dual_epsilon}")


def _num_positions():
    return option(None, "M = H*W: one pi per latent position (the paper); None: one pi shared by all, any number of "
                  "positions", min=1)


@dataclass(frozen=True)
class WassersteinConfig(WassersteinOptions, LatentShape):
    """Everything a ``WassersteinQuantizer`` is built from: 12 options."""

    num_positions: int | None = _num_positions()

    def __post_init__(self):
        LatentShape.__post_init__(self)
        WassersteinOptions.__post_init__(self)  # checks every field, num_positions included


@dataclass(frozen=True)
class PaperWassersteinConfig(PaperOptions, LatentShape):
    """Everything a ``PaperWassersteinQuantizer`` is built from."""

    num_positions: int | None = _num_positions()

    def __post_init__(self):
        LatentShape.__post_init__(self)
        PaperOptions.__post_init__(self)


#: The paper's forms at the values WassersteinQuantizer has: a configuration (or a saved model's) that departs from any
#: of them is the paper's quantizer's.
PRODUCT_FORMS = {"solver": "semidiscrete", "codebook_update": "transport", "codebook_init": "data",
                 "kl_reduction": "sum", "global_batch": False}
#: WassersteinQuantizer's own options, at their defaults: the paper's quantizer has none of them.
_PRODUCT_ONLY = {f.name: f.default for f in fields(WassersteinOptions)
                 if f.name not in _SharedOptions.__dataclass_fields__}

#: The options removed from VQ-WAE by issue #56, each with the value every run of today's code has. Their findings are
#: in the lab notebook (docs/lab/48-.md#one-quantizer) with the commit that removed them (88288fc).
RETIRED = {"pi_floor": 0.0, "potential_lr": None, "potential_pooling": 4.0, "scale_decay": 0.9, "split_dead": 0.1,
           "pull_target": 0.0, "pull_rms": 0.0, "potential_steps": 1}
#: Those a run's identity held at that value (the others it left out there): it still holds them
#: (``VQWAEOptions.retired``), so that the reproduction's cache keys made before are found.
RETIRED_IN_IDENTITY = ("pi_floor", "potential_lr", "potential_pooling", "scale_decay", "split_dead")


@dataclass(frozen=True)
class VQWAEOptions(PaperOptions, WassersteinOptions):
    """A training config's ``vqwae`` section: both quantizers' options, which of them a run trains, and the settings
    of training itself (a saved model carries none of the last four)."""

    codebook_update: str = option("transport", "vqwae: transport (WassersteinQuantizer: each code moves to an EMA of "
                                  "the latents the OT map sends it) or gradient (PaperWassersteinQuantizer: the "
                                  "optimiser steps it on the WS term, the paper)", choices=CODEBOOK_UPDATES)
    fit_steps: int = option(0, "vqwae semidiscrete: when training ends, ascent steps that solve the transport map's "
                            "potential on the training latents with the network held still (0: none; "
                            "docs/lab/17-29.md#fit-steps; a schedule: a finished run resumed with it fits its saved "
                            "weights)", min=0,
                            role=SCHEDULE)
    compile_update: bool = option(False, "vqwae: run the quantizer's own no-grad work per training step through "
                                  "torch.compile (2-15 s of compilation; on an H100 slower than graph_update: "
                                  "docs/lab/40-47.md#gpu-cuda-graph)", role=WHERE)
    graph_update: bool = option(True, "vqwae on a CUDA device: replay that no-grad work as a CUDA graph, one launch "
                                "instead of ~110 (vqwae.fused; not under DDP; docs/lab/40-47.md#gpu-cuda-graph)",
                                role=WHERE)
    chunk_entries: int = option(CHUNK_ENTRIES, "vqwae semidiscrete: (latent, code) distances materialised at once",
                                min=1)

    def __post_init__(self):
        PaperOptions.__post_init__(self)
        if self.fit_steps and self.solver != "semidiscrete":
            raise ValueError(f"fit_steps needs solver='semidiscrete' (it fits that solver's potential), got "
                             f"solver={self.solver!r}")
        # each option belongs to one of the two quantizers: set away from its default on the other, it is an error
        others = PRODUCT_FORMS if self.product else _PRODUCT_ONLY
        wrong = {k: getattr(self, k) for k, v in others.items() if k != "codebook_update" and getattr(self, k) != v
                 and not (k == "pull" and getattr(self, k) == 1)}  # the paper's quantizer pulls at full weight
        if wrong:
            name, value = next(iter(wrong.items()))
            owner, other = (("the paper's quantizer", "gradient") if self.product else ("WassersteinQuantizer",
                                                                                       "transport"))
            raise ValueError(f"{name}={value!r} is an option of {owner} (codebook_update={other!r}), but "
                             f"codebook_update={self.codebook_update!r}")

    @property
    def product(self) -> bool:
        """Whether these options train ``WassersteinQuantizer`` (else ``PaperWassersteinQuantizer``)."""
        return self.codebook_update == "transport"

    def quantizer_config(self, num_codes: int, dim: int, num_positions: int | None):
        """The registry name and config of the quantizer these options train."""
        cls, kind = ((WassersteinConfig, "wasserstein") if self.product
                     else (PaperWassersteinConfig, "paper-wasserstein"))
        values = {k: getattr(self, k) for k in cls.__dataclass_fields__ if hasattr(self, k)}
        return kind, cls(**{**values, "num_codes": num_codes, "dim": dim, "num_positions": num_positions})

    def unread(self) -> tuple[str, ...]:
        """The options this configuration never reads, or holds at the value that does what vqwae did before the
        option existed (a run's identity leaves them out, so that adding one does not change the identity of
        runs it cannot affect)."""
        unread = ()
        if self.pull == 1 or not self.product:
            unread += ("pull",)
        if not (self.split_unused and self.learn_pi and self.product):
            unread += ("split_unused",)
        if self.quantize == "nearest":
            unread += ("quantize",)
        if not self.fit_steps:
            unread += ("fit_steps",)
        if self.solver != "dual":
            unread += ("dual_epsilon",)
        return unread

    def retired(self) -> dict:
        """The retired options a run's identity holds (``RETIRED``), at their value: split_dead only where it acted
        (the transport codebook)."""
        return {k: RETIRED[k] for k in RETIRED_IN_IDENTITY if k != "split_dead" or self.product}

    def runtime(self) -> dict:
        """The settings of training a quantizer takes at run time and a saved model does not carry."""
        return dict(chunk_entries=self.chunk_entries, compile_update=self.compile_update,
                    graph_update=self.graph_update)
