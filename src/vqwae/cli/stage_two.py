"""Stage-two commands on a run folder: ``vqwae prior train``, ``vqwae sample``, ``vqwae probe``, ``vqwae tsne``.

    vqwae prior train RUN_DIR [--conditional] [--epochs 20] [--hidden 64] [--layers 15] [--max-steps N]
    vqwae sample RUN_DIR --n 64 [--class 3] [--temperature 1.0] [--out RUN_DIR/samples]
    vqwae probe RUN_DIR [--limit N]          -> probe_accuracy, probe_accuracy_continuous in eval.json
    vqwae tsne RUN_DIR [--n 2000] [--out RUN_DIR/tsne.png]   -> tsne_silhouette in eval.json

Generation FID is ``vqwae eval RUN_DIR --generation`` (:func:`vqwae.runs.prior.generation_fid`).
Every command prints its wall time; user mistakes end with a one-line ``error: ...`` (exit 2).
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from vqwae.cli.errors import fail
from vqwae.threads import cpu_threads, library_threads

Opt = typer.Option
Arg = typer.Argument

prior_app = typer.Typer(help="The stage-two PixelCNN prior over a run's code grids.", no_args_is_help=True,
                        pretty_exceptions_show_locals=False, add_completion=False)


def _device(name: str):
    from vqwae.distributed import resolve_device

    try:
        return resolve_device(name)
    except (ValueError, RuntimeError) as e:
        fail(f"bad --device {name!r}: {e}")


def _check_run(run_dir: Path) -> None:
    if not run_dir.is_dir():
        fail(f"run folder {run_dir} not found")
    if not (run_dir / "config.json").is_file() or not (run_dir / "model.safetensors").is_file():
        fail(f"{run_dir} is not a trained run folder (no config.json / model.safetensors; make one with `vqwae train`)")


def _threads(dev, threads: Optional[int]):
    """On the CPU: torch's intra-op threads for the command (None: the idle CPUs, vqwae.threads)."""
    return cpu_threads(threads) if dev.type == "cpu" else contextlib.nullcontext()


THREADS_HELP = "CPU threads [default: the CPUs not already busy]."


def _wall(t0: float) -> None:
    typer.echo(f"wall time: {time.perf_counter() - t0:.1f} s")


def _progress() -> bool:
    return sys.stderr.isatty()


def _positive(name: str, value: Optional[int | float], minimum=1) -> None:
    if value is not None and value < minimum:
        fail(f"{name} must be >= {minimum}, got {value}")


# ---- vqwae prior train ---------------------------------------------------------------------------------
@prior_app.callback()
def prior_main() -> None:
    """Train the gated PixelCNN prior of a run (stage two of VQ-WAE / VQ-VAE)."""


