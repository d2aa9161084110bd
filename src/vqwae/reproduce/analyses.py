"""``vqwae reproduce``: run the paper's experiments at a budget and write a report beside the paper's numbers.

Each experiment turns cached runs (``runner``) into a report ``Section``: this run's numbers next to the
paper's, the paper's claims checked one by one (a claim that does not hold in this run is said so), and
the figures.
"""
from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from vqwae.files import atomic_write_text
from vqwae.data import load_split
from vqwae.distributed import resolve_device
from vqwae.figures import side_by_side_usage, usage_histogram
from vqwae.metrics.fid import FIDStatsCache, load_inception
from vqwae.quantizers.wasserstein import initial_pi
from vqwae.reproduce import paper_numbers as P
from vqwae.metrics.lpips import resolve_lpips_weights
from vqwae.reproduce import records as run_records
from vqwae.reproduce.grid import (BASELINES, BUDGETS, CODEBOOK_SIZES, DOWNSTREAM_KEYS, EVAL_LEVELS, EXPERIMENTS,
                                  FFHQ_MODELS,
                                  FFHQ_STAND_IN, LAMBDA_RS, LAMBDAS, MODELS, PAPER_DATASETS, PI_INITS, PI_MODES, ROWS,
                                  WAE_ROWS, Budget, RunSpec, codebook_size_spec, eval_level, ffhq_spec, lambda_spec,
                                  pi_spec, row_spec, runs_for)
from vqwae.reproduce.report import Claim, Section, claims_summary, fmt, write_report
from vqwae.reproduce.runner import ensure_runs, run_status
from vqwae.runs import layout
from vqwae.runs.generation import generation_fid
from vqwae.runs.prior import train_run_prior
from vqwae.runs.studies import probe_run, tsne_run

NAMES = {"vqvae": "VQ-VAE", "sqvae": "SQ-VAE", "vqwae-paper": "VQ-WAE (paper)", "vqwae": "VQ-WAE (shipped)"}


def _paper_key(d: str, row: str) -> tuple[str, str]:
    """The paper's numbers for a row: both VQ-WAE rows sit beside the paper's VQ-WAE."""
    return d, ROWS[row][0]


def reproduce(experiments: list[str], datasets: list[str], budget: str, out: Path, *, data_root: str | None = None,
              jobs: int = 1, device: str = "auto", inception_weights: str | None = None,
              lpips_weights: str | None = None, command: str = "", threads: int | None = None,
              records: Path | None = None, plan: bool = False) -> Path | None:
    """Train, evaluate and analyse what ``experiments`` need on ``datasets`` at ``budget``; write OUT/REPORT.md.
    ``records``: a folder of run records to start from and to save every finished run's record to
    (``reproduce.records``), so the report can be built over several sessions. ``plan``: only print the runs
    (what each is for, the evaluation it needs, where it stands) and return None."""
    if budget not in BUDGETS:
        raise ValueError(f"unknown budget {budget!r}; valid: {', '.join(BUDGETS)}")
    if experiments == ["all"]:
        experiments = list(EXPERIMENTS)
    for e in experiments:
        if e not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {e!r}; valid: {', '.join(EXPERIMENTS)}, all")
    b = BUDGETS[budget]
    out = Path(out)
    t0 = time.perf_counter()
    available, not_run = _available(datasets, data_root)
    serves = _serves(experiments, available, b)  # run -> the experiments that read it
    ffhq = _ffhq_data(b, data_root, lpips_weights) if "ffhq" in experiments else (None, "")
    if ffhq[0] is not None:
        for m in FFHQ_MODELS:
            serves.setdefault(ffhq_spec(ffhq[0], m, b), []).append("ffhq")
    # A record has no weights: with records, evaluate each run for every experiment that will ever read it, so a
    # later invocation with other experiments restores it instead of training it again.
    readers = serves if records is None else _serves(EXPERIMENTS, available, b)
    levels = {s: eval_level(readers.get(s, es), b) for s, es in serves.items()}
    downstream = {s: [DOWNSTREAM_KEYS[e] for e in es if e in DOWNSTREAM_KEYS] for s, es in serves.items()}
    restored = 0
    if plan:
        for d, why in not_run:  # say why a requested dataset has no runs (it would be "Datasets not run")
            print(f"not run: {d}: {why}")
        if "ffhq" in experiments and ffhq[0] is None:
            print(f"not run: ffhq: {ffhq[1]}")
        _print_plan(serves, levels, b, out, data_root, records)
        return None
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
              f"[reproduce] analysis {i}/{len(experiments)}: {e} ({', '.join(available)})", flush=True)
        sections.append(ANALYSES[e](available, results, b, out, device=device, inception_weights=inception_weights,
                                    ffhq=ffhq))
        if records is not None and e in DOWNSTREAM_KEYS:  # it added its results to the runs' eval.json: keep
            for r in results.values():                     # them now, not only when every analysis is done
                run_records.save(Path(r["run_dir"]), Path(records))
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
        f"Command: `{command or ' '.join(sys.argv)}`",
        _training_note(results, jobs, threads, restored, records),
    ]
    sections.insert(0, claims_summary(sections, {"paper": "VQ-WAE as published (`paper`)",
                                                 "shipped": "VQ-WAE as shipped (defaults)"}))
    md, _ = write_report(out, "VQ-WAE reproduction report", preamble, sections)
    # each run's results; trained_now describes this invocation, not the run
    runs = {s.label: {k: v for k, v in r.items() if k != "trained_now"} for s, r in results.items()}
    atomic_write_text(out / "results.json", json.dumps(runs, indent=2, default=str))
    return md


