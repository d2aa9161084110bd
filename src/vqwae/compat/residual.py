"""``ResidualVQ`` as vector-quantize-pytorch 1.32 spells it, on vqwae's ``ResidualQuantizer``: switch by the import.

    # from vector_quantize_pytorch import ResidualVQ
    from vqwae.compat import ResidualVQ
    rq = ResidualVQ(dim=256, num_quantizers=8, codebook_size=1024)
    quantized, indices, losses = rq(torch.randn(1, 1024, 256))   # (1, 1024, 256), (1, 1024, 8), (8,)

Each level is the quantizer ``vqwae.compat.VectorQuantize`` builds from the same per-level arguments (``**vq_kwargs``,
``backend``), so a level argument means here what it means there; the stack's own arguments are in
``RESIDUAL_ARGUMENTS``, mapped, honoured or refused in one line as ``ARGUMENTS`` are. The stack is vqwae's: one
straight-through estimator for the sum, and the levels' losses reach the encoder at the stack's ``pull`` (0.01 for
VQ-WAE levels, 1 for VQ levels: ``ResidualQuantizer``), where the peer sums every level's commitment loss at full
weight.
"""
from __future__ import annotations

import torch
from torch import nn

from vqwae.compat.vector_quantize import VectorQuantize, _refuse_unhonoured, codes_of, forward_held, pad_as_peer
from vqwae.quantizers.residual import ResidualQuantizer

_DROPOUT = "vqwae's quantizer dropout draws 1..L levels (ResidualQuantizer(dropout=True))"
RESIDUAL_ARGUMENTS = {
    "codebook_dim": (None, "a stack-wide low-dimensional lookup is not in vqwae (vqwae.quantizers.Lookup wraps one "
                           "quantizer): project your latents with an nn.Linear before the stack"),
    "shared_codebook": (False, "every level has its own codebook in vqwae (ResidualQuantizer)"),
    "diveq": (False, "not in vqwae"),
    "heads": (1, "several heads are not in vqwae: one ResidualVQ per head"),
    "quantize_dropout": (False, "map"),
    "quantize_dropout_cutoff_index": (0, _DROPOUT),
    "quantize_dropout_multiple_of": (1, _DROPOUT),
    "accept_image_fmap": (False, "map"),
    "implicit_neural_codebook": (False, "not in vqwae"),
    "mlp_kwargs": ({}, "not in vqwae (implicit_neural_codebook)"),
    "beam_size": (None, "not in vqwae: each level takes its own code (greedy)"),
    "eval_beam_size": (None, "not in vqwae (beam_size)"),
    "beam_score_quantizer_weights": (None, "not in vqwae (beam_size)"),
    "quant_grad_frac": (0.0, "not in vqwae: the stack's pull scales the levels' gradient to the encoder"),
    "return_zeros_for_masked_padding": (True, "keep"),
}
"""The peer's ``ResidualVQ`` arguments beyond ``dim``, ``num_quantizers``, ``codebook_size`` and the levels'
``**vq_kwargs`` (``ARGUMENTS``): name -> (the peer's default, how vqwae takes it), as ``ARGUMENTS``."""
RESIDUAL_FORWARD_ARGUMENTS = {
    "mask": (None, "keep"),
    "indices": (None, "not in vqwae: a cross-entropy commitment to given codes"),
    "return_all_codes": (False, "keep"),
    "sample_codebook_temp": (None, "not in vqwae (stochastic_sample_codes)"),
    "freeze_codebook": (False, "keep"),
    "beam_size": (None, "not in vqwae (beam_size)"),
    "rand_quantize_dropout_fixed_seed": (None, "vqwae's quantizer dropout draws from the stack's own saved seed"),
}
"""The peer's ``ResidualVQ.forward`` arguments beyond ``x``."""


