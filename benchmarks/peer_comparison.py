"""vqwae's quantizers against lucidrains' vector-quantize-pytorch, at equal steps, on the same batches.

The paper's 32x32 network, batch 32, K 512, Adam 1e-3. Every model starts from the same encoder/decoder
weights and sees the same batches in the same order: the models take turns on each batch (interleaved), so
load on a shared machine hits them alike. Each model draws its own random numbers (a data-drawn codebook start,
k-means init, dead-code expiry) from its own generator state, seeded from --seed and its name, so a model's
figures do not depend on which other models run beside it. Every ``--eval-every`` steps each model is evaluated
on the first ``--test-images`` test images: one usage histogram over all of them (perplexity, codes used) and
the MSE.

    pip install -e ".[bench]"      # vector-quantize-pytorch: a benchmark-only dependency
    .venv/bin/python benchmarks/peer_comparison.py --dataset mnist --data-root ../shared/data --steps 3000
    .venv/bin/python benchmarks/peer_comparison.py --dataset cifar10 --data-root ../shared/data --steps 3000

Large codebooks, one shared pi (every quantizer gets K codes; FSQ the levels of its paper nearest K):

    .venv/bin/python benchmarks/peer_comparison.py --dataset cifar10 --num-codes 8192 --shared-pi --models "vector-quantize-pytorch,FSQ,VQ-VAE,VQ-WAE default"

Writes benchmarks/results/peer_<dataset>_<steps>.json and a plot of test perplexity and MSE against steps.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import nn

from vqwae.data import load_splits
from vqwae.metrics.usage import CodeUsage
from vqwae.models import NetworkConfig, VQAutoencoder
from vqwae.models.networks import build_networks
from vqwae.quantizers import PaperWassersteinQuantizer, QuantizerOutput, WassersteinQuantizer, build_quantizer, diagnostics
from vqwae.training.config import TrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FSQ_LEVELS, OwnRandomness, parse_settings, plot, training_batches  # noqa: E402

HERE = Path(__file__).resolve().parent


class _Peer(nn.Module):
    """vector-quantize-pytorch quantizers behind vqwae's quantizer interface (benchmark only)."""

    def reconstruction_loss(self, x_hat, x):
        return nn.functional.mse_loss(x_hat, x)


def _vector_quantize(k, d, rotation):  # with its anti-collapse options: k-means start, dead-code expiry
    return dict(dim=d, codebook_size=k, decay=0.99, kmeans_init=True, threshold_ema_dead_code=2,
                commitment_weight=0.25, rotation_trick=rotation, accept_image_fmap=True)


# kind -> (vector-quantize-pytorch class, its arguments for K codes of dimension D as its README shows them).
# "vq" is the library's default, the rotation trick on (rotation_trick=None resolves to True in 1.32.0).
PEERS = {
    "vq": ("VectorQuantize", lambda k, d: _vector_quantize(k, d, rotation=True)),
    "vq-no-rotation": ("VectorQuantize", lambda k, d: _vector_quantize(k, d, rotation=False)),
    "simvq": ("SimVQ", lambda k, d: dict(dim=d, codebook_size=k, rotation_trick=True, channel_first=True)),
    # the README's defaults: entropy_loss_weight 0.1, diversity_gamma 1, no commitment
    "lfq": ("LFQ", lambda k, d: dict(codebook_size=k, dim=d, channel_first=True)),
}


class PeerModule(_Peer):
    """A vector-quantize-pytorch quantizer of one of the PEERS kinds, taking channel-first (B, D, H, W) latents and
    returning (quantized, indices, auxiliary loss). ``overrides`` replace or add constructor arguments (a sweep's
    setting: ``--variant "LABEL:peer=lfq,entropy_loss_weight=0.01"``)."""

    def __init__(self, kind: str, num_codes=512, dim=64, **overrides):
        super().__init__()
        import vector_quantize_pytorch as vqp

        self.num_codes = num_codes
        cls, arguments = PEERS[kind]
        self.vq = getattr(vqp, cls)(**{**arguments(num_codes, dim), **overrides})

    def forward(self, z, compute_loss=None):
        q, idx, loss = tuple(self.vq(z))[:3]
        return QuantizerOutput(quantized=q, indices=idx, loss=loss, losses={"aux": loss})


class PeerFSQ(_Peer):
    """vector-quantize-pytorch's FSQ (levels 8 x 8 x 8 = 512 codes, projected from and back to D) (benchmark only)."""

    def __init__(self, levels=(8, 8, 8), dim=64):
        super().__init__()
        from vector_quantize_pytorch import FSQ

        self.fsq = FSQ(levels=list(levels), dim=dim)
        self.num_codes = self.fsq.codebook_size

    def forward(self, z, compute_loss=None):
        b, d, h, w = z.shape
        q, idx = self.fsq(z.flatten(2).transpose(1, 2))
        zero = q.new_zeros(())
        return QuantizerOutput(quantized=q.transpose(1, 2).reshape(b, d, h, w), indices=idx.reshape(b, h, w),
                               loss=zero, losses={})


