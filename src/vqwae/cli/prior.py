"""``vqwae prior train`` and ``vqwae sample``: the stage-two PixelCNN prior of a run (``vqwae.runs.prior``).

    vqwae prior train RUN_DIR [--conditional] [--epochs 20] [--hidden 64] [--layers 15] [--max-steps N]
    vqwae sample RUN_DIR --n 64 [--class 3] [--temperature 1.0] [--out RUN_DIR/samples]

Generation FID is ``vqwae eval RUN_DIR --generation``.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import typer

from vqwae.cli.common import (DataRoot, Device, RunDir, Seed, Threads, at_least, check_run, device_or_fail, fail,
                              nonempty_path, one_line_errors, out_folder_or_fail, print_wall, threads_on)

Opt = typer.Option
Arg = typer.Argument

prior_app = typer.Typer(help="The stage-two PixelCNN prior over a run's code grids.", no_args_is_help=True,
                        pretty_exceptions_show_locals=False, add_completion=False)


# ---- vqwae prior train ---------------------------------------------------------------------------------
@prior_app.callback()
def prior_main() -> None:
    """Train the gated PixelCNN prior of a run (stage two of VQ-WAE / VQ-VAE)."""


@prior_app.command("train")
@one_line_errors
def prior_train_command(
    run_dir: RunDir,
    conditional: bool = Opt(False, "--conditional", help="Class-conditional prior (needs a labelled dataset)."),
    epochs: int = Opt(20, help="Epochs over the training codes (best epoch by validation NLL is kept)."),
    batch_size: int = Opt(128, help="Code grids per step (the paper: 128)."),
    lr: float = Opt(3e-4, help="Adam learning rate (the paper: 3e-4)."),
    hidden: int = Opt(64, help="Channels per stack (64: 1.5M parameters with K=512; 32 is ~3x faster)."),
    layers: int = Opt(15, help="Gated layers (the paper: 15)."),
    max_steps: int | None = Opt(None, help="Stop after N optimiser steps (the epoch in progress is evaluated)."),
    device: Device = "auto",
    threads: Threads = None,
    train_limit: int | None = Opt(None, help="Override the run's train limit: first N training images (-1: all)."),
    eval_limit: int | None = Opt(None, help="Override the run's eval limit: first N validation images (-1: all)."),
    out: Path | None = Opt(None, "--out", parser=nonempty_path,
                           help="Prior folder (default: RUN_DIR/prior); RUN_DIR/prior_cond or "
                                                  "RUN_DIR/prior_uncond keep a second prior next to it."),
    data_root: DataRoot = None,
    seed: Seed = 0,
    refresh_codes: bool = Opt(False, "--refresh-codes", help="Re-extract the code grids even if cached."),
    force: bool = Opt(False, "--force", help="Replace a trained prior already in the prior folder."),
    codes: Path | None = Opt(None, "--codes", help="Train on this codes file (`vqwae encode RUN --split train`) "
                                                      "instead of extracting the run's training codes."),
    val_codes: Path | None = Opt(None, "--val-codes", help="With --codes: validation codes (`--split val`); "
                                                              "without them the best epoch is chosen by training NLL."),
) -> None:
    """Fit the PixelCNN prior to the run's training codes; writes RUN_DIR/prior (NLL in bits per code)."""
    from vqwae.runs import layout
    from vqwae.runs.prior import foreign_files, holds_prior, kind_replaced, train_and_record_prior

    t0 = time.perf_counter()
    check_run(run_dir)
    for name, v in (("--epochs", epochs), ("--batch-size", batch_size), ("--hidden", hidden), ("--layers", layers),
                    ("--max-steps", max_steps)):
        at_least(name, v)
    if not math.isfinite(lr) or lr <= 0:
        fail(f"--lr must be a finite number > 0, got {lr}")
    at_least("--threads", threads)
    if val_codes is not None and codes is None:
        fail("--val-codes goes with --codes (the training codes file)")
    dev = device_or_fail(device)
    out_dir = out if out is not None else run_dir / layout.PRIOR
    out_folder_or_fail(out_dir)
    foreign = foreign_files(out_dir)
    if foreign:
        fail(f"{foreign[0]} exists and was not written by a vqwae prior: training into {out_dir} would overwrite it; "
             "choose another --out, or move the file away")
    if holds_prior(out_dir) and not force:
        fail(f"{out_dir} already holds a trained prior; pass --force to replace it, or --out to keep both")
    replaced = kind_replaced(out_dir, conditional)  # said after training: a failed start replaces nothing
    try:
        with threads_on(dev, threads):
            result, summary = train_and_record_prior(
                run_dir, conditional=conditional, epochs=epochs, batch_size=batch_size, lr=lr, hidden_channels=hidden,
                num_layers=layers, max_steps=max_steps, device=dev, train_limit=train_limit, eval_limit=eval_limit,
                out_dir=out_dir, data_root=data_root, seed=seed, progress=True, refresh_codes=refresh_codes,
                codes_file=codes, val_codes_file=val_codes, on_epoch=_print_epoch)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    if replaced:
        typer.echo(f"note: this replaced the {replaced} prior in {out_dir} (use --out to keep both)", err=True)
    typer.echo(f"{'class-conditional' if conditional else 'unconditional'} prior: best epoch {result.best_epoch}, "
               f"NLL {result.best_val_bpc:.4f} bits/code (uniform: {summary['uniform_bpc']:.3f}), "
               f"{summary['num_train']} train grids {tuple(summary['grid'])}, {result.steps} steps -> {result.out_dir}")
    print_wall(t0)


