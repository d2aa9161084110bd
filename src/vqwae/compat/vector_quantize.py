"""``VectorQuantize`` as vector-quantize-pytorch 1.32 spells it, on vqwae's quantizers: switch by changing the import.

    # from vector_quantize_pytorch import VectorQuantize
    from vqwae.compat import VectorQuantize
    vq = VectorQuantize(dim=256, codebook_size=512, decay=0.8, commitment_weight=1.0)
    quantized, indices, commit_loss = vq(torch.randn(1, 1024, 256))

Every argument of the peer's constructor and forward is in ``ARGUMENTS`` / ``FORWARD_ARGUMENTS``: mapped onto a vqwae
option, honoured as it is, or refused in one line naming what to use instead (a value that would silently train
something else is never accepted). ``backend`` picks the quantizer: ``"wasserstein"`` (the default, VQ-WAE's
``WassersteinQuantizer``) or ``"vector"`` (vqwae's ``VectorQuantizer`` with an EMA codebook: the peer's own method,
with its k-means start and dead-code expiry when asked for). docs/guides/migration.md has the whole table.
"""
from __future__ import annotations

import math
from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn

from vqwae.quantizers.lookup import Lookup
from vqwae.quantizers.vector import VectorQuantizer
from vqwae.quantizers.wasserstein import WassersteinQuantizer
from vqwae.quantizers.wasserstein_options import WassersteinConfig

#: the vector-quantize-pytorch release whose arguments this module speaks
PEER_VERSION = "1.32.0"
BACKENDS = ("wasserstein", "vector")


def peer_start_bound(k: int, dim: int) -> float:
    """The peer's codebook start without k-means: ``nn.init.kaiming_uniform_`` of a (1, K, D) tensor (fan-in K D,
    gain sqrt 2), so U(-b, b) with b = sqrt(6 / (K D)): 0.027 at K = 256, D = 32, 1/37 of N(0, 1)'s deviation."""
    return math.sqrt(6.0 / (k * dim))
#: vqwae's default weight of the WS term: the peer's commitment_weight scales it (1.0 is each one's default)
WS_WEIGHT = WassersteinConfig.__dataclass_fields__["ws_weight"].default

