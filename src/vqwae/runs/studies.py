"""Representation studies of a run folder as library calls: the linear probe and t-SNE. ``vqwae probe`` /
``vqwae tsne`` and ``vqwae reproduce`` all go through these, so eval.json gets the same keys either way."""
from __future__ import annotations

import math
import os
from pathlib import Path

from torch.utils.data import DataLoader

from vqwae.data import load_splits
from vqwae.runs import load_run_model, read_train_config, update_eval


def probe_run(run_dir: str | os.PathLike, *, limit: int | None = None, device="cpu", batch_size: int = 256,
              data_root: str | None = None) -> tuple[dict, dict]:
    """Linear probe on the frozen quantized latents and on the continuous encoder output, trained on the first
    ``limit`` training images, accuracy on the first ``limit`` test images. Returns (eval.json, probe results)."""
    from vqwae.downstream import probe_autoencoder

    cfg = read_train_config(run_dir)
    splits = load_splits(cfg.dataset, data_root or cfg.data_root, train_limit=limit, eval_limit=limit,
                         download=cfg.download, image_size=cfg.image_size, seed=cfg.seed)
    if not splits.info.num_classes:
        raise ValueError(f"dataset {cfg.dataset!r} has no class labels: nothing to probe")
    if len(splits.train) == 0 or len(splits.test) == 0:
        raise ValueError("the train or test split is empty")
    model = load_run_model(run_dir, device)
    res = probe_autoencoder(model, DataLoader(splits.train, batch_size=batch_size),
                            DataLoader(splits.test, batch_size=batch_size), device,
                            num_classes=splits.info.num_classes)
    q, c = res["quantized"], res["continuous"]
    merged = update_eval(run_dir, {
        "probe_accuracy": q.test_accuracy, "probe_accuracy_continuous": c.test_accuracy,
        "probe_train_accuracy": q.train_accuracy, "probe_train_accuracy_continuous": c.train_accuracy,
        "probe_num_train": len(splits.train), "probe_num_test": len(splits.test),
    })
    return merged, res


def tsne_run(run_dir: str | os.PathLike, *, n: int = 2000, out_png: str | os.PathLike | None = None, device="cpu",
             batch_size: int = 256, perplexity: float = 30.0, seed: int = 0, data_root: str | None = None) -> dict:
    """t-SNE of the flattened quantized latents of the first n test images coloured by class; the silhouette
    of the classes in the embedding into eval.json (null when undefined)."""
    from vqwae.downstream import extract_features, tsne_plot

    cfg = read_train_config(run_dir)
    splits = load_splits(cfg.dataset, data_root or cfg.data_root, train_limit=1, eval_limit=n,
                         download=cfg.download, image_size=cfg.image_size, seed=cfg.seed)
    test = splits.test
    if not splits.info.num_classes:
        raise ValueError(f"dataset {cfg.dataset!r} has no class labels to colour by")
    if len(test) < 3:
        raise ValueError(f"the test split has only {len(test)} images; t-SNE needs at least 3")
    model = load_run_model(run_dir, device)
    feats, labels = extract_features(model, DataLoader(test, batch_size=batch_size), device, kinds=("quantized",))
    png = Path(out_png) if out_png else Path(run_dir) / "tsne.png"
    res = tsne_plot(feats["quantized"], labels, out_png=png, perplexity=perplexity, seed=seed,
                    title=f"{Path(run_dir).name} ({cfg.model}, {cfg.dataset}): quantized latents, {len(test)} test images",
                    class_names=getattr(test, "classes", None))
    sil = None if math.isnan(res.silhouette) else float(res.silhouette)
    return update_eval(run_dir, {"tsne_silhouette": sil, "tsne_points": len(test), "tsne_png": str(png),
                                 "tsne_perplexity": perplexity})