def _print_epoch(row: dict) -> None:
    val = "-" if row["val_bpc"] is None else f"{row['val_bpc']:.4f}"
    typer.echo(f"epoch {row['epoch']:>3}  steps {row['steps']:>6}  train {row['train_bpc']:.4f}  "
               f"val {val} bits/code  ({row['seconds']:.1f} s)")


# ---- vqwae sample --------------------------------------------------------------------------------------
MAX_SAMPLES = 100_000


def sample_command(
    run_dir: Path = Arg(..., help="A run folder with a trained prior (`vqwae prior train`)."),
    n: int = Opt(64, "--n", help="Number of images."),
    klass: int | None = Opt(None, "--class", help="Class id (needs a class-conditional prior). A conditional "
                                                     "prior without --class cycles through the classes."),
    temperature: float = Opt(1.0, help="Softmax temperature (1: the model; <1 sharper; 0 greedy)."),
    out: Path | None = Opt(None, "--out", parser=nonempty_path,
                           help="Output folder (default: RUN_DIR/samples), with a hidden manifest (.vqwae-images.json) "
                                "of what it wrote: a later run replaces only those files."),
    batch_size: int = Opt(256, help="Grids sampled in parallel."),
    seed: Seed = 0,
    prior: Path | None = Opt(None, "--prior", help="Prior folder (default: RUN_DIR/prior, or RUN_DIR/prior_cond "
                                                      "when --class is given)."),
    nrow: int | None = Opt(None, help="Images per grid row (default: the classes, or ~sqrt(n))."),
    device: Device = "auto",
    threads: Threads = None,
) -> None:
    """Sample images from the run's prior: one PNG per image and grid.png in --out."""
    from vqwae.figures.image_folder import check_image_folder
    from vqwae.runs import layout
    from vqwae.runs.prior import generate, save_samples

    t0 = time.perf_counter()
    check_run(run_dir)
    at_least("--n", n)
    if n > MAX_SAMPLES:  # one PNG each, all held in memory: a typo of a few digits would fill the machine
        fail(f"--n must be at most {MAX_SAMPLES:,} (one PNG per image), got {n}")
    out_folder_or_fail(out)
    at_least("--batch-size", batch_size)
    at_least("--nrow", nrow)
    if not math.isfinite(temperature) or temperature < 0:
        fail(f"--temperature must be >= 0, got {temperature}")
    if klass is not None and klass < 0:
        fail(f"--class must be >= 0, got {klass}")
    at_least("--threads", threads)
    dev = device_or_fail(device)
    try:
        # before the work; the run's own samples/ of an earlier vqwae (no manifest) is vqwae's
        check_image_folder(out if out is not None else run_dir / layout.SAMPLES, "sample", legacy=out is None)
        with threads_on(dev, threads):
            images, labels, pdir = generate(run_dir, n, labels=klass, conditional=True if klass is not None else None,
                                            prior_dir=prior, temperature=temperature, seed=seed,
                                            batch_size=batch_size, device=dev, progress=True)
    except (FileNotFoundError, FileExistsError, NotADirectoryError, ValueError) as e:
        fail(str(e))
    try:
        out = save_samples(images, labels, out if out is not None else run_dir / layout.SAMPLES, nrow=nrow,
                           cycling=labels is not None and klass is None, legacy=out is None)
    except (FileExistsError, NotADirectoryError) as e:
        fail(str(e))
    kind = "unconditional" if labels is None else (f"class {klass}" if klass is not None else "classes cycled")
    typer.echo(f"{n} samples ({kind}, temperature {temperature}, prior {pdir}) -> {out}/ (+ grid.png)")
    print_wall(t0)
