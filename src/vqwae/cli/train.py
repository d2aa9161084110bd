"""``vqwae train``: every TrainConfig field is an option; --config FILE and --preset fill in the rest."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from vqwae.cli.errors import fail

Opt = typer.Option


def train_command(
    out: Path = Opt(..., "--out", help="Run folder (RUN_DIR): config, weights, metrics, resumable state."),
    model: Optional[str] = Opt(None, help="vqwae | vqvae | sqvae  [default: vqwae]"),
    dataset: Optional[str] = Opt(None, help="mnist | cifar10 | svhn | celeba | imagefolder | digits  [default: mnist]"),
    data_root: Optional[str] = Opt(None, help="Local copy of the dataset (e.g. ../shared/data)."),
    download: Optional[bool] = Opt(None, "--download/--no-download", help="Let torchvision download the data when online."),
    config: Optional[Path] = Opt(None, "--config", help="YAML or JSON file of options; command-line options override it."),
    preset: Optional[str] = Opt(None, help="Named settings, e.g. 'paper' (the authors' exact configuration)."),
    resume: bool = Opt(False, "--resume", help="Continue the run in --out from its last completed epoch."),
    image_size: Optional[int] = Opt(None, help="Resize images (default: the dataset's native size)."),
    num_codes: Optional[int] = Opt(None, help="Codebook size K  [default: 512]"),
    dim: Optional[int] = Opt(None, help="Codeword / latent dimension D  [default: 64]"),
    solver: Optional[str] = Opt(None, help="vqwae OT solver: semidiscrete | exact | sinkhorn | dual  [default: semidiscrete]"),
    codebook_init: Optional[str] = Opt(None, help="vqwae codebook start: data | normal (the authors' N(0,1))  [default: data]"),
    codebook_update: Optional[str] = Opt(None, help="vqwae codebook learning: transport (EMA of the OT plan's barycentres) | gradient (the paper)  [default: transport]"),
    codebook_decay: Optional[float] = Opt(None, help="vqwae, transport codebook: EMA decay  [default: 0.99]"),
    shared_pi: Optional[bool] = Opt(None, "--shared-pi/--per-position-pi", help="vqwae: one pi for all positions."),
    ws_weight: Optional[float] = Opt(None, help="vqwae: lambda on the WS term  [default: 3e-3; the paper 1e-3]"),
    kl_weight: Optional[float] = Opt(None, help="vqwae: lambda_r on KL(pi || U)  [default: 1.0]"),
    kl_reduction: Optional[str] = Opt(None, help="vqwae: sum (paper) | mean (authors' code)"),
    pi_init: Optional[str] = Opt(None, help="vqwae: uniform | peaked | gaussian"),
    learn_pi: Optional[bool] = Opt(None, "--learn-pi/--fixed-pi", help="vqwae: learn pi or keep it fixed."),
    epsilon: Optional[float] = Opt(None, help="vqwae sinkhorn/dual: entropic regularisation (relative to mean cost)."),
    sinkhorn_iters: Optional[int] = Opt(None, help="vqwae sinkhorn: iteration cap."),
    phi_iterations: Optional[int] = Opt(None, help="vqwae dual: inner potential steps per training step."),
    global_batch: Optional[bool] = Opt(None, "--global-batch/--local-batch", help="vqwae under DDP: OT over all ranks' latents."),
    beta: Optional[float] = Opt(None, help="vqvae: commitment weight  [default: 0.25]"),
    legacy_beta: Optional[bool] = Opt(None, "--legacy-beta/--paper-beta", help="vqvae: beta on the codebook term (authors' code)."),
    ema: Optional[bool] = Opt(None, "--ema/--no-ema", help="vqvae: EMA codebook updates."),
    sq_log_var_init: Optional[float] = Opt(None, help="sqvae: initial log variance parameter s."),
    sq_temperature_decay: Optional[float] = Opt(None, help="sqvae: tau = exp(-decay * step)  [default: 1e-5]"),
    authors_quirks: Optional[bool] = Opt(None, "--authors-quirks/--no-authors-quirks", help="Networks: the authors' residual quirks."),
    epochs: Optional[int] = Opt(None, help="[default: 100]"),
    batch_size: Optional[int] = Opt(None, help="Per process  [default: 32]"),
    lr: Optional[float] = Opt(None, help="Adam learning rate  [default: 1e-3]"),
    lr_factor: Optional[float] = Opt(None, help="ReduceLROnPlateau factor  [default: 0.5]"),
    lr_patience: Optional[int] = Opt(None, help="ReduceLROnPlateau patience in epochs  [default: 3]"),
    max_steps: Optional[int] = Opt(None, help="Stop after N optimiser steps."),
    train_limit: Optional[int] = Opt(None, help="Use the first N training images."),
    eval_limit: Optional[int] = Opt(None, help="Use the first N validation/test images."),
    seed: Optional[int] = Opt(None, help="[default: 0]"),
    device: Optional[str] = Opt(None, help="auto | cpu | cuda | cuda:N  [default: auto]"),
    precision: Optional[str] = Opt(None, help="fp32 | bf16 | fp16 (quantization stays fp32)"),
    num_workers: Optional[int] = Opt(None, help="DataLoader workers  [default: 0]"),
) -> None:
    """Train VQ-WAE, VQ-VAE or SQ-VAE on a dataset; writes RUN_DIR (see README)."""
    from vqwae.training import TrainConfig, TrainingDiverged, train

    overrides = {k: v for k, v in locals().items() if k not in {"out", "config", "preset", "resume", "TrainConfig", "TrainingDiverged", "train"}}
    overrides["out"] = str(out)
    try:
        if resume and (out / "config.json").is_file():
            # Resume with the run's own configuration; only schedule/device options may change.
            saved = json.loads((out / "config.json").read_text())
            changeable = {"epochs", "max_steps", "device", "num_workers"}
            bad = sorted(k for k, v in overrides.items() if v is not None and k not in changeable | {"out"} and v != saved.get(k))
            if bad:
                fail(f"--resume continues {out} with its saved configuration; these options differ from it: {', '.join(bad)}")
            saved.update({k: v for k, v in overrides.items() if v is not None})
            cfg = TrainConfig.from_saved(saved)
        else:
            cfg = TrainConfig.resolve(preset=preset, config_file=config, **overrides)
        result = train(cfg, resume=resume)
    except TrainingDiverged as e:
        fail(str(e))
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        fail(str(e))
    typer.echo(f"done: {result.epochs_completed} epochs, {result.steps} steps, best val MSE {result.best_val_mse:.6f} -> {result.run_dir}")
