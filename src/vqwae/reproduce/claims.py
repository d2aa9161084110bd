"""The paper's claims, checked against one run's noise: when a difference is smaller than what two seeds of one
configuration differ by, the claim is "within noise", not "holds"."""
from __future__ import annotations

import numpy as np

from vqwae.reproduce.grid import BASELINES, FIELD_ROWS, WAE_ROWS
from vqwae.reproduce.report import Claim, fmt

NAMES = {"vqvae": "VQ-VAE", "vqvae-uniform": "VQ-VAE (uniform start)",
         "sqvae": "SQ-VAE (unit-scale latents)", "vqvae-field": "VQ (k-means + expiry)",
         "vqvae-field-rot": "VQ (k-means + expiry + rotation)", "vqwae-paper": "VQ-WAE (paper)",
         "vqwae": "VQ-WAE (shipped)"}


# ---- one run's noise -------------------------------------------------------------------------------------
# Every cell of the report is one run of one seed, so a claim decided by less than the spread between two seeds
# is marked "within noise" (report.Claim) rather than read as a result. Each test says whether a and b are that
# close.

SEED_SPREAD = 0.20  # relative; MSE, FIDs, perplexity, where a cell has no measured second seed. The report's one
                    # cell with a second seed moved 20% in test MSE (0.00576 vs 0.00460) and 27% in rFID between
                    # seeds (docs/lab/48-.md#field-vq-audit), and a last-digit change of the code moved `paper`
                    # MNIST 23% by step 3,000 on one seed (docs/lab/48-.md#issue-57-split-unused). The 7% used
                    # before came from two seeds at K = 8,192 in the zoo (docs/lab/08.md#k8192-codes-from-batches),
                    # not from the report's cells.
RFID_SEED_SPREAD = {"mnist": 0.41}  # relative, by dataset; on MNIST two seeds of the shipped configuration gave
                                    # rFID 25.9 and 15.4 where the same weights on three disjoint 1,000-image test
                                    # slices gave 25.9-26.1: the training seed moves it, through the grey the
                                    # decoder paints MNIST's black background (docs/lab/30-39.md#mnist-rfid-background).
                                    # Elsewhere SEED_SPREAD.
SILHOUETTE_SPREAD = 0.01  # absolute; three t-SNE seeds and a second 1,000-image subset spread the silhouette of
                          # each of two CIFAR-10 runs of the cpu report over 0.010 and 0.011. On MNIST two training
                          # seeds of the shipped configuration differ by 0.013 on the report's images (0.004-0.016
                          # over three slices; benchmarks/tsne_noise.py at 6f7c54f, docs/lab/30-39.md#mnist-tsne):
                          # no report verdict sits between 0.01 and 0.016


# Second seeds of a report cell, measured outside the report ((budget, dataset, row) -> the metrics of the same
# command at another seed, and where). Such a cell's noise is at least the spread of its two seeds, and the section
# says so. The field's VQ on CIFAR-10 at the cpu budget: the report's seed 0 spiked mid-training (validation MSE
# 0.0060 -> 0.0150 at epoch 3) and ended at MSE 0.00576, rFID 142.1; seed 1 trained smoothly
# (docs/lab/48-.md#field-vq-audit).
SECOND_SEEDS = {
    ("cpu", "cifar10", "vqvae-field"): dict(seed=1, mse=0.004602, psnr=25.47, ssim=0.7765, lpips=0.2911, rfid=104.1,
                                            perplexity=493.8, source="docs/lab/48-.md#field-vq-audit"),
}


def second_seed_spread(budget: str, dataset: str, row: str, metric: str, first: float | None) -> float:
    """The relative spread between a cell's value and its measured second seed (SECOND_SEEDS), or 0 without one."""
    second = SECOND_SEEDS.get((budget, dataset, row), {}).get(metric)
    if second is None or first is None:
        return 0.0
    return abs(first - second) / max(abs(first), abs(second))


def within_seeds(values: dict, spread: float, budget: str, dataset: str, metric: str):
    """``within_relative(spread)``, widened to the two seeds' spread when one of the values compared is a cell with a
    measured second seed (SECOND_SEEDS; ``values``: row -> the report's value)."""
    measured = {v: second_seed_spread(budget, dataset, row, metric, v) for row, v in values.items() if v is not None}

    def close(a: float, b: float) -> bool:
        return within_relative(max(spread, measured.get(a, 0.0), measured.get(b, 0.0)))(a, b)
    return close


def within_relative(spread: float):
    """Whether two values are closer than ``spread`` of the larger (in absolute value)."""
    def close(a: float, b: float) -> bool:
        return abs(a - b) < spread * max(abs(a), abs(b))
    return close


