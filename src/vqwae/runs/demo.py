"""The demo: VQ-WAE against the field's VQ and VQ-VAE on scikit-learn's embedded digits (no files, no network).

Four runs (``MODELS``) train with the same network, batch, codebook and steps: VQ-WAE as shipped, the field's VQ (the
``field-vq`` preset: EMA, k-means start, dead-code expiry), and VQ-VAE twice, as the authors' code starts it (its
codebook N(0, 1)) and from the uniform (-1/K, 1/K) start of the public VQ-VAE code the authors' network comes from,
the strongest VQ-VAE start measured (docs/lab/48-.md#vqvae-start). Each is evaluated on the test split; all are
compared in OUT/code_usage.png (side by side) and OUT/summary.json. OUT/<model>/ are full run folders. Rerunning
resumes or reuses the finished runs instead of overwriting them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from vqwae.files import atomic_write_text
from vqwae.figures import side_by_side_usage
from vqwae.runs import layout
from vqwae.runs.evaluation import evaluate_run
from vqwae.training import TrainConfig, train

#: the runs, by folder name: the training options that make each
MODELS = {"vqwae": dict(model="vqwae"), "field-vq": dict(preset="field-vq"), "vqvae": dict(model="vqvae"),
          "vqvae-uniform": dict(model="vqvae", vq_init="uniform")}
SUMMARY = "summary.json"
USAGE_PNG = "code_usage.png"


def run_demo(out: Path, *, epochs: int = 12, num_codes: int = 128, device: str = "auto", threads: int | None = None,
             say: Callable[[str], None] = print) -> list[dict]:
    """Train and evaluate both models; returns the summary rows (also in OUT/summary.json). ``threads``: CPU
    threads (None: VQWAE_THREADS, else the CPUs not already busy, decided when each run starts)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows, counts = [], {}
    for model, options in MODELS.items():
        run = out / model
        cfg = TrainConfig.resolve(**options, dataset="digits", out=str(run), epochs=epochs, num_codes=num_codes,
                                  device=device, threads=threads)
        done = layout.last_epoch(layout.read_metrics(run))
        if (run / layout.STATE).exists() and done >= epochs:  # a finished run is reused as it is, config and all
            say(f"== {model}: {run} has trained {done} epochs already (>= {epochs}); reusing it")
        else:
            say(f"== training {model} ({epochs} epochs, K={num_codes}) -> {run}")
            train(cfg, resume=(run / layout.STATE).exists())
        seconds = sum(m.get("seconds", 0.0) for m in layout.read_metrics(run))  # the run's own training clock
        res = evaluate_run(run, split="test", fid=False, lpips=False, device=device, progress=False, threads=threads)
        counts[model] = json.loads(layout.code_usage_json(run, "test").read_text())
        rows.append(dict(model=model, test_perplexity=res["perplexity"], codes_used=res["codes_used"],
                         test_mse=res["mse"], test_psnr=res["psnr"], train_seconds=seconds))
    side_by_side_usage(counts, out / USAGE_PNG, title=f"Code usage on the digits test split (K={num_codes})")
    atomic_write_text(out / SUMMARY, json.dumps(rows, indent=2))
    return rows
