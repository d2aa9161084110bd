"""Mean-of-seeds table and curves from several runs of peer_comparison.py (or residual_comparison.py).

Each run of a comparison script trains every model on one seed's batches. This script reads the result
files of the same comparison on several seeds and prints one markdown table: for each model and each
evaluation step, the mean over seeds followed by every seed's value, so the spread is in plain view. It also
draws the mean curves with a band spanning the seeds.

    .venv/bin/python benchmarks/seed_summary.py benchmarks/results/peer_cifar10_3000_kl_seed0.json \
        benchmarks/results/peer_cifar10_3000_kl_seed1.json --steps 1000,2000,3000 --out benchmarks/results/peer_cifar10_3000_kl_seeds.png

One seed's runs may be split over several files (models added to a comparison later, on the same seed's
batches): join them with "+", e.g. `peer_cifar10_3000_kl_seed0.json+peer_cifar10_3000_floor_seed0.json`. A
model in more than one of them is taken from the first. Only the models present for every seed are
summarised. Step times are the median of each run's per-step
ratios to VQ-VAE, averaged over the runs (the absolute times depend on the machine's load at the time).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def merged(paths: list[Path]) -> dict:
    """One seed's result files as one run: curves and rows of every model, the first file's where they overlap
    (each row's step-time ratio stays relative to its own file's VQ-VAE, measured interleaved with it)."""
    parts = [json.loads(p.read_text()) for p in paths]
    run = dict(meta=parts[0]["meta"], curves={}, rows=[])
    for part in parts:
        new = [n for n in part["curves"] if n not in run["curves"]]
        run["curves"].update({n: part["curves"][n] for n in new})
        run["rows"] += [r for r in part["rows"] if r.get("quantizer") in new]
    return run


def load(seeds: list[list[Path]]) -> tuple[list[dict], list[str]]:
    runs = [merged(paths) for paths in seeds]
    names = [n for n in runs[0]["curves"] if all(n in r["curves"] for r in runs)]
    if not names:
        raise SystemExit("error: the result files share no model")
    return runs, names


def value_at(run: dict, name: str, step: int, key: str):
    for point in run["curves"][name]:
        if point["step"] == step:
            v = point[key]
            return statistics.fmean(v) if isinstance(v, list) else v  # residual runs: mean over levels
    return None


def cell(values: list, fmt: str) -> str:
    if any(v is None for v in values):
        return "-"
    return f"{format(statistics.fmean(values), fmt)} ({' / '.join(format(v, fmt) for v in values)})"


def table(runs: list[dict], names: list[str], steps: list[int]) -> str:
    head = ["quantizer", "x VQ-VAE step"]
    head += [f"perplexity @{s}" for s in steps] + [f"test MSE @{s}" for s in steps]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for n in names:
        ratios = [next((r["ratio_to_vqvae"] for r in run["rows"] if r.get("quantizer") == n), None) for run in runs]
        row = [n, cell(ratios, ".2f") if all(ratios) else "-"]
        row += [cell([value_at(r, n, s, "perplexity") for r in runs], ".0f") for s in steps]
        row += [cell([value_at(r, n, s, "mse") for r in runs], ".5f") for s in steps]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot(runs: list[dict], names: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for n in names:
        steps = [p["step"] for p in runs[0]["curves"][n]]
        for ax, key in zip(axes, ("perplexity", "mse")):
            per_seed = [[value_at(r, n, s, key) for r in runs] for s in steps]
            mean = [statistics.fmean(v) for v in per_seed]
            line, = ax.plot(steps, mean, marker="o", label=n)
            ax.fill_between(steps, [min(v) for v in per_seed], [max(v) for v in per_seed],
                            color=line.get_color(), alpha=0.2)
    axes[0].set(xlabel="training step", ylabel="test perplexity", title=f"{title}: codebook use")
    axes[1].set(xlabel="training step", ylabel="test MSE", yscale="log", title=f"{title}: reconstruction")
    for a in axes:
        a.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"mean of {len(runs)} seeds; band: min-max over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="result JSON files, one per seed (one seed's files joined by '+')")
    p.add_argument("--steps", default="1000,2000,3000", help="comma-separated evaluation steps for the table")
    p.add_argument("--out", type=Path, help="PNG path for the mean curves (default: none)")
    args = p.parse_args(argv)
    seeds = [[Path(f) for f in arg.split("+")] for arg in args.files]
    for f in (f for paths in seeds for f in paths):
        if not f.is_file():
            raise SystemExit(f"error: no result file {f}")
    runs, names = load(seeds)
    steps = [int(s) for s in args.steps.split(",")]
    print(table(runs, names, steps))
    if args.out:
        plot(runs, names, args.out, runs[0]["meta"].get("dataset", ""))
        print(f"-> {args.out}")


if __name__ == "__main__":
    main()
