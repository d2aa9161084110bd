"""Representation studies of a run folder as library calls (used by ``vqwae reproduce``; the CLI commands
``vqwae probe`` / ``vqwae tsne`` print and add argument checking around the same steps)."""
from __future__ import annotations

import os
from pathlib import Path

from torch.utils.data import DataLoader

from vqwae.data import load_splits
from vqwae.runs import load_run_model, read_train_config, update_eval


def probe_run(run_dir: str | os.PathLike, *, limit: int | None = None, device="cpu", batch_size: int = 256) -> dict:
    """Linear probe on the frozen quantized latents and on the continuous encoder output; into eval.json."""
    from vqwae.downstream import probe_autoencoder

    cfg = read_train_config(run_dir)
    splits = load_splits(cfg.dataset, cfg.data_root, train_limit=limit, eval_limit=limit, download=cfg.download,
                         image_size=cfg.image_size, seed=cfg.seed)
    if not splits.info.num_classes:
        raise ValueError(f"dataset {cfg.dataset!r} has no class labels: nothing to probe")
    model = load_run_model(run_dir, device)
    res = probe_autoencoder(model, DataLoader(splits.train, batch_size=batch_size),
                            DataLoader(splits.test, batch_size=batch_size), device,
                            num_classes=splits.info.num_classes)
    return update_eval(run_dir, {"probe_accuracy": res["quantized"].test_accuracy,
                                 "probe_accuracy_continuous": res["continuous"].test_accuracy,
                                 "probe_num_train": len(splits.train), "probe_num_test": len(splits.test)})


def tsne_run(run_dir: str | os.PathLike, *, n: int = 2000, out_png: str | os.PathLike | None = None,
             device="cpu", batch_size: int = 256) -> dict:
    """t-SNE of the flattened quantized latents of the first n test images; silhouette into eval.json."""
    from vqwae.downstream import extract_features, tsne_plot

    cfg = read_train_config(run_dir)
    splits = load_splits(cfg.dataset, cfg.data_root, train_limit=1, eval_limit=n, download=cfg.download,
                         image_size=cfg.image_size, seed=cfg.seed)
    model = load_run_model(run_dir, device)
    feats, labels = extract_features(model, DataLoader(splits.test, batch_size=batch_size), device, kinds=("quantized",))
    png = Path(out_png) if out_png else Path(run_dir) / "tsne.png"
    res = tsne_plot(feats["quantized"], labels, out_png=png,
                    title=f"{cfg.model} on {cfg.dataset}: quantized latents of {len(splits.test)} test images")
    return update_eval(run_dir, {"tsne_silhouette": res.silhouette, "tsne_points": len(splits.test),
                                 "tsne_png": str(png)})
