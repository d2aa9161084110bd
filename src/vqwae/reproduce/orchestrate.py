"""``vqwae reproduce``: run the paper's experiments at a budget and write a report beside the paper's numbers.

Each experiment turns cached runs (``runner``) into a report ``Section`` (``sections``): this run's numbers next to
the paper's, the paper's claims checked one by one (``claims``: a claim that does not hold in this run is said
so), and the figures. This module decides which runs an invocation needs, has them trained and evaluated, and
writes the report.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from vqwae.files import atomic_write_text
from vqwae.data import load_split
from vqwae.metrics.lpips import resolve_lpips_weights
from vqwae.reproduce import records as run_records
from vqwae.reproduce.grid import (BUDGETS, DOWNSTREAM_KEYS, EVAL_LEVELS, EXPERIMENTS, FFHQ_MODELS, FFHQ_STAND_IN,
                                  LEAD_EXPERIMENTS, PAPER_DATASETS,
                                  Budget, RunSpec, eval_level, ffhq_spec, runs_for)
from vqwae.reproduce.claims import SUMMARY_COLUMNS
from vqwae.reproduce.report import Section, claims_summary, write_report
from vqwae.reproduce.sections import ANALYSES
from vqwae.reproduce.runner import ensure_runs, run_status





def reproduce(experiments: list[str], datasets: list[str], budget: str, out: Path, *, data_root: str | None = None,
              jobs: int = 1, device: str = "auto", inception_weights: str | None = None,
              lpips_weights: str | None = None, command: str = "", threads: int | None = None,
              records: Path | None = None, plan: bool = False, lead: str | None = None) -> Path | None:
    """Train, evaluate and analyse what ``experiments`` need on ``datasets`` at ``budget``; write OUT/REPORT.md.
    ``records``: a folder of run records to start from and to save every finished run's record to
    (``reproduce.records``), so the report can be built over several sessions. ``plan``: only print the runs
    (what each is for, the evaluation it needs, where it stands) and return None. ``lead``: a longer budget whose
    reconstruction table and learning curves (``LEAD_EXPERIMENTS``) open the report, where its rows are heading;
    its runs live in OUT/<lead> and are trained (or restored, or found) like this budget's."""
    for name in (budget, lead):
        if name is not None and name not in BUDGETS:
            raise ValueError(f"unknown budget {name!r}; valid: {', '.join(BUDGETS)}")
    if lead == budget:
        raise ValueError(f"--lead {lead}: the report's own budget; the lead is another (longer) budget")
    if experiments == ["all"]:
        experiments = list(EXPERIMENTS)
    for e in experiments:
        if e not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {e!r}; valid: {', '.join(EXPERIMENTS)}, all")
    b = BUDGETS[budget]
    out = Path(out)
    t0 = time.perf_counter()
    available, not_run = _available(datasets, data_root)
    ffhq = _ffhq_data(b, data_root, lpips_weights) if "ffhq" in experiments else (None, "")
    parts = [(experiments, b, out)] + ([(list(LEAD_EXPERIMENTS), BUDGETS[lead], out / lead)] if lead else [])
    if plan:
        for d, why in not_run:  # say why a requested dataset has no runs (it would be "Datasets not run")
            print(f"not run: {d}: {why}")
        if "ffhq" in experiments and ffhq[0] is None:
            print(f"not run: ffhq: {ffhq[1]}")
        for exps, bud, where in parts:
            _print_plan(*_needs(exps, available, bud, ffhq, records)[:2], bud, where, data_root, records)
        return None
    kwargs = dict(data_root=data_root, jobs=jobs, device=device, inception_weights=inception_weights,
                  lpips_weights=lpips_weights, threads=threads, records=records, ffhq=ffhq)
    built = [_build(exps, available, bud, where, **kwargs) for exps, bud, where in parts]
    sections, results, restored = built[0]
    skipped = not_run + [(d, "not requested (--datasets)") for d in PAPER_DATASETS if d not in datasets]
    if skipped:
        sections.append(Section("Datasets not run", "all tables", ["dataset", "reason"],
                                [[d, why] for d, why in skipped]))
    preamble = [
        f"Budget `{b.name}`: {b.description}. The paper trains 100 epochs on the full training sets; "
        "numbers at a smaller budget show directions, not the paper's values.",
        "Two VQ-WAE rows: as published (the `paper` preset: exact OT per latent position, uniform learned pi, "
        "lambda 1e-3, lambda_r 1 with the authors' mean reduction) and as shipped (every option at its default). "
        f"The ablations vary the published configuration{ABLATION_NOTE.get(b.ablation_preset, '')}. PSNR/SSIM/LPIPS at "
        f"{b.resolution} resolution; rFID on the same test images (InceptionV3 pool3).",
        f"Hardware: {platform.processor() or platform.machine()}, {torch.get_num_threads()} CPU threads, "
        f"{'CUDA ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}; "
        f"torch {torch.__version__}, Python {platform.python_version()}. Date {time.strftime('%Y-%m-%d')}. "
        f"Wall time of this invocation {time.perf_counter() - t0:.0f} s.",
        f"Command: `{_without_machine_paths(command or ' '.join(sys.argv))}`",
        _training_note(results, jobs, threads, restored, records),
    ]
    leading: list[Section] = []
    if lead:  # the longer budget's sections open the report; the summary holds both budgets' claims
        leading, lead_results, lead_restored = built[1]
        preamble[0:0] = [f"This report opens with the `{lead}` budget, where each row is heading: "
                         f"{BUDGETS[lead].description}. The `{b.name}` budget's claims and tables follow; the summary "
                         "names the budget each claim was judged at."]
        preamble.append(f"At the `{lead}` budget: "
                        + _training_note(lead_results, jobs, threads, lead_restored, records))
    summary = claims_summary(leading + sections, SUMMARY_COLUMNS)
    md, _ = write_report(out, "VQ-WAE reproduction report", preamble, leading + [summary] + sections)
    # each run's results; trained_now describes this invocation, not the run
    runs = {s.label: {k: v for k, v in r.items() if k != "trained_now"} for s, r in results.items()}
    atomic_write_text(out / "results.json", json.dumps(runs, indent=2, default=str))
    return md