def _paper_preset() -> dict:
    """The quantizer options of `vqwae train --preset paper` (the authors' configuration), from the preset."""
    _, config = TrainConfig.resolve(preset="paper").quantizer.vqwae.quantizer_config(512, 64, None)
    shape = ("num_codes", "dim", "channel_last", "num_positions")
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in shape}


# name -> (quantizer kind, quantizer kwargs). "VQ-WAE default" is WassersteinQuantizer() as shipped
# (and what `vqwae train` uses); the "without ..." rows each undo one of the defaults that depart from the paper,
# "with codebook_decay 0.95" is the faster codebook EMA that docs/lab/01-07.md#ablation-departures rejects.
QUANTIZERS = {
    "vector-quantize-pytorch": ("vq", {}),  # the rotation trick on: the library's default (every run so far)
    "vector-quantize-pytorch (rotation trick)": ("vq", {}),  # the same, under the name 8h's runs used
    "vector-quantize-pytorch (no rotation)": ("vq-no-rotation", {}),  # the strongest peer
    "SimVQ": ("simvq", {}),
    "LFQ": ("lfq", {}),
    "FSQ 8x8x8": ("fsq", {}),
    "FSQ": ("fsq", {}),  # levels by --num-codes (FSQ_LEVELS)
    "VQ-VAE": ("vector", {}),
    "VQ-WAE default": ("wasserstein", {}),
    "VQ-WAE paper preset": ("paper-wasserstein", _paper_preset()),
    "VQ-WAE sinkhorn": ("paper-wasserstein", dict(solver="sinkhorn")),
    "VQ-WAE exact": ("paper-wasserstein", dict(solver="exact")),
    "VQ-WAE dual": ("paper-wasserstein", dict(solver="dual")),
    "without ws_weight 3e-3 (1e-3)": ("wasserstein", dict(ws_weight=1e-3)),
    "with codebook_decay 0.95": ("wasserstein", dict(codebook_decay=0.95)),
    "without transport update (gradient)": ("paper-wasserstein", dict(codebook_init="data")),
    "without transport update and data start": ("paper-wasserstein", dict(codebook_init="normal")),
}


def build(name: str, channels: int, seed: int, num_codes: int = 512, shared_pi: bool = False) -> VQAutoencoder:
    kind, kwargs = QUANTIZERS[name]
    net = NetworkConfig(in_channels=channels)
    torch.manual_seed(seed)
    enc, dec = build_networks(net)  # identical encoder/decoder start for every model
    torch.manual_seed(seed + 1)
    if kind in PEERS:
        return VQAutoencoder(enc, PeerModule(kind, num_codes, **kwargs), dec)
    if kind == "fsq":
        if num_codes not in FSQ_LEVELS:
            raise SystemExit(f"error: no FSQ levels for K = {num_codes}; known: {sorted(FSQ_LEVELS)}")
        return VQAutoencoder(enc, PeerFSQ(FSQ_LEVELS[num_codes]), dec)
    if kind == "wasserstein":
        kwargs = {"num_positions": None if shared_pi else 64, **kwargs}
    return VQAutoencoder(enc, build_quantizer(kind, num_codes=num_codes, dim=64, **kwargs), dec, net)