def _print_plan(serves: dict, levels: dict, b: Budget, out: Path, data_root: str | None, records) -> None:
    status = {s: run_status(out, s, b, data_root, records, levels[s]) for s in serves}
    for s, es in serves.items():
        print(f"{status[s]:8}{levels[s]:6}{s.label}  <- {', '.join(es)}")
    counts = {k: sum(v == k for v in status.values()) for k in ("done", "trained", "record", "partial", "to do")}
    steps = b.max_steps or "-"
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
                 + (f", {restored} of them restored from the records in `{records}`" if restored else ""))
    return note + "."


ABLATION_NOTE = {"paper-fast": ", run with the semidiscrete solver instead of exact OT and the codebook drawn "
                               "from the first batch's latents instead of N(0, 1) (`paper-fast`: the semidiscrete solver "
                               "never leaves perplexity 1 from the N(0, 1) start; BENCHMARKS.md section 11)"}


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
        why = f"FFHQ is not available on this machine: {str(e).splitlines()[0]}"
    stand_in = FFHQ_STAND_IN.get(b.name)
    if stand_in is not None and _available([stand_in], data_root)[0]:
        return stand_in, why
    return None, why


def _available(datasets: list[str], data_root: str | None):
    ok, missing = [], []
    for d in datasets:
        try:
            load_split(d, None if d == "digits" else data_root, "test", limit=1)
            ok.append(d)
        except (FileNotFoundError, OSError, ValueError) as e:
            missing.append((d, f"not available on this machine: {str(e).splitlines()[0]}"))
    return ok, missing


# ---- helpers ---------------------------------------------------------------------------------------------


def _get(results, s: RunSpec, key):
    return results[s].get(key) if s in results else None


def _paper_pair(this, paper, digits=4):
    return f"{fmt(this, digits)} ({fmt(paper, digits)})"


def _usage(results, s: RunSpec) -> np.ndarray:
    p = layout.code_usage_json(results[s]["run_dir"], "test")
    return np.asarray(json.loads(p.read_text()), dtype=float)


# ---- one run's noise -------------------------------------------------------------------------------------
# Every cell of the report is one run of one seed, so a claim decided by less than the spread between two seeds
# is marked "within noise" (report.Claim) rather than read as a result. Each test says whether a and b are that
# close.

SEED_SPREAD = 0.07  # relative; MSE, FIDs, perplexity: two seeds of one configuration differed by 7% in test MSE
                    # (BENCHMARKS 8n: the peer's 0.00342 vs 0.00319; VQ-WAE's 0.00353 vs 0.00345)