def _needs(experiments, available, b: Budget, ffhq, records):
    """The runs ``experiments`` read at ``b``: ({run: experiments}, {run: evaluation level}, {run: downstream keys})."""
    serves = _serves(experiments, available, b)  # run -> the experiments that read it
    if ffhq[0] is not None and "ffhq" in experiments:
        for m in FFHQ_MODELS:
            serves.setdefault(ffhq_spec(ffhq[0], m, b), []).append("ffhq")
    # A record has no weights: with records, evaluate each run for every experiment that will ever read it, so a
    # later invocation with other experiments restores it instead of training it again.
    readers = serves if records is None else _serves(EXPERIMENTS, available, b)
    levels = {s: eval_level(readers.get(s, es), b) for s, es in serves.items()}
    downstream = {s: [DOWNSTREAM_KEYS[e] for e in es if e in DOWNSTREAM_KEYS] for s, es in serves.items()}
    return serves, levels, downstream


def _build(experiments, available, b: Budget, out: Path, *, data_root, jobs, device, inception_weights, lpips_weights,
           threads, records, ffhq) -> tuple[list[Section], dict, int]:
    """The runs ``experiments`` need at ``b`` in ``out``, trained or restored, and their sections:
    (sections, {run: result}, records restored)."""
    serves, levels, downstream = _needs(experiments, available, b, ffhq, records)
    restored = 0
    if records is not None:
        restored = run_records.restore(Path(records), out)
        print(f"[reproduce] {restored} run record(s) restored from {records}", flush=True)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    results = ensure_runs(out, list(serves), b, data_root, jobs=jobs, device=device, levels=levels,
                          downstream=downstream, records=records, inception_weights=inception_weights,
                          lpips_weights=lpips_weights, threads=threads)
    sections = []
    for i, e in enumerate(experiments, 1):
        print(f"[reproduce] analysis {i}/{len(experiments)}: {e} ({ffhq[0] or 'not run'})" if e == "ffhq" else
              f"[reproduce] analysis {i}/{len(experiments)} at `{b.name}`: {e} ({', '.join(available)})", flush=True)
        section = ANALYSES[e](available, results, b, out, device=device, inception_weights=inception_weights,
                              ffhq=ffhq, data_root=data_root)
        section.budget = b.name
        sections.append(section)
        if records is not None and e in DOWNSTREAM_KEYS:  # it added its results to the runs' eval.json: keep
            for r in results.values():                     # them now, not only when every analysis is done
                run_records.save(Path(r["run_dir"]), Path(records))
    return sections, results, restored


