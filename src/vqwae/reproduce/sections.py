"""The report's sections, one per experiment of the paper: this run's numbers beside the paper's, the claims
(``claims``) and the figures, from the cached runs' records."""
from __future__ import annotations

from pathlib import Path

from vqwae.files import atomic_write_bytes
from vqwae.distributed import resolve_device
from vqwae.figures import side_by_side_usage, usage_histogram
from vqwae.metrics.fid import load_inception
from vqwae.metrics.fid_cache import FIDStatsCache
from vqwae.quantizers.pi import initial_pi
from vqwae.reproduce import paper_numbers as P
from vqwae.reproduce.grid import (BASELINES, CODEBOOK_SIZES, CONTROLLED_PI, CONTROLS, FFHQ_MODELS, LAMBDA_RS, LAMBDAS, MODELS,
                                  PI_INITS,
                                  PI_MODES, WAE_ROWS, Budget, codebook_size_spec, eval_level, ffhq_spec,
                                  controllability_spec, lambda_spec, pi_spec, row_spec)
from vqwae.reproduce.claims import (NAMES, RECIPES_COLUMN, SECOND_SEEDS, SEED_SPREAD, claim_best, claim_monotone,
                                   claim_steadier,
                                   rfid_spread, usage_against_pi, within_seeds,
                                   vqwae_best, within_accuracy_error, within_rfid_spread, within_seed_spread,
                                   within_silhouette_spread)
from vqwae.reproduce.cells import paper_key, get as _get, paper_pair as _paper_pair, usage as _usage
from vqwae.reproduce.curves import curves, reconstructions_figure
from vqwae.reproduce.report import Claim, Section, fmt
from vqwae.runs import layout
from vqwae.runs.generation import generation_fid
from vqwae.runs.prior import train_run_prior
from vqwae.runs.studies import probe_run, tsne_run

# ---- the experiments -----------------------------------------------------------------------------------


def recon(datasets, results, b: Budget, out: Path, data_root: str | None = None, **_) -> Section:

    metrics = P.RECON["metrics"]
    rows, claims, figures = [], [], []
    for d in datasets:
        for m in MODELS:
            paper = P.RECON["values"].get(paper_key(d, m), {})
            s = row_spec(d, m)
            rows.append([d, NAMES[m]] + [_paper_pair(_get(results, s, k), paper.get(k)) for k in metrics]
                        + [fmt(_get(results, s, "mse"))])
        ppl = {m: _get(results, row_spec(d, m), "perplexity") for m in MODELS}
        rfid = {m: _get(results, row_spec(d, m), "rfid") for m in MODELS}
        for w in WAE_ROWS:  # a cell with a measured second seed (SECOND_SEEDS) is as noisy as its two seeds
            claims += vqwae_best(f"{d}: VQ-WAE has the highest codebook perplexity", ppl, w, lower=False,
                                 close=within_seeds(ppl, SEED_SPREAD, b.name, d, "perplexity"))
            claims += vqwae_best(f"{d}: VQ-WAE has the lowest rFID", rfid, w, lower=True,
                                 close=within_seeds(rfid, rfid_spread(d), b.name, d, "rfid"))
            vqvaes = [v for v in ("vqvae", "vqvae-uniform") if ppl.get(v) is not None]  # both of its starts
            if ppl[w] is not None and vqvaes:
                strongest = max(ppl[v] for v in vqvaes)
                claims.append(Claim(f"{d}: VQ-WAE uses its codebook far better than VQ-VAE (perplexity at least 2x, "
                                    "against either of VQ-VAE's starts)", ppl[w] >= 2 * strongest,
                                    f"{fmt(ppl[w])} vs {' / '.join(fmt(ppl[v]) for v in vqvaes)}", WAE_ROWS[w]))
        fig = out / "figures" / f"recon_usage_{d}.png"
        side_by_side_usage({NAMES[m]: _usage(results, row_spec(d, m)) for m in MODELS}, fig,
                           title=f"Code usage on the {d} test split (K=512)")
        figures.append(fig)
        grid = reconstructions_figure(d, results, out / "figures" / f"recon_images_{d}.png", data_root)
        if grid is not None:
            figures.append(grid)
    notes = [f"A second seed of {NAMES[m]} on {d} (seed {v['seed']}, the same command; {v['source']}): "
             + ", ".join(f"{k} {fmt(v[k])}" for k in (*metrics, "mse") if k in v)
             + ". Its claims there are judged against the spread of the two seeds."
             for (budget, d, m), v in SECOND_SEEDS.items() if budget == b.name and d in datasets]
    notes.append(f"Noise: a claim is \"within noise\" when its margin is under {SEED_SPREAD:.0%} (rFID on MNIST: "
                 f"{rfid_spread('mnist'):.0%}), the spread measured between two seeds of a report cell; a cell with a "
                 "measured second seed uses its own spread, and says so above.")
    notes.append(f"{NAMES['sqvae']}: sony/sqvae's 32x32 encoder batch-normalises every convolution and ends in "
                 "residual blocks whose last layer is a BatchNorm, so the latents their quantizer sees are at about "
                 "unit scale; the paper's network has no normalisation layer and starts its latents 400x (CIFAR-10) to "
                 "1,400x (MNIST) smaller than the N(0, 1) codebook. This row divides the latents by the training "
                 "batch's RMS (an EMA of it in evaluation: `latent_scale=batch`) to stand in for that encoder. "
                 "Without it (`latent_scale=none`, sony's quantizer exactly, in the paper's network) it reached "
                 "test MSE 0.0031 / perplexity 39 on MNIST and 0.0207 / 27 on CIFAR-10 at step 2,000, against "
                 "0.0034 / 47 and 0.0140 / 44 with it (one seed, docs/lab/09-16.md#sqvae-latent-scale).")
    notes.append("The pictures: the same first 16 test images, then each row's reconstructions of them (its best "
                 "weights by validation MSE, as evaluated).")
    return Section("Reconstruction", P.RECON["table"], ["dataset", "model"] + [f"{k} (paper)" for k in metrics] + ["mse"],
                   rows, claims, figures, notes)