SILHOUETTE_SPREAD = 0.01  # absolute; three t-SNE seeds and a second 1,000-image subset spread the silhouette of
                          # each of two CIFAR-10 runs of the cpu report over 0.010 and 0.011 (a floor: the
                          # training seed's share is not in it)


def within_seed_spread(a: float, b: float) -> bool:
    return abs(a - b) < SEED_SPREAD * max(abs(a), abs(b))


def within_silhouette_spread(a: float, b: float) -> bool:
    return abs(a - b) < SILHOUETTE_SPREAD


def within_accuracy_error(n: int):
    """Accuracies in percent on n test images: closer than two binomial standard errors of one of them."""
    def close(a: float, b: float) -> bool:
        p = (a + b) / 200
        return abs(a - b) < 200 * np.sqrt(p * (1 - p) / n)
    return close


def _claim_best(text, values: dict, winner: str, lower: bool, config: str = "", close=within_seed_spread) -> Claim:
    """"``winner`` has the lowest (``lower``) or highest value": within noise when the winner's value and the
    best of the others' are ``close``."""
    mine = values.get(winner)
    detail = ", ".join(f"{NAMES.get(k, k)} {fmt(v)}" for k, v in values.items())
    if mine is None:  # the method's own number is missing: nothing to check
        return Claim(text, None, detail, config)
    others = [v for k, v in values.items() if k != winner and v is not None]
    if not others:
        return Claim(text, True, detail, config)
    rival = (min if lower else max)(others)  # the best of the others; a tie goes to the rival
    return Claim(text, mine < rival if lower else mine > rival, detail, config, within_noise=close(mine, rival))


def _claim_steadier(text: str, rows: dict[float, list[float]], config: str = "") -> Claim:
    """"The rFID varies less across lambda with lambda_r = 1 than with 0" from {lambda_r: its rFIDs}: each row's
    spread is max - min. A spread is as noisy as the runs it is taken from, so the verdict is within noise when
    the two spreads differ by less than one run's noise at the largest value."""
    spreads = {lr: max(v) - min(v) for lr, v in rows.items()}
    largest = max(max(v) for v in rows.values())
    return Claim(text, spreads[1.0] < spreads[0.0], f"spread {fmt(spreads[1.0])} vs {fmt(spreads[0.0])}", config,
                 within_noise=abs(spreads[1.0] - spreads[0.0]) < SEED_SPREAD * largest)


def _against_baselines(values: dict, row: str) -> dict:
    """A VQ-WAE row's value beside the baselines' (the other VQ-WAE row is not a competitor)."""
    return {m: values[m] for m in (*BASELINES, row)}


# ---- the experiments -----------------------------------------------------------------------------------


def recon(datasets, results, b: Budget, out: Path, **_) -> Section:

    metrics = P.RECON["metrics"]
    rows, claims, figures = [], [], []
    for d in datasets:
        for m in MODELS:
            paper = P.RECON["values"].get(_paper_key(d, m), {})
            s = row_spec(d, m)
            rows.append([d, NAMES[m]] + [_paper_pair(_get(results, s, k), paper.get(k)) for k in metrics]
                        + [fmt(_get(results, s, "mse"))])
        ppl = {m: _get(results, row_spec(d, m), "perplexity") for m in MODELS}
        rfid = {m: _get(results, row_spec(d, m), "rfid") for m in MODELS}
        for w in WAE_ROWS:
            claims.append(_claim_best(f"{d}: VQ-WAE has the highest codebook perplexity", _against_baselines(ppl, w),
                                      w, lower=False, config=WAE_ROWS[w]))
            claims.append(_claim_best(f"{d}: VQ-WAE has the lowest rFID", _against_baselines(rfid, w), w, lower=True,
                                      config=WAE_ROWS[w]))
            if ppl[w] is not None and ppl["vqvae"] is not None:
                claims.append(Claim(f"{d}: VQ-WAE uses its codebook far better than VQ-VAE (perplexity at least 2x)",
                                    ppl[w] >= 2 * ppl["vqvae"], f"{fmt(ppl[w])} vs {fmt(ppl['vqvae'])}", WAE_ROWS[w]))
        fig = out / "figures" / f"recon_usage_{d}.png"
        side_by_side_usage({NAMES[m]: _usage(results, row_spec(d, m)) for m in MODELS}, fig,
                           title=f"Code usage on the {d} test split (K=512)")
        figures.append(fig)
    return Section("Reconstruction", P.RECON["table"], ["dataset", "model"] + [f"{k} (paper)" for k in metrics] + ["mse"],
                   rows, claims, figures)


