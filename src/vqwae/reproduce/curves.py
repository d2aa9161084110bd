"""The report's views of its rows while and after they train: the Learning curves section (validation MSE and
perplexity after every epoch, beside the paper's and the authors' logged values) and Table 1's picture of the same
test images as each row reconstructs them."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vqwae.figures import learning_curves, reconstruction_rows
from vqwae.reproduce import paper_numbers as P
from vqwae.reproduce.cells import get as _get, paper_key
from vqwae.reproduce.claims import NAMES
from vqwae.reproduce.grid import MODELS, Budget, row_spec
from vqwae.reproduce.report import Section, fmt
from vqwae.runs import layout


def reconstructions_figure(d: str, results, path: Path, data_root: str | None) -> Path | None:
    """The first test images and each row's reconstructions of them (kept by its evaluation: the record's
    reconstructions_test.npz), one strip each; None when no row kept any or the images cannot be read."""
    rows = {}
    for m in MODELS:
        s = row_spec(d, m)
        if s in results and layout.reconstructions_npz(results[s]["run_dir"], "test").is_file():
            with np.load(layout.reconstructions_npz(results[s]["run_dir"], "test")) as kept:
                rows[NAMES[m]] = kept["reconstructions"]
    if not rows:
        return None
    n = len(next(iter(rows.values())))
    run_dir = next(results[row_spec(d, m)]["run_dir"] for m in MODELS if NAMES[m] in rows)
    try:
        data, _ = layout.load_run_split(run_dir, "test", limit=n, data_root=data_root)
    except (FileNotFoundError, OSError, ValueError):
        return None
    originals = np.stack([data[i][0].permute(1, 2, 0).numpy() for i in range(n)])
    return reconstruction_rows({"test images": originals, **rows}, path,
                               title=f"{d}: the first {n} test images and their reconstructions")


VQVAE_CAUSE = ("Why VQ-VAE stays far (measured on its `long` runs after 10,000 steps): its latents grew about 900x (RMS "
               "0.61 on MNIST, 0.40 on CIFAR-10) but its codebook is still the N(0, 1) draw (RMS 1.00) of which only "
               "2 (MNIST) and 7 (CIFAR-10) codes are any latent's nearest; the codes no latent chose at the first step "
               "never receive a gradient (docs/lab/48-.md#issue-64-long).")


def _trend(line) -> str:
    """Whether a row's validation perplexity was still rising over its last two epochs, in its own numbers (`line`:
    its (step, MSE, perplexity) after each epoch): a row far from the paper that is still climbing is a budget
    question, one that has stopped is a mechanism's."""
    ppl = [(step, p) for step, _, p in line if p is not None]
    if len(ppl) < 2:
        return ""
    (s0, p0), (s1, p1) = ppl[-2], ppl[-1]
    state = "still rising" if p1 > 1.02 * p0 else "flat"
    return f" ({state}: val ppl {fmt(p0)} at step {s0:,}, {fmt(p1)} at step {s1:,})"


def curves(datasets, results, b: Budget, out: Path, **_) -> Section:
    """Where each reconstruction row is heading: validation MSE and perplexity after every epoch, against steps, with
    the paper's values and the authors' logged values as marks; a row ending under half the paper's perplexity is
    named."""
    rows, figures, far, far_models = [], [], [], set()
    for d in datasets:
        lines, marks = {}, {}
        for m in MODELS:
            s = row_spec(d, m)
            if s not in results:
                continue
            history = [h for h in layout.read_metrics(results[s]["run_dir"]) if "val/mse" in h]
            lines[NAMES[m]] = [(h["step"], h["val/mse"], h.get("val/perplexity")) for h in history]
            at = {h["step"]: h for h in history}
            shared = at.get(2500, {})  # the last epoch the cpu budget's 3,000 steps share with longer runs
            last = history[-1] if history else {}
            paper = P.RECON["values"].get(paper_key(d, m), {}).get("perplexity")
            logged = P.AUTHORS_LOGS.get(paper_key(d, m), {})
            rows.append([d, NAMES[m], fmt(shared.get("val/mse")), fmt(shared.get("val/perplexity")),
                         fmt(last.get("step")), fmt(last.get("val/mse")), fmt(last.get("val/perplexity")),
                         fmt(_get(results, s, "mse")), fmt(_get(results, s, "perplexity")), fmt(paper),
                         f"{fmt(logged.get('mse'))} / {fmt(logged.get('perplexity'))}" if logged else "—"])
            if paper is not None and _get(results, s, "perplexity") is not None and \
                    _get(results, s, "perplexity") < paper / 2:
                far.append(f"{NAMES[m]} on {d}{_trend(lines[NAMES[m]])}")
                far_models.add(m)
        for key in ("vqvae", "sqvae", "vqwae"):
            value = P.RECON["values"].get((d, key), {}).get("perplexity")
            if value is not None:
                marks[f"paper: {NAMES[key].split(' (')[0]}"] = {"perplexity": value}
            if (d, key) in P.AUTHORS_LOGS:
                marks[f"authors' log: {NAMES[key].split(' (')[0]}"] = P.AUTHORS_LOGS[(d, key)]
        if lines:
            fig = out / "figures" / f"learning_curves_{d}.png"
            learning_curves(lines, fig, marks=marks, title=f"{d}: validation perplexity and MSE during training")
            figures.append(fig)
    notes = ["Validation: the first 1,000 images of the validation split after every epoch (625 steps of 32 images); "
             "step 2,500 is the last epoch a 3,000-step run shares with a longer one (the same batches and schedule). "
             "Test: the best weights by validation MSE on the first 1,000 test images. The marks at the right edge are "
             "the paper's perplexity (Table 1) and the authors' logged test MSE and perplexity "
             "(../shared/notes/official-implementation.md)."]
    if far:
        notes.append("Ending under half the paper's perplexity: " + "; ".join(far) + ".")
    notes.append("Why VQ-VAE and the paper's VQ-WAE start at perplexity 1 (measured at initialisation, seed 0, 65,536 "
                 "latents of 1,024 training images): the paper's N(0, 1) codebook sits 1,471x (MNIST) and 450x "
                 "(CIFAR-10) further out than the first latents of its unnormalised encoder, so every latent's nearest "
                 "code is the same one. VQ-VAE's codebook loss moves that code alone; the paper's exact OT spreads the "
                 "latents over every code, and its perplexity climbs as the codes come in. The rows that start from "
                 "the data (the field's VQ, the shipped VQ-WAE) reach 512 codes at the first step "
                 "(docs/lab/48-.md#vqgan-start).")
    if "vqvae" in far_models:
        notes.append(VQVAE_CAUSE)
    return Section("Learning curves", "Table 1's rows during training (the paper shows none)",
                   ["dataset", "model", "val MSE @2,500", "val ppl @2,500", "steps", "val MSE", "val ppl",
                    "test MSE", "test ppl", "paper ppl", "authors' log MSE / ppl"], rows, figures=figures, notes=notes)
