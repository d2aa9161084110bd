"""What every quantizer shares: the output type, input checks, nearest-code search, the straight-through
estimator and batch code usage. Concrete quantizers add their loss terms."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from vqwae.ot.histogram import code_histogram, perplexity_from_counts
from vqwae.ot.cost import nearest_code
from vqwae.quantizers.shape import CodebookShape, LatentShape  # noqa: F401 (their home before)


@dataclass
class QuantizerOutput:
    """What a quantizer returns for latents z: channel-first (B, D, *positions), e.g. (B, D, H, W) or (B, D, T),
    or channel-last (B, *positions, D), e.g. a sequence (B, N, D), when built with ``channel_last=True``."""

    quantized: torch.Tensor  # z's shape: the decoder's input (straight-through where the method says so)
    indices: torch.Tensor  # (B, *positions) long: nearest codeword of each latent
    loss: torch.Tensor  # scalar: the quantizer's whole contribution to the training loss
    losses: dict[str, torch.Tensor] = field(default_factory=dict)  # named, already weighted; sum to `loss`
    perplexity: torch.Tensor | None = None  # exp(entropy) of this batch's code usage (this rank's batch under DDP)

    def __iter__(self):
        """``quantized, indices, loss = quantizer(z)``, as vector-quantize-pytorch's modules return them."""
        return iter((self.quantized, self.indices, self.loss))


class NonFiniteLatents(ValueError):
    """Latents a quantizer cannot take: NaN, Inf, or so large that their squared distances overflow float32 (the
    trainer reports it as divergence: the weights that made them are non-finite or exploding)."""


def _choice(name: str, value, valid) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(map(repr, valid))}")