def codebook_size(datasets, results, b: Budget, out: Path, **_) -> Section:

    rows, claims, figures = [], [], []
    sizes = CODEBOOK_SIZES
    for d in datasets:
        for m in MODELS:
            paper = P.CODEBOOK_SIZE["values"].get(_paper_key(d, m), {})
            for i, k in enumerate(sizes):
                s = codebook_size_spec(d, m, k, b)
                pp = paper.get("perplexity", (None,) * 4)[i]
                pr = paper.get("rfid", (None,) * 4)[i]
                rows.append([d, NAMES[m], str(k), _paper_pair(_get(results, s, "perplexity"), pp),
                             _paper_pair(_get(results, s, "rfid"), pr), fmt(_get(results, s, "mse"))])
        for w in WAE_ROWS:
            for k in sizes:
                ppl = {m: _get(results, codebook_size_spec(d, m, k, b), "perplexity") for m in (*BASELINES, w)}
                claims.append(_claim_best(f"{d}, K={k}: VQ-WAE has the highest perplexity", ppl, w, lower=False,
                                          config=WAE_ROWS[w]))
            wae = [_get(results, codebook_size_spec(d, w, k, b), "perplexity") for k in sizes]
            if None not in wae:
                claims.append(Claim(f"{d}: VQ-WAE's perplexity grows with K", all(a < c for a, c in zip(wae, wae[1:])),
                                    " < ".join(fmt(v) for v in wae), WAE_ROWS[w]))
                claims.append(Claim(f"{d}: VQ-WAE's perplexity reaches at least 0.9 K at every K",
                                    all(v >= 0.9 * k for v, k in zip(wae, sizes)),
                                    ", ".join(f"{fmt(v)}/{k}" for v, k in zip(wae, sizes)), WAE_ROWS[w]))
            fig = out / "figures" / f"codebook_size_usage_{d}_{w}.png"
            side_by_side_usage({f"K={k}": _usage(results, codebook_size_spec(d, w, k, b)) for k in sizes}, fig,
                               title=f"{NAMES[w]}: code usage on {d} for each codebook size")
            figures.append(fig)
    notes = [] if eval_level(["codebook-size"], b) != "usage" else [
        f"rFID is not computed for this table at the `{b.name}` budget: its claims are about perplexity, and rFID on "
        "the test images costs about as much CPU time as training the run; MSE is the distortion shown."]
    return Section("Codebook size", P.CODEBOOK_SIZE["table"],
                   ["dataset", "model", "K", "perplexity (paper)", "rFID (paper)", "mse"], rows, claims, figures,
                   notes=notes)


def pi_init(datasets, results, b: Budget, out: Path, **_) -> Section:

    rows, claims, figures = [], [], []
    for d in datasets:
        for mode in PI_MODES:
            for init in PI_INITS:
                s = pi_spec(d, mode, init, b)
                paper = P.PI_INIT["values"].get((mode, init), {}) if d == "cifar10" else {}
                rows.append([d, mode, init, _paper_pair(_get(results, s, "rfid"), paper.get("rfid")),
                             _paper_pair(_get(results, s, "perplexity"), paper.get("perplexity"))])
        rfid_u = {i: _get(results, pi_spec(d, "learned_kl1", i, b), "rfid") for i in PI_INITS}
        claims.append(_claim_best(f"{d}: with pi learned and lambda_r = 1, the uniform initialisation gives the best rFID",
                                  rfid_u, "uniform", lower=True, config="paper"))
        for init in ("peaked", "gaussian"):
            a = _get(results, pi_spec(d, "learned_kl1", init, b), "perplexity")
            c = _get(results, pi_spec(d, "learned_kl0", init, b), "perplexity")
            if a is not None and c is not None:
                claims.append(Claim(f"{d}, {init} init: the KL regulariser (lambda_r = 1) raises perplexity over lambda_r = 0",
                                    a > c, f"{fmt(a)} vs {fmt(c)}", "paper",
                                    within_noise=within_seed_spread(a, c)))
        for init in ("peaked", "gaussian"):
            s = pi_spec(d, "fixed", init, b)
            if s in results:
                fig = out / "figures" / f"pi_init_fixed_{init}_{d}.png"
                k = int(_usage(results, s).shape[0])
                usage_histogram(_usage(results, s), fig, pi=initial_pi(init, 1, k)[0].numpy(),
                                title=f"{d}: usage with a fixed {init} pi")
                figures.append(fig)
    return Section("Initialisation of pi", P.PI_INIT["table"] + " (paper values are CIFAR-10 only)" + _ablation(b),
                   ["dataset", "pi", "init", "rFID (paper)", "perplexity (paper)"], rows, claims, figures)


