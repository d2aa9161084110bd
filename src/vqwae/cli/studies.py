"""``vqwae probe`` and ``vqwae tsne``: representation studies of a run (``vqwae.runs.studies``).

    vqwae probe RUN_DIR [--limit N]          -> probe_accuracy, probe_accuracy_continuous in eval.json
    vqwae tsne RUN_DIR [--n 2000] [--out RUN_DIR/tsne.png]   -> tsne_silhouette in eval.json
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from vqwae.cli.common import (DataRoot, Device, RunDir, Seed, Threads, at_least, check_run, device_or_fail, fail,
                              nonempty_path, print_wall, threads_on)

Opt = typer.Option
#: --batch-size of both studies (their forward passes over a run's images)
ImageBatch = Annotated[int, Opt(help="Images per forward pass.")]


# ---- vqwae probe ---------------------------------------------------------------------------------------
def probe_command(
    run_dir: RunDir,
    limit: int | None = Opt(None, help="Use the first N training and first N test images (default: all)."),
    batch_size: ImageBatch = 256,
    device: Device = "auto",
    threads: Threads = None,
    data_root: DataRoot = None,
) -> None:
    """Linear probe on the frozen quantized latents (and the continuous encoder output): test accuracy."""
    from vqwae.runs import layout
    from vqwae.runs.studies import probe_run

    t0 = time.perf_counter()
    check_run(run_dir)
    at_least("--limit", limit)
    at_least("--batch-size", batch_size)
    at_least("--threads", threads)
    dev = device_or_fail(device)
    try:
        with threads_on(dev, threads):
            merged, res = probe_run(run_dir, limit=limit, device=dev, batch_size=batch_size, data_root=data_root)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    q, c = res["quantized"], res["continuous"]
    typer.echo(f"linear probe, {layout.read_config(run_dir).data.dataset}: {merged['probe_num_train']} train / "
               f"{merged['probe_num_test']} test images")
    typer.echo(f"  {'features':<12} {'dim':>6} {'train acc':>10} {'test acc':>10}")
    for name, r in (("quantized", q), ("continuous", c)):
        typer.echo(f"  {name:<12} {r.num_features:>6} {r.train_accuracy:>10.4f} {r.test_accuracy:>10.4f}")
    typer.echo(f"  -> {run_dir / layout.EVAL} (probe_accuracy, probe_accuracy_continuous)")
    print_wall(t0)


# ---- vqwae tsne ----------------------------------------------------------------------------------------
def tsne_command(
    run_dir: RunDir,
    n: int = Opt(2000, "--n", help="Embed the first N test images."),
    out: Path | None = Opt(None, "--out", parser=nonempty_path, help="PNG path (default: RUN_DIR/tsne.png)."),
    perplexity: float = Opt(30.0, help="t-SNE perplexity (capped at (n-1)/3)."),
    seed: Seed = 0,
    batch_size: ImageBatch = 256,
    device: Device = "auto",
    threads: Threads = None,
    data_root: DataRoot = None,
) -> None:
    """t-SNE of the flattened quantized latents of test images, coloured by class; silhouette -> eval.json."""
    from vqwae.runs.studies import tsne_run
    from vqwae.threads import library_threads

    t0 = time.perf_counter()
    check_run(run_dir)
    at_least("--n", n, 3)
    at_least("--batch-size", batch_size)
    if perplexity <= 0:
        fail(f"--perplexity must be > 0, got {perplexity}")
    at_least("--threads", threads)
    dev = device_or_fail(device)
    try:
        with threads_on(dev, threads) as _, library_threads(threads):
            merged = tsne_run(run_dir, n=n, out_png=out, device=dev, batch_size=batch_size, perplexity=perplexity,
                              seed=seed, data_root=data_root)
    except (FileNotFoundError, FileExistsError, ValueError) as e:
        fail(str(e))
    if merged["tsne_points"] < n:
        typer.echo(f"note: the test split has only {merged['tsne_points']} images (asked for {n})")
    typer.echo(f"t-SNE of {merged['tsne_points']} test images: silhouette {merged['tsne_silhouette']} -> {merged['tsne_png']}")
    print_wall(t0)