@torch.no_grad()  # no graph: the same numbers, less memory and time
def evaluate(model, test_x: torch.Tensor, batch: int = 500) -> dict:
    model.eval()
    usage, se = CodeUsage(model.quantizer.num_codes), 0.0
    latents = []
    for x in test_x.split(batch):
        z = model.encoder(x)  # the forward pass of VQAutoencoder, with the latents kept for the diagnostic
        out = model.quantizer(z)
        x_hat = model.decoder(out.quantized)
        usage.update(out.indices)
        se += float(((x_hat.clamp(0, 1) - x) ** 2).mean()) * len(x)
        if isinstance(model.quantizer, (WassersteinQuantizer, PaperWassersteinQuantizer)):
            latents.append(z)
    model.train()
    extra = {}
    if latents:  # where the transport cells stand (vqwae.quantizers.diagnostics; the exact W is the hosts' job)
        d = diagnostics(model.quantizer, torch.cat(latents), exact=False)
        extra = dict(tv_cells=d.tv_cells, tv_floor=d.tv_floor, cells_disagree=d.cells_disagree)
    return {"perplexity": usage.perplexity, "codes_used": usage.codes_used, "mse": se / len(test_x), **extra}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--test-images", type=int, default=2000)
    ap.add_argument("--models", default="vector-quantize-pytorch,VQ-VAE,VQ-WAE default,VQ-WAE paper preset",
                    help=f"comma-separated, from: {', '.join(QUANTIZERS)}")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE,...",
                    help="an extra WassersteinQuantizer configuration for ablations, on top of the default, e.g. "
                         f"'decay 0.95:codebook_decay=0.95', or with peer=KIND ({', '.join(PEERS)}) a peer with "
                         "some README arguments changed, e.g. 'LFQ 0.01:peer=lfq,entropy_loss_weight=0.01' "
                         "(repeatable; trained alongside --models)")
    ap.add_argument("--num-codes", type=int, default=512, help="K of every quantizer (FSQ: see FSQ_LEVELS)")
    ap.add_argument("--shared-pi", action="store_true", help="VQ-WAE: one pi for all positions (num_positions=None)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tag", default="", help="suffix of the result files (e.g. 'ablation')")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for v in args.variant:
        label, _, settings = v.partition(":")
        settings = parse_settings(settings)
        peer = settings.pop("peer", None)
        if peer is None:
            QUANTIZERS[label] = ("wasserstein", {**QUANTIZERS["VQ-WAE default"][1], **settings})
        elif peer in PEERS:  # a vector-quantize-pytorch peer with some of its README arguments changed
            QUANTIZERS[label] = (peer, settings)
        else:
            raise SystemExit(f"error: --variant {v!r}: peer must be one of {', '.join(PEERS)}")
        names.append(label)
    splits = load_splits(args.dataset, args.data_root, train_limit=args.steps * 32, eval_limit=args.test_images)
    test_x = torch.stack([splits.test[i][0] for i in range(len(splits.test))])
    channels = test_x.shape[1]
    models = {n: build(n, channels, args.seed, args.num_codes, args.shared_pi) for n in names}
    opts = {n: torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-3) for n, m in models.items()}
    rngs = {n: OwnRandomness(args.seed, n) for n in names}
    times = {n: [] for n in names}
    curves = {n: [] for n in names}
    for step, x in training_batches(splits.train, args.steps, args.seed):
        for n in names:  # interleaved: every model trains on this batch before the next batch
            m, opt = models[n], opts[n]
            with rngs[n]:
                t0 = time.perf_counter()
                x_hat, out = m(x)
                loss = m.reconstruction_loss(x_hat, x) + out.loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                times[n].append(time.perf_counter() - t0)
        if step % args.eval_every == 0 or step == args.steps:
            for n in names:
                with rngs[n]:
                    curves[n].append(dict(step=step, **evaluate(models[n], test_x)))
            print(f"step {step}: " + "; ".join(f"{n}: ppl {curves[n][-1]['perplexity']:.1f} "
                                              f"mse {curves[n][-1]['mse']:.5f}" for n in names), flush=True)
    rows = []
    vq_med = statistics.median(times["VQ-VAE"]) if "VQ-VAE" in times else None
    for n in names:
        med = statistics.median(times[n])
        q1, q3 = statistics.quantiles(times[n], n=4)[0], statistics.quantiles(times[n], n=4)[2]
        rows.append(dict(quantizer=n, ms_per_step=1000 * med, iqr_ms=(1000 * q1, 1000 * q3),
                         ratio_to_vqvae=med / vq_med if vq_med else None, **curves[n][-1]))
    meta = dict(dataset=args.dataset, steps=args.steps, test_images=len(test_x), date=datetime.now(timezone.utc).isoformat(),
                machine=f"{platform.machine()} {torch.get_num_threads()} threads", torch=torch.__version__,
                command="python benchmarks/peer_comparison.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()))
    stem = (f"peer_{args.dataset}_{args.steps}" + (f"_k{args.num_codes}" if args.num_codes != 512 else "")
            + (f"_{args.tag}" if args.tag else ""))
    out = HERE / "results" / f"{stem}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(dict(meta=meta, rows=rows, curves=curves), indent=2))
    plot(curves, out.with_suffix(".png"), args.dataset)
    print("\n| quantizer | ms/step | x VQ-VAE | test perplexity | codes used | test MSE |\n|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['ratio_to_vqvae']:.2f}" if r["ratio_to_vqvae"] else "-"
        print(f"| {r['quantizer']} | {r['ms_per_step']:.0f} | {ratio} | {r['perplexity']:.1f} | {r['codes_used']} | {r['mse']:.4f} |")
    print(f"\n{meta['command']}\n-> {out}")


if __name__ == "__main__":
    main()
