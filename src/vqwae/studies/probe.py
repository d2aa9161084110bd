"""Linear probe: how linearly separable are the classes in a frozen autoencoder's latents?

One ``nn.Linear(F, num_classes)`` on standardised, flattened features (mean/std fitted on the training
features only), trained with softmax cross-entropy, accuracy reported on the test features.

Optimizer: full-batch L-BFGS with a strong-Wolfe line search by default. The problem is convex
(multinomial logistic regression), so a quasi-Newton method reaches the optimum in a few hundred
iterations with no learning rate, schedule or epoch count to tune, and full-batch steps make the result
deterministic (no minibatch order). A small L2 penalty (``weight_decay``) keeps the optimum finite on
separable data. Mini-batch Adam is available (``optimizer="adam"``) for feature sets too large for one
full-batch pass on the device.

Features (:func:`extract_features`): ``"quantized"`` = ``out.quantized`` from ``x_hat, out = model(x)``
(B, D, h, w), the decoder's input (the paper's probe: 64x8x8 -> 10 classes); ``"continuous"`` =
``model.encoder(x)`` (B, D, h, w), the encoder output before quantization. Memory: 50k CIFAR-10 images
give 50k x 4096 float32 features, about 0.8 GB per kind.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vqwae.progress import progress_bar

FEATURE_KINDS = ("quantized", "continuous")
"""What the linear probe reads: the quantized latents (the paper's probe) or the encoder's continuous ones."""


@dataclass
class Standardizer:
    mean: torch.Tensor  # (F,)
    std: torch.Tensor  # (F,), constant features get std 1

    @classmethod
    def fit(cls, x: torch.Tensor, eps: float = 1e-8) -> "Standardizer":
        x = x.double()
        mean = x.mean(0)
        std = x.std(0, unbiased=False)
        std = torch.where(std > eps, std, torch.ones_like(std))
        return cls(mean.float(), std.float())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() - self.mean.to(x.device)) / self.std.to(x.device)


@dataclass
class ProbeResult:
    train_accuracy: float
    test_accuracy: float
    train_loss: float  # final cross-entropy on the training features (nats, without the L2 term)
    num_features: int
    num_classes: int
    optimizer: str
    iterations: int  # L-BFGS function evaluations, or Adam steps
    probe: nn.Linear | None = None  # the trained layer (on standardised features), on the CPU
    standardizer: Standardizer | None = None

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("train_accuracy", "test_accuracy", "train_loss", "num_features",
                                              "num_classes", "optimizer", "iterations")}


@torch.no_grad()
def _accuracy(layer: nn.Linear, x: torch.Tensor, y: torch.Tensor, batch: int = 8192) -> float:
    correct = 0
    for s in range(0, x.shape[0], batch):
        correct += int((layer(x[s:s + batch]).argmax(1) == y[s:s + batch]).sum())
    return correct / max(x.shape[0], 1)


def linear_probe(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    *,
    num_classes: int | None = None,
    optimizer: str = "lbfgs",
    weight_decay: float = 1e-4,
    max_iter: int = 500,
    epochs: int = 30,
    lr: float = 1e-3,
    batch_size: int = 256,
    standardize: bool = True,
    seed: int = 0,
    device: str | torch.device = "cpu",
    progress: str | None = None,
) -> ProbeResult:
    """Train one linear layer on (N, F) train features, report train and test accuracy.

    optimizer: "lbfgs" (full batch, ``max_iter`` iterations at most) or "adam" (``epochs`` of minibatches
    of ``batch_size`` at learning rate ``lr``). weight_decay: L2 penalty 0.5 * wd * ||W||^2 on the weights
    (not the bias) added to the mean cross-entropy. Features of any trailing shape are flattened.
    progress: a label for a progress bar of the optimiser's iterations on stderr (None: silent).
    """
    device = torch.device(device)
    xtr = torch.as_tensor(train_features).flatten(1).float()
    xte = torch.as_tensor(test_features).flatten(1).float()
    ytr = torch.as_tensor(train_labels).long().reshape(-1)
    yte = torch.as_tensor(test_labels).long().reshape(-1)
    if xtr.shape[0] != ytr.shape[0] or xte.shape[0] != yte.shape[0]:
        raise ValueError("features and labels disagree in length")
    if xtr.shape[1] != xte.shape[1]:
        raise ValueError(f"train and test features differ in width: {xtr.shape[1]} vs {xte.shape[1]}")
    if num_classes is None:
        num_classes = int(max(ytr.max(), yte.max() if yte.numel() else 0)) + 1
    std = Standardizer.fit(xtr) if standardize else None
    if std is not None:
        xtr, xte = std(xtr), std(xte)
    xtr, ytr, xte, yte = xtr.to(device), ytr.to(device), xte.to(device), yte.to(device)

    torch.manual_seed(seed)
    layer = nn.Linear(xtr.shape[1], num_classes).to(device)
    nn.init.zeros_(layer.weight)  # convex problem: a fixed, symmetric start makes the result seed-free for L-BFGS
    nn.init.zeros_(layer.bias)

    def objective(xb, yb):
        loss = F.cross_entropy(layer(xb), yb)
        return loss, loss + 0.5 * weight_decay * layer.weight.pow(2).sum()

    iterations = 0
    total = max_iter if optimizer == "lbfgs" else epochs * math.ceil(xtr.shape[0] / batch_size)
    bar = progress_bar(total=total, desc=progress)
    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS(layer.parameters(), lr=1.0, max_iter=max_iter, history_size=20,
                                tolerance_grad=1e-6, tolerance_change=1e-9, line_search_fn="strong_wolfe")

        def closure():
            nonlocal iterations
            iterations += 1
            bar.update()
            opt.zero_grad()
            _, total = objective(xtr, ytr)
            total.backward()
            return total

        opt.step(closure)
    elif optimizer == "adam":
        opt = torch.optim.Adam(layer.parameters(), lr=lr)
        g = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            perm = torch.randperm(xtr.shape[0], generator=g).to(device)
            for s in range(0, xtr.shape[0], batch_size):
                idx = perm[s:s + batch_size]
                opt.zero_grad()
                _, total = objective(xtr[idx], ytr[idx])
                total.backward()
                opt.step()
                iterations += 1
                bar.update()
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: 'lbfgs', 'adam'")

    bar.close()
    with torch.no_grad():
        train_loss = float(F.cross_entropy(layer(xtr), ytr))
    return ProbeResult(
        train_accuracy=_accuracy(layer, xtr, ytr),
        test_accuracy=_accuracy(layer, xte, yte),
        train_loss=train_loss,
        num_features=xtr.shape[1],
        num_classes=num_classes,
        optimizer=optimizer,
        iterations=iterations,
        probe=layer.cpu().eval(),
        standardizer=std,
    )


@torch.no_grad()
def extract_features(
    model: nn.Module,
    loader,
    device: str | torch.device = "cpu",
    *,
    kinds: tuple[str, ...] = FEATURE_KINDS,
    progress: str | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Flattened features of a frozen autoencoder over a loader of (images, labels).

    Returns ({kind: (N, D*h*w) float32 on the CPU}, labels (N,) long). ``kinds`` is a subset of
    ("quantized", "continuous"). The model is put in eval mode for the pass and restored afterwards.
    ``progress``: a label for a progress bar over the batches on stderr (None: silent)."""
    for k in kinds:
        if k not in FEATURE_KINDS:
            raise ValueError(f"unknown feature kind {k!r}; valid: {FEATURE_KINDS}")
    was_training = model.training
    model.eval()
    feats: dict[str, list[torch.Tensor]] = {k: [] for k in kinds}
    labels = []
    try:
        for batch in progress_bar(loader, desc=progress, unit="batch"):
            x = batch[0].to(device)
            if "quantized" in kinds:
                _, out = model(x)
                feats["quantized"].append(out.quantized.flatten(1).float().cpu())
            if "continuous" in kinds:
                feats["continuous"].append(model.encoder(x).flatten(1).float().cpu())
            labels.append(torch.as_tensor(batch[1]).long().reshape(-1).cpu())
    finally:
        model.train(was_training)
    if not labels:
        raise ValueError("the loader yielded no batches")
    return {k: torch.cat(v) for k, v in feats.items()}, torch.cat(labels)


def probe_autoencoder(
    model: nn.Module,
    train_loader,
    test_loader,
    device: str | torch.device = "cpu",
    *,
    kinds: tuple[str, ...] = FEATURE_KINDS,
    progress: bool = False,
    **probe_kwargs,
) -> dict[str, ProbeResult]:
    """Linear-probe a frozen autoencoder on each feature kind; returns {kind: ProbeResult}.

    ``probe_kwargs`` go to :func:`linear_probe` (``device`` is shared with feature extraction). ``progress``:
    progress bars for each stage (encoding the train and test images, fitting each probe) on stderr."""
    ftr, ytr = extract_features(model, train_loader, device, kinds=kinds,
                                progress="probe: encoding train images" if progress else None)
    fte, yte = extract_features(model, test_loader, device, kinds=kinds,
                                progress="probe: encoding test images" if progress else None)
    return {k: linear_probe(ftr[k], ytr, fte[k], yte, device=device,
                            progress=f"probe: fitting on {k} features" if progress else None, **probe_kwargs)
            for k in kinds}
