"""``vqwae demo``: VQ-WAE against the field's VQ and VQ-VAE on the embedded digits (see ``vqwae.runs.demo``)."""
from __future__ import annotations

from pathlib import Path

import typer

from vqwae.cli.common import THREADS_HELP, at_least, device_or_fail, fail


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), help="Folder for the four runs and the summary."),
    epochs: int = typer.Option(12, help="Training epochs of each model (1,397 images, 44 steps per epoch)."),
    num_codes: int = typer.Option(128, help="Codebook size K."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
    threads: int | None = typer.Option(None, help=THREADS_HELP),
) -> None:
    """Train VQ-WAE, the field's VQ and VQ-VAE (two starts) briefly on the embedded digits; compare codebook use
    and MSE."""
    from vqwae.runs.demo import USAGE_PNG, run_demo

    at_least("--epochs", epochs)
    at_least("--num-codes", num_codes, 2)
    at_least("--threads", threads)
    device_or_fail(device)
    try:
        rows = run_demo(out, epochs=epochs, num_codes=num_codes, device=device, threads=threads, say=typer.echo)
    except (ValueError, FileNotFoundError, FileExistsError, RuntimeError) as e:
        fail(str(e))
    typer.echo(f"\n{'model':<14}{'test perplexity':>17}{'codes used':>12}{'test MSE':>11}{'PSNR':>8}{'train s':>9}")
    for r in rows:
        typer.echo(f"{r['model']:<14}{r['test_perplexity']:>17.1f}{r['codes_used']:>12}{r['test_mse']:>11.5f}"
                   f"{r['test_psnr']:>8.2f}{r['train_seconds']:>9.1f}")
    typer.echo(f"\npictures: {out}/{USAGE_PNG}, {out}/*/reconstructions_test.png, {out}/*/training_curves.png")
