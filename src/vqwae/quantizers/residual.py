"""Residual quantization (SoundStream, Zeghidour et al. 2021; EnCodec, DAC): a stack of quantizers, each
quantizing what the levels before it left over.

    r_0 = z,   q_l = Q_l(r_{l-1}),   r_l = r_{l-1} - q_l,   z_q = q_1 + ... + q_L

Every level has its own codebook (and, for VQ-WAE, its own pi and solver state). The decoder receives z_q with
one straight-through estimator for the whole stack (the gradient of z_q w.r.t. z is the identity), and each
level's own loss terms (commitment, WS, ...) train the encoder through its residual. Residual VQ is where
codebooks collapse in practice (the later levels quantize small, shrinking residuals): a Wasserstein level
keeps every level's codebook in use by construction; BENCHMARKS.md's residual table measures it against
vector-quantize-pytorch's ResidualVQ.

    rq = ResidualQuantizer(lambda: WassersteinQuantizer(num_codes=256, dim=64, channel_last=True), num_levels=4)
    out = rq(z)                     # z (B, N, 64): out.indices (B, N, 4), out.loss the levels' summed loss
    z_q = rq.indices_to_latents(out.indices)

The pull: each level's loss (commitment, WS) moves the encoder toward that level's codes. In one quantizer that
costs the decoder nothing (it receives the code, not the latent's place in its cell); in a stack it erases what the
later levels would encode, the place of the latent inside the first levels' cells. So the levels' losses reach the
encoder scaled by ``pull`` (their codebooks and pi learn at full weight); by default the levels' own
``residual_pull``: 0.01 for Wasserstein levels, whose WS pull is ~50x the field's commitment
(docs/lab/17-29.md#residual-pull:
CIFAR-10 test MSE 0.00260 against 0.00467 at pull 1 and ResidualVQ's 0.00288), and 1 for the others, as
SoundStream and ResidualVQ train.

Quantizer dropout (SoundStream's bitrate scalability): with ``dropout=True`` each training call uses the first
n levels, n drawn uniformly from 1..L (once per batch, on the host: no device synchronisation); any call can
ask for ``num_levels=n`` itself (e.g. a lower bitrate at inference). Levels not used report index -1.
The draw is the same on every DDP rank and after a resume: the t-th training call's n comes from a generator
seeded by (a seed drawn at construction, t), both kept in the ``dropout_state`` buffer (DDP broadcasts buffers
from rank 0 when it wraps the model; the buffer is read on the host once, at the first call).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from vqwae.quantizers.base import Quantizer, QuantizerOutput, check_index_tensor, scale_gradient


#: The index of a level a call did not use (``num_levels=n``, dropout): the levels after the first n.
UNUSED = -1


def residual_index_error(indices: torch.Tensor, num_codes: int) -> str | None:
    """What is wrong with residual codes (..., L) int64, or None: every index in [0, K) or ``UNUSED`` (-1), the first
    level used, and the unused levels a suffix (a call uses the first n levels)."""
    lo, hi = int(indices.min()), int(indices.max())
    if lo < UNUSED or hi >= num_codes:
        return f"indices must lie in [0, {num_codes}), or be -1 for a level not used; got [{lo}, {hi}]"
    used = indices >= 0
    if not bool(used[..., 0].all()):
        return "the first level of every residual code must be used (-1 only marks the levels after the first n)"
    if used.shape[-1] > 1 and bool((used[..., 1:] & ~used[..., :-1]).any()):
        return "a level not used (-1) is followed by a used one: a call uses the first n levels, so -1s end a code"
    return None


@dataclass
class ResidualOutput(QuantizerOutput):
    """A QuantizerOutput whose ``indices`` have a trailing level axis (B, *positions, L; -1 for a level not
    used), whose ``perplexity`` is one value per level (L,; NaN for a level not used) and whose ``losses`` are
    named "level{l}/{term}"."""

    levels_used: int = 0


class ResidualQuantizer(nn.Module):
    """``num_levels`` quantizers made by ``quantizer_factory()``, each quantizing the previous levels' residual;
    the output is the sum of the levels' codewords, its indices have a trailing level axis (B, *positions, L).

    >>> rq = ResidualQuantizer(lambda: WassersteinQuantizer(num_codes=1024, dim=128, channel_last=True), 4)
    >>> out = rq(torch.randn(8, 150, 128)); out.indices.shape
    torch.Size([8, 150, 4])

    Args:
        quantizer_factory: makes one level (every level must share the latents' dim and layout).
        num_levels: L, the number of levels.
        dropout: in training, use only the first n levels, n drawn uniformly in [1, L] per call (SoundStream's
            quantizer dropout: one model for every bitrate); unused levels' indices are -1.
        pull: the scale of the gradient the levels' losses send to the encoder (None: the levels' ``residual_pull``).
    """

    kind = "residual"  # the name a saved model's config gives it (``VQAutoencoder``)

    def __init__(self, quantizer_factory: Callable[[], Quantizer], num_levels: int, *, dropout: bool = False,
                 pull: float | None = None):
        super().__init__()
        if not isinstance(num_levels, int) or num_levels < 1:
            raise ValueError(f"num_levels must be an int >= 1, got {num_levels!r}")
        if pull is not None and not (isinstance(pull, (int, float)) and 0 <= pull <= 1):
            raise ValueError(f"pull must be a number in [0, 1], got {pull!r}")
        self.levels = nn.ModuleList(quantizer_factory() for _ in range(num_levels))
        first = self.levels[0]
        for q in self.levels:
            if not isinstance(q, Quantizer):
                raise TypeError(f"quantizer_factory must return vqwae quantizers, got {type(q).__name__}")
            if q.dim != first.dim or q.config.channel_last != first.config.channel_last:
                raise ValueError("every level must share the latent dim and layout")
        self.num_levels, self.dim, self.dropout = num_levels, first.dim, dropout
        self.pull = first.residual_pull if pull is None else float(pull)
        self.num_codes = max(q.num_codes for q in self.levels)  # what an index of any level fits in
        if dropout:  # (seed, training calls so far): every rank draws the same level counts
            seed = int(torch.randint(0, 2**62, ()))
            self.register_buffer("dropout_state", torch.tensor([seed, 0], dtype=torch.long))
        self._draws: list[int] | None = None  # the host's copy of dropout_state, read at the first draw

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        self._draws = None  # read the loaded state at the next draw
        if prefix + "dropout_state" in missing_keys:  # saved before the draw was kept: keep this stack's own
            missing_keys.remove(prefix + "dropout_state")

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, *, num_levels: int | None = None,
                compute_loss: bool | None = None) -> ResidualOutput:
        """Quantize z (the levels' layout) with the first ``num_levels`` levels (default: all, or a random
        number of them in training with ``dropout``). ``mask`` goes to every level (see the quantizers)."""
        if isinstance(z, torch.Tensor) and not z.is_floating_point():  # the pull's arithmetic would make it float
            raise TypeError(f"latents must be floating point, got {z.dtype}")
        n = self._levels_for_call(num_levels)
        residual, total = z, None
        indices, perplexity, losses = [], [], {}
        for level, q in enumerate(self.levels[:n], 1):
            out = q(scale_gradient(residual, self.pull), mask, compute_loss=compute_loss)
            codes = out.quantized.detach()  # this level's codewords (the straight-through value)
            total = codes if total is None else total + codes
            residual = residual - codes
            indices.append(out.indices)
            perplexity.append(out.perplexity)
            losses.update({f"level{level}/{name}": value for name, value in out.losses.items()})
        unused = self.num_levels - n
        indices += [torch.full_like(indices[0], UNUSED)] * unused
        perplexity = torch.stack(perplexity + [torch.full_like(perplexity[0], float("nan"))] * unused)
        quantized = total + (z - z.detach())  # one straight-through estimator for the stack (the value: exactly total)
        loss = sum(losses.values()) if losses else quantized.new_zeros(())
        return ResidualOutput(quantized=quantized, indices=torch.stack(indices, -1), loss=loss, losses=losses,
                              perplexity=perplexity, levels_used=n)

    def _levels_for_call(self, num_levels: int | None) -> int:
        if num_levels is not None:
            if not 1 <= num_levels <= self.num_levels:
                raise ValueError(f"num_levels must lie in 1..{self.num_levels}, got {num_levels}")
            return num_levels
        if self.dropout and self.training:
            return self._draw_levels()
        return self.num_levels

    def _draw_levels(self) -> int:
        if self._draws is None:
            self._draws = [int(v) for v in self.dropout_state.tolist()]
        seed, t = self._draws
        self._draws[1] = t + 1
        self.dropout_state[1].fill_(t + 1)  # a write, not a read: no host synchronisation
        return random.Random(seed * 1_000_003 + t).randint(1, self.num_levels)

    def reconstruction_loss(self, x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The data term of the levels' method (``Quantizer.reconstruction_loss``)."""
        return self.levels[0].reconstruction_loss(x_hat, x)

    def config_dict(self) -> dict:
        """What rebuilds the stack (``from_config_dict``): the levels' shared config, their number, the dropout.
        Levels made by one factory share one config; a stack of differing levels cannot be saved this way."""
        first = self.levels[0].config_dict()
        if any(q.config_dict() != first for q in self.levels[1:]):
            raise ValueError("save needs levels of one configuration (a factory that builds the same quantizer)")
        return {"kind": self.kind, "num_levels": self.num_levels, "dropout": self.dropout, "pull": self.pull,
                "level": first}

    @classmethod
    def from_config_dict(cls, config: dict, build: Callable[[str, dict], Quantizer]) -> "ResidualQuantizer":
        """The stack ``config_dict`` describes; ``build(kind, options)`` makes one level."""
        level = dict(config["level"])
        kind = level.pop("kind")
        # a stack saved before ``pull`` existed trained its encoder with every level's full loss (pull 1)
        return cls(lambda: build(kind, level), int(config["num_levels"]), dropout=bool(config.get("dropout", False)),
                   pull=float(config.get("pull", 1.0)))

    def indices_to_latents(self, indices: torch.Tensor) -> torch.Tensor:
        """(B, *positions, L) indices (-1: level not used) -> the summed codewords in the levels' layout."""
        check_index_tensor(indices)
        if indices.dim() < 2 or indices.shape[-1] != self.num_levels:
            raise ValueError(f"indices must end with a level axis of {self.num_levels}, got shape {tuple(indices.shape)}")
        error = residual_index_error(indices, self.num_codes) if indices.numel() else None
        if error:
            raise ValueError(error)
        total = None
        for level, q in enumerate(self.levels):
            idx = indices[..., level]
            used = idx >= 0
            latents = q.indices_to_latents(idx.clamp_min(0))
            weight = used.unsqueeze(-1 if q.config.channel_last else 1).to(latents.dtype)
            total = latents * weight if total is None else total + latents * weight
        return total