class ResidualVQ(nn.Module):
    """vector-quantize-pytorch's ``ResidualVQ``, taking its arguments by their names (``RESIDUAL_ARGUMENTS`` and
    the levels' ``ARGUMENTS``).

    Args:
        dim: the latents' dimension D.
        num_quantizers: L, the number of levels.
        codebook_size: K of every level, or one K per level.
        backend: each level's, as ``VectorQuantize``'s ("wasserstein", vqwae's default, or "vector").
        **options: the stack's arguments and the levels' (``vq_kwargs``): mapped, honoured or refused in one line.
    """

    def __init__(self, *, dim: int, num_quantizers: int, codebook_size, backend: str = "wasserstein", **options):
        super().__init__()
        stack = {name: options.pop(name) for name in list(options) if name in RESIDUAL_ARGUMENTS}
        _refuse_unhonoured(RESIDUAL_ARGUMENTS, stack, "ResidualVQ")
        sizes = list(codebook_size) if isinstance(codebook_size, (tuple, list)) else [codebook_size] * num_quantizers
        if len(sizes) != num_quantizers:
            raise ValueError(f"ResidualVQ got {len(sizes)} codebook sizes for {num_quantizers} quantizers")
        self.channel_first = bool(stack.get("accept_image_fmap", False))
        if self.channel_first:
            options["accept_image_fmap"] = True
        self.return_zeros_for_masked_padding = bool(stack.get("return_zeros_for_masked_padding", True))
        if options.get("use_cosine_sim"):
            raise ValueError("ResidualVQ(use_cosine_sim=True) cannot be honoured: vqwae's l2-normalised lookup "
                             "(vqwae.quantizers.Lookup) wraps one quantizer, not the levels of a stack")
        # each level is what compat's VectorQuantize builds from the same arguments (its refusals included)
        made = iter(VectorQuantize(dim, k, backend=backend, **options).quantizer for k in sizes)
        self.stack = ResidualQuantizer(lambda: next(made), num_quantizers,
                                       dropout=bool(stack.get("quantize_dropout", False)))
        self.num_quantizers, self.codebook_size = num_quantizers, codebook_size

    @property
    def codebooks(self) -> torch.Tensor:
        """The levels' codes, (L, K, D) (a list where the levels' K differ)."""
        books = [q.codebook for q in self.stack.levels]
        return torch.stack(books) if len({b.shape for b in books}) == 1 else books

    def forward(self, x: torch.Tensor, mask=None, indices=None, return_all_codes=False, sample_codebook_temp=None,
                freeze_codebook=False, beam_size=None, rand_quantize_dropout_fixed_seed=None):
        """(quantized, indices (..., L), per-level losses (L,)) as the peer returns them (``return_all_codes``:
        and each level's codes, (L, ...)). Padded positions come back as zeros with index -1; ``freeze_codebook``
        leaves every level's codebook and state where they are for this call (and uses every level)."""
        given = dict(indices=indices, sample_codebook_temp=sample_codebook_temp, beam_size=beam_size,
                     rand_quantize_dropout_fixed_seed=rand_quantize_dropout_fixed_seed)
        _refuse_unhonoured(RESIDUAL_FORWARD_ARGUMENTS, given, "ResidualVQ.forward")
        if mask is not None:
            if self.channel_first:
                raise ValueError("a mask is for sequences (B, N, D): ResidualVQ without accept_image_fmap")
            mask = mask if mask.dtype == torch.bool else mask != 0
        out = forward_held(self.stack, x, mask, bool(freeze_codebook))
        losses = torch.stack([sum((v for k, v in out.losses.items() if k.startswith(f"level{level}/")),
                                  x.new_zeros(())) for level in range(1, self.num_quantizers + 1)])
        quantized, idx = pad_as_peer(out.quantized, out.indices, x, mask, self.return_zeros_for_masked_padding)
        if return_all_codes:
            return quantized, idx, losses, self.get_codes_from_indices(idx)
        return quantized, idx, losses

    def get_codes_from_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """Each level's codes of ``indices`` (..., L), stacked first: (L, ...) in the forward's layout (index -1:
        zeros)."""
        indices = torch.as_tensor(indices).long()
        return torch.stack([codes_of(q.codebook, indices[..., level], self.channel_first)
                            for level, q in enumerate(self.stack.levels)])

    def get_output_from_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """The summed codes of ``indices``: what the forward returns as ``quantized`` (in eval mode, equal to it)."""
        return self.get_codes_from_indices(indices).sum(0)