class Quantizer(nn.Module):
    """Base class. A quantizer is built from its frozen config, or from keyword options of that config:

        WassersteinQuantizer(num_codes=512, dim=64)          # drop-in
        WassersteinQuantizer(WassersteinConfig(...))         # from a config object (what training does)
    """

    kind: str = ""  # registry name, set by subclasses
    config_class: type = LatentShape  # set by subclasses
    #: As a level of a ``ResidualQuantizer``: the weight of this quantizer's loss on the encoder (the stack's
    #: default ``pull``). 1: the commitment at full weight, as SoundStream and ResidualVQ train.
    residual_pull: float = 1.0
    #: appended to the error for an unknown option: where such options live instead
    _options_elsewhere: str = ""

    def __init__(self, config=None, **options):
        super().__init__()
        if config is None:
            valid = [f.name for f in dataclasses.fields(self.config_class)]
            unknown = sorted(set(options) - set(valid))
            if unknown:
                raise TypeError(f"{type(self).__name__} has no option {', '.join(map(repr, unknown))}; valid: "
                                f"{', '.join(valid)}{self._options_elsewhere}")
            config = self.config_class(**options)
        elif not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__}, got {type(config).__name__}")
        elif options:
            config = dataclasses.replace(config, **options)
        self.config = config
        self.num_codes, self.dim = config.num_codes, config.dim
        self._done_once: set[str] = set()  # host-side cache of the flags of _once_per_run found set

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._done_once.clear()  # re-read the loaded flags on the next training step

    def _apply(self, fn, recurse=True):
        """A module cast to half precision (``model.bfloat16()``, ``.half()``, ``.to(torch.float16)``) leaves the
        quantizer's float32 state (codebook, pi, EMAs, the solver's potential) in float32: its updates are sums of
        small steps that bf16 rounds away (the mass drifts). The forward runs in float32 (``fp32``) and returns
        ``quantized`` in the latents' dtype. A cast to float64 applies (a double quantizer is a user's choice; its
        ``quantized`` is still in the latents' dtype, the decoder's)."""

        def keep_float32(t):
            out = fn(t)
            if t.dtype == torch.float32 and out.dtype in (torch.float16, torch.bfloat16):
                return t.to(out.device)  # the values as they were (not rounded through half precision), moved
            return out

        return super()._apply(keep_float32, recurse)

    # ---- to be provided by subclasses -------------------------------------------------------------
    @property
    def codebook(self) -> torch.Tensor:
        """The codewords (K, D), in the latents' units: what a latent is replaced by."""
        raise NotImplementedError

    def reconstruction_loss(self, x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The data term d_x the method pairs with this quantizer (mean squared error unless overridden)."""
        return torch.nn.functional.mse_loss(x_hat, x)

    # ---- shared machinery -----------------------------------------------------------------------
    def _once_per_run(self, flag: str, init, *args) -> None:
        """``init(*args)`` on the first training batch of a run (and on the next ones while it returns False,
        "not finished"), then never again: ``flag`` names a saved bool buffer saying it was done, so a resumed
        run keeps what it set. The flag is read on the host until it is found set, then the answer is cached on
        the module: no host synchronisation after that."""
        if flag in self._done_once:
            return
        done = getattr(self, flag)
        if not bool(done):
            if init(*args) is False:
                return
            done.fill_(True)
        self._done_once.add(flag)

    def config_dict(self) -> dict:
        """The quantizer's kind and options, as ``save_pretrained`` writes them (``quantizer_from_config`` reads
        them back)."""
        return {"kind": self.kind, **dataclasses.asdict(self.config)}

    @property
    def layout(self) -> str:
        """The latents' layout this quantizer expects, in words: ``"(B, D, *positions)"`` or
        ``"(B, *positions, D)"``."""
        return "(B, *positions, D)" if self.config.channel_last else "(B, D, *positions)"

    def check_input(self, z: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Refuse, in one line, latents the forward cannot take: not a floating-point tensor of at least 3 axes,
        the wrong feature size, an ambiguous layout, a mask of another shape, or values that are not finite."""
        if not isinstance(z, torch.Tensor):
            raise TypeError(f"expected a tensor of latents, got {type(z).__name__}")
        if z.dim() < 3:
            raise ValueError(f"expected latents of shape {self.layout}, got shape {tuple(z.shape)}")
        if not z.is_floating_point():
            raise TypeError(f"latents must be floating point, got {z.dtype}")
        refuse_meta(z)
        if self.config.channel_last is None and z.shape[1] == z.shape[-1] == self.dim:
            raise ValueError(f"latents of shape {tuple(z.shape)} have {self.dim} features on both their second and "
                             "last axes: say which holds the features, channel_last=True for (B, *positions, D) (a "
                             "sequence (B, N, D)) or channel_last=False for (B, D, *positions)")
        channels = z.shape[-1] if self.config.channel_last else z.shape[1]
        if channels != self.dim:
            where = "last" if self.config.channel_last else "second (channel-first; channel_last=True for (B, N, D))"
            raise ValueError(f"latents of shape {tuple(z.shape)} have {channels} features on their {where} axis "
                             f"but the codebook dim is {self.dim}")
        if z.numel() == 0:
            raise ValueError(f"latents of shape {tuple(z.shape)} are empty: nothing to quantize")
        if mask is not None:
            expected = self.positions_shape(z)
            if mask.dtype != torch.bool or tuple(mask.shape) != (z.shape[0], *expected):
                raise ValueError(f"mask must be a bool tensor of shape {(z.shape[0], *expected)} (True = a real "
                                 f"latent), got {mask.dtype} {tuple(mask.shape)}")
        self.check_finite(z)

    def check_finite(self, z: torch.Tensor) -> None:
        """NaN, Inf, or latents so large that their squared distances to the codes overflow float32 (|z| of ~1e18
        and more: a NaN or infinite loss, silently) are an error. On the CPU (eager) a ``NonFiniteLatents``
        (a ValueError); on an accelerator or under torch.compile an asynchronous device assert, so the hot path
        neither waits for the device nor breaks the compiled graph. One reduction either way (no |z| copy)."""
        limit = (torch.finfo(torch.float32).max / (4 * self.dim)) ** 0.5  # then (|z| + |c|)^2 D stays finite
        lo, hi = torch.aminmax(z.detach())
        ok = (hi <= limit) & (lo >= -limit)  # False for NaN and Inf too
        if z.device.type != "cpu" or torch.compiler.is_compiling():
            torch._assert_async(ok, f"latents contain NaN or Inf, or values beyond +-{limit:.1g} whose squared "
                                "distances overflow float32 (check the encoder and the learning rate)")
        elif not ok:
            if not torch.isfinite(z).all():
                raise NonFiniteLatents("latents contain NaN or Inf (check the encoder and the learning rate)")
            raise NonFiniteLatents(f"latents reach {float(z.abs().amax()):.3g}: beyond +-{limit:.1g} their squared "
                                   "distances to the codes overflow float32; scale the latents")

    def positions_shape(self, z: torch.Tensor) -> tuple[int, ...]:
        """The positions' axes of z: (H, W) of (B, D, H, W), (N,) of a channel-last (B, N, D)."""
        return tuple(z.shape[1:-1] if self.config.channel_last else z.shape[2:])

    def flatten(self, z: torch.Tensor) -> torch.Tensor:
        """Latents of either layout -> (B, M, D) in the codebook's dtype (float32 unless the quantizer was made
        double), M = the number of positions (row-major)."""
        b = z.shape[0]
        z = z.to(self.codebook.dtype)
        return (z if self.config.channel_last else z.movedim(1, -1)).reshape(b, -1, self.dim)

    def nearest(self, flat: torch.Tensor) -> torch.Tensor:
        """(B, M, D) -> (B, M) indices of the nearest codewords."""
        b, m, d = flat.shape
        return nearest_code(flat.detach().reshape(b * m, d), self.codebook.detach()).view(b, m)

    def indices_to_latents(self, indices: torch.Tensor) -> torch.Tensor:
        """(B, *positions) long -> the codewords in the input's layout, equal to ``quantized`` at eval time (values
        and memory layout: a decoder then computes exactly what it computes in the forward pass), in the codebook's
        dtype. Flat indices (N,) give the codewords (N, D), whatever the layout (a lookup, as a second stage
        wants it: there is no position axis to put the features before)."""
        check_index_tensor(indices)
        if indices.numel() and (indices.min() < 0 or indices.max() >= self.num_codes):
            raise ValueError(f"indices must lie in [0, {self.num_codes}), got [{int(indices.min())}, {int(indices.max())}]")
        latents = F.embedding(indices, self.codebook)  # (B, *positions, D)
        return latents if self.config.channel_last or indices.dim() < 2 else latents.movedim(-1, 1)

    def batch_perplexity(self, indices: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Perplexity of this batch's usage histogram (the unmasked latents'). Under DDP it is this rank's batch:
        a forward issues no collective (evaluation, sampling and encoding run uneven shares on the ranks); the
        trainer averages the logged value over ranks with the epoch's other figures. ``CodeUsage`` sums a
        histogram over ranks where one is wanted."""
        indices = indices.detach()
        counts = code_histogram(indices, self.num_codes, keep=None if mask is None else mask.reshape(indices.shape))
        return perplexity_from_counts(counts).float()

    @staticmethod
    def straight_through(z: torch.Tensor, z_q: torch.Tensor) -> torch.Tensor:
        """Forward value z_q, gradient of the identity to z and none to the codebook: z + sg(z_q - z), the
        copy-gradient trick as VQ-VAE (van den Oord et al. 2017, Eq. 3) and VQ-WAE's authors write it. A codebook
        learns only through its own loss term (VQ-VAE's codebook loss, VQ-WAE's W), never from the decoder.

        Written as sg(z_q) + (z - sg(z)): z - sg(z) is exactly 0 in floating point, so the value is bit-identical to
        the codewords (``indices_to_latents`` matches ``quantized``), which z + sg(z_q - z) is not."""
        return z_q.detach() + (z - z.detach())

    def _output(self, z, flat_q, indices, losses, mask=None, perplexity=None) -> QuantizerOutput:
        """Outputs in z's layout from the (B, M, D) quantized latents and (B, M) indices (``perplexity``: the batch's,
        when the caller has it)."""
        b, positions = z.shape[0], self.positions_shape(z)
        quantized = flat_q.view(b, *positions, self.dim)
        if not self.config.channel_last:
            quantized = quantized.movedim(-1, 1)
        loss = sum(losses.values()) if losses else quantized.new_zeros(())
        return QuantizerOutput(
            quantized=quantized if quantized.dtype == z.dtype else quantized.to(z.dtype),  # the decoder's dtype
            indices=indices.view(b, *positions),
            loss=loss,
            losses=losses,
            perplexity=self.batch_perplexity(indices, mask) if perplexity is None else perplexity,
        )


def rotation_trick(z: torch.Tensor, z_q: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """The rotation trick (Fifty et al., ICLR 2025, Eq. 4-5), the straight-through that vector-quantize-pytorch's
    ``VectorQuantize`` uses by default: value z_q exactly, but the decoder's gradient reaches z (..., D) rotated from
    z_q's direction onto z's and scaled by ||z_q|| / ||z||, instead of copied. The map is
    lam (I - 2 r r^T + 2 q^ e^^T) z with e^ = z / ||z||, q^ = z_q / ||z_q||, r = (e^ + q^) / ||e^ + q^||,
    lam = ||z_q|| / ||z||, all treated as constants (so z_q gets no gradient from this path). Written as
    sg(z_q) + (R z - sg(R z)), like ``Quantizer.straight_through``, so the value is bit-identical to the codewords."""
    q, e = z_q.detach(), z.detach()
    z_norm, q_norm = e.norm(dim=-1, keepdim=True).clamp_min(eps), q.norm(dim=-1, keepdim=True).clamp_min(eps)
    e_hat, q_hat = e / z_norm, q / q_norm
    r = e_hat + q_hat
    r = r / r.norm(dim=-1, keepdim=True).clamp_min(eps)
    rotated = (q_norm / z_norm) * (z - 2 * r * (r * z).sum(-1, keepdim=True) + 2 * q_hat * (e_hat * z).sum(-1, keepdim=True))
    return q + (rotated - rotated.detach())


def check_index_tensor(indices) -> None:
    """Code indices must be an int64 tensor (a list, or another dtype, is refused in one line naming it)."""
    if not isinstance(indices, torch.Tensor) or indices.dtype != torch.long:
        got = indices.dtype if isinstance(indices, torch.Tensor) else type(indices).__name__
        raise TypeError(f"indices must be an int64 tensor, got {got}")


def refuse_meta(z) -> None:
    """Latents on the meta device (shapes without values) are an error naming it, not torch's "unsupported
    scalarType" from deep inside."""
    if isinstance(z, torch.Tensor) and z.device.type == "meta":
        raise ValueError("latents on the 'meta' device hold no values: give them (and the quantizer) a real device")


