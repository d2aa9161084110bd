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
from vqwae.metrics.usage import CodeUsage
from vqwae.models import VQAutoencoder, build_networks
from vqwae.progress import progress_bar, refresh_interval
from vqwae.quantizers import build_quantizer
from vqwae.training import folder
from vqwae.training.lock import hold_run_folder
from vqwae.threads import cpu_threads, default_num_threads
from vqwae.training import checkpoint
from vqwae.training.adversarial import BETAS, AdversarialLoss
from vqwae.training.logger import build_logger
from vqwae.training.config import TrainConfig


class TrainingDiverged(RuntimeError):
    """The loss became NaN or Inf; the last good checkpoint is kept."""


@dataclass
class TrainResult:
    run_dir: Path
    epochs_completed: int
    steps: int
    best_val_mse: float
    last_metrics: dict


def build_model(cfg: TrainConfig, channels: int, image_size: int) -> VQAutoencoder:
    """The network for the image size (``TrainConfig.network_config``) and the quantizer."""
    net = cfg.network_config(channels, image_size)
    kind, qcfg = cfg.quantizer_config(latent_positions=net.latent_side(image_size) ** 2)
    encoder, decoder = build_networks(net)
    return VQAutoencoder(encoder, build_quantizer(kind, qcfg), decoder, net)


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


@torch.no_grad()
def validate(model: VQAutoencoder, loader: DataLoader, device: torch.device, autocast) -> dict:
    """Validation MSE, loss terms and ONE code-usage histogram over the whole split (all ranks)."""
    model.eval()
    usage = CodeUsage(model.quantizer.num_codes, device=device)
    sums = defaultdict(float)
    count = 0
    for x, _ in loader:
        x = x.to(device, non_blocking=True)
        with autocast():
            z = model.encoder(x)
        out = model.quantizer(z, compute_loss=True)
        with autocast():
            x_hat = model.decoder(out.quantized)
        b = x.shape[0]
        sums["mse"] += float(torch.nn.functional.mse_loss(x_hat.float(), x)) * b
        for name, value in out.losses.items():
            sums[name] += float(value.detach()) * b
        usage.update(out.indices)
        count += b
    totals = torch.tensor([count, *sums.values()], dtype=torch.float64, device=device)
    distributed.all_reduce_sum(totals)
    usage.reduce()
    result = {f"val/{k}": float(v / totals[0]) for k, v in zip(sums, totals[1:])}
    result.update({"val/perplexity": usage.perplexity, "val/codes_used": usage.codes_used})
    model.train()
    return result


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


def _check_run_dir(run_dir: Path, resume: bool) -> None:
    existing = folder.existing_run_files(run_dir)
    if existing and not resume:
        raise FileExistsError(
            f"{run_dir} already holds a run ({', '.join(existing)}); pass --resume to continue it, "
            "or choose another --out (nothing was overwritten)"
        )
    if resume and not (run_dir / folder.STATE).exists():
        # state.pt is written after each epoch's metrics line, so a run killed during its first state write
        # records one epoch (it restarts); a run that records more has lost its state.pt: restarting would
        # silently replace its weights and metrics
        epochs = folder.last_epoch(folder.read_metrics(run_dir))
        if epochs > 1:
            raise FileNotFoundError(f"cannot resume: {run_dir / folder.STATE} is missing, yet {run_dir} records "
                                    f"{epochs} trained epochs; nothing was changed (restore the file, or train into "
                                    "another --out)")


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
            result = _train_locked(cfg, run_dir, device, dist_info, scope, resume=resume, progress=progress)
    except BaseException:
        if fresh and main:
            _remove_if_unused(run_dir)
        raise
    distributed.teardown() if dist_info.enabled else None
    return result


def _remove_if_unused(run_dir: Path) -> None:
    """A run that stopped before its first checkpoint (bad data, a bad option) leaves no folder behind: this
    removes RUN_DIR when it holds nothing but what this process wrote into it (its lock and config.json)."""
    ours = {folder.LOCK, folder.CONFIG}
    with contextlib.suppress(OSError):
        if all(p.name in ours and p.is_file() for p in run_dir.iterdir()):
            for name in ours:
                (run_dir / name).unlink(missing_ok=True)
            run_dir.rmdir()