def codebook_size(datasets, results, b: Budget, out: Path, **_) -> Section:

    rows, claims, figures = [], [], []
    sizes = CODEBOOK_SIZES
    for d in datasets:
        for m in MODELS:
            paper = P.CODEBOOK_SIZE["values"].get(paper_key(d, m), {})
            for i, k in enumerate(sizes):
                s = codebook_size_spec(d, m, k, b)
                pp = paper.get("perplexity", (None,) * 4)[i]
                pr = paper.get("rfid", (None,) * 4)[i]
                rows.append([d, _ablation_name(m, b), str(k), _paper_pair(_get(results, s, "perplexity"), pp),
                             _paper_pair(_get(results, s, "rfid"), pr), fmt(_get(results, s, "mse"))])
        for w in WAE_ROWS:
            for k in sizes:
                ppl = {m: _get(results, codebook_size_spec(d, m, k, b), "perplexity") for m in (*BASELINES, w)}
                claims += vqwae_best(f"{d}, K={k}: VQ-WAE has the highest perplexity", ppl, w, lower=False)
            wae = [_get(results, codebook_size_spec(d, w, k, b), "perplexity") for k in sizes]
            rfids = [_get(results, codebook_size_spec(d, w, k, b), "rfid") for k in sizes]
            if None not in rfids:  # the paper's VQ-WAE rFIDs fall with K on both data sets (Table 2)
                claims.append(claim_monotone(f"{d}: VQ-WAE's rFID falls as K grows", rfids, False, WAE_ROWS[w],
                                             within_rfid_spread(d)))
            if None not in wae:
                claims.append(claim_monotone(f"{d}: VQ-WAE's perplexity grows with K", wae, True, WAE_ROWS[w]))
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
    return Section("Codebook size", P.CODEBOOK_SIZE["table"] + _ablation(b),
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
        claims.append(claim_best(f"{d}: with pi learned and lambda_r = 1, the uniform initialisation gives the best rFID",
                                  rfid_u, "uniform", lower=True, config="paper", close=within_rfid_spread(d)))
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


def _ablation_name(row: str, b: Budget) -> str:
    """A row's name in an ablation's table: the paper's VQ-WAE names the preset it ran with when it is not `paper`."""
    if row == "vqwae-paper" and b.ablation_preset != "paper":
        return f"VQ-WAE (`{b.ablation_preset}`)"
    return NAMES[row]


def _ablation(b: Budget) -> str:
    """The caption's note on the configuration the ablation ran."""
    return f"; this run: the `{b.ablation_preset}` preset" + (" (the paper's, with the semidiscrete solver and a data start)"
                                                               if b.ablation_preset == "paper-fast" else "")



def controllability(datasets, results, b: Budget, out: Path, **_) -> Section:

    rows, claims = [], []
    for d in datasets:
        for (row, control), inits in CONTROLLED_PI.items():
            how = "".join(f", {k}={v}" for k, v in CONTROLS[control].items())
            for init in inits:
                s = controllability_spec(d, row, init, b, control)
                usage = _usage(results, s)
                corr, tv = usage_against_pi(usage, initial_pi(init, 1, len(usage))[0].numpy())
                rows.append([d, _ablation_name(row, b) + how, init, fmt(corr), fmt(tv),
                             fmt(_get(results, s, "perplexity")), fmt(_get(results, s, "mse"))])
                if corr is not None:  # a claim that needs options beyond its row's own counts as a recipe's
                    config = WAE_ROWS[row] if control == "nearest" else RECIPES_COLUMN
                    claims.append(Claim(f"{d}: with a fixed {init} pi the code usage follows pi (correlation >= 0.9)"
                                        + (f" ({_ablation_name(row, b)}{how})" if how else ""), corr >= 0.9,
                                        f"correlation {corr:.3f}", config))
    notes = ["Usage is that of the code the decoder receives on the test images: the nearest code, or with "
             "quantize=transport the semidiscrete solver's transport map (argmin ||z - c_k||^2 - g_k, the assignment "
             "the WS term trains on). The lab notebook's docs/lab/09-16.md#controllability-nearest-vs-map sets the "
             "nearest code beside that map for the paper's runs. The paper's row is the pi-init table's fixed-pi run, "
             "then with quantize=transport, then with the map also solved after training (fit_steps=1000); the "
             "shipped rows are every default with pi "
             "fixed at its initial value, then with quantize=transport, then with the toy's recipe for controlled "
             "usage (quantize=transport, codebook_decay=0.95, pull=0.1), then with quantize=transport and the map "
             "solved on the training latents once training ends (fit_steps=1000: what the README tells a user who "
             "wants usage to follow a fixed pi; docs/lab/17-29.md#fit-steps)."]
    return Section("Controllability", "Figure 'Different initialization of Codebook' (fig:init), as a number"
                   + _ablation(b),
                   ["dataset", "model", "fixed pi", "corr(usage, pi)", "total variation", "perplexity", "test MSE"],
                   rows, claims, notes=notes)


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
            claims.append(claim_steadier(f"{d}: with lambda_r = 1 the rFID varies less across lambda than with "
                                          "lambda_r = 0", rfids, "paper", rfid_spread(d)))
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
            rows.append([d, NAMES[m], _paper_pair(acc[m], P.PROBE["values"].get(paper_key(d, m))),
                         fmt(100 * r["probe_accuracy_continuous"])])
        for w in WAE_ROWS:
            claims += vqwae_best(f"{d}: a linear probe on VQ-WAE's quantized latents is the most accurate", acc, w,
                                 lower=False, close=within_accuracy_error(b.eval_limit or 10_000))
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
            atomic_write_bytes(png, own.read_bytes())
            sil[m] = r.get("tsne_silhouette")
            rows.append([d, NAMES[m], fmt(sil[m])])
            figures.append(png)
        for w in WAE_ROWS:
            claims += vqwae_best(f"{d}: VQ-WAE's classes are the best separated in t-SNE (highest silhouette)", sil, w,
                                 lower=False, close=within_silhouette_spread)
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
            paper = P.GENERATION["values"].get(paper_key(d, m), (None, None))
            fids[m] = r.get("gfid_uncond")
            rows.append([d, NAMES[m], _paper_pair(r.get("gfid_uncond"), paper[0]),
                         _paper_pair(r.get("gfid_cond"), paper[1])])
        for w in WAE_ROWS:
            claims += vqwae_best(f"{d}: VQ-WAE's codes give the lowest unconditional generation FID", fids, w,
                                 lower=True)
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
        claims.append(claim_best(f"{data}: inside VQGAN, VQ-WAE has the higher codebook perplexity (paper: 1022 vs 423)",
                                  {names[m]: v for m, v in ppl.items()}, names["vqwae"], lower=False, config="paper"))
        claims.append(claim_best(f"{data}: inside VQGAN, VQ-WAE has the lower rFID (paper: 4.20 vs 4.42)",
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
                atomic_write_bytes(copy, grid.read_bytes())
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


ANALYSES = {"recon": recon, "curves": curves, "codebook-size": codebook_size, "pi-init": pi_init, "lambda": lam,
            "probe": probe, "generation": generation, "controllability": controllability, "tsne": tsne,
            "ffhq": ffhq_rows}

