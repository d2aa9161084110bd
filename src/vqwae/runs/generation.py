"""Generation FID of a run: images sampled from its prior (``vqwae.runs.prior``) against its test split, with
the same Inception pipeline and the same real-statistics cache key as the reconstruction FID of
:func:`vqwae.runs.evaluation.evaluate_run` (so ``vqwae eval`` and the gFID share the real statistics).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from vqwae.metrics.fid import feature_statistics, fid_against_statistics, load_inception
from vqwae.metrics.fid_cache import FIDStatsCache, StatsKey, dataset_fingerprint
from vqwae.progress import progress_bar
from vqwae.runs import layout
from vqwae.runs.prior import read_summary, available_priors, find_prior, generate

__all__ = ["real_stats_key", "generation_fid", "run_generation_fid"]


def _labels_of(dataset) -> torch.Tensor:
    labels = getattr(dataset, "labels", None)
    if isinstance(labels, torch.Tensor) and labels.shape[0] == len(dataset):
        return labels.long().clone()
    return torch.as_tensor([int(dataset[i][1]) for i in range(len(dataset))], dtype=torch.long)


def real_stats_key(cfg, split: str, limit: int | None, dataset, root) -> StatsKey:
    """The FID real-statistics key of a run's split: the same key as the reconstruction FID of
    :func:`vqwae.runs.evaluation.evaluate_run`, so both FIDs share one cache entry."""
    return StatsKey(dataset=cfg.data.dataset, split=split, limit=limit, data_root=str(root or "."),
                    fingerprint=dataset_fingerprint(dataset, limit))


def generation_fid(
    run_dir: str | os.PathLike,
    *,
    n: int = 1000,
    conditional: bool,
    inception,
    stats_cache=None,
    device: str | torch.device = "cpu",
    batch_size: int = 256,
    temperature: float = 1.0,
    seed: int = 0,
    limit: int | None = None,
    data_root: str | None = None,
    prior_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> dict:
    """Generation FID of a run: FID between ``n`` images sampled from its prior and the test split.

    Args:
        run_dir: a run folder with a trained prior (``vqwae prior train RUN_DIR [--conditional]``).
        n: number of generated images (the paper: the size of the test set; 1000 is a quick estimate,
            biased upwards compared with larger n).
        conditional: False: the unconditional prior; True: the class-conditional prior, with class labels
            drawn (seeded) from the empirical label distribution of the test split.
        inception: a :class:`vqwae.metrics.fid.InceptionFeatures` (from ``load_inception``), already on
            the device it should run on.
        stats_cache: a :class:`vqwae.metrics.fid_cache.FIDStatsCache` for the real-image statistics (None: the
            default cache ``~/.cache/vqwae/fid``). The key is the one ``vqwae eval`` uses for rFID
            (:func:`real_stats_key`), so both share the test split's statistics.
        device: where the prior and the decoder run.
        batch_size: grids sampled in parallel.
        temperature: sampling temperature (1.0: the model's distribution, as in the paper).
        seed: seeds the sampling and the drawn labels.
        limit: the first ``limit`` test images are the real set (None: the whole test split, as rFID).
        data_root: overrides the dataset location recorded in the run.
        prior_dir: an explicit prior folder (default: :func:`find_prior` for the requested kind).
        progress: show the sampling progress bar.

    Returns a dict for eval.json, with K = ``gfid_cond`` or ``gfid_uncond``: ``K`` (the FID), ``K_n``
    (generated images), ``K_seconds`` (wall time) and ``K_info`` (real images, whether the real statistics
    came from the cache, temperature, seed, prior folder and its validation bits per code).
    Raises FileNotFoundError (no prior of that kind, missing run) and ValueError (bad arguments).
    """
    t0 = time.perf_counter()
    if n < 2:
        raise ValueError(f"generation FID needs n >= 2 generated images, got {n}")
    if inception is None:
        raise ValueError("generation FID needs an Inception network (vqwae.metrics.fid.load_inception)")
    name = "gfid_cond" if conditional else "gfid_uncond"
    run_dir = Path(run_dir)
    pdir = find_prior(run_dir, conditional, prior_dir)  # fail early, before loading data
    cfg = layout.read_config(run_dir)
    root = layout.data_root_of(cfg, data_root)
    test, _ = layout.load_run_split(run_dir, "test", limit=limit, data_root=root, cfg=cfg)
    if len(test) < 2:
        raise ValueError(f"the test split has {len(test)} images; FID needs at least 2")

    labels = None
    if conditional:
        test_labels = _labels_of(test)
        g = torch.Generator().manual_seed(int(seed) + 1)
        labels = test_labels[torch.randint(len(test_labels), (n,), generator=g)]
    images, labels, pdir = generate(run_dir, n, labels=labels, conditional=conditional, prior_dir=pdir,
                                    temperature=temperature, seed=seed, batch_size=batch_size, device=device,
                                    progress=progress)
    steps = range(0, n, 100)
    fake = torch.cat([inception(images[s:s + 100]) for s in
                      progress_bar(steps, desc="inception (samples)" if progress else None, unit="batch")])

    cache = stats_cache if stats_cache is not None else FIDStatsCache()
    key = real_stats_key(cfg, "test", limit, test, root)
    hit = cache.lookup(key, inception.identity, len(test))
    if hit is not None:
        (mu_r, sigma_r), real_source = hit, "cache"
    else:
        loader = DataLoader(test, batch_size=250, shuffle=False)
        feats = [inception(x) for x, _ in progress_bar(loader, desc="inception (real)" if progress else None,
                                                       unit="batch")]
        mu_r, sigma_r = feature_statistics(torch.cat(feats))
        cache.save(key, inception.identity, mu_r, sigma_r, num_images=len(test))
        real_source = "computed"
    fid = fid_against_statistics(mu_r, sigma_r, fake)
    summary = read_summary(pdir)
    info = {"real_images": len(test), "real_split": "test", "real_stats": real_source, "temperature": temperature,
            "seed": seed, "prior": str(pdir), "prior_val_bpc": summary.get("best_val_bpc"),
            "inception": inception.identity}
    if labels is not None:
        info["label_counts"] = torch.bincount(labels, minlength=int(labels.max()) + 1).tolist()
    return {name: float(fid), f"{name}_n": n, f"{name}_seconds": time.perf_counter() - t0, f"{name}_info": info}


def run_generation_fid(run_dir: str | os.PathLike, *, n: int, inception_weights: str | None, device,
                       limit: int | None, progress: bool = False, download_weights: bool = False) -> dict:
    """Generation FID of every prior the run has (unconditional and / or class-conditional) into eval.json."""
    priors = available_priors(run_dir)
    if not priors:
        raise FileNotFoundError(f"no prior in {run_dir}: train one first with `vqwae prior train {run_dir}` "
                                "(add --conditional for class-conditional generation)")
    inception, why = load_inception(inception_weights, device=device, download=download_weights)
    if inception is None:
        return layout.update_eval(run_dir, {"gfid_uncond": None, "gfid_cond": None, "gfid_skipped": why})
    out = {}
    for kind, prior_dir in priors.items():  # the kinds that exist: "uncond" and/or "cond"
        out.update(generation_fid(run_dir, n=n, conditional=kind == "cond", inception=inception,
                                  stats_cache=FIDStatsCache(), device=device, limit=limit, prior_dir=prior_dir,
                                  progress=progress))
    return layout.update_eval(run_dir, out)
