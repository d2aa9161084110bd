"""Train and evaluate the runs an experiment needs, each once, cached by its full configuration.

A run lives in OUT/runs/<dataset>/<model>-<hash of its TrainConfig>; rerunning skips finished training and
evaluation and resumes an interrupted run from its last completed epoch. Several runs can go at once
(``jobs``), each process then using fewer CPU threads. Each run is evaluated at the level its experiments need
(``grid.EVAL_LEVELS``); with ``records``, each finished run's record is saved there (``reproduce.records``).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from vqwae.reproduce import records as run_records
from vqwae.reproduce.grid import EVAL_LEVELS, Budget, RunSpec
from vqwae.runs import layout
from vqwae.runs.evaluation import evaluate_run
from vqwae.threads import default_num_threads
from vqwae.training import TrainConfig, train
from vqwae.training.lock import RunFolderBusy

BUSY_POLL_SECONDS = 30.0  # how often a run another process is training is looked at again


def run_key(cfg: TrainConfig) -> str:
    """A run's cache key: a hash of what it trains (``TrainConfig.identity``: its resolved configuration, defaults
    included, without the options declared ``role=WHERE`` and those it never reads), so that a run trained before
    a default changed is not taken for one trained after. What the code does with the same options (a fixed bug)
    is not in the key."""
    return hashlib.sha256(json.dumps(cfg.identity(), sort_keys=True, default=str).encode()).hexdigest()[:10]


def run_dir_for(out: Path, spec: RunSpec, values: dict) -> Path:
    """OUT/runs/<dataset>/<model>-<run_key of the configuration the spec's values resolve to>."""
    return Path(out) / "runs" / spec.dataset / f"{spec.model}-{run_key(TrainConfig.from_dict(values))}"


def trained(run_dir: Path, cfg: TrainConfig) -> bool:
    """Whether the run of ``cfg`` in ``run_dir`` has finished training: all epochs (or max_steps) in its
    metrics.jsonl and, with the quantizer option fit_steps, its saved weights' transport map solved (a kill between
    the two leaves the fit to do; a record without weights counts as fitted: its evaluation came after the fit)."""
    history, opt = layout.read_metrics(run_dir), cfg.optim
    done = layout.last_epoch(history)
    last_step = history[-1].get("step", 0) if history else 0
    return ((done >= opt.epochs or (opt.max_steps is not None and last_step >= opt.max_steps))
            and not layout.fit_pending(run_dir, cfg.transport_fit_steps))


def eval_signature(budget: Budget, level: str) -> dict:
    """What an evaluation at ``level`` (a member of EVAL_LEVELS) computed, as stored in eval.json."""
    full = level == "full"
    return dict(split="test", limit=budget.eval_limit, level=level,
                resolution=budget.resolution if full else "native",
                fid=budget.fid and level != "usage", lpips=budget.lpips and full)


def _covers(stored: dict | None, budget: Budget, level: str) -> bool:
    """Whether a stored evaluation holds everything an evaluation at ``level`` would."""
    if not stored or stored.get("level") not in EVAL_LEVELS:
        return False
    return (EVAL_LEVELS.index(stored["level"]) >= EVAL_LEVELS.index(level)
            and stored == eval_signature(budget, stored["level"]))


def _lacks(result: dict, budget: Budget, level: str, downstream: tuple[str, ...] = ()) -> list[str]:
    """What a run's eval.json ``result`` lacks for an evaluation at ``level`` and the ``downstream`` keys (empty:
    nothing); without the run's weights, a run that lacks anything is trained again."""
    lacks = [] if _covers(result.get("eval_signature"), budget, level) else [f"a {level} evaluation"]
    return lacks + [k for k in downstream if result.get(k) != budget.name]


