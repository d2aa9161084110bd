"""How hard does the WS term pull the encoder, against the reconstruction? (issue #34, BENCHMARKS.md section 22)

In one host of ``hosts.py`` the default VQ-WAE trains as there (Adam 1e-3, batch 32, the same batches); every step
the gradients on the encoder's latents z of the two losses are taken apart: the reconstruction's (through the
straight-through estimator) and the WS term's (the pull; the KL does not reach z). Printed every ``--every`` steps,
averaged over those steps: their norms, the ratio WS / reconstruction, the cosine between them, and the latents' RMS.

    .venv/bin/python benchmarks/pull_gradients.py --host groupnorm --dataset cifar10 --steps 400
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hosts import HOSTS, TOKENS, Model, build_host, quantizer_factories, random_mask  # noqa: E402
from peer_comparison import parse_settings, training_batches  # noqa: E402

from vqwae.data import load_splits  # noqa: E402

HERE = Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="default-init", choices=HOSTS)
    ap.add_argument("--dataset", default="cifar10")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--set", default="", help="VQ-WAE options, e.g. pull=0.1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    train = load_splits(args.dataset, args.data_root, train_limit=20000, eval_limit=1).train
    channels = train[0][0].shape[0]
    torch.manual_seed(args.seed)
    host = build_host(args.host, channels)
    torch.manual_seed(args.seed + 1)
    model = Model(host, quantizer_factories(512, host.dim, TOKENS, residual=False)["VQ-WAE"](
        **parse_settings(args.set)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    mask_gen = torch.Generator().manual_seed(args.seed + 7)
    rows, acc = [], []
    for step, x in training_batches(train, args.steps, args.seed):
        mask = random_mask(len(x), mask_gen) if args.host == "sequence" else None
        z, _, _, qloss, out = model(x, mask)
        rec = host.train_loss(out, x, mask)
        g_rec, = torch.autograd.grad(rec, z, retain_graph=True)
        g_ws, = torch.autograd.grad(qloss, z, retain_graph=True)
        acc.append((g_rec.norm().item(), g_ws.norm().item(),
                    torch.cosine_similarity(g_rec.flatten(), g_ws.flatten(), dim=0).item(),
                    z.detach().pow(2).mean().sqrt().item()))
        opt.zero_grad(set_to_none=True)
        (rec + qloss).backward()
        opt.step()
        if step % args.every == 0:
            n = len(acc)
            rec_n, ws_n, cos, rms = (sum(a[i] for a in acc) / n for i in range(4))
            rows.append(dict(step=step, rec_grad=rec_n, ws_grad=ws_n, ratio=ws_n / rec_n, cosine=cos, latent_rms=rms))
            print(f"step {step}: |g_rec| {rec_n:.3g} |g_ws| {ws_n:.3g} ratio {ws_n / rec_n:.3g} cos {cos:+.2f} "
                  f"rms {rms:.3g}", flush=True)
            acc = []
    out = HERE / "results" / (f"pull_gradients_{args.host}_{args.dataset}" + (f"_{args.tag}" if args.tag else "")
                              + ".json")
    out.write_text(json.dumps(dict(args=vars(args), rows=rows), indent=1))
    print("->", out)


if __name__ == "__main__":
    main()
