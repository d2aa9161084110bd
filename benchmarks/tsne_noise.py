"""How noisy is one t-SNE silhouette? The same weights under other t-SNE seeds and other test images, and other
training seeds.

The report (``vqwae reproduce``) embeds the quantized latents of the first 1,000 test images of one run per cell
with t-SNE (seed 0) and ranks the models by the silhouette of the classes in the embedding; a claim is "within
noise" when its margin is under ``claims.SILHOUETTE_SPREAD``. This script measures the parts of that noise:

- **t-SNE seed**: one run's silhouette under ``--tsne-seeds`` (the embedding's own randomness);
- **test images**: under ``--subsets`` disjoint slices of ``--size`` test images;
- **training seed**: the first slice at t-SNE seed 0 of every run given (pass runs that differ only in their seed).

    python benchmarks/tsne_noise.py RUN_A RUN_B ... --data-root ../shared/data --tsne-seeds 0,1,2 --subsets 2 \\
        --out benchmarks/results/tsne_noise_mnist.json

Read-only on the runs: the features are the report's (``vqwae.runs.studies.tsne_features``), but unlike
``tsne_run`` nothing is written to eval.json. Results are written after
every run, so a killed command keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from vqwae.files import atomic_write_text
from vqwae.runs import layout
from vqwae.runs.studies import tsne_features
from vqwae.studies.tsne import silhouette_2d, tsne_embed


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders made by `vqwae train`, one dataset")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--tsne-seeds", default="0,1,2", help="t-SNE seeds, each on the first slice")
    ap.add_argument("--subsets", type=int, default=2, help="disjoint test slices, each at t-SNE seed 0")
    ap.add_argument("--size", type=int, default=1000, help="images per slice (the report's 1,000)")
    ap.add_argument("--perplexity", type=float, default=30.0, help="t-SNE perplexity (the report's 30)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.tsne_seeds.split(",") if s.strip()]

    argv = sys.argv[1:] if argv is None else argv
    results = {"command": "python benchmarks/tsne_noise.py " + " ".join(map(str, argv)), "runs": {}}
    for run in args.runs:
        if not layout.has_weights(run):
            print(f"{run}: skipped, no model.safetensors (a record without weights)", flush=True)
            continue
        t0 = time.perf_counter()
        z, labels, _ = tsne_features(run, n=args.subsets * args.size, data_root=args.data_root, progress=False)
        y = np.asarray(labels)
        row = {"tsne_seed": {}, "slice": {}}
        first = slice(0, args.size)
        for s in seeds:  # the embedding's own randomness, on the report's images
            row["tsne_seed"][s] = silhouette_2d(tsne_embed(z[first], perplexity=args.perplexity, seed=s), y[first])
        for i in range(args.subsets):  # the images' share, at the report's t-SNE seed
            part = slice(i * args.size, (i + 1) * args.size)
            row["slice"][i] = (row["tsne_seed"][0] if i == 0 and 0 in seeds else
                               silhouette_2d(tsne_embed(z[part], perplexity=args.perplexity, seed=0), y[part]))
        row["seconds"] = time.perf_counter() - t0
        results["runs"][str(run)] = row
        print(f"{run}: t-SNE seeds {[round(v, 4) for v in row['tsne_seed'].values()]}, "
              f"slices {[round(v, 4) for v in row['slice'].values()]} ({row['seconds']:.0f} s)", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
