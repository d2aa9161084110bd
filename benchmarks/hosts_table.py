"""The host zoo's table from the result files of ``benchmarks/hosts.py``: one row per host x dataset x K x quantizer,
the test MSE as the mean over seeds with every seed's value, the test perplexity (mean, and the lowest evaluation
after step 1,000: the collapse check) with the codes used on each seed, the step time over VQ-VAE's (or in ms),
and for VQ-WAE the transport cells' total variation from pi against its sampling floor and the W ratio.

    .venv/bin/python benchmarks/hosts_table.py benchmarks/results/host_*_3000_seed*.json
    .venv/bin/python benchmarks/hosts_table.py --at 1500 benchmarks/results/host_*_gpu.json   # runs cut short

A quantizer run twice on one seed and stream (two files of the same cell) counts once, the latest run; each stream of
a seed (``hosts.py --stream``) is a run of its own, listed after the seed's first (the columns "per seed" then hold
one value per run); ``--models`` keeps only the quantizers named. ``--step ms`` prints each quantizer's milliseconds a step (the mean over its seeds) instead of
its ratio to VQ-VAE's, for cells without VQ-VAE in the process (the large codebooks of issue #67):

    R=benchmarks/results; .venv/bin/python benchmarks/hosts_table.py --step ms $R/host_*_k16384_1000_seed*_{largek,largek2,largek3,peers}.json

``--against QUANTIZER`` prints, instead of the table, each quantizer's test MSE over that one's on every run both
have (cell x seed x stream): the geometric mean and the median of the ratios, their range and on how many runs it is
lower (lab 52m, 52n).

``--rises FACTOR`` counts, instead, each quantizer's evaluations from step 500 whose test MSE is above FACTOR x the
run's previous evaluation, and names them: how often a run's error jumps between two evaluations (lab 64).

``--metric l1`` shows the example host's test L1 (the error vector-quantize-pytorch's example reports) in place of
the MSE.

``--label OLD=NEW[,OLD=NEW]`` shows a quantizer under another name (after ``--models``), e.g. ``"pull 0.02=VQ-WAE"``
for runs of a label whose value became the default (two files' labels for one quantizer then join in one row). A run
both names have counts once: the latest file's row, and within one process (the old default beside the label) the
label's, which is what NEW names now.

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


def load(paths: list[Path], at: int | None = None, models: set[str] | None = None,
         names: dict[str, str] | None = None) -> dict:
    """(host, dataset, K, steps) -> quantizer -> [row per seed at step ``at`` (default: the run's last)], with the
    lowest perplexity from step 1,000 on. A quantizer run on the same seed in several files counts once: the latest
    run (the files' dates), so a cell can join an older process's peers to a newer run of a changed default.
    ``models``: only these quantizers (None: all). ``names``: quantizers shown under another name (``--label``), their
    runs joined to that name's; where one process ran both on a run, the renamed one's row counts (the name means it
    now)."""
    names = names or {}
    latest = {}  # (cell, name, (seed, stream)) -> ((date, renamed), row)
    for p in paths:
        d = json.loads(p.read_text())
        m = d["meta"]
        steps = at or m["steps"]
        host = m["host"] + (f" (batch {m['batch']})" if "batch" in m else "")  # another batch is another cell
        key = (host, m["dataset"], m["num_codes"], steps)
        for row in d["rows"]:
            q = row["quantizer"]
            if models is not None and q not in models:
                continue
            curve = [c for c in d["curves"][q] if c["step"] <= steps]
            if not curve or curve[-1]["step"] != steps:
                continue  # a run that did not reach that step
            later = [c["perplexity"] for c in curve if c["step"] >= 1000] or [curve[-1]["perplexity"]]
            run = (m["seed"], m.get("stream", 0))  # files written before streams existed are stream 0
            slot, rank = (key, names.get(q, q), run), (m.get("date", ""), q in names)
            entry = dict(row, **curve[-1], run=run, min_ppl_after_1000=min(later),
                         errors=[(c["step"], c["mse"]) for c in curve])
            if slot not in latest or rank >= latest[slot][0]:
                latest[slot] = (rank, entry)
    cells = defaultdict(lambda: defaultdict(list))  # table() orders each quantizer's rows by run
    for (key, quantizer, _), (_, entry) in latest.items():
        cells[key][quantizer].append(entry)
    return cells


#: the error columns a table can show: the result rows' key -> its name
METRICS = {"mse": "MSE", "l1": "L1"}


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(cells: dict, step: str = "ratio", metric: str = "mse") -> str:
    """The markdown table; ``step``: the step time as a ratio to VQ-VAE's in the same process, or in ms; ``metric``:
    the error column (``mse``, or ``l1``: the example host's L1 in its [-1, 1] units)."""
    step_head, step_key, step_spec = (("x VQ-VAE step", "ratio_to_vqvae", ".2f") if step == "ratio"
                                      else ("ms a step", "ms_per_step", ",.0f"))
    lines = [f"| host | dataset | K | steps | quantizer | test {METRICS[metric]}, mean (per seed) "
             "| test perplexity (lowest after step "
             f"1,000), codes used per seed | {step_head} | cells TV / floor | W ratio |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (host, dataset, k, steps), quantizers in sorted(cells.items()):
        means = {q: statistics.mean(r[metric] for r in rows) for q, rows in quantizers.items()}
        spread = max((max(r[metric] for r in rows) - min(r[metric] for r in rows) for rows in quantizers.values()),
                     default=0.0)
        best = min(means.values())
        lowest = defaultdict(lambda: (float("inf"), None))  # run -> (the lowest MSE on that run, its quantizer)
        for q, rows in quantizers.items():
            for r in rows:
                lowest[r["run"]] = min(lowest[r["run"]], (r[metric], q))
        for q, rows in quantizers.items():
            rows = sorted(rows, key=lambda r: r["run"])
            mse = f"{means[q]:.5f} ({' / '.join(format(r[metric], '.5f') for r in rows)})"
            if len(rows) >= 3:
                wins = sum(lowest[r["run"]][1] == q for r in rows)
                unit = "runs" if any(r["run"][1] for r in rows) else "seeds"  # a seed's streams are runs too
                median = statistics.median(r[metric] for r in rows)
                mse += f", median {median:.5f}, lowest on {wins} of {len(rows)} {unit}"
            if means[q] == best and len(quantizers) > 1:  # a quantizer alone in its cell is nobody's best
                mse = f"**{mse}**"
            elif len(rows) > 1 and means[q] - best <= spread:
                mse += " (within spread)"
            ppl = statistics.mean(r["perplexity"] for r in rows)
            low = min(r["min_ppl_after_1000"] for r in rows)
            codes = " / ".join(f"{r['codes_used']:,}" for r in rows)  # per seed: one seed's unused codes show
            step_times = [r[step_key] for r in rows if r.get(step_key)]
            tv = [(r["tv_cells"], r["tv_floor"]) for r in rows if "tv_cells" in r]
            w = [r["w_ratio"] for r in rows if r.get("w_ratio") is not None]
            lines.append(
                f"| {host} | {dataset} | {k} | {steps} | {q} | {mse} | {ppl:.0f} ({low:.0f}), {codes} "
                f"| {fmt(statistics.mean(step_times) if step_times else None, step_spec)} "
                f"| {' / '.join(f'{a:.3f}' for a in map(statistics.mean, zip(*tv))) if tv else '-'} "
                f"| {fmt(statistics.mean(w) if w else None, '.2f')} |")
    return "\n".join(lines)


def against(cells: dict, reference: str) -> str:
    """Each quantizer's test MSE over ``reference``'s on every run (cell x seed x stream) both have: the geometric mean
    and the median of the ratios, their range and on how many runs it is lower. One ratio per run, so a cell's mean
    does not hide a seed."""
    ratios = defaultdict(list)
    for quantizers in cells.values():
        ref = {r["run"]: r["mse"] for r in quantizers.get(reference, [])}
        for q, rows in quantizers.items():
            ratios[q] += [r["mse"] / ref[r["run"]] for r in rows if q != reference and r["run"] in ref]
    lines = [f"| quantizer | test MSE over {reference}'s: geometric mean | median | range | runs where it is lower |",
             "| --- | --- | --- | --- | --- |"]
    for q, v in sorted(ratios.items()):
        if v:  # the median beside the mean: one run caught in a collapse moves the mean, not the median
            lines.append(f"| {q} | {statistics.geometric_mean(v) - 1:+.1%} | {statistics.median(v) - 1:+.1%} "
                         f"| {min(v) - 1:+.0%} to {max(v) - 1:+.0%} | {sum(x < 1 for x in v)} of {len(v)} |")
    return "\n".join(lines)


def rises(cells: dict, factor: float, after: int = 500) -> str:
    """Each quantizer's evaluations from step ``after`` on whose test MSE is above ``factor`` x the run's previous
    evaluation (an excursion of the run, the issue #81 target "at every evaluation" counts), and which they were."""
    runs, evaluations, jumps = defaultdict(int), defaultdict(int), defaultdict(list)  # per quantizer
    for (host, dataset, k, _), quantizers in sorted(cells.items()):
        for q, rows in quantizers.items():
            runs[q] += len(rows)
            for r in rows:
                for (_, before), (step, now) in zip(r["errors"], r["errors"][1:]):
                    if step < after:
                        continue
                    evaluations[q] += 1
                    if now > factor * before:
                        jumps[q].append(f"{host} {dataset} K={k} seed {r['run'][0]} stream {r['run'][1]} step "
                                        f"{step}: {before:.5f} -> {now:.5f}")
    lines = [f"| quantizer | evaluations from step {after:,} | above {factor:g}x the previous | runs | which |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {q} | {evaluations[q]} | {len(jumps[q])} | {runs[q]} | {'; '.join(jumps[q]) or '-'} |"
              for q in sorted(runs)]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--at", type=int, default=None, help="read every run at this step (default: its last)")
    ap.add_argument("--models", default=None, help="comma-separated quantizers to show (default: every one)")
    ap.add_argument("--step", choices=("ratio", "ms"), default="ratio",
                    help="the step time: ratio to VQ-VAE's in the same process (default), or ms")
    ap.add_argument("--against", default=None, metavar="QUANTIZER",
                    help="instead of the table: every quantizer's MSE over this one's, run by run (geometric mean, "
                         "median)")
    ap.add_argument("--rises", type=float, default=None, metavar="FACTOR",
                    help="instead of the table: every quantizer's evaluations from step 500 whose MSE is above "
                         "FACTOR x its previous one (excursions)")
    ap.add_argument("--metric", choices=tuple(METRICS), default="mse",
                    help="the error column: mse (default), or l1 (the example host's L1, in its [-1, 1] units)")
    ap.add_argument("--label", default="", metavar="OLD=NEW[,OLD=NEW]", help="show a quantizer under another name")
    args = ap.parse_args()
    missing = [str(f) for f in args.files if not f.is_file()]
    if missing:
        ap.error(f"no such result file: {', '.join(missing)}")
    models = None if args.models is None else {m.strip() for m in args.models.split(",")}
    names = dict(pair.split("=", 1) for pair in args.label.split(",") if pair)
    cells = load(args.files, args.at, models, names)
    if args.rises is not None:
        print(rises(cells, args.rises))
    elif args.against:
        print(against(cells, args.against))
    else:
        print(table(cells, args.step, args.metric))


if __name__ == "__main__":
    main()
