"""The paper's experiments as lists of runs, and the compute budgets they can be run at.

Every experiment is a set of training runs (a ``TrainConfig`` each, identified by its full configuration)
plus what is measured on them. Runs shared between experiments (the "learned, lambda_r = 1, uniform" cell of
the initialisation table is also the lambda = 1e-3, lambda_r = 1 cell of the lambda table) are trained once.

The reconstruction and downstream tables have seven rows: VQ-VAE twice (as the authors' code starts its codebook,
and from the uniform start, the strongest measured), SQ-VAE, the field's VQ twice (the ``field-vq``
preset: VQ-VAE with an EMA codebook, a k-means start and dead-code expiry, as practitioners train it, not in the
paper; once as it is and once with the rotation trick, vector-quantize-pytorch's default, which is worth 25% of test
MSE on CIFAR-10 and costs 41% on MNIST: docs/lab/48-.md#field-vq-audit), VQ-WAE as published (the ``paper`` preset:
exact OT per position, uniform learned pi, lambda = 1e-3, lambda_r = 1 with the code's mean reduction) and VQ-WAE
as shipped (every option at its default, the ``default`` preset). The ablations (codebook size, pi
initialisation, lambda) vary the published configuration; below the full budget they run it with the
``semidiscrete`` solver, since exact OT is the slowest part of a CPU run, and a data start (``paper-fast``: from
the paper's N(0, 1) codebook the semidiscrete solver never leaves one code). Only the amount of training and
evaluation changes with the budget.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from vqwae.training.config import PRESETS

EXPERIMENTS = ("recon", "curves", "codebook-size", "pi-init", "lambda", "probe", "generation", "controllability",
               "tsne", "ffhq")
LEAD_EXPERIMENTS = ("recon", "curves")  # what a report's lead budget shows first (``--lead``): where the rows are heading
# The reconstruction and downstream tables' rows: key -> (method, the TrainConfig options it sets, preset included).
# "vqvae" is VQ-VAE as the authors' code trains it (its N(0, 1) codebook); "vqvae-uniform" the strongest VQ-VAE
# start measured, the uniform (-1/K, 1/K) of the public VQ-VAE code the authors' network comes from
# (docs/lab/48-.md#vqvae-start: CIFAR-10 perplexity 51 against 3 after 3,000 steps). VQ-WAE's claims face both.
ROWS = {"vqvae": ("vqvae", {}), "vqvae-uniform": ("vqvae", {"vq_init": "uniform"}), "sqvae": ("sqvae", {}),
        "vqvae-field": ("vqvae", {"preset": "field-vq"}),
        "vqvae-field-rot": ("vqvae", {"preset": "field-vq", "rotation_trick": True}),
        "vqwae-paper": ("vqwae", {"preset": "paper"}), "vqwae": ("vqwae", {"preset": "default"})}
MODELS = tuple(ROWS)
# The field's VQ, with and without the rotation trick: neither is the stronger on both data sets, so the shipped row's
# claims are also checked against the two alone (the field at its strength, whichever form that is).
FIELD_ROWS = ("vqvae-field", "vqvae-field-rot")
BASELINES = ("vqvae", "vqvae-uniform", "sqvae", *FIELD_ROWS)  # every VQ-WAE claim is checked against each
# The paper's row whose numbers sit beside each of ours (the field's VQ is not in the paper).
PAPER_ROWS = {"vqvae": "vqvae", "vqvae-uniform": "vqvae", "sqvae": "sqvae", "vqwae-paper": "vqwae", "vqwae": "vqwae"}
WAE_ROWS = {"vqwae-paper": "paper", "vqwae": "shipped"}  # each VQ-WAE claim is checked for both: row -> summary column
PAPER_DATASETS = ("mnist", "cifar10", "svhn", "celeba")


@dataclass(frozen=True)
class Budget:
    name: str
    description: str
    epochs: int
    train_limit: int | None  # first N training images (None: all)
    eval_limit: int | None  # first N validation and test images
    max_steps: int | None = None
    resolution: int | str = 256  # PSNR/SSIM/LPIPS resolution, as the authors (upsampled to 256)
    fid: bool = True
    lpips: bool = True
    prior_epochs: int = 1
    prior_hidden: int = 64
    prior_max_steps: int | None = None
    gen_samples: int = 1000
    tsne_points: int = 2000
    probe_limit: int | None = None  # training images for the probe (None: the training split used)
    eval_everything: bool = True  # False: each run is evaluated only for what its tables show (EVAL_NEEDS)
    ablation_fid: bool = True  # False: no rFID for the ablations either (smoke: speed)
    pictures: bool = True  # per-run reconstruction grid, usage histogram and curves (the report's own figures always)
    ablation_preset: str = "paper"  # the published configuration as the ablations run it


BUDGETS = {
    "smoke": Budget("smoke", "every experiment end to end on tiny subsets (a test, not a result): 64 training "
                    "images, 2 steps, 8 evaluation images", epochs=1,
                    train_limit=64, eval_limit=8, max_steps=2, eval_everything=False, ablation_fid=False, pictures=False,
                    resolution="native", prior_epochs=1, prior_hidden=16, prior_max_steps=2, gen_samples=16,
                    tsne_points=8, fid=True, lpips=True, ablation_preset="paper-fast"),
    "cpu": Budget("cpu", "fits CPUs: the first 20,000 training images, 3,000 steps of 32 (4.8 epochs), 1,000 test "
                  "images for every metric; the ablations with the semidiscrete solver (paper-fast); each run "
                  "evaluated for the metrics its tables show", epochs=5,
                  train_limit=20000, eval_limit=1000, max_steps=3000, prior_epochs=3, gen_samples=1000,
                  tsne_points=1000, ablation_preset="paper-fast", eval_everything=False),
    "long": Budget("long", "where each row is heading: the cpu budget's data (the first 20,000 training images, "
                   "1,000 test images) and 10,000 steps of 32 (16 epochs), validation MSE and perplexity after every "
                   "epoch (625 steps) for the learning curves; MSE, PSNR and SSIM at the native resolution, no LPIPS "
                   "or rFID (the cpu budget has them)", epochs=16, train_limit=20000, eval_limit=1000,
                   max_steps=10000, resolution="native", fid=False, lpips=False, eval_everything=False,
                   ablation_preset="paper-fast"),
    "full": Budget("full", "the paper's: full training sets, 100 epochs, whole test sets", epochs=100,
                   train_limit=None, eval_limit=None, prior_epochs=50, gen_samples=10000, tsne_points=2000),
}

# What an experiment reads from its runs' evaluations, cheapest first: "usage" (MSE, perplexity, the usage
# histogram), "fid" (and rFID), "full" (and PSNR / SSIM / LPIPS at the budget's resolution: the reconstruction
# table). Unless the budget evaluates everything, a run gets the most any of its experiments needs: on a CPU core
# rFID on 1,000 images costs about 4.5 minutes and SSIM + LPIPS at 256x256 another 4, against 5-6 to train. The
# codebook-size table shows rFID at every K, as the paper's does (issue #35).
EVAL_LEVELS = ("usage", "fid", "full")
EVAL_NEEDS = {"recon": "full", "curves": "usage", "probe": "full", "generation": "full", "tsne": "full", "ffhq": "full",
              "pi-init": "fid", "lambda": "fid", "codebook-size": "fid", "controllability": "usage"}
# What the report sections add to a run's eval.json after training: {experiment: the key that says it was done at the
# budget}. A run restored from a record (no weights) that lacks one is trained again.
DOWNSTREAM_KEYS = {"probe": "probe_budget", "generation": "generation_budget", "tsne": "tsne_budget"}


def eval_level(experiments, budget: Budget) -> str:
    """The evaluation a run serving ``experiments`` needs at ``budget`` (a member of EVAL_LEVELS)."""
    if budget.eval_everything:
        return "full"
    needs = [EVAL_NEEDS[e] for e in experiments]
    if not budget.ablation_fid:
        needs = ["usage" if n == "fid" else n for n in needs]
    return max(needs, key=EVAL_LEVELS.index, default="usage")


PI_MODES = {  # the initialisation table's rows: (learn_pi, kl_weight)
    "fixed": dict(learn_pi=False, kl_weight=1.0),
    "learned_kl0": dict(learn_pi=True, kl_weight=0.0),
    "learned_kl1": dict(learn_pi=True, kl_weight=1.0),
}
PI_INITS = ("peaked", "gaussian", "uniform")
CODEBOOK_SIZES = (64, 128, 256, 512)
LAMBDAS = (1e-2, 1e-3, 1e-4)
LAMBDA_RS = (1.0, 0.0)


@dataclass(frozen=True)
class RunSpec:
    """One training run: a label for tables and the TrainConfig fields that define it."""

    dataset: str
    model: str
    settings: tuple = field(default_factory=tuple)  # sorted (name, value) pairs beyond the budget's

    @property
    def label(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.settings)
        return f"{self.dataset}/{self.model}" + (f"[{extra}]" if extra else "")

    def config_values(self, budget: Budget, data_root: str | None) -> dict:
        values = dict(model=self.model, dataset=self.dataset, data_root=_dataset_root(self.dataset, data_root),
                      epochs=budget.epochs, train_limit=budget.train_limit, eval_limit=budget.eval_limit,
                      max_steps=budget.max_steps, seed=0)
        settings = dict(self.settings)
        preset = settings.get("preset")
        if preset is not None:  # the preset's values, under the budget's amount of training and the spec's data
            values.update({k: v for k, v in PRESETS[preset].items() if k not in ("epochs", "dataset")}, preset=preset)
        values.update(settings)
        return values


def spec(dataset: str, model: str, **settings) -> RunSpec:
    return RunSpec(dataset, model, tuple(sorted(settings.items())))


def _dataset_root(dataset: str, data_root: str | None) -> str | None:
    """``--data-root`` names the folder holding every dataset (the loaders find e.g. ``cifar10-jpeg/`` in it);
    the embedded digits need none."""
    return None if dataset == "digits" else data_root


def row_spec(dataset: str, row: str, **settings) -> RunSpec:
    """A run of one of the tables' rows (a key of ROWS), with ``settings`` beyond the row's own."""
    model, own = ROWS[row]
    return spec(dataset, model, **{**own, **settings})


# ---- the grid: one function per cell, used by runs_for and by the report sections that read the results -------------
# A cell equal to the ablations' base run (K = 512; pi learned with lambda_r = 1 from uniform; lambda = 1e-3) is
# that run, trained once and shared by the experiments (and by the reconstruction table at the full budget).
def codebook_size_spec(dataset: str, row: str, k: int, budget: Budget) -> RunSpec:
    extra = {} if k == 512 else {"num_codes": k}
    if row == "vqwae-paper":
        return spec(dataset, "vqwae", preset=budget.ablation_preset, **extra)
    return row_spec(dataset, row, **extra)


def pi_spec(dataset: str, mode: str, init: str, budget: Budget, **settings) -> RunSpec:
    if mode == "learned_kl1" and init == "uniform" and not settings:
        return spec(dataset, "vqwae", preset=budget.ablation_preset)
    return spec(dataset, "vqwae", preset=budget.ablation_preset, pi_init=init, **PI_MODES[mode], **settings)


# The controllability experiment's fixed-pi runs: (VQ-WAE row, control variant) -> pi forms. The shipped rows leave
# out the uniform pi (no claim reads it: a correlation with a constant is undefined; the paper's row keeps it as the
# pi-init table's run). A variant is the options it sets beyond its row (CONTROLS): "nearest", the row as it is;
# "transport", quantize="transport" (the solver's transport map, what the README tells a user who wants usage to
# follow a fixed pi); "recipe", the toy's best combination, which holds on CIFAR-10 and not on MNIST
# (docs/lab/17-29.md#quantize-transport, #toy-recipe-controlled-usage); "fitted", quantize="transport" with the map
# solved on the training latents once training ends (fit_steps, docs/lab/17-29.md#fit-steps), for both rows.
CONTROL_RECIPE = {"quantize": "transport", "codebook_decay": 0.95, "pull": 0.1}
CONTROLS = {"nearest": {}, "transport": {"quantize": "transport"}, "recipe": CONTROL_RECIPE,
            "fitted": {"quantize": "transport", "fit_steps": 1000}}
CONTROLLED_PI = {("vqwae-paper", "nearest"): PI_INITS, ("vqwae-paper", "transport"): ("peaked", "gaussian"),
                 ("vqwae", "nearest"): ("peaked", "gaussian"), ("vqwae", "transport"): ("peaked", "gaussian"),
                 ("vqwae", "recipe"): ("peaked", "gaussian"), ("vqwae", "fitted"): ("peaked", "gaussian"),
                 ("vqwae-paper", "fitted"): ("peaked", "gaussian")}


def controllability_spec(dataset: str, row: str, init: str, budget: Budget, control: str = "nearest") -> RunSpec:
    """A fixed pi: the published configuration's (the pi-init table's run) or the shipped defaults' (issue #35),
    under one of the CONTROLS variants (the options it sets beyond the row)."""
    extra = CONTROLS[control]
    if row == "vqwae-paper":
        return pi_spec(dataset, "fixed", init, budget, **extra)
    return row_spec(dataset, row, pi_init=init, learn_pi=False, **extra)


def lambda_spec(dataset: str, lambda_r: float, lam: float, budget: Budget) -> RunSpec:
    if (lambda_r, lam) == (1.0, 1e-3):
        return spec(dataset, "vqwae", preset=budget.ablation_preset)
    return spec(dataset, "vqwae", preset=budget.ablation_preset, kl_weight=lambda_r, ws_weight=lam)


# ---- the FFHQ row (Table 1's last block): VQGAN against VQ-WAE inside VQGAN --------------------------------
# Its own dataset, whatever --datasets says. The `ffhq` preset (the paper's network, K 1024 x D 256 at 256x256)
# at the full budget; below it a VQGAN small enough for a CPU (the CIFAR-10 64x64 pair of docs/lab/09-16.md#vqgan-cifar10-64:
# f = 8, ch 32, batch 16). 1,500 steps with the adversary for the last tenth (from step 1,350), as that 500-step pair
# had it:
# long enough to see whether taming's VQGAN leaves the one code it starts on (issue #35); 21 minutes of training
# per row, the two rows on two cores at once (docs/lab/17-29.md#controllability-ten-seeds). Without FFHQ, CIFAR-10 stands in at the cpu
# budget and the embedded digits at the smoke budget (the path, not the paper's result; the report says so).
FFHQ_MODELS = ("vqvae", "vqwae")
FFHQ_STAND_IN = {"smoke": "digits", "cpu": "cifar10"}
VQGAN_AT_BUDGET = {
    "smoke": dict(image_size=32, ch=32, ch_mult="1,1,2", num_res_blocks=1, attn_resolutions="", z_channels=32,
                  num_codes=64, dim=32, batch_size=16, disc_start=1, disc_channels=8, disc_layers=2),
    "cpu": dict(image_size=64, ch=32, ch_mult="1,2,2,4", num_res_blocks=1, attn_resolutions="8", z_channels=64,
                batch_size=16, lr=2e-4, disc_start=1350, max_steps=1500, train_limit=8000),
    "full": {},
}


def ffhq_spec(dataset: str, model: str, budget: Budget) -> RunSpec:
    """A row of the FFHQ block: ``dataset`` is "ffhq", or its stand-in at the budget (FFHQ_STAND_IN)."""
    return spec(dataset, model, preset="ffhq", **VQGAN_AT_BUDGET[budget.name])


def runs_for(experiment: str, dataset: str, budget: Budget) -> list[RunSpec]:
    """The runs an experiment needs on one dataset (none for "ffhq": see :func:`ffhq_spec`)."""
    if experiment == "ffhq":
        return []
    if experiment in ("recon", "curves", "probe", "generation", "tsne"):
        return [row_spec(dataset, m) for m in MODELS]
    if experiment == "codebook-size":
        return [codebook_size_spec(dataset, m, k, budget) for m in MODELS for k in CODEBOOK_SIZES]
    if experiment == "pi-init":
        return [pi_spec(dataset, mode, init, budget) for mode in PI_MODES for init in PI_INITS]
    if experiment == "controllability":
        return [controllability_spec(dataset, row, init, budget, control)
                for (row, control), inits in CONTROLLED_PI.items() for init in inits]
    if experiment == "lambda":
        return [lambda_spec(dataset, lr, lam, budget) for lr in LAMBDA_RS for lam in LAMBDAS]
    raise ValueError(f"unknown experiment {experiment!r}; valid: {', '.join(EXPERIMENTS)}, all")
