"""Stage two: extract code grids with the frozen autoencoder, cache them, and fit the PixelCNN prior.

Likelihoods are reported in bits per code (mean over positions of -log2 p(code | previous codes));
a uniform prior scores log2 K.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vqwae.files import append_line, atomic_torch_save, atomic_write_text
from vqwae.models.pretrained import weights_fingerprint  # noqa: F401  (re-exported: vqwae.prior's API)
from vqwae.progress import progress_bar
from vqwae.models.pretrained import WEIGHTS_NAME
from vqwae.prior.pixelcnn import GatedPixelCNN, PixelCNNConfig

LN2 = math.log(2.0)
METRICS_NAME = "metrics.jsonl"
SUMMARY_NAME = "train_summary.json"


# ---- code extraction and caching ---------------------------------------------------------------------
@torch.no_grad()
def extract_codes(model: nn.Module, loader, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Run a frozen autoencoder (``model.encode(x) -> (B, h, w)`` indices) over a loader of (images, labels).

    Returns ``codes`` (N, h, w) long and ``labels`` (N,) long, both on the CPU. The model is put in eval
    mode for the pass and restored afterwards."""
    was_training = model.training
    model.eval()
    codes, labels = [], []
    try:
        for batch in loader:
            x, y = batch[0], batch[1]
            idx = model.encode(x.to(device))
            if idx.dim() != 3:
                raise ValueError(f"model.encode must return (B, h, w) indices, got {tuple(idx.shape)}")
            codes.append(idx.long().cpu())
            labels.append(torch.as_tensor(y).long().reshape(-1).cpu())
    finally:
        model.train(was_training)
    if not codes:
        raise ValueError("the loader yielded no batches")
    return torch.cat(codes), torch.cat(labels)


