"""The host zoo: vqwae's quantizers against vector-quantize-pytorch inside host networks the defaults were not
tuned in (issue #34), at equal steps, on the same batches.

A default is a promise to networks we have never seen, so every quantizer is dropped, as a user would drop it,
into each of the hosts of `host_networks.py` (all take 32x32 images, batch 32, Adam 1e-3):

* ``paper``: the paper's 32x32 network as vqwae ships it (the authors' start: N(0, 0.02) convolution weights,
  PyTorch's default biases; before 2026-12-01 the biases were zeroed: result files up to tag ``zoo3000``), latent
  64 x 8 x 8;
* ``default-init``: the same layers with PyTorch's default initialisation, weights too (its latents start at the
  ``paper`` host's RMS since the authors' start, 0.05-0.06 on 32 CIFAR-10 images; ~25x above the zero-bias start);
* ``groupnorm``: a GroupNorm / SiLU ResNet autoencoder (VQGAN-style blocks) with a narrow latent, 16 x 8 x 8;
* ``sequence``: a transformer over the image's 64 patches of 4x4 pixels, channel-last tokens (B, 64, 32),
  each row a random number (16-64) of real tokens and the rest padding (a mask; the loss is over real patches);
* ``residual``: ``default-init`` with 4 residual levels of 256 codes (``ResidualQuantizer`` against ``ResidualVQ``);
* ``example``: vector-quantize-pytorch's own example (``host_networks.ExampleHost``: a 2-convolution autoencoder,
  28x28 images, batch 256, L1 + 10x the quantizer's loss, AdamW 3e-4; K = 256 in its example), with the example's
  ``VectorQuantize`` ("VQ (example)"), the same through ``vqwae.compat`` ("compat vector"), VQ-WAE and vqwae's
  field VQ; its rows also give the example's test L1 (``l1``, in its [-1, 1] units).

Every host hands the quantizer channel-last tokens (B, N, D) (an image's 8 x 8 positions in raster order) and a
mask where it has padding, so one adapter serves every quantizer in every host. Every model of a run starts from
the same host weights and sees the same batches, interleaved (load hits them alike); each draws its own random
numbers (``OwnRandomness``). Every ``--eval-every`` steps: test MSE (over real patches), test perplexity and codes
used (one histogram over all real test latents; the residual host: each level's, and their minimum), the latents'
relative distortion (the mean ||q - z||^2 over the real test latents over their mean ||z - mean z||^2: the share of
their spread that the code the decoder receives loses, whatever their scale), and for VQ-WAE the transport
diagnostics of ``vqwae.quantizers.diagnostics`` (goal 3 of issue #34). In the ``sequence`` host also the
perplexity of the codes of blank patches (how many codes one input spreads over) and of the others;
its metadata holds the blank share of the real test tokens and the perplexity bound it sets (``blank_bound``). In
an image host, the codes and perplexity of the far-blank positions (``common.blank_positions``: MNIST's background)
and of the others.

    pip install -e ".[bench]"     # vector-quantize-pytorch 1.32.0, pinned: a benchmark-only dependency
    .venv/bin/python benchmarks/hosts.py --host default-init --dataset cifar10 --steps 3000 --seed 0
    .venv/bin/python benchmarks/hosts.py --host sequence --dataset mnist --steps 3000 --seed 1
    .venv/bin/python benchmarks/hosts.py --host default-init --dataset cifar10 --num-codes 8192 --steps 3000
    .venv/bin/python benchmarks/hosts.py --host example --dataset fashionmnist --data-root /usr/share/datasets/fashion-mnist --num-codes 256 --steps 1000 --eval-every 250 --seed 1234
    python benchmarks/hosts.py --host paper --dataset mnist --device cuda --pack .gpudata/mnist.pt   # on a GPU

``--device cuda`` times each step to its end (a synchronisation after it). ``--pack FILE`` reads the images from a
file of encoded images written by ``benchmarks/device_pack.py`` (for a machine without the data sets).

``--stream N`` runs the cell again with the random numbers the quantizers draw while training (k-means starts,
re-seeds, data starts) drawn afresh, on the seed's host weights, batches and quantizer construction: how far one run
of a cell is from another (lab 52n).

``--trace-every N`` records, every N steps, the step's training loss and VQ-WAE's transport state on its own
latents (``transport_state``: the cost scale, the potential's spread, the EMA cells' TV to pi, the dead shares by the
EMA mass and by each code's own record, the latents' and codebook's RMS, the splits so far); every evaluation of a
traced run records it on the test latents, with the share of empty transport cells (issue #81's collapse
diagnosis, lab 55).

``--batch B`` trains on B images a step instead of the host's batch (the cell is then its own: ``paper (batch B)`` in
the tables).

Writes benchmarks/results/host_<host>_<dataset>_k<K>_<steps>_seed<S>[_batch<B>][_stream<N>][_<tag>].json (with
``--plot`` also a PNG of the curves beside it: not committed, the JSON holds them). A second run of the same cell,
stream and tag refuses to start while the first is writing (give it its own ``--tag``).
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (FSQ_LEVELS, OwnRandomness, blank_positions, parse_settings, plot,  # noqa: E402
                    training_batches)
from host_networks import HOSTS, PATCH, TOKENS, blank_bound, build_host, random_mask  # noqa: E402
from peer_ot import OptVQ, WassersteinVQ  # noqa: E402

from vqwae.data import load_splits  # noqa: E402
from vqwae.files import atomic_write_text  # noqa: E402
from vqwae.metrics.usage import CodeUsage  # noqa: E402
from vqwae.ot.histogram import code_histogram  # noqa: E402
from vqwae.ot.transport import latents_by_group  # noqa: E402
from vqwae.provenance import provenance  # noqa: E402
from vqwae.quantizers import Lookup, ResidualQuantizer, VectorQuantizer, WassersteinQuantizer, diagnostics  # noqa: E402
from vqwae.quantizers.transport_codebook import SPLIT_DEAD  # noqa: E402
from vqwae.training.lock import RunFolderBusy, RunLock  # noqa: E402

HERE = Path(__file__).resolve().parent
#: the example host's default rows: the peer's example as written, the same through vqwae.compat, VQ-WAE (what
#: ``vqwae.compat.VectorQuantize`` builds by default) and vqwae's field VQ
#: the zoo's models that run only when --models names them
OPT_IN = ("vqwae VQ kmeans+expiry", "VQ-WAE pull 1", "SimVQ", "LFQ", "OptVQ", "Wasserstein-VQ", "VQ (example)",
          "compat vector", "VQ-WAE cosine", "VQ-WAE d/4 cosine", "VQ kmeans+expiry cosine",
          "VQ kmeans+expiry d/4 cosine")
EXAMPLE_MODELS = ["VQ (example)", "compat vector", "VQ-WAE", "vqwae VQ kmeans+expiry"]
#: The most (latent, code) distances an evaluation forward makes (1 GiB in float32): K = 65,536 in 64 images.
EVAL_ENTRIES = 2 ** 28


# ---------------------------------------------------------------------------------------------- quantizers
class Peer(nn.Module):
    """A vector-quantize-pytorch quantizer on channel-last tokens (B, N, D) with an optional mask, returning
    (quantized, indices, loss). The versions are pinned in pyproject.toml's ``bench`` extra."""

    def __init__(self, kind: str, num_codes: int, dim: int, levels: int = 4, **overrides):
        super().__init__()
        import vector_quantize_pytorch as vqp

        self.kind, self.num_codes = kind, num_codes
        vq = dict(dim=dim, codebook_size=num_codes, decay=0.99, kmeans_init=True, threshold_ema_dead_code=2,
                  commitment_weight=0.25)
        if kind == "fsq":
            self.q = vqp.FSQ(levels=list(FSQ_LEVELS[num_codes]), dim=dim)
            self.num_codes = self.q.codebook_size
        elif kind == "simvq":  # its defaults: a frozen random codebook through a learned linear map, the rotation trick
            self.q = vqp.SimVQ(dim=dim, codebook_size=num_codes)
        elif kind == "lfq":  # log2 K bits, projections from and to dim, its default entropy loss (0.1)
            self.q = vqp.LFQ(dim=dim, codebook_size=num_codes)
        elif kind == "example":  # the peer's example exactly: its VectorQuantize defaults and the rotation trick
            self.q = vqp.VectorQuantize(dim=dim, codebook_size=num_codes, rotation_trick=True, **overrides)
        elif kind == "rvq":
            self.q = vqp.ResidualVQ(num_quantizers=levels, rotation_trick=False, **{**vq, **overrides})
        else:
            self.q = vqp.VectorQuantize(rotation_trick=kind == "vq", **{**vq, **overrides})

    def forward(self, z, mask):
        if self.kind == "fsq":  # no parameters: the mask changes nothing
            q, idx = self.q(z)
            return q, idx, z.new_zeros(())
        if self.kind == "simvq":  # takes no mask: padding takes part in its loss (the image hosts have none)
            q, idx, loss = self.q(z)
            return q, idx, loss.sum()
        q, idx, loss = tuple(self.q(z, mask=mask))[:3]
        return q, idx, loss.sum()