ARGUMENTS = {
    "codebook_dim": (None, "map"),
    "heads": (1, "several heads are not in vqwae: split the features yourself, one VectorQuantize each"),
    "separate_codebook_per_head": (False, "several heads are not in vqwae: one VectorQuantize per head"),
    "decay": (0.8, "map"),
    "eps": (1e-5, "map"),
    "freeze_codebook": (False, "keep"),
    "kmeans_init": (False, "map"),
    "kmeans_iters": (10, "map"),
    "sync_kmeans": (True, "the data start (k-means start) is rank 0's draw, broadcast to every rank"),
    "use_cosine_sim": (False, "map"),
    "layernorm_after_project_in": (False, "not in vqwae: codebook_dim's projection is a plain nn.Linear (put a "
                                          "LayerNorm in your encoder)"),
    "threshold_ema_dead_code": (0, "map"),
    "channel_last": (True, "map"),
    "accept_image_fmap": (False, "map"),
    "accept_3d_fmap": (False, "map"),
    "commitment_weight": (1.0, "map"),
    "commitment_use_cross_entropy_loss": (False, "not in vqwae: the quantizer's own loss is its method's"),
    "orthogonal_reg_weight": (0.0, "not in vqwae: backend='wasserstein' keeps every code in use through pi"),
    "orthogonal_reg_active_codes_only": (False, "not in vqwae (orthogonal_reg_weight)"),
    "orthogonal_reg_max_codes": (None, "not in vqwae (orthogonal_reg_weight)"),
    "codebook_diversity_loss_weight": (0.0, "not in vqwae: backend='wasserstein' learns pi, and KL(pi || U) "
                                            "spreads the latents over the codes"),
    "codebook_diversity_temperature": (100.0, "not in vqwae (codebook_diversity_loss_weight)"),
    "stochastic_sample_codes": (False, "not in vqwae: SQ-VAE's stochastic quantizer is "
                                       "vqwae.quantizers.StochasticQuantizer"),
    "sample_codebook_temp": (1.0, "not in vqwae (stochastic_sample_codes)"),
    "straight_through": (False, "map"),
    "rotation_trick": (None, "map"),
    "directional_reparam": (False, "not in vqwae: rotation_trick=True with backend='vector'"),
    "directional_reparam_variance": (0.005, "not in vqwae (directional_reparam)"),
    "sync_codebook": (None, "under DDP every rank holds the same codebook (its updates are all-reduced)"),
    "sync_affine_param": (False, "not in vqwae (affine_param)"),
    "ema_update": (None, "a codebook trained by the optimiser is vqwae.quantizers.VectorQuantizer(ema=False)"),
    "vq_bridge": (None, "not in vqwae"),
    "manual_ema_update": (False, "not in vqwae: the codebook moves in the training forward"),
    "learnable_codebook": (None, "a codebook trained by the optimiser is vqwae.quantizers.VectorQuantizer(ema=False)"),
    "in_place_codebook_optimizer": (None, "not in vqwae (learnable_codebook)"),
    "manual_in_place_optimizer_update": (False, "not in vqwae (learnable_codebook)"),
    "affine_param": (False, "not in vqwae: backend='wasserstein' moves its codes to the latents the transport sends "
                            "them"),
    "affine_param_batch_decay": (0.99, "not in vqwae (affine_param)"),
    "affine_param_codebook_decay": (0.9, "not in vqwae (affine_param)"),
    "sync_update_v": (0.0, "not in vqwae (learnable_codebook)"),
    "return_zeros_for_masked_padding": (True, "keep"),
    "route_gradients_to_input": (True, "the decoder's gradient always reaches the latents in vqwae"),
}
"""The peer's constructor arguments beyond ``dim`` and ``codebook_size``: name -> (the peer's default, how vqwae takes
it). "map": onto a vqwae option (``VectorQuantize._build``); "keep": honoured as it is; anything else: refused for
any value but the default, with that text as the reason and what to use instead."""
FORWARD_ARGUMENTS = {
    "indices": (None, "not in vqwae: a cross-entropy commitment to given codes (commitment_use_cross_entropy_loss)"),
    "mask": (None, "keep"),
    "lens": (None, "keep"),
    "topk": (None, "not in vqwae: quantizer.codebook and torch.cdist give each latent's k nearest codes"),
    "sample_codebook_temp": (None, "not in vqwae (stochastic_sample_codes)"),
    "freeze_codebook": (None, "keep"),
    "return_loss_breakdown": (False, "keep"),
    "codebook_transform_fn": (None, "not in vqwae"),
    "ema_update_weight": (None, "not in vqwae: a mask weighs latents in or out"),
    "accum_ema_update": (False, "not in vqwae (manual_ema_update)"),
    "ema_update": (None, "not in vqwae: freeze_codebook=True stops the codebook's move for a call"),
}
"""The peer's forward arguments beyond ``x``, as ``ARGUMENTS``."""
#: the peer's loss breakdown, with vqwae's whole quantizer loss as ``commitment`` (the term that ties the latents
#: to their codes: the WS term and the KL for backend='wasserstein', beta times the commitment for 'vector')
LossBreakdown = namedtuple("LossBreakdown", ["commitment", "codebook_diversity", "orthogonal_reg", "inplace_optimize"])


def _refuse_unhonoured(table: dict, given: dict, where: str) -> None:
    unknown = sorted(set(given) - set(table))
    if unknown:
        raise TypeError(f"{where} has no argument {', '.join(map(repr, unknown))} (vector-quantize-pytorch "
                        f"{PEER_VERSION}'s: {', '.join(table)})")
    for name, value in given.items():
        default, how = table[name]
        if how not in ("map", "keep") and not _same(value, default):
            raise ValueError(f"{where}({name}={value!r}) cannot be honoured: {how}")


def _same(value, default) -> bool:
    return value is default or (not isinstance(value, torch.Tensor) and value == default)


def forward_held(q: nn.Module, x: torch.Tensor, mask, frozen: bool):
    """``q(x, mask)``; ``frozen`` in training: the loss with the state held still (an eval-mode forward that
    computes it), the training mode put back after."""
    if not (frozen and q.training):
        return q(x, mask)
    q.train(False)
    try:
        return q(x, mask, compute_loss=True)
    finally:
        q.train(True)


