"""``vqwae train``: every TrainConfig option is a flag (derived from its declaration); --config FILE and
--preset fill in the rest. Precedence: defaults < --preset < --config < flags."""
from __future__ import annotations

import os
from pathlib import Path

import typer

from vqwae.cli.common import COMPUTE_DEVICES, fail, nonempty_path
from vqwae.cli.options import with_config_options
from vqwae.training.config import TrainConfig


# What `vqwae train --help` lists (`--help-all`: every option): the choices most runs make. Every other option is
# accepted all the same; a new option is advanced until it is named here.
COMMON = ("model", "dataset", "data_root", "num_codes", "dim", "shared_pi", "arch", "epochs", "max_steps",
          "batch_size", "lr", "train_limit", "eval_limit", "num_workers", "device", "precision", "threads", "seed",
          "logger")


@with_config_options(TrainConfig, skip=("out", "preset"), common=COMMON)
def train_command(
    out: Path = typer.Option(..., "--out", parser=nonempty_path,
                             help="Run folder (RUN_DIR): config, weights, metrics, resumable state."),
    config: Path | None = typer.Option(None, "--config", help="YAML or JSON file of options (flat names or "
                                          "nested sections); flags override it."),
    preset: str | None = typer.Option(None, help="Named settings: 'paper' (the authors' exact configuration), 'paper-fast' (the same with the semidiscrete solver and a data start), 'default' (the shipped defaults), 'ffhq' (the paper's VQGAN row), 'field-vq' (VQ-VAE as the field trains it: EMA, k-means start, dead-code expiry)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last completed epoch."),
    **options,
) -> None:
    """Train VQ-WAE, VQ-VAE or SQ-VAE on a dataset; writes RUN_DIR (see README)."""
    from vqwae.runs.layout import CONFIG, resume_config
    from vqwae.training import TrainingDiverged, train
    from vqwae.training.lock import RunFolderBusy

    options["out"] = str(out)
    if resume and (config is not None or preset is not None):
        given = " and ".join(f for f, v in (("--config", config), ("--preset", preset)) if v is not None)
        fail(f"--resume continues {out} with its saved configuration; {given} would be ignored: leave it out "
             "(only the schedule and where the run trains may change, as flags)")
    if resume and not (out / CONFIG).is_file():
        fail(f"--resume: {out} holds no run to continue (no {CONFIG}); leave out --resume to start one")
    try:
        if resume:
            cfg = resume_config(out, options)  # the run's own configuration; only its schedule may change
        else:
            cfg = TrainConfig.resolve(preset=preset, config_file=config, **options)
        _check_bounds(cfg)
        result = train(cfg, resume=resume)
    except KeyboardInterrupt:
        _interrupted(out)
    except (TrainingDiverged, RunFolderBusy, ValueError, FileNotFoundError, FileExistsError) as e:
        fail(str(e))
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, one line for the run, not one per rank
        typer.echo(f"done: {result.epochs_completed} epochs, {result.steps} steps, best val MSE {result.best_val_mse:.6f} "
                   f"-> {result.run_dir}")


def _check_bounds(cfg: TrainConfig) -> None:
    """What the configuration's own checks (finite numbers, num_codes <= 2^20: ``vqwae.options.check_fields``) leave
    open: a device that holds no data (meta)."""
    device = str(cfg.run.device)
    if device != "auto":
        import torch

        try:
            kind = torch.device(device).type
        except RuntimeError:
            return  # the trainer names a device torch does not know
        if kind not in COMPUTE_DEVICES:
            fail(f"bad --device {device!r}: vqwae computes on {', '.join(COMPUTE_DEVICES)}, not on {kind}")


def _interrupted(out: Path) -> None:
    """Ctrl-C: say what was kept and how to go on (exit 130, the shell's code for SIGINT). The advice follows what
    the folder now holds, so that the command it names is one that works."""
    from vqwae.runs.layout import STATE, existing_run_files, last_epoch, read_metrics

    if int(os.environ.get("RANK", "0")) == 0:
        if (out / STATE).is_file():
            epochs = last_epoch(read_metrics(out))
            typer.echo(f"\ninterrupted: {out} keeps its last completed epoch ({epochs}); continue with "
                       f"`vqwae train --out {out} --resume`", err=True)
        elif existing_run_files(out):  # weights of an epoch whose checkpoint was never written
            typer.echo(f"\ninterrupted before the first checkpoint: no epoch of {out} was completed; start it "
                       f"again with `vqwae train --out {out} --resume`", err=True)
        else:
            typer.echo(f"\ninterrupted before the first epoch ended: nothing was saved in {out}; run the same "
                       "command again to start over", err=True)
    raise typer.Exit(130)