class Ours(nn.Module):
    """A vqwae quantizer (or a ResidualQuantizer of them) built as a user would: ``channel_last=True``."""

    def __init__(self, make, num_codes: int):
        super().__init__()
        self.q, self.num_codes = make(), num_codes

    def forward(self, z, mask):
        out = self.q(z, mask)
        return out.quantized, out.indices, out.loss


class OTPeer(nn.Module):
    """A quantizer of ``peer_ot.py`` (OptVQ, Wasserstein VQ: already (z, mask) -> (quantized, indices, loss)) where
    the evaluation looks for a model's quantizer (``.q``)."""

    def __init__(self, q: nn.Module):
        super().__init__()
        self.q, self.num_codes = q, q.num_codes

    def forward(self, z, mask):
        return self.q(z, mask)


class CompatPeer(nn.Module):
    """``vqwae.compat.VectorQuantize`` with the peer's arguments, on channel-last tokens as a peer user calls it."""

    def __init__(self, num_codes: int, dim: int, **options):
        super().__init__()
        from vqwae.compat import VectorQuantize

        self.q, self.num_codes = VectorQuantize(dim=dim, codebook_size=num_codes, **options), num_codes

    def forward(self, z, mask):
        q, idx, loss = self.q(z, mask=mask)
        return q, idx, loss.sum()


