"""Train a VQ autoencoder (VQ-WAE, VQ-VAE or SQ-VAE): plain PyTorch, one loop, torchrun-compatible.

One process (CPU, or one GPU when present):
    vqwae train --model vqwae --dataset mnist --data-root ../shared/data --out runs/m1
Several GPUs on one node (NCCL; gloo when on CPU):
    torchrun --nproc_per_node=4 -m vqwae train --model vqwae --dataset cifar10 --data-root DATA --out runs/c1
Several nodes: the usual torchrun flags (--nnodes 2 --node_rank R --rdzv_endpoint HOST:PORT ...).
Resume a stopped run (kill -9 included) from its last completed epoch:
    vqwae train --out runs/m1 --resume

Every step: encode, quantize (the quantizer's loss terms are computed there), decode, one backward over
everything (encoder, decoder, codebook, pi). Once per epoch: validation MSE and code usage on the whole
validation split, ReduceLROnPlateau on validation MSE, the best model saved by validation MSE, one line of
metrics.jsonl, and the resumable state (atomically).

With ``--arch vqgan`` the reconstruction term is VQGAN's (L1 + LPIPS-VGG + the adaptive hinge adversary,
:mod:`vqwae.training.adversarial`), a discriminator step follows each autoencoder step once ``disc_start``
is reached, both Adams use betas (0.5, 0.9), and the learning rate stays constant (taming has no schedule).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from vqwae import distributed
from vqwae.data import load_splits
from vqwae.models import VQAutoencoder, build_networks, load_checked
from vqwae.progress import progress_bar, refresh_interval
from vqwae.provenance import provenance
from vqwae.quantizers import build_quantizer
from vqwae.quantizers.base import NonFiniteLatents
from vqwae.training import folder
from vqwae.training.lock import hold_run_folder
from vqwae.threads import cpu_threads, default_num_threads, flush_denormals
from vqwae.training import checkpoint
from vqwae.training.adversarial import BETAS, AdversarialLoss
from vqwae.training.logger import build_logger
from vqwae.training.config import TrainConfig
from vqwae.training.epoch_figures import TermSums, validate
from vqwae.training.transport_fit import fit_saved_weights

class TrainingDiverged(RuntimeError):
    """The loss became NaN or Inf; the last good checkpoint is kept."""


@dataclass
class TrainResult:
    """What ``train`` returns: the run folder, how far it got, and the model as the last step left it (on the
    training device, in training mode; the folder's ``model.safetensors`` holds the best epoch's weights)."""

    run_dir: Path
    epochs_completed: int
    steps: int
    best_val_mse: float
    last_metrics: dict
    model: VQAutoencoder | None = None


def build_model(cfg: TrainConfig, channels: int, image_size: int) -> VQAutoencoder:
    """The network for the image size (``TrainConfig.network_config``) and the quantizer."""
    net = cfg.network_config(channels, image_size)
    kind, qcfg = cfg.quantizer_config(latent_positions=net.latent_side(image_size) ** 2)
    encoder, decoder = build_networks(net)
    quantizer = build_quantizer(kind, qcfg)
    if cfg.quantizer_runtime:
        quantizer.set_runtime(**cfg.quantizer_runtime)
    return VQAutoencoder(encoder, quantizer, decoder, net)


def epoch_batches(n: int, batch_size: int, epoch: int, seed: int, rank: int, world: int) -> list[list[int]]:
    """This rank's index batches for an epoch. One permutation per (seed, epoch), so a resumed run sees the
    same order; global batch t is perm[t*B*world : (t+1)*B*world] and rank r takes its r-th slice, so a
    DDP step sees exactly the images a single process with batch B*world would."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
    global_batch = batch_size * world
    usable = n if world == 1 else (n // global_batch) * global_batch  # DDP: equal steps on every rank
    out = []
    for start in range(0, usable, global_batch):
        chunk = perm[start : start + global_batch]
        out.append(chunk[rank * batch_size : (rank + 1) * batch_size])
    return [b for b in out if b]


def _autocast_factory(precision: str, device: torch.device):
    if precision == "fp32":
        return lambda: torch.autocast(device.type, enabled=False)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return lambda: torch.autocast(device.type, dtype=dtype)


def build_adversarial(cfg: TrainConfig, channels: int, device: torch.device) -> AdversarialLoss | None:
    """VQGAN's discriminator and perceptual loss for an ``arch=vqgan`` run (None otherwise). A run that needs
    LPIPS-VGG and cannot find its weights stops here, before anything is written."""
    if cfg.network.arch != "vqgan":
        return None
    gan = cfg.gan
    perceptual = None
    if gan.perceptual_weight > 0:
        from vqwae.metrics.lpips import require_lpips

        perceptual = require_lpips(gan.lpips_weights, net="vgg", download=cfg.data.download, device=device)
    return AdversarialLoss(gan, channels, perceptual, cfg.optim.lr).to(device)


def _wrap_ddp(model: VQAutoencoder) -> DDP:
    """DDP without buffer broadcasts in the forward: the quantizer keeps its buffers identical on every rank
    itself (its statistics are all-reduced), and rank 0's would overwrite them. Gradients are views of DDP's
    buckets (no copy). A 1-channel input's first convolution gets its weight gradient from the backward with
    other (equivalent) strides than the weight's, which DDP reports as a layout mismatch on every step: the hook
    hands DDP that gradient in the weight's own layout."""
    for p in model.parameters():
        if p.requires_grad:
            p.register_hook(functools.partial(_in_layout_of, p))
    if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters:  # torch >= 2.12 renamed it
        return DDP(model, forward_sync_buffers=False, gradient_as_bucket_view=True)
    return DDP(model, broadcast_buffers=False, gradient_as_bucket_view=True)


def _in_layout_of(param: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return grad if grad.stride() == param.stride() else torch.empty_like(param).copy_(grad)


def train(cfg: TrainConfig, *, resume: bool = False, progress: bool | None = None) -> TrainResult:
    """Train into ``cfg.run.out`` (resume: continue the run there), holding the folder's lock throughout.

    Raises RunFolderBusy when another process is writing the folder, FileExistsError when it already holds a
    run and ``resume`` is False, TrainingDiverged on a non-finite loss."""
    run = cfg.run
    device = distributed.resolve_device(run.device)
    dist_info = distributed.setup(device)
    world, main = dist_info.world_size, dist_info.is_main
    if device.type == "cuda":
        torch.cuda.set_device(device)
    run_dir = Path(run.out)
    fresh = not run_dir.exists()
    try:
        with contextlib.ExitStack() as scope:
            # One writer per run folder (rank 0 holds the lock; every rank stops if it could not be taken).
            scope.enter_context(hold_run_folder(run_dir, is_main=main, distributed=dist_info.enabled, device=device))
            if device.type == "cpu":
                scope.enter_context(cpu_threads(_cpu_threads_per_rank(run.threads, world)))
                scope.enter_context(flush_denormals())
            result = _train_locked(cfg, run_dir, device, dist_info, scope, resume=resume, progress=progress)
    except BaseException:
        if fresh and main:
            folder.remove_if_unused(run_dir)
        raise
    distributed.teardown() if dist_info.enabled else None
    return result


def _cpu_threads_per_rank(threads: int | None, world: int) -> int:
    """--threads (or VQWAE_THREADS), else the CPUs not already busy shared among this node's ranks."""
    if threads is not None:
        return threads
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return max(1, default_num_threads() // max(1, local_world))


def _train_locked(cfg: TrainConfig, run_dir: Path, device: torch.device, dist_info, scope: contextlib.ExitStack,
                  *, resume: bool, progress: bool | None) -> TrainResult:
    folder.check_can_train(run_dir, resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    training = _Training(cfg, run_dir, device, dist_info, resume=resume)
    training.start(scope, progress=progress)
    for epoch in range(training.epoch, cfg.optim.epochs):
        if cfg.optim.max_steps is not None and training.step >= cfg.optim.max_steps:
            break
        training.run_epoch(epoch)
    if dist_info.is_main:
        training.fit_transport()
    return TrainResult(run_dir, training.epoch, training.step, training.best, training.last, training.model)


def _load_training_data(cfg: TrainConfig, rank: int, world: int):
    """(splits, the validation loader of this rank's share), or a ValueError when a split is empty."""
    data, opt = cfg.data, cfg.optim
    splits = load_splits(data.dataset, data.data_root, train_limit=data.train_limit, eval_limit=data.eval_limit,
                         download=data.download, image_size=data.image_size, seed=cfg.run.seed,
                         skip_unreadable=data.skip_unreadable)
    if len(splits.val) == 0 or len(splits.train) == 0:
        raise ValueError(f"{data.dataset}: {len(splits.train)} training and {len(splits.val)} validation images; "
                         "training needs both (an image folder gives a tenth of its images, rounded down, to "
                         "validation: at least 10 images, or ROOT/train and ROOT/val folders)")
    if world > 1 and len(splits.train) < opt.batch_size * world:  # epoch_batches takes whole global batches only
        raise ValueError(f"a global batch of {opt.batch_size * world} ({world} processes x --batch-size "
                         f"{opt.batch_size}) is more than the {len(splits.train)} training images, so no rank "
                         "would take a step; lower --batch-size or start fewer processes")
    val_idx = list(range(rank, len(splits.val), world))  # each rank validates its own share
    return splits, DataLoader(splits.val, batch_size=max(opt.batch_size, 256), sampler=val_idx,
                              num_workers=data.num_workers)


class _Training:
    """One run's training, in the order it happens: ``__init__`` loads the data and builds the model, its
    optimiser and (VQGAN) adversary, identically on every rank, and restores a saved state; ``start`` records the
    configuration and opens the logger; ``run_epoch`` trains one epoch, then validates, schedules and saves."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, device: torch.device, dist_info, *, resume: bool):
        self.cfg, self.run_dir, self.device, self.dist, self.resume = cfg, run_dir, device, dist_info, resume
        opt, run = cfg.optim, cfg.run
        self.splits, self.val_loader = _load_training_data(cfg, dist_info.rank, dist_info.world_size)
        info = self.splits.info
        torch.manual_seed(run.seed)  # the same initialisation on every rank
        self.model = build_model(cfg, info.channels, info.image_size).to(device)
        self.gan = build_adversarial(cfg, info.channels, device)
        self.optimizer = torch.optim.Adam([p for p in self.model.parameters() if p.requires_grad], lr=opt.lr,
                                          **({"betas": BETAS} if self.gan is not None else {}))
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(self.optimizer, mode="min", factor=opt.lr_factor,
                                                                    patience=opt.lr_patience)
        self.scaler = torch.amp.GradScaler(device.type, enabled=run.precision == "fp16" and device.type == "cuda")
        self.autocast = _autocast_factory(run.precision, device)
        self.epoch, self.step, self.best, self.last = 0, 0, math.inf, {}
        if resume and (run_dir / folder.STATE).exists():
            self._restore(run_dir / folder.STATE)
        else:
            torch.manual_seed(run.seed + dist_info.rank)  # per-rank randomness (e.g. SQ-VAE's Gumbel noise)

    def _restore(self, path: Path) -> None:
        state = checkpoint.load_state(path)
        checkpoint.check_same_run(state, path, self.cfg.to_dict())  # the configuration this call was given
        try:
            load_checked(self.model, state["model"], path)  # a tensor of another dtype: refused, named
        except RuntimeError as e:
            raise ValueError(f"cannot resume: {path} does not match this configuration: {e}") from e
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.gan is not None:
            if "gan" not in state:
                raise ValueError(f"cannot resume: {path} holds no discriminator state")
            self.gan.load_state_dict(state["gan"])
        self.epoch, self.step, self.best = state["epoch"], state["step"], state["best_val_mse"]
        checkpoint.set_rng_state(state["rng"])

    def start(self, scope: contextlib.ExitStack, *, progress: bool | None) -> None:
        main = self.dist.is_main  # the logger first: one that cannot start refuses before the run's files change
        self.logger = scope.enter_context(contextlib.closing(build_logger(self.cfg.run.logger, self.run_dir, main)))
        if main:  # only once the data, the model and any saved state have loaded: a failed start changes nothing
            folder.write_config(self.run_dir, self.cfg)
            folder.append_provenance(self.run_dir, provenance("train", self.device, step=self.step,
                                                              world_size=self.dist.world_size))
        if self.resume and main:
            # Lines of epochs after the saved state (or every line, when killed before the first state was
            # written) are written again by this run.
            folder.truncate_metrics(self.run_dir, self.epoch)
        self.ddp_model = _wrap_ddp(self.model) if self.dist.enabled else self.model
        if self.cfg.run.compile:  # after DDP, as torch recommends; the weights stay self.model's (saved unprefixed)
            self.ddp_model = torch.compile(self.ddp_model)
        if self.gan is not None and self.dist.enabled:
            self.gan.wrap_ddp(DDP)
        self.progress = main and progress is not False  # default: on rank 0 (a bar, or a line every 30 s in a log)
        self.refresh = refresh_interval()  # decided once: the loop only compares clocks

    def run_epoch(self, epoch: int) -> None:
        metrics = self._epoch_metrics(epoch, *self._train_steps(epoch))
        if self.gan is None:
            self.scheduler.step(metrics["val/mse"])
        self.last, self.epoch = metrics, epoch + 1
        if self.dist.is_main:
            self._save(metrics)
        else:
            self.best = min(self.best, metrics["val/mse"])

    def _train_steps(self, epoch: int):
        """One epoch of optimiser steps: (the sums of the logged terms over the epoch's images, the images behind
        each adversarial term, the images seen, the seconds, whether max_steps cut the epoch short, whether a loss
        was non-finite)."""
        cfg, device, model, gan = self.cfg, self.device, self.model, self.gan
        opt, world = cfg.optim, self.dist.world_size
        model.train()
        batches = epoch_batches(len(self.splits.train), opt.batch_size, epoch, cfg.run.seed, self.dist.rank, world)
        loader = DataLoader(self.splits.train, batch_sampler=batches, num_workers=cfg.data.num_workers,
                            pin_memory=device.type == "cuda")  # pinned: the copy below is asynchronous
        # The logged terms of a step are stacked and added to the epoch's sums in one launch; the sums, and the flag of
        # a non-finite loss, stay on the device: no host synchronisation per step. The flag is read at the progress
        # refresh (one process) and with the epoch's figures (every rank at once: DDP ranks stop together).
        sums = TermSums(device)
        seen_by = defaultdict(int)  # images behind each VQGAN term: the adversary's start at disc_start
        diverged = torch.zeros((), dtype=torch.bool, device=device)
        seen, t0 = 0, time.perf_counter()
        # A bar in a terminal, a line every 30 s in a log file; its figures are read from the device (a host
        # sync) only when it is about to show them.
        bar = progress_bar(loader, desc=f"epoch {epoch + 1}/{opt.epochs}" if self.progress else None, unit="batch")
        shown_at = time.perf_counter()
        # One process on the CPU reads the flag every step (no device to wait for): it stops before the bad step's
        # update. Elsewhere a non-finite step's update makes the weights non-finite, and the next latents stop the
        # quantizer (its check: a ValueError on the CPU, a device assert on a GPU), which is reported as divergence.
        check_each_step = device.type == "cpu" and not self.dist.enabled
        for i, (x, _) in enumerate(bar):
            x = x.to(device, non_blocking=True)
            try:
                with self.autocast():
                    x_hat, out = self.ddp_model(x)
            except (NonFiniteLatents, RuntimeError) as e:  # the quantizer's check, on the CPU / as a device assert
                if isinstance(e, NonFiniteLatents) or "device-side assert" in str(e):
                    raise TrainingDiverged(f"non-finite latents at epoch {epoch + 1}, step {self.step + 1} (the "
                                           f"weights diverged); the last good checkpoint in {self.run_dir} is kept. "
                                           "Try a lower --lr or --precision fp32.") from e
                raise
            terms: dict = {}
            if gan is None:
                recon = model.reconstruction_loss(x_hat.float(), x)
            else:
                with self.autocast():
                    recon, terms = gan.generator_terms(x, x_hat.float(), model.decoder.last_layer, self.step)
                recon = recon.float()
            loss = recon + out.loss
            diverged |= ~torch.isfinite(loss.detach())
            if check_each_step and diverged:
                self._diverged(epoch, out, recon, self.step + 1)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if gan is not None:
                with self.autocast():
                    terms.update(gan.discriminator_step(x, x_hat.detach().float(), self.step))
            self.step += 1
            self.logger.step(self.step, {"loss": loss, "recon": recon, **out.losses, **terms,
                                         "perplexity": out.perplexity})
            b = x.shape[0]
            seen += b
            with torch.no_grad():
                mse = torch.nn.functional.mse_loss(x_hat.detach().float(), x)
                sums.add({"loss": loss, "recon": recon, "mse": mse, **out.losses, **terms,
                          "perplexity": out.perplexity}, b)
            for name in terms:
                seen_by[name] += b
            if time.perf_counter() - shown_at >= self.refresh:
                shown_at = time.perf_counter()
                if not self.dist.enabled and bool(diverged):  # under DDP every rank reads it at the epoch's end
                    self._diverged(epoch, out, recon)
                if self.progress:
                    bar.set_postfix(step=self.step, loss=f"{float(sums.as_dict()['loss']) / seen:.5f}",
                                    ppl=f"{float(out.perplexity):.1f}",
                                    img_s=f"{seen * world / (shown_at - t0):.0f}", refresh=False)
            if opt.max_steps is not None and self.step >= opt.max_steps:
                break
        bar.close()
        partial = opt.max_steps is not None and self.step >= opt.max_steps and i + 1 < len(batches)
        self._last_terms = (out, recon)  # for the message, if the epoch's figures find the loss non-finite
        return sums.as_dict(), seen_by, seen, time.perf_counter() - t0, partial, diverged

    def _diverged(self, epoch: int, out, recon, step: int | None = None) -> None:
        raise TrainingDiverged(
            f"non-finite loss {'at' if step else 'by'} epoch {epoch + 1}, step {step or self.step} (terms: "
            f"recon={float(recon.detach()):.4g}, "
            + ", ".join(f"{k}={float(v.detach()):.4g}" for k, v in out.losses.items())
            + f"); the last good checkpoint in {self.run_dir} is kept. Try a lower --lr or --precision fp32."
        )

    def _epoch_metrics(self, epoch: int, sums: dict, seen_by: dict, seen: int, seconds: float,
                       partial: bool, diverged: torch.Tensor) -> dict:
        """The epoch's line of metrics.jsonl: the training terms averaged over every rank's images, validation. A
        non-finite loss on any rank (summed in the same all-reduce) stops every rank before anything is saved."""
        counts = torch.tensor([float(seen), *map(float, seen_by.values())], dtype=torch.float64, device=self.device)
        totals = torch.cat([diverged.double().reshape(1), counts, torch.stack(list(sums.values()))])
        distributed.all_reduce_sum(totals)
        if float(totals[0]) > 0:
            self._diverged(epoch, *self._last_terms)
        totals = totals[1:]
        n = dict(zip(seen_by, totals[1:len(counts)]))
        metrics = {"epoch": epoch + 1, "step": self.step}
        metrics.update({f"train/{k}": float(v / n.get(k, totals[0])) for k, v in zip(sums, totals[len(counts):])})
        metrics.update(validate(self.model, self.val_loader, self.device, self.autocast))
        metrics.update({"lr": self.optimizer.param_groups[0]["lr"], "seconds": seconds,
                        "images_per_second": float(totals[0]) / max(seconds, 1e-9)})
        if partial:
            metrics["partial_epoch"] = True
        return metrics

    def fit_transport(self) -> None:
        """Rank 0, once training has ended: with fit_steps, the saved weights' transport map solved on the training
        latents (``transport_fit.fit_saved_weights``)."""
        fit_saved_weights(self.cfg, self.run_dir, self.splits.train, self.device, self.step)

    def _save(self, metrics: dict) -> None:
        """Rank 0: the best weights, the metrics line, the logger's epoch, then the resumable state (atomic)."""
        if metrics["val/mse"] < self.best:
            self.best = metrics["val/mse"]
            self.model.save_pretrained(self.run_dir)
        folder.append_metrics(self.run_dir, metrics)
        self.logger.epoch(self.step, metrics)
        checkpoint.save_state(self.run_dir / folder.STATE, model=self.model.state_dict(),
                              optimizer=self.optimizer.state_dict(), scheduler=self.scheduler.state_dict(),
                              epoch=self.epoch, step=self.step, best_val_mse=self.best, config=self.cfg.to_dict(),
                              **({"gan": self.gan.state_dict()} if self.gan is not None else {}))
        print(f"epoch {self.epoch}: " + ", ".join(f"{k} {v:.5g}" for k, v in metrics.items()
                                                 if isinstance(v, float) and not k.startswith("train/")), flush=True)