def cached_codes(
    model: nn.Module,
    loader,
    *,
    split: str,
    cache_dir: str | Path,
    fingerprint: str | None = None,
    device: str | torch.device = "cpu",
    refresh: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``extract_codes`` with a cache at ``cache_dir/codes_{split}.pt`` (use ``cache_dir=RUN_DIR/"prior"``).

    The cache is keyed by ``fingerprint`` (pass ``weights_fingerprint(RUN_DIR / "model.safetensors")``: the
    weights file itself, since hashing a whole run folder also hashes any resumable checkpoints in it; when None it
    is computed from ``model``'s state dict) and by the dataset length when the loader has one: a
    retrained model or a different split size never reuses stale codes, it recomputes and overwrites.
    """
    if fingerprint is None:
        fingerprint = weights_fingerprint(model)
    n_expected = None
    try:
        n_expected = len(loader.dataset)
    except (AttributeError, TypeError):
        pass
    path = Path(cache_dir) / f"codes_{split}.pt"
    if path.is_file() and not refresh:
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # unreadable or partial cache: recompute
            blob = None
        if (isinstance(blob, dict) and blob.get("fingerprint") == fingerprint and blob.get("split") == split
                and isinstance(blob.get("codes"), torch.Tensor) and isinstance(blob.get("labels"), torch.Tensor)
                and blob["codes"].dim() == 3 and not blob["codes"].dtype.is_floating_point
                and blob["labels"].shape == blob["codes"].shape[:1]
                and (n_expected is None or blob["codes"].shape[0] == n_expected)):
            return blob["codes"], blob["labels"]  # anything else (a damaged or foreign cache) is recomputed
    codes, labels = extract_codes(model, loader, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_torch_save({"fingerprint": fingerprint, "split": split, "codes": codes, "labels": labels}, path)
    return codes, labels


# ---- training ----------------------------------------------------------------------------------------
@dataclass
class PriorTrainResult:
    """What ``train_prior`` returns: the best model, the folder it was saved in, and its training history."""

    model: GatedPixelCNN  # the best model by validation NLL (also saved in out_dir), in eval mode
    out_dir: Path
    best_epoch: int  # 1-based
    best_val_bpc: float  # bits per code (train bits per code when no validation codes were given)
    steps: int  # optimizer steps taken
    history: list[dict] = field(default_factory=list)  # the rows of metrics.jsonl


@torch.no_grad()
def evaluate_bpc(prior: GatedPixelCNN, codes: torch.Tensor, labels: torch.Tensor | None = None, *,
                 batch_size: int = 512, device: str | torch.device | None = None) -> float:
    """Mean negative log-likelihood of ``codes`` (N, H, W) under ``prior`` in bits per code."""
    device = prior.device if device is None else torch.device(device)
    was_training = prior.training
    prior.eval()
    total, count = 0.0, 0
    try:
        for s in range(0, codes.shape[0], batch_size):
            x = codes[s:s + batch_size].to(device)
            y = labels[s:s + batch_size].to(device) if labels is not None else None
            ce = F.cross_entropy(prior(x, y), x, reduction="sum")
            total += float(ce)
            count += x.numel()
    finally:
        prior.train(was_training)
    return total / max(count, 1) / LN2


def _check_codes(name: str, codes: torch.Tensor, K: int) -> torch.Tensor:
    codes = torch.as_tensor(codes)
    if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
        raise ValueError(f"{name} must be integer code indices, got {codes.dtype}")
    codes = codes.long()
    if codes.dim() != 3:
        raise ValueError(f"{name} must be (N, H, W) code indices, got {tuple(codes.shape)}")
    if codes.shape[0] == 0:
        raise ValueError(f"{name} holds no code grids (0 items): nothing to fit the prior to")
    if codes.min() < 0 or codes.max() >= K:
        raise ValueError(f"{name} has indices outside [0, {K})")
    return codes


def _check_labels(name: str, labels, n: int, num_classes: int) -> torch.Tensor:
    labels = torch.as_tensor(labels)
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise ValueError(f"{name} must be integer classes, got {labels.dtype}")
    labels = labels.long().reshape(-1)
    if labels.shape[0] != n:
        raise ValueError(f"{name}: {labels.shape[0]} labels for {n} code grids")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(f"{name} must lie in [0, {num_classes}) (the prior's classes), got "
                         f"[{int(labels.min())}, {int(labels.max())}]")
    return labels


def train_prior(
    codes_train: torch.Tensor,
    codes_val: torch.Tensor | None,
    *,
    labels_train: torch.Tensor | None = None,
    labels_val: torch.Tensor | None = None,
    config: PixelCNNConfig,
    epochs: int,
    batch_size: int = 128,
    lr: float = 3e-4,
    out_dir: str | Path,
    seed: int = 0,
    device: str | torch.device = "cpu",
    max_steps: int | None = None,
    progress: bool = False,
    on_epoch: Callable[[dict], None] | None = None,
) -> PriorTrainResult:
    """Fit a gated PixelCNN to code grids with Adam; keep the best epoch by validation NLL.

    Writes into ``out_dir``: ``config.json`` + ``model.safetensors`` (the best model, via
    ``save_pretrained``), ``metrics.jsonl`` (one JSON object per epoch: epoch, steps, train_bpc, val_bpc,
    seconds, lr) and ``train_summary.json``. NLLs are in bits per code; log2(K) is the uniform baseline.
    ``max_steps`` caps the total number of optimizer steps (the epoch in progress is then evaluated and
    training stops). Class-conditional when ``config.num_classes`` is set (labels then required).
    ``on_epoch(row)`` is called with each epoch's metrics row as soon as it is written (a command prints it).
    """
    K = config.num_codes
    codes_train = _check_codes("codes_train", codes_train, K)
    if codes_val is not None:
        codes_val = _check_codes("codes_val", codes_val, K)
    conditional = config.num_classes is not None
    if conditional:
        if labels_train is None or (codes_val is not None and labels_val is None):
            raise ValueError("config.num_classes is set: labels_train (and labels_val) are required")
        labels_train = _check_labels("labels_train", labels_train, codes_train.shape[0], config.num_classes)
        labels_val = (_check_labels("labels_val", labels_val, codes_val.shape[0], config.num_classes)
                      if labels_val is not None and codes_val is not None else None)
    else:
        labels_train = labels_val = None
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a finite number > 0, got {lr}")

    device = torch.device(device)
    codes_train = codes_train.to(device)  # 50k 8x8 grids are 25 MB: keep them on the device
    labels_train = labels_train.to(device) if labels_train is not None else None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = GatedPixelCNN(config).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)

    metrics_path = out_dir / METRICS_NAME
    metrics_path.write_text("")
    history: list[dict] = []
    best_bpc, best_epoch, best_state = math.inf, 0, None
    steps = 0
    N = codes_train.shape[0]
    for epoch in range(1, epochs + 1):
        t0 = time.time()
        model.train()
        perm = torch.randperm(N, generator=g)
        tot, cnt = 0.0, 0
        batches = range(0, N, batch_size)
        if progress:
            batches = progress_bar(batches, desc=f"prior epoch {epoch}", unit="batch")
        for s in batches:
            idx = perm[s:s + batch_size].to(device)
            x = codes_train[idx]
            y = labels_train[idx] if conditional else None
            loss = F.cross_entropy(model(x, y), x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            tot += float(loss.detach()) * x.numel()
            cnt += x.numel()
            if max_steps is not None and steps >= max_steps:
                break
        train_bpc = tot / max(cnt, 1) / LN2
        val_bpc = evaluate_bpc(model, codes_val, labels_val) if codes_val is not None else None
        diverged = not math.isfinite(train_bpc) or (val_bpc is not None and not math.isfinite(val_bpc))
        row = {"epoch": epoch, "steps": steps, "train_bpc": train_bpc, "val_bpc": val_bpc,
               "seconds": time.time() - t0, "lr": lr}
        history.append(row)
        append_line(metrics_path, json.dumps(row))
        if on_epoch is not None:
            on_epoch(row)
        if diverged:  # a NaN / inf NLL is no result: keep the best finite epoch, if there is one
            if best_state is None:
                raise ValueError(f"the prior's training diverged in epoch {epoch} (NLL {train_bpc} bits/code after "
                                 f"{steps} steps) before any finite epoch: lower the learning rate ({lr})")
            break
        score = val_bpc if val_bpc is not None else train_bpc
        if score < best_bpc:
            best_bpc, best_epoch = score, epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            model.save_pretrained(out_dir)
        if max_steps is not None and steps >= max_steps:
            break

    model.load_state_dict(best_state)  # an epoch that scored NaN never gets here without a finite one
    model.eval()
    summary = {"best_epoch": best_epoch, "best_val_bpc": best_bpc, "uniform_bpc": math.log2(K), "steps": steps,
               "epochs_run": len(history), "batch_size": batch_size, "lr": lr, "seed": seed,
               "num_train": N, "num_val": None if codes_val is None else int(codes_val.shape[0]),
               "grid": list(codes_train.shape[1:]), "weights": WEIGHTS_NAME}
    atomic_write_text(out_dir / SUMMARY_NAME, json.dumps(summary, indent=2) + "\n")
    return PriorTrainResult(model=model, out_dir=out_dir, best_epoch=best_epoch, best_val_bpc=best_bpc,
                            steps=steps, history=history)