def _print_plan(serves: dict, levels: dict, b: Budget, out: Path, data_root: str | None, records) -> None:
    status = {s: run_status(out, s, b, data_root, records, levels[s]) for s in serves}
    for s, es in serves.items():
        print(f"{status[s]:8}{levels[s]:6}{s.label}  <- {', '.join(es)}")
    counts = {k: sum(v == k for v in status.values()) for k in ("done", "trained", "again", "record", "partial", "to do")}
    steps = sorted({s.config_values(b, data_root).get("max_steps") or 0 for s in serves})  # the FFHQ rows set their own
    steps = " or ".join(str(n or "-") for n in steps)
    print(f"{len(serves)} runs of {steps} steps at the `{b.name}` budget: "
          + ", ".join(f"{n} {k}" for k, n in counts.items() if n)
          + "; evaluations: " + ", ".join(f"{sum(v == lv for v in levels.values())} {lv}" for lv in EVAL_LEVELS))


def _serves(experiments, datasets, b: Budget) -> dict[RunSpec, list[str]]:
    """{run: the experiments (of ``experiments``) that read it} on ``datasets`` (the FFHQ rows aside)."""
    serves: dict[RunSpec, list[str]] = {}
    for e in experiments:
        for d in datasets:
            for s in runs_for(e, d, b):
                serves.setdefault(s, []).append(e)
    return serves


def _training_note(results: dict, jobs: int, threads: int | None, restored: int, records) -> str:
    """Which runs this invocation trained and which it found finished (in OUT, or restored from records)."""
    hours = sum(r.get("train_seconds", 0.0) for r in results.values()) / 3600
    now = sum(bool(r.get("trained_now")) for r in results.values())
    note = f"Training: {len(results)} runs, {hours:.1f} hours in all by the runs' own clocks. "
    if now:
        note += (f"This invocation trained or resumed {now} of them ({jobs} at a time"
                 + (f", {threads} thread(s) each" if threads else "") + ")")
    else:
        note += "This invocation trained none of them"
    found = len(results) - now
    if found:
        note += (f"; {found} were trained and evaluated by earlier invocations of this command (a resumed report)"
                 + (f", {restored} of them restored from the records in `{_without_machine_paths(str(records))}`"
                    if restored else ""))
    return note + "."


ABLATION_NOTE = {"paper-fast": ", run with the semidiscrete solver instead of exact OT and the codebook drawn "
                               "from the first batch's latents instead of N(0, 1) (`paper-fast`: the semidiscrete solver "
                               "never leaves perplexity 1 from the N(0, 1) start; docs/lab/09-16.md#paper-fast)"}


def _ffhq_data(b: Budget, data_root: str | None, lpips_weights: str | None) -> tuple[str | None, str]:
    """(the dataset the FFHQ rows train on, or None; why not FFHQ itself). VQGAN's loss needs the LPIPS-VGG trunk:
    without it locally (and no download possible) the rows are not run rather than failing the report."""
    vgg = resolve_lpips_weights(lpips_weights, "vgg")
    if isinstance(vgg, str):
        return None, f"LPIPS-VGG, which VQGAN's loss needs, is missing: {vgg}"
    try:
        load_split("ffhq", data_root, "test", limit=1)
        return "ffhq", ""
    except (FileNotFoundError, OSError, ValueError) as e:
        why = f"FFHQ is not available on this machine: {_without_paths(str(e).splitlines()[0], data_root)}"
    stand_in = FFHQ_STAND_IN.get(b.name)
    if stand_in is not None and _available([stand_in], data_root)[0]:
        return stand_in, why
    return None, why


def _without_paths(message: str, data_root: str | None) -> str:
    """A loader's message with the data root named as the option, not as this machine's path."""
    if data_root:
        for form in sorted({os.path.abspath(os.path.expanduser(data_root)), data_root}, key=len, reverse=True):
            message = message.replace(form, "--data-root")
    return message


def _without_machine_paths(command: str) -> str:
    """A command line with each absolute path shown by its last part only (a report names no machine's folders)."""
    return " ".join(f".../{Path(t).name}" if os.path.isabs(t) else t for t in command.split(" "))


def _available(datasets: list[str], data_root: str | None):
    ok, missing = [], []
    for d in datasets:
        try:
            load_split(d, None if d == "digits" else data_root, "test", limit=1)
            ok.append(d)
        except (FileNotFoundError, OSError, ValueError) as e:
            missing.append((d, f"not available on this machine: {_without_paths(str(e).splitlines()[0], data_root)}"))
    return ok, missing


