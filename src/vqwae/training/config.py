"""``TrainConfig``: every option of a training run, declared once, grouped by what it configures.

    TrainConfig
    ├── model        vqwae | vqvae | sqvae
    ├── quantizer    num_codes, dim, shared_pi, and one section per method:
    │   ├── vqwae    VQWAEOptions        (vqwae.quantizers.wasserstein_options: both VQ-WAE quantizers)
    │   ├── vqvae    VectorOptions       (vqwae.quantizers.vector_options)
    │   └── sqvae    StochasticOptions   (vqwae.quantizers.stochastic_options)
    ├── network      NetworkOptions      (vqwae.models.network_options: the paper's networks or VQGAN's)
    ├── gan          AdversarialOptions  (vqwae.training.adversarial_options: VQGAN's losses, with arch=vqgan)
    ├── optim        epochs, batch size, Adam, the plateau schedule, max_steps
    ├── data         DataOptions         (vqwae.data.options)
    └── run          out, seed, device, precision, preset

Each option is one line (``vqwae.options.option``: default, help, range) in the section that owns it; the
command line (``vqwae train --ws-weight 1e-3``), config files (flat ``ws_weight: 1e-3`` or nested
``quantizer: {vqwae: {ws_weight: 1e-3}}``) and the saved RUN_DIR/config.json all derive from it.

Resolution order (later wins): the defaults, a ``--preset``, a ``--config`` file, explicit options.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from vqwae.data.options import DataOptions
from vqwae.models.network_options import NetworkConfig, NetworkOptions
from vqwae.options import (SCHEDULE, SEED_MAX, WHERE, check_fields, find_leaf, from_flat, identity, option, section,
                           to_flat, to_nested)
from vqwae.quantizers.shape import CodebookShape
from vqwae.quantizers.stochastic_options import StochasticConfig, StochasticOptions, initial_log_var
from vqwae.quantizers.upgrade import implicit_options
from vqwae.quantizers.vector_options import VectorConfig, VectorOptions
from vqwae.ot.catalog import authors_dual_epsilon
from vqwae.quantizers.wasserstein_options import RETIRED, VQWAEOptions, latents_per_code_pull
from vqwae.training.adversarial_options import AdversarialOptions
from vqwae.training.config_file import flatten_paths, load_config_file

MODELS = ("vqwae", "vqvae", "sqvae")
PRECISIONS = ("fp32", "bf16", "fp16")
LOGGERS = ("none", "tensorboard")
#: Version of the config.json layout. 1: flat keys, no "format_version" (every run before 2026-11-23);
#: 2: the nested sections below; 3: without the options issue #56 retired (``RETIRED``).
FORMAT_VERSION = 3
#: The layout version a run's identity (``TrainConfig.identity``, the reproduction's cache key) names: format 3 only
#: dropped retired options, which the identity keeps, so identities stay those of format 2.
IDENTITY_VERSION = 2

# Named bundles of settings, by flat option name. "paper" is the authors' configuration exactly as their code
# runs it.
_PAPER = dict(solver="exact", shared_pi=False, ws_weight=1e-3, kl_weight=1.0, kl_reduction="mean", pi_init="uniform",
              learn_pi=True, codebook_init="normal", codebook_update="gradient", pull=1.0,
              lr=1e-3, batch_size=32, epochs=100)
PRESETS: dict[str, dict] = {
    "paper": _PAPER,
    # The paper's configuration with the OT solver changed to the default `semidiscrete` (same loss, same learned
    # pi, gradient codebook): the reproduction's ablations at the cpu budget, where exact OT is too slow. Its
    # codebook starts from the data: from the N(0, 1) start the encoder's first latents are a near-point mass far
    # from every code, which exact OT splits over all codes (a fractional plan) but a semi-discrete transport map
    # sends whole to one code per step, so it never leaves perplexity 1 (docs/lab/09-16.md#paper-fast).
    "paper-fast": dict(_PAPER, solver="semidiscrete", codebook_init="data"),
    # What vqwae ships: every option at its default (named so a run can record that it used exactly them).
    "default": {},
    # The field's VQ-VAE (SoundStream, EnCodec, vector-quantize-pytorch's VectorQuantize(kmeans_init=True,
    # threshold_ema_dead_code=2)): EMA codebook, k-means start, dead-code expiry;
    # docs/lab/09-16.md#field-vq-vs-vector-quantize-pytorch checks it
    # against vector-quantize-pytorch.
    "field-vq": dict(model="vqvae", ema=True, vq_init="kmeans", dead_code_threshold=2.0),
    # The paper's FFHQ row (Table 1): VQGAN's network and losses (taming's faces configuration: f = 16,
    # attention at 16x16, disc_start 30001, disc_weight 0.8), K 1024 x D 256 on 256x256 images, batch 32 and 100
    # epochs (App. D), beta 0.25 and lambda 1e-3, lambda_r 1 (Sec. 5). The learning rate is taming's
    # 4.5e-6 per image of the batch (1.44e-4 at 32): the paper's 1e-3 is for its small networks. VQGAN's quantizer
    # as taming's: its codebook starts uniform in (-1/K, 1/K) and beta sits on the codebook term (its legacy default;
    # issue #64: from N(0, 1) every latent's nearest code was one code, docs/lab/48-.md#vqgan-start).
    "ffhq": dict(arch="vqgan", dataset="ffhq", image_size=256, num_codes=1024, dim=256, ch=128,
                 ch_mult="1,1,2,2,4", num_res_blocks=2, attn_resolutions="16", z_channels=256,
                 perceptual_weight=1.0, disc_weight=0.8, disc_start=30001, beta=0.25, vq_init="uniform",
                 legacy_beta=True, ws_weight=1e-3,
                 kl_weight=1.0, shared_pi=False, pull=1.0, lr=4.5e-6 * 32, batch_size=32, epochs=100),
}
"""Named bundles of settings (``vqwae train --preset NAME``, ``TrainConfig.resolve(preset=NAME)``), by flat option
name: "paper" (the authors' configuration as their code runs it), "paper-fast", "default", "field-vq", "ffhq"."""

#: Fixes that changed what a configuration trains with the same options (issue #64), each with the configurations it
#: touches. A run's identity names those that touch it, so that a run trained before a fix is not taken for one trained
#: after (the reproduction's cache keys); the identities of the runs no fix touches are unchanged.
FIXES = {
    # the straight-through no longer passes the decoder's gradient to a gradient-trained codebook (z + sg(z_q - z))
    "straight-through": lambda c: ((c.model == "vqvae" and not c.quantizer.vqvae.ema
                                    and not c.quantizer.vqvae.rotation_trick)
                                   or (c.model == "vqwae" and not c.quantizer.vqwae.product)),
    # EMA counts start at 1 with the codeword as the sum (an unused code is no longer divided by epsilon). A k-means
    # start sets every count from the data, so it changes only where k-means leaves a cluster empty, which the
    # field-vq rows' first batches do not (their weights after 3 steps are bit-identical before and after, MNIST
    # and CIFAR-10, K = 64 and 512): their identities stay.
    "ema-count-start": lambda c: c.model == "vqvae" and c.quantizer.vqvae.ema and c.quantizer.vqvae.init != "kmeans",
    # the paper's networks keep PyTorch's default convolution biases, as the authors' weights_init does (issue #82:
    # they were zeroed, and the latents started ~24x smaller); VQGAN's network has taming's own start
    "authors-init": lambda c: c.network.arch != "vqgan",
    # WassersteinQuantizer judges a dead code by its own record since a split placed it, not by the EMA mass the
    # split handed it, and from the first steps (issue #81: the splits were blind ~200 steps after each wave)
    "dead-own-record": lambda c: c.model == "vqwae" and c.quantizer.vqwae.product,
}


@dataclass(frozen=True)
class QuantizerOptions(CodebookShape):
    """The ``quantizer`` section: the codebook's shape, then each method's own options (only the trained
    ``model``'s are read)."""

    shared_pi: bool = option(True, "vqwae: one pi for all positions (the authors' 'global' variant, the drop-in "
                             "quantizer's default); --per-position-pi: one pi per latent position (the paper's, "
                             "--preset paper; docs/lab/30-39.md#train-shared-pi)", negative="per-position-pi")
    vqwae: VQWAEOptions = section(VQWAEOptions)
    vqvae: VectorOptions = section(VectorOptions)
    sqvae: StochasticOptions = section(StochasticOptions)


@dataclass(frozen=True)
class OptimOptions:
    """The ``optim`` section: how long and how fast a run trains (Adam, the learning rate halved on a plateau of
    the validation MSE)."""

    epochs: int = option(100, "training epochs", min=1, role=SCHEDULE)
    batch_size: int = option(32, "images per step and process (the global batch under DDP is world_size times this)",
                             min=1)
    lr: float = option(1e-3, "Adam learning rate", min=0)
    lr_factor: float = option(0.5, "ReduceLROnPlateau (on validation MSE) factor", min=0, below=1)
    lr_patience: int = option(3, "ReduceLROnPlateau patience, in epochs", min=0)
    max_steps: int | None = option(None, "stop after this many optimiser steps (None: run all epochs)", min=1,
                                   role=SCHEDULE)

    def __post_init__(self):
        check_fields(self)
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


@dataclass(frozen=True)
class RunOptions:
    """The ``run`` section: where a run writes, its seed, device, precision and logging."""

    out: str = option("runs/run", "the run folder (RUN_DIR)", role=WHERE)
    seed: int = option(0, "random seed (initialisation, batch order, splits)", min=0, max=SEED_MAX)
    device: str = option("auto", "auto (CUDA when present) | cpu | cuda | cuda:N", role=WHERE)
    precision: str = option("fp32", "autocast precision; quantization always runs in fp32", choices=PRECISIONS)
    logger: str = option("none", "live curves besides metrics.jsonl: tensorboard (RUN_DIR/tensorboard; "
                         "pip install 'vqwae[tensorboard]')", choices=LOGGERS, role=WHERE)
    threads: int | None = option(None, "CPU threads on the CPU (env VQWAE_THREADS; None: the CPUs not already "
                                 "busy when training starts)", min=1, role=WHERE)
    compile: bool = option(False, "torch.compile the autoencoder's training forward and backward (inductor; the "
                           "optimiser and evaluation stay eager): on an H100 VQ-WAE's step went from 1.41x to 1.17x "
                           "VQ-VAE's (docs/lab/30-39.md#gpu-launch-bound); compiling takes seconds to a minute per "
                           "process",
                           role=WHERE)
    preset: str | None = option(None, "the preset applied (recorded for provenance)")

    def __post_init__(self):
        check_fields(self)
        if self.device != "auto":
            import torch  # here: the command line's help reads these options without torch

            try:
                torch.device(self.device)
            except RuntimeError:
                raise ValueError(f"unknown device {self.device!r}; valid: auto, cpu, cuda, cuda:N, mps") from None


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run is built from: the method and six groups of options, each option declared once
    (``vqwae.options.option``) with its default and help. The command line's flags (``vqwae train --help``), a
    config file's keys and the run folder's ``config.json`` all derive from it; every option, with its flag and
    default, is listed on the options reference page.

    >>> cfg = TrainConfig.resolve(preset="paper", dataset="cifar10", epochs=2)     # flat names, as the flags
    >>> cfg.optim.lr, cfg.quantizer.vqwae.ws_weight
    (0.001, 0.001)
    >>> cfg = TrainConfig.resolve(config_file="config.yaml", seed=1)    # a file's keys (nested or flat), then flags

    Args:
        model: the method: vqwae, vqvae or sqvae.
        quantizer: the codebook's shape and each method's options.
        network: the encoder and decoder.
        gan: VQGAN's adversarial and perceptual losses.
        optim: epochs, batch size, learning rate and its schedule.
        data: the dataset, its folder and splits.
        run: the run folder, seed, device, precision and logging.
    """

    model: str = option("vqwae", "the method", choices=MODELS)
    quantizer: QuantizerOptions = section(QuantizerOptions)
    network: NetworkOptions = section(NetworkOptions)
    gan: AdversarialOptions = section(AdversarialOptions)
    optim: OptimOptions = section(OptimOptions)
    data: DataOptions = section(DataOptions)
    run: RunOptions = section(RunOptions)

    def __post_init__(self):
        check_fields(self)

    # ---- identity -----------------------------------------------------------------------------------
    def unread(self) -> tuple[tuple[str, ...], ...]:
        """Paths of the options this configuration never reads: the other methods' quantizer sections, the
        options its own method leaves unread (``unread()`` of its section), the network's (``NetworkOptions``)
        and, unless the network is VQGAN's, the adversarial section."""
        paths = [("quantizer", m) for m in MODELS if m != self.model]
        if self.model != "vqwae":
            paths.append(("quantizer", "shared_pi"))  # VQ-WAE's pi: no other method has one
        options = getattr(self.quantizer, self.model)
        paths += [("quantizer", self.model, k) for k in (options.unread() if hasattr(options, "unread") else ())]
        if self.model == "vqwae" and options.product and options.pull is None and self._full_pull():
            paths.append(("quantizer", "vqwae", "pull"))  # trains as pull=1 does: that run's identity
        paths += [("network", k) for k in self.network.unread()]
        if self.network.arch != "vqgan":
            paths.append(("gan",))
        return tuple(paths)

    def _full_pull(self) -> bool:
        """Whether ``pull=None`` gives this run the full pull at every step, so that it trains as ``pull=1`` does:
        one process's batch at the fewest latent positions its network can have (the paper's networks: 32x32 images;
        VQGAN's: its image size, and no full pull assumed when that is not set) brings at least PULL_FULL_FROM latents
        a code."""
        size = self.data.image_size if self.network.arch == "vqgan" else 32
        if size is None:
            return False
        side = self.network_config(1, size).latent_side(size)
        return latents_per_code_pull(self.optim.batch_size * side * side, self.quantizer.num_codes) == 1

    @property
    def transport_fit_steps(self) -> int:
        """The transport fit this run asks for once training ends: the Wasserstein quantizer's fit_steps (0 for the
        other methods, which have no transport map)."""
        return self.quantizer.vqwae.fit_steps if self.model == "vqwae" else 0

    @property
    def quantizer_runtime(self) -> dict:
        """The settings a VQ-WAE quantizer takes at run time, not saved with it (``set_runtime``)."""
        return self.quantizer.vqwae.runtime() if self.model == "vqwae" else {}

    def identity(self) -> dict:
        """What this run trains (nested, with the config layout's version, as config.json): every option but the
        WHERE ones (``vqwae.options``) and the unread, and a VQ-WAE run's retired options at the value every run had
        (``VQWAEOptions.retired``). The version stays at 2, the layout's when issue #56 retired them: the identities
        of earlier runs, the reproduction's cache keys, are unchanged."""
        nested = identity(self, self.unread())
        if self.model == "vqwae":
            nested["quantizer"]["vqwae"].update(self.quantizer.vqwae.retired())
        fixes = self.fixes()
        return {"format_version": IDENTITY_VERSION, **nested, **({"fixes": list(fixes)} if fixes else {})}

    def fixes(self) -> tuple[str, ...]:
        """The fixes (``FIXES``) that changed what this configuration trains."""
        return tuple(name for name, touches in FIXES.items() if touches(self))

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def resolve(cls, *, preset: str | None = None, config_file: str | Path | None = None,
                **overrides) -> "TrainConfig":
        """defaults < preset < config file < overrides (flat option names; None values are ignored)."""
        cfg = cls()
        values = load_config_file(config_file) if config_file is not None else {}
        in_file = _preset_in_file(values, config_file)  # a file's preset applies, as --preset's
        if in_file is not None and preset is not None and in_file != preset:
            raise ValueError(f"--preset {preset} and config file {config_file}'s preset {in_file!r} disagree")
        preset = preset if preset is not None else in_file
        if preset is not None:
            if preset not in PRESETS:
                raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
            cfg = from_flat(cls, dict(PRESETS[preset], preset=preset), base=cfg)
        if values:
            cfg = from_flat(cls, values, base=cfg, where=f"config file {config_file}")
        given = {k: v for k, v in overrides.items() if v is not None}
        cfg = from_flat(cls, given, base=cfg)
        _check_given_apply(cfg, [*values, *given], preset)
        return cfg

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        """From flat option names and / or dotted paths ("quantizer.vqwae.ws_weight"); unknown keys are an error."""
        return from_flat(cls, values)

    @classmethod
    def from_saved(cls, values: dict) -> "TrainConfig":
        """A run's config.json, of any format version."""
        version = values.get("format_version", 1)
        if version == 1:  # flat keys
            flat = dict(values)
        elif version in (2, FORMAT_VERSION):
            flat = flatten_paths({k: v for k, v in values.items() if k != "format_version"})
        elif isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise ValueError(f"config.json has format_version {version}; this vqwae reads 1 to {FORMAT_VERSION} "
                             "(a newer vqwae wrote it?)")
        else:
            raise ValueError(f"config.json's format_version must be an integer from 1 to {FORMAT_VERSION}, got "
                             f"{version!r}")
        if flat.get("model", "vqwae") == "vqwae":  # a key the file lacks takes the behaviour of its time
            given = {k.rsplit(".", 1)[-1] for k in flat}
            flat.update({k: v for k, v in implicit_options("wasserstein", version).items() if k not in given})
        return from_flat(cls, _without_retired(flat), where="config.json")

    def to_dict(self) -> dict:
        """What RUN_DIR/config.json stores: the nested sections and the format version."""
        return {"format_version": FORMAT_VERSION, **to_nested(self)}

    def to_flat(self) -> dict:
        """Every option by its flat name (the command line's flag without dashes)."""
        return to_flat(self)

    def replace(self, **changes) -> "TrainConfig":
        """A copy with options changed, by flat name."""
        return from_flat(type(self), changes, base=self)

    # ---- what the run builds ------------------------------------------------------------------------
    def network_config(self, channels: int, image_size: int) -> NetworkConfig:
        """The network for the image size: the paper's (conv32 -> 8x8 latents, conv64 -> 16x16), or with
        ``arch=vqgan`` the taming encoder / decoder (image_size / f latents)."""
        net = self.network
        if net.arch == "vqgan":
            sizes = {k: v for k, v in dataclasses.asdict(net).items() if k not in ("arch", "authors_quirks")}
            cfg = NetworkConfig(arch="vqgan", in_channels=channels, latent_dim=self.quantizer.dim,
                                image_size=image_size, **sizes)
            cfg.latent_side(image_size)  # a size the factor does not divide: one line, before anything is built
            return cfg
        if image_size not in (32, 64):
            raise ValueError(f"the paper's networks take 32x32 or 64x64 images, got {image_size} "
                             "(set --image-size, or --arch vqgan for other sizes)")
        arch = "conv32" if image_size == 32 else "conv64"
        return NetworkConfig(arch=arch, in_channels=channels, num_res_layers=2 if arch == "conv32" else 6,
                             latent_dim=self.quantizer.dim, authors_quirks=net.authors_quirks)

    def quantizer_config(self, latent_positions: int) -> tuple[str, object]:
        """The quantizer registry name and its config object for this run."""
        q = self.quantizer
        shape = dict(num_codes=q.num_codes, dim=q.dim)
        if self.model == "vqwae":
            vqwae = q.vqwae
            if vqwae.solver == "dual" and vqwae.dual_epsilon is None:
                vqwae = dataclasses.replace(vqwae, dual_epsilon=authors_dual_epsilon(self.data.dataset))
            kind, config = vqwae.quantizer_config(q.num_codes, q.dim, None if q.shared_pi else latent_positions)
        elif self.model == "vqvae":
            kind, config = "vector", VectorConfig(**dataclasses.asdict(q.vqvae), **shape)
        else:
            sq = q.sqvae
            if sq.log_var_init is None:
                sq = dataclasses.replace(sq, log_var_init=initial_log_var(self.data.dataset))
            kind, config = "stochastic", StochasticConfig(**dataclasses.asdict(sq), **shape)
        return kind, dataclasses.replace(config, channel_last=False)  # the networks' latents: (B, D, h, w)


def _without_retired(flat: dict) -> dict:
    """A saved config's options without those issue #56 retired (at the value it kept for them; another value is an
    error naming the option: the run cannot be trained as it was)."""
    out = {}
    for key, value in flat.items():
        name = key.rsplit(".", 1)[-1]
        if name in RETIRED:
            kept = RETIRED[name]
            if value != kept:
                raise ValueError(f"config.json sets {name}={value!r}, an option vqwae removed (issue #56; it keeps "
                                 f"{kept!r}): train this run with vqwae at commit c3f1090")
            continue
        out[key] = value
    return out


def _preset_in_file(values: dict, config_file) -> str | None:
    """Take the preset out of a config file's values (flat ``preset`` or nested ``run: {preset}``, not both)."""
    given = [values.pop(key) for key in ("preset", "run.preset") if key in values]
    if len(given) == 2:
        raise ValueError(f"config file {config_file} gives the preset twice ({given[0]!r} and {given[1]!r})")
    if given and given[0] is not None and not isinstance(given[0], str):
        raise ValueError(f"config file {config_file}: preset must be one name ({', '.join(PRESETS)}), got "
                         f"{given[0]!r}")
    return given[0] if given else None


def _check_given_apply(cfg: "TrainConfig", given: list[str], preset: str | None) -> None:
    """An option given (on the command line or in a config file) that the trained model never reads is an error,
    not a no-op recorded in config.json as if it applied (``--rotation-trick`` with VQ-WAE); so is a ``--model``
    that contradicts its preset's (``--preset field-vq --model vqwae`` would train VQ-WAE recorded as field-vq)."""
    wanted = PRESETS.get(preset, {}).get("model") if preset is not None else None
    if wanted is not None and cfg.model != wanted:
        raise ValueError(f"--preset {preset} trains --model {wanted}, but --model {cfg.model} was given: drop one")
    for key in given:
        leaf = find_leaf(TrainConfig, key)
        path = leaf.path if leaf is not None else ()
        owner = (path[1] if len(path) == 3 and path[0] == "quantizer" and path[1] in MODELS
                 else "vqwae" if path == ("quantizer", "shared_pi") else None)
        if owner is not None and owner != cfg.model:
            flag = leaf.flat.replace("_", "-")
            raise ValueError(f"--{flag} is an option of --model {owner}, but this run trains --model {cfg.model}")
