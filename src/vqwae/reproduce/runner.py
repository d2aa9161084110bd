"""Train and evaluate the runs an experiment needs, each once, cached by its full configuration.

A run lives in OUT/runs/<dataset>/<model>-<hash of its TrainConfig>; rerunning skips finished training and
evaluation and resumes an interrupted run from its last completed epoch. Several runs can go at once
(``jobs``), each process then using fewer CPU threads.
"""
from __future__ import annotations

import hashlib
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from vqwae.reproduce.grid import Budget, RunSpec
from vqwae.quantizers import upgrade_quantizer_config
from vqwae.runs import layout
from vqwae.runs.evaluation import evaluate_run
from vqwae.threads import default_num_threads
from vqwae.training import TrainConfig, train


def run_dir_for(out: Path, spec: RunSpec, values: dict) -> Path:
    """OUT/runs/<dataset>/<model>-<hash>: the hash is of the run's flat option values (format 1, as the cache
    has always keyed them). A value equal to what a format-1 config.json implies when the option is absent
    (an option added later) is left out, so runs trained before the option existed are still found."""
    implicit = upgrade_quantizer_config("wasserstein", {}, version=1)
    key = json.dumps({k: v for k, v in sorted(values.items())
                      if k != "out" and not (k in implicit and v == implicit[k])}, sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return Path(out) / "runs" / spec.dataset / f"{spec.model}-{digest}"


def eval_signature(budget: Budget, fid: bool) -> dict:
    return dict(split="test", limit=budget.eval_limit, resolution=budget.resolution, fid=fid, lpips=budget.lpips)


def ensure_run(out: Path, spec: RunSpec, budget: Budget, data_root: str | None, device: str = "auto",
               threads: int | None = None, inception_weights: str | None = None, lpips_weights: str | None = None,
               fid: bool = True, position: str = "") -> dict:
    """Train (or resume, or skip) and evaluate one run; returns its eval.json plus run_dir and label.
    ``threads``: CPU threads (None: vqwae.threads' default); ``position``: "[i/n] " for the progress lines."""
    values = spec.config_values(budget, data_root)
    run_dir = run_dir_for(out, spec, values)
    local = dict(out=str(run_dir), device=device, threads=threads)  # where and how, not what: outside the hash
    if values.get("arch") == "vqgan" and lpips_weights is not None:
        local["lpips_weights"] = lpips_weights  # VQGAN's perceptual loss
    cfg = TrainConfig.from_dict(dict(values, **local))
    history = layout.read_metrics(run_dir)
    done = max((m.get("epoch", 0) for m in history), default=0)
    last_step = history[-1].get("step", 0) if history else 0
    opt = cfg.optim
    finished = done >= opt.epochs or (opt.max_steps is not None and last_step >= opt.max_steps)
    if not finished:
        print(f"[reproduce] {position}training {spec.label} ({opt.max_steps or '-'} steps) -> {run_dir}", flush=True)
        train(cfg, resume=(run_dir / layout.STATE).exists(), progress=False)
    result = layout.read_eval(run_dir)
    fid = fid and budget.fid
    if result.get("eval_signature") != eval_signature(budget, fid):
        print(f"[reproduce] {position}evaluating {spec.label}", flush=True)
        result = evaluate_run(run_dir, split="test", limit=budget.eval_limit, resolution=budget.resolution,
                              fid=fid, lpips=budget.lpips, device=device, progress=False, pictures=budget.pictures,
                              threads=threads,
                              inception_weights=inception_weights, lpips_weights=lpips_weights)
        result = layout.update_eval(run_dir, {"eval_signature": eval_signature(budget, fid)})
    train_seconds = sum(m.get("seconds", 0.0) for m in layout.read_metrics(run_dir))
    return dict(result, run_dir=str(run_dir), label=spec.label, train_seconds=train_seconds)


def ensure_runs(out: Path, specs: list[RunSpec], budget: Budget, data_root: str | None, *, jobs: int = 1,
                device: str = "auto", inception_weights: str | None = None, lpips_weights: str | None = None,
                fid_specs: set | None = None, threads: int | None = None) -> dict:
    """All runs (deduplicated), in parallel when jobs > 1. Returns {spec: result}. rFID is computed for the
    runs in ``fid_specs`` (all when None or when the budget says fid_everywhere)."""
    unique = list(dict.fromkeys(specs))
    kwargs = dict(device=device, inception_weights=inception_weights, lpips_weights=lpips_weights)

    def fid_for(s):
        return budget.fid_everywhere or fid_specs is None or s in fid_specs

    where = {s: f"[{i}/{len(unique)}] " for i, s in enumerate(unique, 1)}
    if jobs <= 1:
        return {s: ensure_run(out, s, budget, data_root, fid=fid_for(s), threads=threads, position=where[s], **kwargs)
                for s in unique}
    threads = threads or max(1, default_num_threads() // jobs)  # the free CPUs, shared by the jobs
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {s: pool.submit(ensure_run, out, s, budget, data_root, threads=threads, fid=fid_for(s),
                                  position=where[s], **kwargs)
                   for s in unique}
        return {s: f.result() for s, f in futures.items()}
