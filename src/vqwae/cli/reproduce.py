"""``vqwae reproduce``: the paper's experiments at a budget, with a report beside the paper's numbers."""
from __future__ import annotations

import sys
from pathlib import Path


import typer

from vqwae.cli.common import THREADS_HELP, Device, at_least, device_or_fail, fail, threads_on
from vqwae.data.catalog import DATASETS, normalise_name

Opt = typer.Option


def reproduce_command(
    experiment: str = Opt("all", help="recon | curves | codebook-size | pi-init | lambda | probe | generation | "
                                      "controllability | tsne | ffhq (VQGAN vs VQ-WAE in VQGAN, on FFHQ under "
                                      "--data-root) | all (comma-separated for several)"),
    datasets: str = Opt("mnist,cifar10", help="Comma-separated: mnist, cifar10, svhn, celeba, digits, ..."),
    budget: str = Opt("smoke", help="smoke (minutes, a test) | cpu (hours on 2 CPU cores) | long (10,000 steps, "
                                    "for recon and curves) | full (the paper's)"),
    data_root: str | None = Opt(None, help="Folder holding the datasets (e.g. ../shared/data)."),
    out: Path = Opt(Path("runs/reproduce"), help="Output folder: runs/, figures/, REPORT.md, REPORT.html."),
    jobs: int = Opt(1, help="Runs trained at once (each with fewer CPU threads)."),
    device: Device = "auto",
    threads: int | None = Opt(None, help=THREADS_HELP + " With --jobs, per job."),
    inception_weights: str | None = Opt(None, envvar="VQWAE_INCEPTION_WEIGHTS"),
    lpips_weights: str | None = Opt(None, envvar="VQWAE_LPIPS_WEIGHTS"),
    records: Path | None = Opt(None, help="Folder of run records (each finished run's config, metrics and "
                                          "evaluation, no weights): start from those found there and save every "
                                          "finished run's record to it, to build a report over several sessions."),
    lead: str | None = Opt(None, help="A longer budget (e.g. long) whose reconstruction table and learning curves "
                                         "open the report, where the rows are heading; its runs go in OUT/<lead>."),
    plan: bool = Opt(False, "--plan", help="Only list the runs (where each stands, the evaluation it needs, the "
                                           "experiments it serves) and stop."),
) -> None:
    """Run (or resume) the paper's experiments; finished runs are reused, interrupted ones resumed."""
    from vqwae.reproduce import reproduce

    at_least("--jobs", jobs)
    at_least("--threads", threads)
    dev = device_or_fail(device)
    names = [d.strip() for d in datasets.split(",") if d.strip()]
    unknown = [d for d in names if normalise_name(d) not in DATASETS]
    if not names or unknown:
        fail(f"--datasets: {', '.join(map(repr, unknown)) if unknown else 'none given'}; valid: {', '.join(DATASETS)}")
    try:
        with threads_on(dev, threads):
            md = reproduce([e.strip() for e in experiment.split(",")], names,
                           budget, out, data_root=data_root, jobs=jobs, device=device, threads=threads,
                           inception_weights=inception_weights, lpips_weights=lpips_weights, records=records, plan=plan, lead=lead,
                           command="vqwae " + " ".join(sys.argv[1:]))
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        fail(str(e))
    if md is not None:
        typer.echo(f"report: {md} and {md.with_suffix('.html')}")