def _ablation(b: Budget) -> str:
    """The caption's note on the configuration the ablation ran."""
    return f"; this run: the `{b.ablation_preset}` preset" + (" (the paper's, with the semidiscrete solver and a data start)"
                                                               if b.ablation_preset == "paper-fast" else "")


def usage_against_pi(usage: np.ndarray, pi: np.ndarray) -> tuple[float | None, float]:
    """(correlation, total variation) of a code-usage histogram (counts) with pi; no correlation for a uniform
    pi, where it is undefined."""
    p = usage / max(usage.sum(), 1)
    corr = None if np.allclose(pi, pi[0]) else float(np.corrcoef(p, pi)[0, 1])
    return corr, 0.5 * float(np.abs(p - pi).sum())


def controllability(datasets, results, b: Budget, out: Path, **_) -> Section:

    rows, claims = [], []
    for d in datasets:
        for init in PI_INITS:
            s = pi_spec(d, "fixed", init, b)
            usage = _usage(results, s)
            corr, tv = usage_against_pi(usage, initial_pi(init, 1, len(usage))[0].numpy())
            rows.append([d, init, fmt(corr), fmt(tv), fmt(_get(results, s, "perplexity"))])
            if corr is not None:
                claims.append(Claim(f"{d}: with a fixed {init} pi the code usage follows pi (correlation >= 0.9)",
                                    corr >= 0.9, f"correlation {corr:.3f}", "paper"))
    notes = ["Usage is the nearest code's on the test images, the quantization the decoder receives. BENCHMARKS.md "
             "section 12 sets it, for the `cpu` budget's runs, beside the usage of the semidiscrete solver's "
             "transport map, the assignment the WS term trains on."]
    return Section("Controllability", "Figure 'Different initialization of Codebook' (fig:init), as a number"
                   + _ablation(b), ["dataset", "fixed pi", "corr(usage, pi)", "total variation", "perplexity"], rows,
                   claims, notes=notes)


def lam(datasets, results, b: Budget, out: Path, **_) -> Section:
    rows, claims = [], []
    for d in datasets:
        rfids = {}
        for lr in LAMBDA_RS:
            rfids[lr] = []
            for lm in LAMBDAS:
                s = lambda_spec(d, lr, lm, b)
                paper = P.LAMBDA["values"].get((lr, lm), {}) if d == "cifar10" else {}
                r = _get(results, s, "rfid")
                rfids[lr].append(r)
                rows.append([d, fmt(lr), fmt(lm), _paper_pair(r, paper.get("rfid")),
                             _paper_pair(_get(results, s, "perplexity"), paper.get("perplexity"))])
        if not any(None in v for v in rfids.values()):
            claims.append(_claim_steadier(f"{d}: with lambda_r = 1 the rFID varies less across lambda than with "
                                          "lambda_r = 0", rfids, "paper"))
    return Section("lambda and lambda_r", P.LAMBDA["table"] + " (paper values are CIFAR-10 only)" + _ablation(b),
                   ["dataset", "lambda_r", "lambda", "rFID (paper)", "perplexity (paper)"], rows, claims)