@prior_app.command("train")
def prior_train_command(
    run_dir: Path = Arg(..., help="A run folder made by `vqwae train`."),
    conditional: bool = Opt(False, "--conditional", help="Class-conditional prior (needs a labelled dataset)."),
    epochs: int = Opt(20, help="Epochs over the training codes (best epoch by validation NLL is kept)."),
    batch_size: int = Opt(128, help="Code grids per step (the paper: 128)."),
    lr: float = Opt(3e-4, help="Adam learning rate (the paper: 3e-4)."),
    hidden: int = Opt(64, help="Channels per stack (64: 1.5M parameters with K=512; 32 is ~3x faster)."),
    layers: int = Opt(15, help="Gated layers (the paper: 15)."),
    max_steps: Optional[int] = Opt(None, help="Stop after N optimiser steps (the epoch in progress is evaluated)."),
    device: str = Opt("auto", help="auto | cpu | cuda | cuda:N"),
    threads: Optional[int] = Opt(None, help=THREADS_HELP),
    train_limit: Optional[int] = Opt(None, help="Override the run's train limit: first N training images (-1: all)."),
    eval_limit: Optional[int] = Opt(None, help="Override the run's eval limit: first N validation images (-1: all)."),
    out: Optional[Path] = Opt(None, "--out", help="Prior folder [default: RUN_DIR/prior]; RUN_DIR/prior_cond or "
                                                  "RUN_DIR/prior_uncond keep a second prior next to it."),
    data_root: Optional[str] = Opt(None, help="Override the dataset location recorded in the run."),
    seed: int = Opt(0),
    refresh_codes: bool = Opt(False, "--refresh-codes", help="Re-extract the code grids even if cached."),
) -> None:
    """Fit the PixelCNN prior to the run's training codes; writes RUN_DIR/prior (NLL in bits per code)."""
    from vqwae.runs.layout import PRIOR as PRIOR_DIR
    from vqwae.runs.prior import prior_is_conditional, train_run_prior
    from vqwae.runs.layout import update_eval

    t0 = time.perf_counter()
    _check_run(run_dir)
    for name, v in (("--epochs", epochs), ("--batch-size", batch_size), ("--hidden", hidden), ("--layers", layers),
                    ("--max-steps", max_steps)):
        _positive(name, v)
    if lr <= 0:
        fail(f"--lr must be > 0, got {lr}")
    _positive("--threads", threads)
    dev = _device(device)
    out_dir = out if out is not None else run_dir / PRIOR_DIR
    if (out_dir / "config.json").is_file() and (out_dir / "model.safetensors").is_file():
        try:
            was_cond = prior_is_conditional(out_dir)
        except (OSError, ValueError):
            was_cond = None
        if was_cond is not None and was_cond != conditional:
            kind = "class-conditional" if was_cond else "unconditional"
            typer.echo(f"note: replacing the {kind} prior in {out_dir} (use --out to keep both)", err=True)
    try:
        with _threads(dev, threads):
            result, summary = train_run_prior(
                run_dir, conditional=conditional, epochs=epochs, batch_size=batch_size, lr=lr, hidden_channels=hidden,
                num_layers=layers, max_steps=max_steps, device=dev, train_limit=train_limit, eval_limit=eval_limit,
                out_dir=out_dir, data_root=data_root, seed=seed, progress=_progress(), refresh_codes=refresh_codes)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    for row in result.history:
        val = "-" if row["val_bpc"] is None else f"{row['val_bpc']:.4f}"
        typer.echo(f"epoch {row['epoch']:>3}  steps {row['steps']:>6}  train {row['train_bpc']:.4f}  "
                   f"val {val} bits/code  ({row['seconds']:.1f} s)")
    key = "prior_cond_val_bpc" if conditional else "prior_val_bpc"
    update_eval(run_dir, {key: result.best_val_bpc})
    typer.echo(f"{'class-conditional' if conditional else 'unconditional'} prior: best epoch {result.best_epoch}, "
               f"NLL {result.best_val_bpc:.4f} bits/code (uniform: {summary['uniform_bpc']:.3f}), "
               f"{summary['num_train']} train grids {tuple(summary['grid'])}, {result.steps} steps -> {result.out_dir}")
    _wall(t0)


# ---- vqwae sample --------------------------------------------------------------------------------------
def sample_command(
    run_dir: Path = Arg(..., help="A run folder with a trained prior (`vqwae prior train`)."),
    n: int = Opt(64, "--n", help="Number of images."),
    klass: Optional[int] = Opt(None, "--class", help="Class id (needs a class-conditional prior). A conditional "
                                                     "prior without --class cycles through the classes."),
    temperature: float = Opt(1.0, help="Softmax temperature (1: the model; <1 sharper; 0 greedy)."),
    out: Optional[Path] = Opt(None, "--out", help="Output folder [default: RUN_DIR/samples]."),
    batch_size: int = Opt(256, help="Grids sampled in parallel."),
    seed: int = Opt(0),
    prior: Optional[Path] = Opt(None, "--prior", help="Prior folder [default: RUN_DIR/prior, or RUN_DIR/prior_cond "
                                                      "when --class is given]."),
    nrow: Optional[int] = Opt(None, help="Images per grid row [default: the classes, or ~sqrt(n)]."),
    device: str = Opt("auto", help="auto | cpu | cuda | cuda:N"),
    threads: Optional[int] = Opt(None, help=THREADS_HELP),
) -> None:
    """Sample images from the run's prior: one PNG per image and grid.png in --out."""
    from torchvision.utils import save_image

    from vqwae.runs.prior import generate

    t0 = time.perf_counter()
    _check_run(run_dir)
    _positive("--n", n)
    _positive("--batch-size", batch_size)
    _positive("--nrow", nrow)
    if not math.isfinite(temperature) or temperature < 0:
        fail(f"--temperature must be >= 0, got {temperature}")
    if klass is not None and klass < 0:
        fail(f"--class must be >= 0, got {klass}")
    _positive("--threads", threads)
    dev = _device(device)
    try:
        with _threads(dev, threads):
            images, labels, pdir = generate(run_dir, n, labels=klass, conditional=True if klass is not None else None,
                                            prior_dir=prior, temperature=temperature, seed=seed,
                                            batch_size=batch_size, device=dev, progress=_progress())
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    out = out if out is not None else run_dir / "samples"
    out.mkdir(parents=True, exist_ok=True)
    width = len(str(n - 1))
    for i in range(n):
        suffix = f"_class{int(labels[i])}" if labels is not None else ""
        save_image(images[i], out / f"sample_{i:0{width}d}{suffix}.png")
    if nrow is None:
        cycling = labels is not None and klass is None
        nrow = int(labels.max()) + 1 if cycling and n > int(labels.max()) else max(1, math.ceil(math.sqrt(n)))
    save_image(images, out / "grid.png", nrow=nrow, padding=2, pad_value=1.0)
    kind = "unconditional" if labels is None else (f"class {klass}" if klass is not None else "classes cycled")
    typer.echo(f"{n} samples ({kind}, temperature {temperature}, prior {pdir}) -> {out}/ (+ grid.png)")
    _wall(t0)


