"""Benchmark 3: quality per cost -- a same-budget run of VQ-VAE and of VQ-WAE with each solver.

Every run uses the project's trainer (``vqwae.training.trainer.train``: the paper's network, Adam 1e-3,
batch 32, validation each epoch, best model by validation MSE) for the same number of epochs, one run after
the other. Reported per run: training seconds (the trainer's own per-epoch timer, summed), validation MSE
of the best epoch, and on the official test split the MSE and the perplexity of ONE code-usage histogram
over all test latents (the authors' metric; at most K).

    .venv/bin/python benchmarks/quality.py --dataset cifar10 --epochs 3 --out /tmp/quality
    .venv/bin/python benchmarks/quality.py --runs vqvae,semidiscrete --dataset mnist --max-steps 500

Runs whose folder already holds results are not repeated (delete the folder to re-run one).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from vqwae.data import load_splits
from vqwae.metrics.usage import CodeUsage
from vqwae.models import VQAutoencoder
from vqwae.training.config import TrainConfig
from vqwae.training.trainer import train

# name -> (TrainConfig model, TrainConfig option overrides: every WassersteinQuantizer option is one)
RUNS = {
    "vqvae": ("vqvae", {}),
    # the recommended default: the semidiscrete solver and the data-dependent codebook initialisation
    "semidiscrete": ("vqwae", dict(solver="semidiscrete", codebook_init="data")),
    "semidiscrete-normal-init": ("vqwae", dict(solver="semidiscrete", codebook_init="normal")),
    "sinkhorn": ("vqwae", dict(solver="sinkhorn", codebook_init="data")),
    "dual": ("vqwae", dict(solver="dual", codebook_init="data")),
    "exact": ("vqwae", dict(solver="exact", codebook_init="data")),
    "exact-normal-init": ("vqwae", dict(solver="exact", codebook_init="normal")),
    "sqvae": ("sqvae", {}),
}


@torch.no_grad()
def test_metrics(run_dir: Path, dataset: str, data_root: str, eval_limit: int | None) -> dict:
    model = VQAutoencoder.from_pretrained(run_dir).eval()
    test = load_splits(dataset, data_root, eval_limit=eval_limit, train_limit=1).test
    usage = CodeUsage(model.quantizer.num_codes)
    loader = torch.utils.data.DataLoader(test, batch_size=256)
    se, n = 0.0, 0
    for x, _ in loader:
        x_hat, out = model(x)
        se += float(torch.nn.functional.mse_loss(x_hat.clamp(0, 1), x, reduction="sum"))
        n += x.numel()
        usage.update(out.indices)
    return {"test_mse": se / n, "test_perplexity": float(usage.perplexity), "test_codes_used": int(usage.codes_used)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="vqvae,semidiscrete,sinkhorn,dual,exact")
    ap.add_argument("--dataset", default="cifar10")
    ap.add_argument("--data-root", default=os.environ.get("VQWAE_DATA", "/work/shared/data"))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--train-limit", type=int, default=None)
    ap.add_argument("--eval-limit", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="RUN:KEY=VALUE",
                    help="extra quantizer option for one run, e.g. semidiscrete:potential_lr=0.02")
    ap.add_argument("--out", default="benchmarks/results/quality")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    extra: dict[str, dict] = {}
    for item in a.set:
        run, kv = item.split(":", 1)
        key, value = kv.split("=", 1)
        extra.setdefault(run, {})[key] = json.loads(value) if value[:1] in "0123456789-[{tfn\"" else value
    rows = []
    for name in [r.strip() for r in a.runs.split(",") if r.strip()]:
        base = name.split("@")[0]  # "semidiscrete@lr2" lets one run the same solver with other --set options
        model_kind, overrides = RUNS[base]
        overrides = {**overrides, **extra.get(name, {})}
        run_dir = out / name
        result_file = run_dir / "quality.json"
        if result_file.exists():
            rows.append(json.loads(result_file.read_text()))
            continue
        cfg = TrainConfig.resolve(model=model_kind, dataset=a.dataset, data_root=a.data_root, out=str(run_dir),
                                  epochs=a.epochs, max_steps=a.max_steps, train_limit=a.train_limit,
                                  eval_limit=a.eval_limit, seed=a.seed, device="cpu", **overrides)
        load0 = " ".join(f"{v:.2f}" for v in os.getloadavg())
        t0 = time.perf_counter()
        res = train(cfg, progress=False)
        wall = time.perf_counter() - t0
        lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines() if l.strip()]
        row = dict(run=name, model=model_kind, overrides=overrides, epochs=len(lines), steps=res.steps,
                   train_seconds=sum(l["seconds"] for l in lines), wall_seconds=wall,
                   best_val_mse=res.best_val_mse, last_val_perplexity=lines[-1]["val/perplexity"],
                   load_before=load0, load_after=" ".join(f"{v:.2f}" for v in os.getloadavg()))
        row.update(test_metrics(run_dir, a.dataset, a.data_root, a.eval_limit))
        result_file.write_text(json.dumps(row, indent=2))
        rows.append(row)
        print(json.dumps(row), flush=True)
    info = dict(date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), machine=platform.node(),
                cpus=os.cpu_count(), threads=torch.get_num_threads(), torch=torch.__version__,
                command="python " + " ".join(sys.argv))
    (out / "summary.json").write_text(json.dumps(dict(info=info, rows=rows), indent=2))
    base = next((r for r in rows if r["run"] == "vqvae"), None)
    print("| run | epochs | train s | s vs VQ-VAE | best val MSE | test MSE | test perplexity | codes used |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        rel = f"{r['train_seconds'] / base['train_seconds']:.2f}x" if base else "-"
        print(f"| {r['run']} | {r['epochs']} | {r['train_seconds']:.0f} | {rel} | {r['best_val_mse']:.5f} | "
              f"{r['test_mse']:.5f} | {r['test_perplexity']:.1f} | {r['test_codes_used']} |")


if __name__ == "__main__":
    main()