def quantizer_factories(num_codes: int, dim: int, positions: int, residual: bool) -> dict:
    """name -> a function building that quantizer; the VQ-WAE rows are the constructor's defaults."""
    k, d = num_codes, dim
    if residual:
        k = 256
        return {
            "VQ-VAE": lambda **o: Ours(lambda: ResidualQuantizer(
                lambda: VectorQuantizer(num_codes=k, dim=d, channel_last=True), 4), k),
            "ResidualVQ kmeans+expiry": lambda **o: Peer("rvq", k, d, **o),
            # a variant's "pull" goes to the stack, its other settings to every level
            "VQ-WAE": lambda pull=None, **o: Ours(lambda: ResidualQuantizer(
                lambda: WassersteinQuantizer(num_codes=k, dim=d, channel_last=True, **o), 4, pull=pull), k),
            # not in the default list: the stack before its default pull (every level's WS at full weight on the
            # encoder), and vqwae's own field VQ stacked
            "VQ-WAE pull 1": lambda **o: Ours(lambda: ResidualQuantizer(
                lambda: WassersteinQuantizer(num_codes=k, dim=d, channel_last=True, **o), 4, pull=1.0), k),
            "vqwae VQ kmeans+expiry": lambda **o: Ours(lambda: ResidualQuantizer(lambda: VectorQuantizer(
                num_codes=k, dim=d, channel_last=True, ema=True, init="kmeans", dead_code_threshold=2, **o), 4), k),
        }
    return {
        "VQ-VAE": lambda **o: Ours(lambda: VectorQuantizer(num_codes=k, dim=d, channel_last=True, **o), k),
        # vqwae's own field VQ, to check against the peer below (issue #35): not in the default list
        "vqwae VQ kmeans+expiry": lambda **o: Ours(lambda: VectorQuantizer(
            num_codes=k, dim=d, channel_last=True, ema=True, init="kmeans", dead_code_threshold=2, **o), k),
        "VQ kmeans+expiry+rotation": lambda **o: Peer("vq", k, d, **o),
        "VQ kmeans+expiry": lambda **o: Peer("vq-no-rotation", k, d, **o),
        "FSQ": lambda **o: Peer("fsq", k, d),
        "SimVQ": lambda **o: Peer("simvq", k, d),  # the large-K peers (issue #67): not in the default list
        "LFQ": lambda **o: Peer("lfq", k, d),
        # the peer's example (the example host's rows): its VectorQuantize, and the same arguments through vqwae.compat
        "VQ (example)": lambda **o: Peer("example", k, d, **o),
        "compat vector": lambda **o: CompatPeer(k, d, backend="vector", rotation_trick=True, **o),
        # the optimal-transport peers without a package (peer_ot.py, their papers' defaults): not in the default list
        "OptVQ": lambda **o: OTPeer(OptVQ(k, d, **o)),
        "Wasserstein-VQ": lambda **o: OTPeer(WassersteinVQ(k, d, **o)),
        "VQ-WAE": lambda **o: Ours(lambda: WassersteinQuantizer(num_codes=k, dim=d, channel_last=True, **o), k),
        "VQ-WAE per-position": lambda **o: Ours(lambda: WassersteinQuantizer(
            num_codes=k, dim=d, channel_last=True, num_positions=positions, **o), k),
        # the field's lookup features (issue #83 goal 2; ViT-VQGAN's factorized, l2-normalised codes): the cosine cost
        # alone, and a search in D / 4 dimensions on the sphere, in vqwae (Lookup) and in the peer (codebook_dim,
        # use_cosine_sim): not in the default list
        "VQ-WAE cosine": lambda **o: Ours(lambda: Lookup(WassersteinQuantizer(
            num_codes=k, dim=d, channel_last=True, **o), d, cosine=True), k),
        "VQ-WAE d/4 cosine": lambda **o: Ours(lambda: Lookup(WassersteinQuantizer(
            num_codes=k, dim=d // 4, channel_last=True, **o), d, cosine=True), k),
        "VQ kmeans+expiry cosine": lambda **o: Peer("vq-no-rotation", k, d, use_cosine_sim=True, **o),
        "VQ kmeans+expiry d/4 cosine": lambda **o: Peer("vq-no-rotation", k, d, codebook_dim=d // 4,
                                                        use_cosine_sim=True, **o),
    }


class Model(nn.Module):
    def __init__(self, host: nn.Module, quantizer: nn.Module):
        super().__init__()
        self.host, self.quantizer = host, quantizer

    def forward(self, x, mask):
        z, mask = self.host.encode(x, mask)
        q, idx, qloss = self.quantizer(z, mask)
        return z, q, idx, qloss, self.host.decode(q, x, mask)

    def loss(self, x, mask):
        _, _, _, qloss, out = self(x, mask)
        return self.host.train_loss(out, x, mask) + getattr(self.host, "quantizer_weight", 1.0) * qloss


# ------------------------------------------------------------------------------------------------ evaluation
def _wasserstein_levels(quantizer: nn.Module) -> list:
    q = quantizer.q
    if isinstance(q, WassersteinQuantizer):
        return [q]
    if isinstance(q, ResidualQuantizer) and isinstance(q.levels[0], WassersteinQuantizer):
        return list(q.levels)
    return []


@torch.no_grad()
def evaluate(model: Model, test_x: torch.Tensor, test_mask: torch.Tensor | None, seed: int,
             state: bool = False) -> dict:
    model.eval()
    se = count = l1 = 0.0
    distortion = 0.0  # the latents' summed squared quantization error
    usage, tokens = None, []
    # the sequence host: codes of the real tokens whose 4x4 patch is blank (all zero), and of the others; an image
    # host: of the far-blank positions (``blank_positions``) and of the others
    patches = getattr(model.host, "patches", None) if test_mask is not None else None
    by_content = {"blank": CodeUsage(model.quantizer.num_codes), "content": CodeUsage(model.quantizer.num_codes)}
    # images per forward: at most EVAL_ENTRIES (latent, code) distances at once (the peers hold them whole)
    chunk = max(1, min(500, EVAL_ENTRIES // (model.quantizer.num_codes * TOKENS)))
    for i in range(0, len(test_x), chunk):
        x = test_x[i:i + chunk]
        mask = None if test_mask is None else test_mask[i:i + chunk]
        z, q, idx, _, out = model(x, mask)
        s, c = model.host.sq_error(out, x, mask)
        se, count = se + float(s), count + float(c)
        if hasattr(model.host, "abs_error"):
            l1 += float(model.host.abs_error(out, x)[0])
        keep = torch.ones(z.shape[:2], dtype=torch.bool, device=z.device) if mask is None else mask
        distortion += float((q - z)[keep].pow(2).sum())
        idx = idx.reshape(*z.shape[:2], -1)  # (B, N, levels)
        if usage is None:
            usage = [CodeUsage(model.quantizer.num_codes) for _ in range(idx.shape[-1])]
        for level, u in enumerate(usage):
            u.update(idx[..., level][keep])
        if patches is not None:
            blank = patches(x).amax(-1) == 0
            by_content["blank"].update(idx[..., 0][keep & blank])
            by_content["content"].update(idx[..., 0][keep & ~blank])
        elif idx.shape[1] == TOKENS and idx.shape[-1] == 1:  # (B, 8 x 8) in raster order
            far = blank_positions(x.amax(1, keepdim=True) > 0, PATCH)[1].reshape(len(x), -1)
            by_content["blank"].update(idx[..., 0][far])
            by_content["content"].update(idx[..., 0][~far])
        tokens.append(z if mask is None else z[keep])
    model.train()
    real = torch.cat(tokens)  # (B, N, D) or (N, D) when masked: the real test latents
    row = dict(mse=se / count, perplexity=min(u.perplexity for u in usage), codes_used=min(u.codes_used for u in usage),
               latent_rms=float(real.pow(2).mean().sqrt()))
    if hasattr(model.host, "abs_error"):
        row["l1"] = l1 / count
    # per latent: the squared error of the code the decoder receives, and the latents' spread about their mean
    flat_real = real.reshape(-1, real.shape[-1])
    spread = float((flat_real - flat_real.mean(0)).pow(2).sum(-1).mean())
    row.update(latent_distortion=distortion / len(flat_real), latent_variance=spread,
               relative_distortion=distortion / len(flat_real) / max(spread, 1e-30))
    if len(usage) > 1:
        row["perplexity_per_level"] = [u.perplexity for u in usage]
    if patches is not None:  # how many codes the blank patches spread over; the perplexity among the others
        row.update(perplexity_blank=by_content["blank"].perplexity, perplexity_content=by_content["content"].perplexity)
    elif by_content["blank"].counts.sum():  # the far-blank positions' codes against their share of pi (share x K)
        blank, other = (float(by_content[k].counts.sum()) for k in ("blank", "content"))
        row.update(far_blank_share=blank / (blank + other),
                   far_blank_codes=by_content["blank"].codes_used, far_blank_perplexity=by_content["blank"].perplexity,
                   other_codes=by_content["content"].codes_used, other_perplexity=by_content["content"].perplexity)
    levels = _wasserstein_levels(model.quantizer)
    if levels:
        row["codebook_rms"] = float(levels[0].embedding.pow(2).mean().sqrt())
        gen = torch.Generator().manual_seed(seed)
        level = levels[0] if real.device.type == "cpu" else copy.deepcopy(levels[0]).cpu()  # POT runs on the CPU
        real = real.cpu()
        # (tokens, 1, D) with a mask's real latents only: the quantizer's channel-last layout
        diag = diagnostics(level, real[:, None] if real.dim() == 2 else real, generator=gen)
        row.update({k: getattr(diag, k) for k in ("tv_cells", "tv_nearest", "tv_floor", "w_ratio", "cells_disagree")})
        if state:  # one more search of every test latent: only where the run traces
            row.update(transport_state(levels[0], real[:, None] if real.dim() == 2 else real, cells=True))
    return row


@torch.no_grad()
def transport_state(q: WassersteinQuantizer, z: torch.Tensor, cells: bool = False) -> dict:
    """The transport map's state on the latents z (channel-last, (B, N, D)) (issue #81's collapse diagnosis): the
    cost scale the potential is measured in (the solver's EMA of the quantization error), the potential's spread in
    cost units and in that scale's units, the mean excess cost of the map over the nearest code in the scale's units,
    the TV to pi of the EMA transported mass (what the splits read) and the share of codes it calls dead (below
    SPLIT_DEAD x pi_k), the latents' and codebook's RMS, the splits made so far; with ``cells`` also the share of
    codes whose transport cell holds none of these latents (meaningful where they are many latents per code)."""
    x = latents_by_group(q.flatten(z), q.solver.shared)  # (N, G, D)
    nearest, assigned, _, g = q.solver.assign_batch(x, q.embedding)
    scale = float(q.solver.scale)
    cost = lambda idx: (x - q.embedding[idx]).pow(2).sum(-1)  # noqa: E731
    pi = q.pi.mean(0)
    t = q.transport
    ratio = t._share_over_pi(t.mass, q.pi)  # each code's EMA share over pi_k, as the splits read it
    row = dict(scale=scale, g_std=float(g.std()), g_range=float(g.max() - g.min()),
               potential_std=float(q.solver.potential.std()),
               excess_cost=float((cost(assigned) - cost(nearest)).mean()) / max(scale, 1e-30),
               tv_ema=0.5 * float(((ratio - 1) * pi).abs().sum()),
               dead_share=float((ratio < SPLIT_DEAD).float().mean()),
               # the dead-code test itself, with these latents as a step's
               dead_own=float((t.served(x.shape[0] * x.shape[1] * pi) < SPLIT_DEAD).float().mean()),
               batch_rms=float(x.pow(2).mean().sqrt()), codebook_rms=float(q.embedding.pow(2).mean().sqrt()),
               splits=int(t.splits))
    if cells:
        row["cells_empty"] = float((code_histogram(assigned.reshape(-1), q.num_codes) == 0).float().mean())
    return row


# ------------------------------------------------------------------------------------------------------ main
def cell_arguments(ap: argparse.ArgumentParser, *, host: str, steps: int, num_codes: int) -> None:
    """The options naming one cell of the zoo (host, data, K, steps, seed), for every script that trains in one."""
    ap.add_argument("--host", default=host, choices=HOSTS)
    ap.add_argument("--dataset", default="cifar10")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--num-codes", type=int, default=num_codes)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--seed", type=int, default=0)


def build_model(host: str, channels: int, make, seed: int, device: torch.device | str = "cpu"):
    """The host network with the quantizer ``make()``, and its optimiser (Adam 1e-3, or the host's own; a quantizer
    with a ``codebook_lr`` gets its own parameter group at that rate): the host's weights drawn from ``seed`` (the
    same for every quantizer of a cell), the quantizer's start from ``seed + 1``."""
    torch.manual_seed(seed)
    network = build_host(host, channels)
    torch.manual_seed(seed + 1)
    model = Model(network, make()).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    make_opt = getattr(network, "optimizer", lambda ps: torch.optim.Adam(ps, lr=1e-3))
    codebook_lr = getattr(model.quantizer.q, "codebook_lr", None)  # a peer whose authors train its codebook apart
    if codebook_lr is None:
        return model, make_opt(params)
    codebook = set(map(id, model.quantizer.q.parameters()))
    opt = make_opt([p for p in params if id(p) not in codebook])
    opt.add_param_group(dict(params=[p for p in params if id(p) in codebook], lr=codebook_lr))
    return model, opt


def train_step(model: Model, opt: torch.optim.Optimizer, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """One optimiser step; returns its loss (detached: read on the host only where a run traces)."""
    loss = model.loss(x, mask)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cell_arguments(ap, host="default-init", steps=3000, num_codes=512)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--test-images", type=int, default=2000)
    ap.add_argument("--models", default=None, help="comma-separated (default: every quantizer of the host)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE,...",
                    help="an extra VQ-WAE with some options changed, e.g. 'cd 0.95:codebook_decay=0.95' "
                         "('per-position' in the label: one pi per position; labelled 'VQ-WAE', it replaces the "
                         "default and draws its random numbers: a paired comparison with the default's own run)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--plot", action="store_true", help="also write a PNG of the curves beside the result file")
    ap.add_argument("--trace-every", type=int, default=0,
                    help="every N steps, VQ-WAE's transport state on the step's latents (transport_state; 0: never)")
    ap.add_argument("--batch", type=int, default=None,
                    help="images a step (default: the host's own): e.g. 256 in the paper host is "
                         "16,384 latents a step, one a code at K = 16,384 (the field's regime, issue #81)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--stream", type=int, default=0,
                    help="draw the quantizers' random numbers from stream N of the seed (0: the seed's own); the "
                         "host weights and batches stay the seed's: a second run of a cell measures the quantizers' "
                         "own noise")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pack", default=None, help="read the images from this file (benchmarks/device_pack.py)")
    args = ap.parse_args()
    if args.stream < 0:
        raise SystemExit(f"error: --stream must be 0 or more, not {args.stream}")
    if args.batch is not None and args.batch < 1:
        raise SystemExit(f"error: --batch must be 1 or more, not {args.batch}")
    try:  # two runs of one cell and tag would overwrite each other's rows at every evaluation (it lost a row once)
        _lock = RunLock(HERE / "results" / ".locks" / result_path(args).stem).acquire()  # held until the process ends
    except RunFolderBusy as busy:
        raise SystemExit(f"error: {busy}; or give this run its own --tag") from None
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    probe = build_host(args.host, 1)  # its latent width, data and batch (32x32 images, 20,000 training, batch 32)
    side, train_limit = getattr(probe, "side", None), getattr(probe, "train_limit", 20000)
    if args.pack:
        from device_pack import read_pack

        train, test_x = read_pack(args.pack, args.dataset, 20000, args.test_images)
    else:
        splits = load_splits(args.dataset, args.data_root, train_limit=train_limit, eval_limit=args.test_images,
                             image_size=side)
        train = splits.train
        test_x = torch.stack([splits.test[i][0] for i in range(len(splits.test))])
    channels = test_x.shape[1]
    sequence = args.host == "sequence"
    dim = probe.dim
    factories = quantizer_factories(args.num_codes, dim, TOKENS, residual=args.host == "residual")
    if sequence:  # a per-position pi needs every position in every row: no padding
        factories.pop("VQ-WAE per-position")
    names = ([n.strip() for n in args.models.split(",")] if args.models
             else EXAMPLE_MODELS if args.host == "example"
             else [n for n in factories if n not in OPT_IN])
    for v in args.variant:
        label, _, settings = v.partition(":")
        base = "VQ-WAE per-position" if "per-position" in label else "VQ-WAE"
        factories[label] = (lambda f, s: lambda **o: f(**{**s, **o}))(factories[base], parse_settings(settings))
        if label not in names:  # a variant labelled as a model replaces it, drawing that model's random numbers
            names.append(label)
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise SystemExit(f"error: unknown model(s) {unknown}; known: {', '.join(factories)}")
    models, opts, rngs, times, curves, traces = {}, {}, {}, {}, {}, {}
    for n in names:
        models[n], opts[n] = build_model(args.host, channels, factories[n], args.seed, device)
        rngs[n], times[n], curves[n] = OwnRandomness(args.seed, n, cuda, args.stream), [], []
        if args.trace_every and _wasserstein_levels(models[n].quantizer):
            traces[n] = []
    mask_gen = torch.Generator().manual_seed(args.seed + 7)
    test_mask = random_mask(len(test_x), torch.Generator().manual_seed(1234)) if sequence else None
    # the meta every write shares, read at the process's start (a commit may land meanwhile); a write adds the date
    run_meta = dict(provenance("hosts", device, vector_quantize_pytorch=version("vector-quantize-pytorch"),
                               command="python benchmarks/hosts.py " + " ".join(sys.argv[1:])),
                    host=args.host, dataset=args.dataset, num_codes=args.num_codes, steps=args.steps, seed=args.seed,
                    stream=args.stream, **({"batch": args.batch} if args.batch else {}),
                    **(blank_bound(test_x, test_mask, args.num_codes) if sequence else {}))
    test_x, test_mask = test_x.to(device), None if test_mask is None else test_mask.to(device)
    for step, x in training_batches(train, args.steps, args.seed, args.batch or getattr(probe, "batch", 32)):
        mask = random_mask(len(x), mask_gen).to(device) if sequence else None
        x = x.to(device)
        for n in names:
            with rngs[n]:
                t0 = time.perf_counter()
                loss = train_step(models[n], opts[n], x, mask)
                if cuda:  # the step's end, not its launch
                    torch.cuda.synchronize(device)
                times[n].append(time.perf_counter() - t0)
                if n in traces and step % args.trace_every == 0:
                    with torch.no_grad():
                        z, _ = models[n].host.encode(x, mask)
                    state = transport_state(_wasserstein_levels(models[n].quantizer)[0], z)
                    traces[n].append(dict(step=step, loss=float(loss), **state))
        if step % args.eval_every == 0 or step == args.steps:
            for n in names:
                with rngs[n]:
                    curves[n].append(dict(step=step, **evaluate(models[n], test_x, test_mask, args.seed,
                                                                state=n in traces)))
            print(f"step {step}: " + "; ".join(
                f"{n}: ppl {c[-1]['perplexity']:.0f} mse {c[-1]['mse']:.5f}"
                + (f" tv {c[-1]['tv_cells']:.3f}/{c[-1]['tv_floor']:.3f} w {c[-1]['w_ratio'] or 0:.3f}"
                   if "tv_cells" in c[-1] else "") for n, c in curves.items()), flush=True)
            write(args, names, times, curves, run_meta, traces)


def result_path(args) -> Path:
    """The cell's result file: one per host, data set, K, steps, seed, batch, stream and tag (not per model: the tag
    tells runs apart)."""
    stem = f"host_{args.host}_{args.dataset}_k{args.num_codes}_{args.steps}_seed{args.seed}" + (
        f"_batch{args.batch}" if args.batch else "") + (f"_stream{args.stream}" if args.stream else "") + (
        f"_{args.tag}" if args.tag else "")
    return HERE / "results" / f"{stem}.json"


def write(args, names, times, curves, run_meta: dict, traces: dict | None = None) -> Path:
    """The result file (rewritten at every evaluation, so a killed run keeps what it measured) and its plot."""
    vq = statistics.median(times["VQ-VAE"]) if "VQ-VAE" in times else None
    rows = [dict(quantizer=n, ms_per_step=1000 * statistics.median(times[n]),
                 ratio_to_vqvae=statistics.median(times[n]) / vq if vq else None, **curves[n][-1]) for n in names]
    meta = dict(run_meta, date=datetime.now(timezone.utc).isoformat())
    out = result_path(args)
    out.parent.mkdir(exist_ok=True)
    atomic_write_text(out, json.dumps(dict(meta=meta, rows=rows, curves=curves,
                                           **({"traces": traces} if traces else {})), indent=1))
    if args.plot:
        plot(curves, out.with_suffix(".png"), f"{args.host}, {args.dataset}, K = {args.num_codes}, seed {args.seed}")
    return out


if __name__ == "__main__":
    main()
