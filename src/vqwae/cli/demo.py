"""``vqwae demo``: VQ-WAE against VQ-VAE on scikit-learn's embedded digits (no files, no network).

Trains both briefly with the same network, batch, codebook and steps, evaluates each on the test split,
and writes OUT/{vqwae,vqvae}/ (full run folders), OUT/code_usage.png (side by side), OUT/summary.json
and a printed table. Rerunning resumes or reuses the finished runs instead of overwriting them.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from vqwae.figures import side_by_side_usage
from vqwae.runs import layout
from vqwae.runs.evaluation import evaluate_run
from vqwae.training import TrainConfig, train

Opt = typer.Option


def demo_command(
    out: Path = Opt(Path("runs/demo"), help="Folder for the two runs and the summary."),
    epochs: int = Opt(12, help="Training epochs of each model (1,397 images, 44 steps per epoch)."),
    num_codes: int = Opt(128, help="Codebook size K."),
    device: str = Opt("auto"),
) -> None:
    """Train VQ-WAE and VQ-VAE briefly on the embedded digits and compare codebook use and MSE."""
    out.mkdir(parents=True, exist_ok=True)
    rows, counts = [], {}
    for model in ("vqwae", "vqvae"):
        run = out / model
        cfg = TrainConfig.resolve(model=model, dataset="digits", out=str(run), epochs=epochs, num_codes=num_codes,
                                  device=device)
        typer.echo(f"== training {model} ({epochs} epochs, K={num_codes}) -> {run}")
        t0 = time.perf_counter()
        train(cfg, resume=(run / layout.STATE).exists())
        seconds = time.perf_counter() - t0
        res = evaluate_run(run, split="test", fid=False, lpips=False, device=device, progress=False)
        counts[model] = json.loads(layout.code_usage_json(run, "test").read_text())
        rows.append(dict(model=model, test_perplexity=res["perplexity"], codes_used=res["codes_used"],
                         test_mse=res["mse"], test_psnr=res["psnr"], train_seconds=seconds))
    side_by_side_usage(counts, out / "code_usage.png", title=f"Code usage on the digits test split (K={num_codes})")
    (out / "summary.json").write_text(json.dumps(rows, indent=2))
    typer.echo(f"\n{'model':<8}{'test perplexity':>17}{'codes used':>12}{'test MSE':>11}{'PSNR':>8}{'train s':>9}")
    for r in rows:
        typer.echo(f"{r['model']:<8}{r['test_perplexity']:>17.1f}{r['codes_used']:>12}{r['test_mse']:>11.5f}"
                   f"{r['test_psnr']:>8.2f}{r['train_seconds']:>9.1f}")
    typer.echo(f"\npictures: {out}/code_usage.png, {out}/*/reconstructions_test.png, {out}/*/training_curves.png")