def pad_as_peer(quantized: torch.Tensor, idx: torch.Tensor, x: torch.Tensor, mask, zeros: bool):
    """The peer's padding: padded positions' outputs zeros (``zeros``; else the input) and their indices -1 (every
    level's, where ``idx`` has a level axis)."""
    if mask is None:
        return quantized, idx
    keep = mask.unsqueeze(-1)
    quantized = quantized * keep if zeros else torch.where(keep, quantized, x)
    return quantized, idx.masked_fill(~(keep if idx.dim() > mask.dim() else mask), -1)


def codes_of(codebook: torch.Tensor, indices, channel_first: bool) -> torch.Tensor:
    """The codes of ``indices`` (index -1, a padded position: zeros), channel-first where the layer's layout is."""
    indices = torch.as_tensor(indices, device=codebook.device).long()
    codes = F.embedding(indices.clamp(min=0), codebook) * (indices >= 0).unsqueeze(-1)
    return codes.movedim(-1, 1) if channel_first and codes.dim() > 2 else codes


class VectorQuantize(nn.Module):
    """vector-quantize-pytorch's ``VectorQuantize``, taking its arguments by their names (``ARGUMENTS``).

    >>> vq = VectorQuantize(dim=256, codebook_size=512)
    >>> quantized, indices, loss = vq(torch.randn(1, 1024, 256))    # (1, 1024, 256), (1, 1024), a scalar

    Args:
        dim: the latents' dimension D.
        codebook_size: K, the number of codes.
        backend: "wasserstein" (VQ-WAE, vqwae's default) or "vector" (the peer's EMA VQ as vqwae's VectorQuantizer).
        **options: the peer's constructor arguments: mapped, honoured, or refused in one line (``ARGUMENTS``).
    """

    def __init__(self, dim: int, codebook_size: int, *, backend: str = "wasserstein", **options):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(map(repr, BACKENDS))}")
        _refuse_unhonoured(ARGUMENTS, options, "VectorQuantize")
        get = {name: options.get(name, default) for name, (default, _) in ARGUMENTS.items()}.get
        if get("accept_image_fmap") and get("accept_3d_fmap"):
            raise ValueError("VectorQuantize takes accept_image_fmap or accept_3d_fmap, not both")
        self.channel_first = bool(get("accept_image_fmap") or get("accept_3d_fmap") or not get("channel_last"))
        self.freeze_codebook = bool(get("freeze_codebook"))
        self.return_zeros_for_masked_padding = bool(get("return_zeros_for_masked_padding"))
        self.backend, self.codebook_size = backend, codebook_size
        self.quantizer = self._build(dim, codebook_size, backend, options, get)

    def _build(self, dim, k, backend, given, get) -> nn.Module:
        """The quantizer the arguments ask for; with ``codebook_dim`` or ``use_cosine_sim`` inside a ``Lookup``
        (the search in codebook_dim dimensions, on the sphere), as the peer projects and normalises."""
        codebook_dim = dim if get("codebook_dim") is None else int(get("codebook_dim"))
        q = self._build_quantizer(codebook_dim, k, backend, given, get)
        if codebook_dim == dim and not get("use_cosine_sim"):
            return q
        return Lookup(q, dim, cosine=bool(get("use_cosine_sim")))

    def _build_quantizer(self, dim, k, backend, given, get) -> nn.Module:
        shape = dict(num_codes=k, dim=dim, channel_last=not self.channel_first)
        if backend == "wasserstein":
            # The peer's defaults are its method's; where the user left one, vqwae's own default stands. The data
            # start is the k-means start's place, and pi keeps every code in use, so nothing is left to expire.
            if given.get("rotation_trick"):
                raise ValueError("VectorQuantize(rotation_trick=True) cannot be honoured with backend='wasserstein' "
                                 "(straight-through to the decoder): backend='vector' has the rotation trick")
            mapped = {}
            if "decay" in given:
                mapped["codebook_decay"] = float(get("decay"))
            if "commitment_weight" in given:  # relative to each method's default weight
                mapped["ws_weight"] = WS_WEIGHT * float(get("commitment_weight"))
            return WassersteinQuantizer(**shape, **mapped)
        rotation = get("rotation_trick")
        rotation = (not get("straight_through")) if rotation is None else bool(rotation)  # the peer's rule
        threshold = float(get("threshold_ema_dead_code"))
        q = VectorQuantizer(**shape, ema=True, decay=float(get("decay")), ema_epsilon=float(get("eps")),
                            beta=float(get("commitment_weight")), init="kmeans" if get("kmeans_init") else "normal",
                            kmeans_iters=int(get("kmeans_iters")), dead_code_threshold=threshold,
                            rotation_trick=rotation)
        if not get("kmeans_init"):  # the peer's start: kaiming_uniform_ of its (1, K, D) table, U(+-sqrt(6 / (K D)))
            with torch.no_grad():
                q.embedding.uniform_(-peer_start_bound(k, dim), peer_start_bound(k, dim))
                q.ema_embed_sum.copy_(q.embedding)
        return q

    @property
    def codebook(self) -> torch.Tensor:
        """The codes (K, codebook_dim): on the unit sphere with ``use_cosine_sim``."""
        return self.quantizer.codebook

    def forward(self, x: torch.Tensor, indices=None, mask=None, lens=None, topk=None, sample_codebook_temp=None,
                freeze_codebook=None, return_loss_breakdown=False, codebook_transform_fn=None,
                ema_update_weight=None, accum_ema_update=False, ema_update=None):
        """(quantized, indices, loss) as the peer returns them (``return_loss_breakdown``: and a ``LossBreakdown``).
        Padded positions (``mask`` False, or past ``lens``) come back as zeros with index -1 (the peer's
        ``return_zeros_for_masked_padding``; without it, as the input); ``freeze_codebook`` leaves the codebook,
        and the transport's state, where they are for this call."""
        given = dict(indices=indices, topk=topk, sample_codebook_temp=sample_codebook_temp,
                     codebook_transform_fn=codebook_transform_fn, ema_update_weight=ema_update_weight,
                     accum_ema_update=accum_ema_update, ema_update=ema_update)
        _refuse_unhonoured(FORWARD_ARGUMENTS, given, "VectorQuantize.forward")
        if mask is not None and lens is not None:
            raise ValueError("VectorQuantize.forward takes mask or lens, not both")
        if (mask is not None or lens is not None) and self.channel_first:
            raise ValueError("a mask or lens is for sequences (B, N, D): channel_last=True without accept_image_fmap")
        one_token = x.dim() == 2
        if one_token:
            if mask is not None or lens is not None:
                raise ValueError("one token a row (B, D) takes no mask")
            x = x.unsqueeze(1)
        if lens is not None:
            mask = torch.arange(x.shape[1], device=x.device) < torch.as_tensor(lens, device=x.device)[:, None]
        if mask is not None:
            mask = mask if mask.dtype == torch.bool else mask != 0  # a float or int mask: nonzero is real
        frozen = self.freeze_codebook if freeze_codebook is None else bool(freeze_codebook)
        out = forward_held(self.quantizer, x, mask, frozen)
        quantized, idx = pad_as_peer(out.quantized, out.indices, x, mask, self.return_zeros_for_masked_padding)
        loss = out.loss
        if one_token:
            quantized, idx = quantized.squeeze(1), idx.squeeze(1)
        if return_loss_breakdown:
            zero = loss.new_zeros(())
            return quantized, idx, loss, LossBreakdown(loss, zero, zero, zero)
        return quantized, idx, loss

    def get_codes_from_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """The codes of ``indices`` (codebook_dim features) in the layout the forward returns (index -1, a padded
        position: zeros)."""
        return codes_of(self.codebook, indices, self.channel_first)

    def get_output_from_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """What the forward returns as ``quantized`` for ``indices`` (in eval mode, equal to it): the codes through
        codebook_dim's projection back to dim."""
        codes = self.get_codes_from_indices(indices)
        return self.quantizer.from_codes(codes) if isinstance(self.quantizer, Lookup) else codes