def probe(datasets, results, b: Budget, out: Path, device="auto", **_) -> Section:

    rows, claims = [], []
    for d in datasets:
        acc = {}
        for m in MODELS:
            r = results[row_spec(d, m)]
            if r.get("probe_budget") != b.name:
                r.update(probe_run(r["run_dir"], limit=b.train_limit, device=resolve_device(device))[0])

                layout.update_eval(r["run_dir"], {"probe_budget": b.name})
            acc[m] = 100 * r["probe_accuracy"]
            rows.append([d, NAMES[m], _paper_pair(acc[m], P.PROBE["values"].get(_paper_key(d, m))),
                         fmt(100 * r["probe_accuracy_continuous"])])
        for w in WAE_ROWS:
            claims.append(_claim_best(f"{d}: a linear probe on VQ-WAE's quantized latents is the most accurate",
                                      _against_baselines(acc, w), w, lower=False, config=WAE_ROWS[w],
                                      close=within_accuracy_error(b.eval_limit or 10_000)))
    return Section("Linear probe", P.PROBE["table"],
                   ["dataset", "model", "accuracy % on quantized (paper)", "accuracy % on continuous"], rows, claims)


def tsne(datasets, results, b: Budget, out: Path, device="auto", **_) -> Section:

    rows, claims, figures = [], [], []
    for d in datasets:
        sil = {}
        for m in MODELS:
            r = results[row_spec(d, m)]
            own = Path(r["run_dir"]) / layout.TSNE  # part of the run's record
            if r.get("tsne_budget") != b.name or not own.exists():
                r.update(tsne_run(r["run_dir"], n=min(b.tsne_points, b.eval_limit or b.tsne_points), out_png=own,
                                  device=resolve_device(device), progress=False))
                layout.update_eval(r["run_dir"], {"tsne_budget": b.name})
            png = out / "figures" / f"tsne_{d}_{m}.png"
            png.write_bytes(own.read_bytes())
            sil[m] = r.get("tsne_silhouette")
            rows.append([d, NAMES[m], fmt(sil[m])])
            figures.append(png)
        for w in WAE_ROWS:
            claims.append(_claim_best(f"{d}: VQ-WAE's classes are the best separated in t-SNE (highest silhouette)",
                                      _against_baselines(sil, w), w, lower=False, config=WAE_ROWS[w],
                                      close=within_silhouette_spread))
    return Section("t-SNE", "Figure 't-SNE feature visualization' (fig:tsne), with a silhouette score",
                   ["dataset", "model", "silhouette of classes"], rows, claims, figures)


def generation(datasets, results, b: Budget, out: Path, device="auto", inception_weights=None, **_) -> Section:

    dev = resolve_device(device)
    inception, why = load_inception(inception_weights, device=dev)
    rows, claims = [], []
    for d in datasets:
        fids = {}
        for m in MODELS:
            r = results[row_spec(d, m)]
            run = Path(r["run_dir"])
            if r.get("generation_budget") != b.name and inception is not None:
                for cond in (False, True):
                    train_run_prior(run, conditional=cond, epochs=b.prior_epochs, hidden_channels=b.prior_hidden,
                                    max_steps=b.prior_max_steps, device=dev,
                                    out_dir=run / (layout.ALT_PRIORS[True] if cond else layout.PRIOR))
                    r.update(generation_fid(run, n=b.gen_samples, conditional=cond, inception=inception,
                                            stats_cache=FIDStatsCache(), device=dev, limit=b.eval_limit,
                                            prior_dir=run / (layout.ALT_PRIORS[True] if cond else layout.PRIOR)))
                layout.update_eval(run, {k: r.get(k) for k in ("gfid_uncond", "gfid_cond")} | {"generation_budget": b.name})
            paper = P.GENERATION["values"].get(_paper_key(d, m), (None, None))
            fids[m] = r.get("gfid_uncond")
            rows.append([d, NAMES[m], _paper_pair(r.get("gfid_uncond"), paper[0]),
                         _paper_pair(r.get("gfid_cond"), paper[1])])
        for w in WAE_ROWS:
            claims.append(_claim_best(f"{d}: VQ-WAE's codes give the lowest unconditional generation FID",
                                      _against_baselines(fids, w), w, lower=True, config=WAE_ROWS[w]))
    notes = [] if inception is not None else [f"Generation FID not computed: {why}"]
    return Section("Generation", P.GENERATION["table"],
                   ["dataset", "model", "FID unconditional (paper)", "FID class-conditional (paper)"], rows, claims,
                   notes=notes)


