"""Representation studies of a run folder as library calls: the linear probe and t-SNE. ``vqwae probe`` /
``vqwae tsne`` and ``vqwae reproduce`` all go through these, so eval.json gets the same keys either way."""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from torch.utils.data import DataLoader

from vqwae.studies import extract_features, probe_autoencoder, tsne_plot
from vqwae.runs import layout


def probe_run(run_dir: str | os.PathLike, *, limit: int | None = None, device="cpu", batch_size: int = 256,
              data_root: str | None = None, progress: bool = True) -> tuple[dict, dict]:
    """Linear probe on the frozen quantized latents and on the continuous encoder output, trained on the first
    ``limit`` training images, accuracy on the first ``limit`` test images. Returns (eval.json, probe results)."""
    cfg = layout.read_config(run_dir)
    train, info = layout.load_run_split(run_dir, "train", limit=limit, data_root=data_root, cfg=cfg)
    test, _ = layout.load_run_split(run_dir, "test", limit=limit, data_root=data_root, cfg=cfg)
    if not info.num_classes:
        raise ValueError(f"dataset {cfg.data.dataset!r} has no class labels: nothing to probe")
    if len(train) == 0 or len(test) == 0:
        raise ValueError("the train or test split is empty")
    classes = len({int(train[i][1]) for i in range(len(train))})
    if classes < 2:
        raise ValueError(f"the probe's {len(train)} training image(s) hold {classes} class: a classifier needs "
                         "at least 2 (raise --limit)")
    model = layout.load_model(run_dir, device)
    res = probe_autoencoder(model, DataLoader(train, batch_size=batch_size), DataLoader(test, batch_size=batch_size),
                            device, num_classes=info.num_classes, progress=progress)
    q, c = res["quantized"], res["continuous"]
    merged = layout.update_eval(run_dir, {
        "probe_accuracy": q.test_accuracy, "probe_accuracy_continuous": c.test_accuracy,
        "probe_train_accuracy": q.train_accuracy, "probe_train_accuracy_continuous": c.train_accuracy,
        "probe_num_train": len(train), "probe_num_test": len(test),
    })
    return merged, res


def tsne_features(run_dir: str | os.PathLike, *, n: int = 2000, device="cpu", batch_size: int = 256,
                  data_root: str | None = None, progress: bool = True):
    """What a run's t-SNE embeds: (the flattened quantized latents of the first n test images (n, F), their class
    labels (n,), the test split). ``tsne_run`` draws them; ``benchmarks/tsne_noise.py`` measures their spread."""
    cfg = layout.read_config(run_dir)
    test, info = layout.load_run_split(run_dir, "test", limit=n, data_root=data_root, cfg=cfg)
    if not info.num_classes:
        raise ValueError(f"dataset {cfg.data.dataset!r} has no class labels to colour by")
    if len(test) < 3:
        raise ValueError(f"the test split has only {len(test)} images; t-SNE needs at least 3")
    model = layout.load_model(run_dir, device)
    feats, labels = extract_features(model, DataLoader(test, batch_size=batch_size), device, kinds=("quantized",),
                                     progress="t-SNE: encoding test images" if progress else None)
    return feats["quantized"], labels, test


def _check_own_png(run_dir, png: Path) -> None:
    """That writing the t-SNE picture to ``png`` replaces no file vqwae did not write: a new file, the run's own
    tsne.png, or the picture an earlier ``vqwae tsne`` of this run wrote (eval.json's tsne_png)."""
    if png.is_dir():
        raise ValueError(f"--out {png} is a folder: name the PNG to write")
    if not png.exists() and not png.is_symlink():
        return
    try:
        recorded = layout.read_eval(run_dir).get("tsne_png")
    except ValueError:
        recorded = None
    own = {(Path(run_dir) / layout.TSNE).resolve()} | ({Path(recorded).resolve()} if recorded else set())
    if png.resolve() not in own:
        raise FileExistsError(f"{png} exists and was not written by `vqwae tsne {run_dir}`: nothing was written; "
                              "choose another --out, or move the file away")


def tsne_run(run_dir: str | os.PathLike, *, n: int = 2000, out_png: str | os.PathLike | None = None, device="cpu",
             batch_size: int = 256, perplexity: float = 30.0, seed: int = 0, data_root: str | None = None,
             progress: bool = True) -> dict:
    """t-SNE of the flattened quantized latents of the first n test images coloured by class; the silhouette
    of the classes in the embedding into eval.json (null when undefined)."""
    cfg = layout.read_config(run_dir)
    png = Path(out_png) if out_png else Path(run_dir) / layout.TSNE
    if png.suffix.lower() != ".png":  # matplotlib would add ".png" itself, and eval.json name a file that is not there
        png = png.with_name(png.name + ".png")
    _check_own_png(run_dir, png)
    feats, labels, test = tsne_features(run_dir, n=n, device=device, batch_size=batch_size, data_root=data_root,
                                        progress=progress)
    if progress:
        print(f"t-SNE: embedding {len(test)} points of dimension {feats.shape[1]} (scikit-learn)...",
              file=sys.stderr, flush=True)
    res = tsne_plot(feats, labels, out_png=png, perplexity=perplexity, seed=seed,
                    title=f"{Path(run_dir).name} ({cfg.model}, {cfg.data.dataset}): quantized latents, {len(test)} test images",
                    class_names=getattr(test, "classes", None))
    sil = None if math.isnan(res.silhouette) else float(res.silhouette)
    return layout.update_eval(run_dir, {"tsne_silhouette": sil, "tsne_points": len(test), "tsne_png": str(png),
                                 "tsne_perplexity": perplexity})
