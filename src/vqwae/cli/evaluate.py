"""``vqwae eval RUN_DIR``: reconstruction metrics, code usage and pictures (and generation FID)."""
from __future__ import annotations


import typer

from vqwae.cli.common import (DataRoot, Device, RunDir, Threads, at_least, check_run, device_or_fail, fail,
                              threads_on)

Opt = typer.Option

TABLE_KEYS = ("mse", "psnr", "ssim", "lpips", "lpips_vgg", "rfid", "perplexity", "codes_used", "num_images",
              "gfid_uncond", "gfid_cond")


def eval_command(
    run_dir: RunDir,
    split: str = Opt("test", help="val | test"),
    limit: int | None = Opt(None, help="Evaluate the first N images of the split."),
    batch_size: int = Opt(100),
    resolution: str = Opt("native", help="native | 256 (the authors upsample 32x32 to 256 for PSNR/SSIM/LPIPS)."),
    inception_weights: str | None = Opt(None, envvar="VQWAE_INCEPTION_WEIGHTS",
                                           help="FID InceptionV3 TorchScript file (env VQWAE_INCEPTION_WEIGHTS)."),
    lpips_weights: str | None = Opt(None, envvar="VQWAE_LPIPS_WEIGHTS",
                                       help="LPIPS folder with alexnet_features.pth and v0.1/alex.pth (and, for "
                                            "--lpips-vgg, vgg16_features.pth and v0.1/vgg.pth) "
                                            "(env VQWAE_LPIPS_WEIGHTS)."),
    fid: bool = Opt(True, "--fid/--no-fid", help="Compute rFID."),
    lpips: bool = Opt(True, "--lpips/--no-lpips", help="Compute LPIPS."),
    lpips_vgg: bool = Opt(False, "--lpips-vgg/--no-lpips-vgg", help="Also compute LPIPS with the VGG16 trunk."),
    generation: bool = Opt(False, "--generation", help="Also generation FID from RUN_DIR/prior (see `vqwae prior train`)."),
    n_samples: int = Opt(1000, help="Generated images for --generation."),
    download_weights: bool = Opt(False, "--download-weights",
                                 help="Fetch metric weights not found locally (Inception from torch-fidelity's "
                                      "release, the LPIPS trunks from torchvision); without it nothing is downloaded "
                                      "and a metric whose weights are missing is skipped, saying why."),
    device: Device = "auto",
    threads: Threads = None,
    data_root: DataRoot = None,
) -> None:
    """Evaluate a trained run; writes RUN_DIR/eval.json and PNGs next to it, prints a table."""
    from vqwae.runs import layout
    from vqwae.runs.evaluation import evaluate_run
    from vqwae.runs.generation import run_generation_fid

    res = 256 if resolution == "256" else resolution
    if res not in ("native", 256):
        fail(f"unknown resolution {resolution!r}; valid: native, 256")
    if split not in ("val", "test"):
        fail(f"unknown --split {split!r}; valid: val, test")
    check_run(run_dir)
    at_least("--limit", limit)
    at_least("--batch-size", batch_size)
    at_least("--n-samples", n_samples)
    at_least("--threads", threads)
    if generation and not fid:
        fail("--generation measures a FID: it cannot run with --no-fid")
    dev = device_or_fail(device)
    try:
        result = evaluate_run(run_dir, split=split, limit=limit, batch_size=batch_size, resolution=res,
                              inception_weights=inception_weights, lpips_weights=lpips_weights, fid=fid,
                              lpips=lpips, lpips_vgg=lpips_vgg, device=dev, data_root=data_root, threads=threads,
                              download_weights=download_weights)
        if generation:  # the prior's sampling and the Inception network obey --threads / VQWAE_THREADS too
            with threads_on(dev, threads):
                result = run_generation_fid(run_dir, n=n_samples, inception_weights=inception_weights,
                                            device=dev, limit=limit, progress=True,
                                            download_weights=download_weights)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    typer.echo(f"\n{run_dir}  ({result.get('model')} on {result.get('dataset')}, {split} split, "
               f"{result.get('resolution')} resolution)")
    for k in TABLE_KEYS:
        if k in result:
            v = result[k]
            shown = "skipped: " + str(result.get(f"{k}_skipped", "")) if v is None else (
                f"{v:.6g}" if isinstance(v, float) else str(v))
            typer.echo(f"  {k:<12} {shown}")
    typer.echo(f"  seconds      {result.get('seconds', 0):.1f}\n  -> {run_dir / layout.EVAL}")