def ffhq_rows(datasets, results, b: Budget, out: Path, ffhq=(None, ""), **_) -> Section:
    """The FFHQ block of Table 1: VQGAN against VQ-WAE inside VQGAN, with reconstruction grids and usage."""
    data, why = ffhq
    metrics = P.FFHQ["metrics"]
    names = {"vqvae": "VQGAN", "vqwae": "VQ-WAE (in VQGAN)"}
    rows, claims, figures, notes = [], [], [], []
    specs = {m: ffhq_spec(data, m, b) for m in FFHQ_MODELS} if data else {}
    for m in FFHQ_MODELS:
        paper = P.FFHQ["values"][m]
        if m in specs:
            rows.append([data, names[m]] + [_paper_pair(_get(results, specs[m], k), paper[k]) for k in metrics]
                        + [fmt(_get(results, specs[m], "mse"))])
        else:
            rows.append(["ffhq", names[m]] + [f"not run ({fmt(paper[k])})" for k in metrics] + ["—"])
    if data:
        ppl = {m: _get(results, specs[m], "perplexity") for m in FFHQ_MODELS}
        rfid = {m: _get(results, specs[m], "rfid") for m in FFHQ_MODELS}
        claims.append(_claim_best(f"{data}: inside VQGAN, VQ-WAE has the higher codebook perplexity (paper: 1022 vs 423)",
                                  {names[m]: v for m, v in ppl.items()}, names["vqwae"], lower=False, config="paper"))
        claims.append(_claim_best(f"{data}: inside VQGAN, VQ-WAE has the lower rFID (paper: 4.20 vs 4.42)",
                                  {names[m]: v for m, v in rfid.items()}, names["vqwae"], lower=True, config="paper"))
        if data != "ffhq":  # a stand-in's numbers test the path; they do not bear on the paper's claims
            claims = [Claim(c.text, None, f"not checked on a stand-in: {c.detail}", c.config) for c in claims]
        fig = out / "figures" / f"ffhq_usage_{data}.png"
        k = len(_usage(results, specs["vqwae"]))
        side_by_side_usage({names[m]: _usage(results, specs[m]) for m in FFHQ_MODELS}, fig,
                           title=f"Code usage on the {data} test split (K={k}), inside VQGAN")
        figures.append(fig)
        for m in FFHQ_MODELS:  # the reconstruction grids at full resolution, when the budget draws them
            grid = layout.reconstructions_png(results[specs[m]]["run_dir"], "test")
            if grid.exists():
                copy = out / "figures" / f"ffhq_reconstructions_{data}_{m}.png"
                copy.write_bytes(grid.read_bytes())
                figures.append(copy)
        net = ", ".join(f"{k} {v}" for k, v in sorted(dict(specs["vqwae"].settings).items()) if k != "preset")
        notes.append(f"Configuration: the `ffhq` preset (the paper's VQGAN network and losses, K 1024 x D 256 at "
                     f"256x256){' with ' + net if net else ''}.")
    if why:
        notes.append(why + (f"; the {b.name} budget ran both rows on {data} instead, upsampled to the network's "
                            "image size (a stand-in: its numbers test the path and compare the two rows, they are not "
                            "the paper's FFHQ result)." if data else "; the paper's numbers are shown in brackets."))
    return Section("FFHQ: VQGAN and VQ-WAE inside VQGAN", P.FFHQ["table"],
                   ["dataset", "model"] + [f"{k} (paper)" for k in metrics] + ["mse"], rows, claims, figures, notes)


ANALYSES = {"recon": recon, "codebook-size": codebook_size, "pi-init": pi_init, "lambda": lam, "probe": probe,
            "generation": generation, "controllability": controllability, "tsne": tsne, "ffhq": ffhq_rows}
