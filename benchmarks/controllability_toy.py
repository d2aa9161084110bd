"""The controllability toy of issue #35 (``vqwae.studies.controllability``) over seeds and quantizer options.

8-D data from a mixture of 6 Gaussians; an MLP encoder (8 -> 64 -> 64 -> 8), the quantizer (K = 16 codes, one
position, options as given), an MLP decoder; encoder, decoder and quantizer learn together for 1,500 steps of
256 samples with Adam 3e-3 and the MSE. Then, on 10,000 fresh samples: the usage of the nearest code (what the
decoder receives) against pi: Pearson correlation and total variation for a fixed peaked and a fixed gaussian
pi (and, for comparison, the correlation of the trained transport map's cells with pi), and the perplexity of the
usage for a learned pi that starts uniform. With ``fit_steps=N`` the transport map is first solved on 20,000 fresh
training samples' latents (``WassersteinQuantizer.fit_transport``, as ``vqwae train`` does). Seconds per run on one
CPU core.

    .venv/bin/python benchmarks/controllability_toy.py                                 # the shipped defaults
    .venv/bin/python benchmarks/controllability_toy.py --set codebook_decay=0.95 --seeds 0,1,2,3,4,5,6,7,8,9 --tag cd0.95

Prints one row per pi form (the mean, then each seed) and writes benchmarks/results/controllability_toy[_TAG].json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import parse_settings  # noqa: E402

from vqwae.studies.controllability import run  # noqa: E402

HERE = Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="", metavar="KEY=VALUE,...", help="WassersteinQuantizer options to change")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--forms", default="peaked,gaussian,uniform (learned)",
                    help="which pi: peaked, gaussian (fixed), uniform (learned); comma-separated")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    options = parse_settings(args.set)
    fit_steps = int(options.pop("fit_steps", 0))  # a training setting, not the quantizer's
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {}
    print(f"options: {options or 'the defaults'}\n\n| pi | measure | mean | per seed |\n| --- | --- | --- | --- |")
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    unknown = set(forms) - {"peaked", "gaussian", "uniform (learned)"}
    if unknown:
        raise SystemExit(f"error: unknown --forms {sorted(unknown)}; choose from peaked, gaussian, uniform (learned)")
    for form in forms:
        rows = [run(form, s, args.steps, options, fit_steps) for s in seeds]
        results[form] = rows
        for key in (("corr", "corr_transport_map", "tv", "mse") if form != "uniform (learned)"
                    else ("perplexity", "tv", "mse")):
            values = [r[key] for r in rows if key in r]
            if not values:
                continue
            print(f"| {form} | {key} | {statistics.mean(values):.3f} | {' / '.join(f'{v:.3f}' for v in values)} |",
                  flush=True)
    out = HERE / "results" / ("controllability_toy" + (f"_{args.tag}" if args.tag else "") + ".json")
    out.write_text(json.dumps(dict(options=options, fit_steps=fit_steps, steps=args.steps, seeds=seeds,
                                   results=results), indent=1))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
