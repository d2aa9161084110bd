"""The host zoo's table from the result files of ``benchmarks/hosts.py``: one row per host x dataset x K x quantizer,
the test MSE as the mean over seeds with every seed's value, the test perplexity (mean, and the lowest evaluation
after step 1,000: the collapse check), the step time over VQ-VAE's, and for VQ-WAE the transport cells' total
variation from pi against its sampling floor and the W ratio.

    .venv/bin/python benchmarks/hosts_table.py benchmarks/results/host_*_3000_seed*.json
    .venv/bin/python benchmarks/hosts_table.py --at 1500 benchmarks/results/host_*_gpu.json   # runs cut short

A quantizer run twice on one seed (two files of the same cell) counts once, the latest run; ``--models`` keeps only
the quantizers named.

``--at STEP`` reads every run at that evaluation (runs that did not reach it are left out); the step-time column
is then the whole run's.

The best MSE of each host x dataset x K cell is in bold; a quantizer whose mean is within the seeds' spread of the
best (the largest gap between two seeds of the same quantizer in that cell) is marked "(within spread)". With three
seeds or more the cell adds the median and on how many of its seeds the quantizer had the cell's lowest MSE (a mean
that one erratic seed decides is then visible).
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def load(paths: list[Path], at: int | None = None, models: set[str] | None = None) -> dict:
    """(host, dataset, K, steps) -> quantizer -> [row per seed at step ``at`` (default: the run's last)], with the
    lowest perplexity from step 1,000 on. A quantizer run on the same seed in several files counts once: the latest
    run (the files' dates), so a cell can join an older process's peers to a newer run of a changed default.
    ``models``: only these quantizers (None: all)."""
    latest = {}  # (cell, quantizer, seed) -> (date, row)
    for p in paths:
        d = json.loads(p.read_text())
        m = d["meta"]
        steps = at or m["steps"]
        key = (m["host"], m["dataset"], m["num_codes"], steps)
        for row in d["rows"]:
            if models is not None and row["quantizer"] not in models:
                continue
            curve = [c for c in d["curves"][row["quantizer"]] if c["step"] <= steps]
            if not curve or curve[-1]["step"] != steps:
                continue  # a run that did not reach that step
            later = [c["perplexity"] for c in curve if c["step"] >= 1000] or [curve[-1]["perplexity"]]
            entry = dict(row, **curve[-1], seed=m["seed"], min_ppl_after_1000=min(later))
            slot, date = (key, row["quantizer"], m["seed"]), m.get("date", "")
            if slot not in latest or date >= latest[slot][0]:
                latest[slot] = (date, entry)
    cells = defaultdict(lambda: defaultdict(list))  # table() orders each quantizer's rows by seed
    for (key, quantizer, _), (_, entry) in latest.items():
        cells[key][quantizer].append(entry)
    return cells


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(cells: dict) -> str:
    lines = ["| host | dataset | K | steps | quantizer | test MSE, mean (per seed) | test perplexity (lowest after step "
             "1,000) | x VQ-VAE step | cells TV / floor | W ratio |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (host, dataset, k, steps), quantizers in sorted(cells.items()):
        means = {q: statistics.mean(r["mse"] for r in rows) for q, rows in quantizers.items()}
        spread = max((max(r["mse"] for r in rows) - min(r["mse"] for r in rows) for rows in quantizers.values()),
                     default=0.0)
        best = min(means.values())
        lowest = defaultdict(lambda: (float("inf"), None))  # seed -> (the lowest MSE on that seed, its quantizer)
        for q, rows in quantizers.items():
            for r in rows:
                lowest[r["seed"]] = min(lowest[r["seed"]], (r["mse"], q))
        for q, rows in quantizers.items():
            rows = sorted(rows, key=lambda r: r["seed"])
            mse = f"{means[q]:.5f} ({' / '.join(format(r['mse'], '.5f') for r in rows)})"
            if len(rows) >= 3:
                wins = sum(lowest[r["seed"]][1] == q for r in rows)
                mse += f", median {statistics.median(r['mse'] for r in rows):.5f}, lowest on {wins} of {len(rows)} seeds"
            if means[q] == best:
                mse = f"**{mse}**"
            elif len(rows) > 1 and means[q] - best <= spread:
                mse += " (within spread)"
            ppl = statistics.mean(r["perplexity"] for r in rows)
            low = min(r["min_ppl_after_1000"] for r in rows)
            ratio = [r["ratio_to_vqvae"] for r in rows if r.get("ratio_to_vqvae")]
            tv = [(r["tv_cells"], r["tv_floor"]) for r in rows if "tv_cells" in r]
            w = [r["w_ratio"] for r in rows if r.get("w_ratio") is not None]
            lines.append(
                f"| {host} | {dataset} | {k} | {steps} | {q} | {mse} | {ppl:.0f} ({low:.0f}) "
                f"| {fmt(statistics.mean(ratio) if ratio else None, '.2f')} "
                f"| {' / '.join(f'{a:.3f}' for a in map(statistics.mean, zip(*tv))) if tv else '-'} "
                f"| {fmt(statistics.mean(w) if w else None, '.2f')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--at", type=int, default=None, help="read every run at this step (default: its last)")
    ap.add_argument("--models", default=None, help="comma-separated quantizers to show (default: every one)")
    args = ap.parse_args()
    models = None if args.models is None else {m.strip() for m in args.models.split(",")}
    print(table(load(args.files, args.at, models)))


if __name__ == "__main__":
    main()