within_seed_spread = within_relative(SEED_SPREAD)


def rfid_spread(dataset: str) -> float:
    """rFID's relative seed spread on ``dataset``: measured where RFID_SEED_SPREAD has it, else SEED_SPREAD."""
    return RFID_SEED_SPREAD.get(dataset, SEED_SPREAD)


def within_rfid_spread(dataset: str):
    """Whether two rFIDs on ``dataset`` are closer than two seeds of one configuration's were there."""
    return within_relative(rfid_spread(dataset))


def within_silhouette_spread(a: float, b: float) -> bool:
    return abs(a - b) < SILHOUETTE_SPREAD


def within_accuracy_error(n: int):
    """Accuracies in percent on n test images: closer than two binomial standard errors of one of them."""
    def close(a: float, b: float) -> bool:
        p = (a + b) / 200
        return abs(a - b) < 200 * np.sqrt(p * (1 - p) / n)
    return close


def claim_best(text, values: dict, winner: str, lower: bool, config: str = "", close=within_seed_spread) -> Claim:
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


def claim_steadier(text: str, rows: dict[float, list[float]], config: str = "", noise: float = SEED_SPREAD) -> Claim:
    """"The rFID varies less across lambda with lambda_r = 1 than with 0" from {lambda_r: its rFIDs}: each row's
    spread is max - min. A spread is as noisy as the runs it is taken from, so the verdict is within noise when
    the two spreads differ by less than one run's noise (``noise``, relative) at the largest value."""
    spreads = {lr: max(v) - min(v) for lr, v in rows.items()}
    largest = max(max(v) for v in rows.values())
    return Claim(text, spreads[1.0] < spreads[0.0], f"spread {fmt(spreads[1.0])} vs {fmt(spreads[0.0])}", config,
                 within_noise=abs(spreads[1.0] - spreads[0.0]) < noise * largest)


def claim_monotone(text: str, values: list[float], rising: bool, config: str = "", close=within_seed_spread) -> Claim:
    """"The values rise (``rising``) or fall along the list": within noise when any two neighbours are ``close``,
    since that step could go either way in another seed."""
    steps = list(zip(values, values[1:]))
    ok = all((b > a) if rising else (b < a) for a, b in steps)
    return Claim(text, ok, (" < " if rising else " > ").join(fmt(v) for v in values), config,
                 within_noise=any(close(a, b) for a, b in steps))


def against_baselines(values: dict, row: str) -> dict:
    """A VQ-WAE row's value beside the baselines' that ran (the other VQ-WAE row is not a competitor)."""
    return {m: values[m] for m in (*BASELINES, row) if m in values}


FIELD_COLUMN = "field"  # the summary's column: the shipped VQ-WAE against the field's VQ alone (both its forms)
RECIPES_COLUMN = "recipes"  # claims checked with options beyond a row's own (quantize=transport, fit_steps, ...)
# The summary's columns, one per configuration a claim is checked on (WAE_ROWS' values, FIELD_COLUMN, RECIPES_COLUMN).
SUMMARY_COLUMNS = {"paper": "VQ-WAE as published (`paper`)", "shipped": "VQ-WAE as shipped (defaults only)",
                   FIELD_COLUMN: "shipped, against the field's VQ alone",
                   RECIPES_COLUMN: "VQ-WAE with a recipe's options (named in the claim)"}


def vqwae_best(text, values: dict, row: str, lower: bool, close=within_seed_spread) -> list[Claim]:
    """"VQ-WAE has the best value" for one VQ-WAE row against every baseline (its summary column WAE_ROWS[row]);
    for the shipped row also against the field's VQ alone (FIELD_COLUMN): the baseline a reader would use today,
    which the paper never compared with, so the summary says where the shipped method stands against it even when
    another baseline already decides the first verdict."""
    claims = [claim_best(text, against_baselines(values, row), row, lower, WAE_ROWS[row], close)]
    if WAE_ROWS[row] == "shipped":
        claims.append(claim_best(text, {**{f: values[f] for f in FIELD_ROWS}, row: values[row]}, row, lower,
                                 FIELD_COLUMN, close))
    return claims


def usage_against_pi(usage: np.ndarray, pi: np.ndarray) -> tuple[float | None, float]:
    """(correlation, total variation) of a code-usage histogram (counts) with pi; no correlation for a uniform
    pi, where it is undefined."""
    p = usage / max(usage.sum(), 1)
    corr = None if np.allclose(pi, pi[0]) else float(np.corrcoef(p, pi)[0, 1])
    return corr, 0.5 * float(np.abs(p - pi).sum())