def ensure_run(out: Path, spec: RunSpec, budget: Budget, data_root: str | None, device: str = "auto",
               threads: int | None = None, inception_weights: str | None = None, lpips_weights: str | None = None,
               level: str = "full", downstream: tuple[str, ...] = (), records: Path | None = None,
               position: str = "") -> dict:
    """Train (or resume, or skip) and evaluate one run at ``level``; returns its eval.json plus run_dir, label,
    train_seconds (its training's own clock) and trained_now (whether this call trained or resumed it).
    ``downstream``: eval.json keys the report sections will need (a run restored from a record without them, hence
    without the weights to compute them, is trained again); ``records``: where to save the run's record;
    ``threads``: CPU threads (None: vqwae.threads' default); ``position``: "[i/n] " for the progress lines."""
    values = spec.config_values(budget, data_root)
    run_dir = run_dir_for(out, spec, values)
    local = dict(out=str(run_dir), device=device, threads=threads)  # where and how, not what: outside the hash
    if values.get("arch") == "vqgan" and lpips_weights is not None:
        local["lpips_weights"] = lpips_weights  # VQGAN's perceptual loss
    cfg = TrainConfig.from_dict(dict(values, **local))
    opt = cfg.optim

    result = layout.read_eval(run_dir)
    finished = trained(run_dir, cfg)
    if finished and not layout.has_weights(run_dir):  # restored from a record
        lacks = _lacks(result, budget, level, downstream)
        if lacks:
            print(f"[reproduce] {position}{spec.label}: its record has no weights and lacks {', '.join(lacks)}; "
                  "training it again", flush=True)
            shutil.rmtree(run_dir)
            finished, result = False, {}
    if not finished and not layout.has_weights(run_dir) and not (run_dir / layout.STATE).exists() \
            and (run_dir / layout.METRICS).exists():  # a record, restored, that does not hold the finished run
        print(f"[reproduce] {position}{spec.label}: its record in {run_dir} does not hold a finished run "
              f"({layout.last_epoch(layout.read_metrics(run_dir))} of {opt.epochs} epochs in {layout.METRICS}: cut "
              "short?) and has no state to continue from; training it again", flush=True)
        shutil.rmtree(run_dir)
        result = {}
    trained_now = not finished
    if trained_now:
        print(f"[reproduce] {position}training {spec.label} ({opt.max_steps or '-'} steps) -> {run_dir}", flush=True)
        train(cfg, resume=(run_dir / layout.STATE).exists(), progress=False)
        result = layout.read_eval(run_dir)
    if not _covers(result.get("eval_signature"), budget, level):
        print(f"[reproduce] {position}evaluating {spec.label} ({level})", flush=True)
        sig = eval_signature(budget, level)
        evaluate_run(run_dir, split="test", limit=budget.eval_limit, resolution=sig["resolution"], fid=sig["fid"],
                     lpips=sig["lpips"], device=device, progress=False, pictures=budget.pictures, threads=threads,
                     inception_weights=inception_weights, lpips_weights=lpips_weights)
        result = layout.update_eval(run_dir, {"eval_signature": sig})
    if records is not None:
        run_records.save(run_dir, records)
    train_seconds = sum(m.get("seconds", 0.0) for m in layout.read_metrics(run_dir))
    return dict(result, run_dir=str(run_dir), label=spec.label, train_seconds=train_seconds, trained_now=trained_now)


def run_status(out: Path, spec: RunSpec, budget: Budget, data_root: str | None, records: Path | None = None,
               level: str = "full") -> str:
    """Where a run stands: "done" (trained in OUT and evaluated at ``level``), "trained" (its evaluation still to
    do), "again" (finished, but its record has no weights for the evaluation it lacks: trained again), "record" (a
    record to restore), "partial" (resumable) or "to do"."""
    values = spec.config_values(budget, data_root)
    run_dir = run_dir_for(out, spec, values)
    if records is not None and not run_dir.exists() and (Path(records) / run_dir.parent.name / run_dir.name).is_dir():
        return "record"
    if trained(run_dir, TrainConfig.from_dict(values)):
        if not _lacks(layout.read_eval(run_dir), budget, level):
            return "done"
        return "trained" if layout.has_weights(run_dir) else "again"
    return "partial" if (run_dir / layout.STATE).exists() else "to do"


def ensure_runs(out: Path, specs: list[RunSpec], budget: Budget, data_root: str | None, *, jobs: int = 1,
                device: str = "auto", inception_weights: str | None = None, lpips_weights: str | None = None,
                levels: dict | None = None, downstream: dict | None = None, records: Path | None = None,
                threads: int | None = None) -> dict:
    """All runs (deduplicated), in parallel when jobs > 1. Returns {spec: result}. ``levels``: {spec: the
    evaluation it needs} ("full" for a spec not in it); ``downstream``: {spec: eval.json keys the report sections need}.

    A run whose folder another process is writing (a second ``vqwae reproduce`` on the same OUT) is left to it:
    the others go first, then this one waits for that process and takes its result (evaluating it if need be)."""
    unique = list(dict.fromkeys(specs))
    levels, downstream = levels or {}, downstream or {}
    kwargs = dict(device=device, inception_weights=inception_weights, lpips_weights=lpips_weights, records=records)
    where = {s: f"[{i}/{len(unique)}] " for i, s in enumerate(unique, 1)}

    def args(s):
        return dict(level=levels.get(s, "full"), downstream=tuple(downstream.get(s, ())), position=where[s], **kwargs)

    results, busy = {}, []

    def collect(s, result):  # result(): the run's eval.json, or RunFolderBusy where another process holds it
        try:
            results[s] = result()
        except RunFolderBusy as e:
            busy.append(s)
            print(f"[reproduce] {where[s]}{s.label}: {str(e).split(';')[0]}; coming back to it last", flush=True)

    if jobs <= 1:
        for s in unique:
            collect(s, lambda s=s: ensure_run(out, s, budget, data_root, threads=threads, **args(s)))
    else:
        threads = threads or max(1, default_num_threads() // jobs)  # the free CPUs, shared by the jobs
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {s: pool.submit(ensure_run, out, s, budget, data_root, threads=threads, **args(s)) for s in unique}
            for s, f in futures.items():
                collect(s, f.result)
    for s in busy:  # the other process's runs, last: wait for each to be free, then take (or finish) its result
        print(f"[reproduce] {where[s]}{s.label}: waiting for it", flush=True)
        while s not in results:
            try:
                results[s] = ensure_run(out, s, budget, data_root, threads=threads, **args(s))
            except RunFolderBusy:
                time.sleep(BUSY_POLL_SECONDS)
    return {s: results[s] for s in unique}