def fp32(fn):
    """Run a quantizer's forward in float32 even inside a bf16/fp16 autocast region."""

    def wrapper(self, z, *args, **kwargs):
        refuse_meta(z)
        with torch.autocast(device_type=z.device.type, enabled=False):
            return fn(self, z, *args, **kwargs)

    wrapper.__doc__, wrapper.__name__ = fn.__doc__, fn.__name__
    return wrapper


def scale_gradient(x: torch.Tensor, scale) -> torch.Tensor:
    """x's value exactly (the second term is 0 in value), its gradient x ``scale`` (a number or a tensor): how far a
    loss pulls what produced x (the pull of ``ResidualQuantizer`` and of ``WassersteinQuantizer``)."""
    if isinstance(scale, (int, float)) and scale == 1:
        return x
    return x.detach() + scale * (x - x.detach())


def masked_square_sum(x: torch.Tensor, keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of x^2 over the real latents, how many elements that is) for (B, M, D) latents; ``keep``: (B, M),
    True / 1 for a real latent, or None for all. Kept apart so that DDP can sum both before dividing.

    The mask weights the terms rather than indexing them: ``x[keep]`` has a data-dependent size, a host read."""
    if keep is None:
        return x.pow(2).sum(), x.new_tensor(float(x.numel()))
    w = keep.to(x.dtype)
    return (x.pow(2).sum(-1) * w).sum(), w.sum() * x.shape[-1]


def masked_mse(a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Mean squared error of (B, M, D) latents over the real ones (``keep`` as in :func:`masked_square_sum`)."""
    if keep is None:
        return F.mse_loss(a, b)
    total, count = masked_square_sum(a - b, keep)
    return total / count.clamp_min(1)