# ---- vqwae probe ---------------------------------------------------------------------------------------
def probe_command(
    run_dir: Path = Arg(..., help="A run folder made by `vqwae train`."),
    limit: Optional[int] = Opt(None, help="Use the first N training and first N test images [default: all]."),
    batch_size: int = Opt(256, help="Images per forward pass."),
    device: str = Opt("auto", help="auto | cpu | cuda | cuda:N"),
    threads: Optional[int] = Opt(None, help=THREADS_HELP),
    data_root: Optional[str] = Opt(None, help="Override the dataset location recorded in the run."),
) -> None:
    """Linear probe on the frozen quantized latents (and the continuous encoder output): test accuracy."""
    from vqwae.runs.studies import probe_run

    t0 = time.perf_counter()
    _check_run(run_dir)
    _positive("--limit", limit)
    _positive("--batch-size", batch_size)
    _positive("--threads", threads)
    dev = _device(device)
    try:
        with _threads(dev, threads):
            merged, res = probe_run(run_dir, limit=limit, device=dev, batch_size=batch_size, data_root=data_root)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    q, c = res["quantized"], res["continuous"]
    typer.echo(f"linear probe, {merged.get('dataset', '')}: {merged['probe_num_train']} train / "
               f"{merged['probe_num_test']} test images")
    typer.echo(f"  {'features':<12} {'dim':>6} {'train acc':>10} {'test acc':>10}")
    for name, r in (("quantized", q), ("continuous", c)):
        typer.echo(f"  {name:<12} {r.num_features:>6} {r.train_accuracy:>10.4f} {r.test_accuracy:>10.4f}")
    typer.echo(f"  -> {run_dir / 'eval.json'} (probe_accuracy, probe_accuracy_continuous)")
    _wall(t0)


# ---- vqwae tsne ----------------------------------------------------------------------------------------
def tsne_command(
    run_dir: Path = Arg(..., help="A run folder made by `vqwae train`."),
    n: int = Opt(2000, "--n", help="Embed the first N test images."),
    out: Optional[Path] = Opt(None, "--out", help="PNG path [default: RUN_DIR/tsne.png]."),
    perplexity: float = Opt(30.0, help="t-SNE perplexity (capped at (n-1)/3)."),
    seed: int = Opt(0),
    batch_size: int = Opt(256, help="Images per forward pass."),
    device: str = Opt("auto", help="auto | cpu | cuda | cuda:N"),
    threads: Optional[int] = Opt(None, help=THREADS_HELP),
    data_root: Optional[str] = Opt(None, help="Override the dataset location recorded in the run."),
) -> None:
    """t-SNE of the flattened quantized latents of test images, coloured by class; silhouette -> eval.json."""
    from vqwae.runs.studies import tsne_run

    t0 = time.perf_counter()
    _check_run(run_dir)
    _positive("--n", n, 3)
    _positive("--batch-size", batch_size)
    if perplexity <= 0:
        fail(f"--perplexity must be > 0, got {perplexity}")
    _positive("--threads", threads)
    dev = _device(device)
    try:
        with _threads(dev, threads) as _, library_threads(threads):
            merged = tsne_run(run_dir, n=n, out_png=out, device=dev, batch_size=batch_size, perplexity=perplexity,
                              seed=seed, data_root=data_root)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    if merged["tsne_points"] < n:
        typer.echo(f"note: the test split has only {merged['tsne_points']} images (asked for {n})")
    typer.echo(f"t-SNE of {merged['tsne_points']} test images: silhouette {merged['tsne_silhouette']} -> {merged['tsne_png']}")
    _wall(t0)
