"""The controllability toy of issue #35: does nearest-code usage follow a fixed pi when everything learns?

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
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_comparison import parse_settings  # noqa: E402

from vqwae.quantizers import WassersteinQuantizer  # noqa: E402

HERE = Path(__file__).resolve().parent
K, DIM = 16, 8


def mixture(n: int, gen: torch.Generator) -> torch.Tensor:
    """n samples of the fixed 6-component mixture (its means drawn once from seed 0)."""
    means = torch.randn(6, DIM, generator=torch.Generator().manual_seed(0)) * 2.0
    comp = torch.randint(0, 6, (n,), generator=gen)
    return means[comp] + 0.5 * torch.randn(n, DIM, generator=gen)


def mlp(i: int, o: int) -> nn.Module:
    return nn.Sequential(nn.Linear(i, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, o))


def run(pi_form: str, seed: int, steps: int, options: dict) -> dict:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    enc, dec = mlp(DIM, DIM), mlp(DIM, DIM)
    fixed = pi_form != "uniform (learned)"
    q = WassersteinQuantizer(num_codes=K, dim=DIM, channel_last=True, learn_pi=not fixed,
                             pi_init=pi_form if fixed else "uniform", **options)
    params = [p for m in (enc, dec, q) for p in m.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=3e-3)
    for _ in range(steps):
        x = mixture(256, gen)
        out = q(enc(x)[:, None])  # (B, 1, D): one position
        loss = nn.functional.mse_loss(dec(out.quantized[:, 0]), x) + out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    q.eval()
    with torch.no_grad():
        if q.config.fit_steps:  # as vqwae train does: the map solved on training latents, the network held still
            fit_gen = torch.Generator().manual_seed(10_000 + seed)  # apart from gen: the test samples stay the same
            q.fit_transport(enc(mixture(20_000, fit_gen))[:, None], generator=fit_gen)
        x = mixture(10_000, gen)
        z = enc(x)[:, None]
        idx = q(z).indices.reshape(-1)
        mse = float(nn.functional.mse_loss(dec(q.indices_to_latents(idx[:, None])[:, 0]), x))
        # the trained transport map's cells (semidiscrete: the power diagram of its potential), for comparison
        cells = q.solver.search(z, q.embedding)[1][0].reshape(-1) if q.config.solver == "semidiscrete" else None
    usage = torch.bincount(idx, minlength=K).double() / len(idx)
    pi = q.pi[0].double()
    row = dict(tv=float(0.5 * (usage - pi).abs().sum()), mse=mse,
               perplexity=float(torch.exp(-(usage * usage.clamp_min(1e-30).log()).sum())))
    if fixed:
        row["corr"] = float(torch.corrcoef(torch.stack([usage, pi]))[0, 1])
        if cells is not None:
            mass = torch.bincount(cells, minlength=K).double() / len(cells)
            row["corr_transport_map"] = float(torch.corrcoef(torch.stack([mass, pi]))[0, 1])
    return row


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
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {}
    print(f"options: {options or 'the defaults'}\n\n| pi | measure | mean | per seed |\n| --- | --- | --- | --- |")
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    unknown = set(forms) - {"peaked", "gaussian", "uniform (learned)"}
    if unknown:
        raise SystemExit(f"error: unknown --forms {sorted(unknown)}; choose from peaked, gaussian, uniform (learned)")
    for form in forms:
        rows = [run(form, s, args.steps, options) for s in seeds]
        results[form] = rows
        for key in (("corr", "corr_transport_map", "tv", "mse") if form != "uniform (learned)"
                    else ("perplexity", "tv", "mse")):
            values = [r[key] for r in rows if key in r]
            if not values:
                continue
            print(f"| {form} | {key} | {statistics.mean(values):.3f} | {' / '.join(f'{v:.3f}' for v in values)} |",
                  flush=True)
    out = HERE / "results" / ("controllability_toy" + (f"_{args.tag}" if args.tag else "") + ".json")
    out.write_text(json.dumps(dict(options=options, steps=args.steps, seeds=seeds, results=results), indent=1))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