def _cpu_threads_per_rank(threads: int | None, world: int) -> int:
    """--threads (or VQWAE_THREADS), else the CPUs not already busy shared among this node's ranks."""
    if threads is not None:
        return threads
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return max(1, default_num_threads() // max(1, local_world))


def _train_locked(cfg: TrainConfig, run_dir: Path, device: torch.device, dist_info, scope: contextlib.ExitStack,
                  *, resume: bool, progress: bool | None) -> TrainResult:
    data, opt, run = cfg.data, cfg.optim, cfg.run
    rank, world, main = dist_info.rank, dist_info.world_size, dist_info.is_main
    _check_run_dir(run_dir, resume)
    run_dir.mkdir(parents=True, exist_ok=True)

    # ---- data ------------------------------------------------------------------------------------------
    splits = load_splits(data.dataset, data.data_root, train_limit=data.train_limit, eval_limit=data.eval_limit,
                         download=data.download, image_size=data.image_size, seed=run.seed,
                         skip_unreadable=data.skip_unreadable)
    info = splits.info
    if len(splits.val) == 0 or len(splits.train) == 0:
        raise ValueError(f"{data.dataset}: {len(splits.train)} training and {len(splits.val)} validation images; "
                         "training needs both (an image folder gives a tenth of its images, rounded down, to "
                         "validation: at least 10 images, or ROOT/train and ROOT/val folders)")
    val_idx = list(range(rank, len(splits.val), world))  # each rank validates its own share
    val_loader = DataLoader(splits.val, batch_size=max(opt.batch_size, 256),
                            sampler=val_idx, num_workers=data.num_workers)

    # ---- model and optimisation (identical initialisation on every rank) --------------------------------
    torch.manual_seed(run.seed)
    model = build_model(cfg, info.channels, info.image_size).to(device)
    gan = build_adversarial(cfg, info.channels, device)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=opt.lr,
                                 **({"betas": BETAS} if gan is not None else {}))
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=opt.lr_factor,
                                                           patience=opt.lr_patience)
    scaler = torch.amp.GradScaler(device.type, enabled=run.precision == "fp16" and device.type == "cuda")
    autocast = _autocast_factory(run.precision, device)
    start_epoch, step, best = 0, 0, math.inf
    if resume and (run_dir / folder.STATE).exists():
        state = checkpoint.load_state(run_dir / folder.STATE)
        try:
            model.load_state_dict(state["model"])
        except RuntimeError as e:
            raise ValueError(f"cannot resume: {run_dir / folder.STATE} does not match this configuration: {e}") from e
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if gan is not None:
            if "gan" not in state:
                raise ValueError(f"cannot resume: {run_dir / folder.STATE} holds no discriminator state")
            gan.load_state_dict(state["gan"])
        start_epoch, step, best = state["epoch"], state["step"], state["best_val_mse"]
        checkpoint.set_rng_state(state["rng"])
    else:
        torch.manual_seed(run.seed + rank)  # per-rank randomness (e.g. SQ-VAE's Gumbel noise)
    if main:  # only once the data, the model and any saved state have loaded: a failed start changes nothing
        folder.write_config(run_dir, cfg)
    if resume and main:
        # Lines of epochs after the saved state (or every line, when killed before the first state was
        # written) are written again by this run.
        folder.truncate_metrics(run_dir, start_epoch)
    ddp_model = _wrap_ddp(model) if dist_info.enabled else model
    if gan is not None and dist_info.enabled:
        gan.wrap_ddp(DDP)
    logger = scope.enter_context(contextlib.closing(build_logger(run.logger, run_dir, main)))
    progress = main and progress is not False  # default: on rank 0 (a bar, or a line every 30 s in a log)
    refresh = refresh_interval()  # decided once: the loop below only compares clocks

    # ---- the loop ------------------------------------------------------------------------------------
    last: dict = {}
    completed = start_epoch
    for epoch in range(start_epoch, opt.epochs):
        if opt.max_steps is not None and step >= opt.max_steps:
            break
        model.train()
        batches = epoch_batches(len(splits.train), opt.batch_size, epoch, run.seed, rank, world)
        loader = DataLoader(splits.train, batch_sampler=batches, num_workers=data.num_workers)
        # Running sums stay on the device: no host synchronisation per step for bookkeeping.
        sums = defaultdict(lambda: torch.zeros((), dtype=torch.float64, device=device))
        seen_by = defaultdict(int)  # images behind each VQGAN term: the adversary's start at disc_start
        seen, t0 = 0, time.perf_counter()
        # A bar in a terminal, a line every 30 s in a log file; its figures are read from the device (a host
        # sync) only when it is about to show them.
        bar = progress_bar(loader, desc=f"epoch {epoch + 1}/{opt.epochs}" if progress else None, unit="batch")
        shown_at = -math.inf
        for i, (x, _) in enumerate(bar):
            x = x.to(device, non_blocking=True)
            with autocast():
                x_hat, out = ddp_model(x)
            terms: dict = {}
            if gan is None:
                recon = model.reconstruction_loss(x_hat.float(), x)
            else:
                with autocast():
                    recon, terms = gan.generator_terms(x, x_hat.float(), model.decoder.last_layer, step)
                recon = recon.float()
            loss = recon + out.loss
            if not torch.isfinite(loss):
                raise TrainingDiverged(
                    f"non-finite loss at epoch {epoch + 1}, step {step + 1} (terms: recon={float(recon.detach()):.4g}, "
                    + ", ".join(f"{k}={float(v.detach()):.4g}" for k, v in out.losses.items())
                    + f"); the last good checkpoint in {run_dir} is kept. Try a lower --lr or --precision fp32."
                )
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if gan is not None:
                with autocast():
                    terms.update(gan.discriminator_step(x, x_hat.detach().float(), step))
            step += 1
            logger.step(step, {"loss": loss, "recon": recon, **out.losses, **terms, "perplexity": out.perplexity})
            b = x.shape[0]
            seen += b
            with torch.no_grad():
                sums["loss"] += loss.detach() * b
                sums["recon"] += recon.detach() * b
                sums["mse"] += torch.nn.functional.mse_loss(x_hat.detach().float(), x) * b
                for name, value in {**out.losses, **terms}.items():
                    sums[name] += value.detach() * b
                for name in terms:
                    seen_by[name] += b
                sums["perplexity"] += out.perplexity * b
            if progress and time.perf_counter() - shown_at >= refresh:
                shown_at = time.perf_counter()
                bar.set_postfix(step=step, loss=f"{float(sums['loss']) / seen:.5f}", ppl=f"{float(out.perplexity):.1f}",
                                img_s=f"{seen * world / (shown_at - t0):.0f}", refresh=False)
            if opt.max_steps is not None and step >= opt.max_steps:
                break
        bar.close()
        train_seconds = time.perf_counter() - t0

        # ---- end of epoch: validate, schedule, save ----------------------------------------------------
        counts = torch.tensor([float(seen), *map(float, seen_by.values())], dtype=torch.float64, device=device)
        totals = torch.cat([counts, torch.stack(list(sums.values()))])
        distributed.all_reduce_sum(totals)
        n = dict(zip(seen_by, totals[1:len(counts)]))
        metrics = {"epoch": epoch + 1, "step": step}
        metrics.update({f"train/{k}": float(v / n.get(k, totals[0])) for k, v in zip(sums, totals[len(counts):])})
        metrics.update(validate(model, val_loader, device, autocast))
        metrics.update({"lr": optimizer.param_groups[0]["lr"], "seconds": train_seconds,
                        "images_per_second": float(totals[0]) / max(train_seconds, 1e-9)})
        if opt.max_steps is not None and step >= opt.max_steps and i + 1 < len(batches):
            metrics["partial_epoch"] = True
        if gan is None:
            scheduler.step(metrics["val/mse"])
        last = metrics
        completed = epoch + 1
        if main:
            if metrics["val/mse"] < best:
                best = metrics["val/mse"]
                model.save_pretrained(run_dir)
            folder.append_metrics(run_dir, metrics)
            logger.epoch(step, metrics)
            checkpoint.save_state(run_dir / folder.STATE, model=model.state_dict(), optimizer=optimizer.state_dict(),
                                  scheduler=scheduler.state_dict(), epoch=epoch + 1, step=step,
                                  best_val_mse=best, config=cfg.to_dict(),
                                  **({"gan": gan.state_dict()} if gan is not None else {}))
            print(f"epoch {epoch + 1}: " + ", ".join(f"{k} {v:.5g}" for k, v in metrics.items()
                                                     if isinstance(v, float) and not k.startswith("train/")),
                  flush=True)
        else:
            best = min(best, metrics["val/mse"])
    return TrainResult(run_dir, completed, step, best, last)

