"""Drop-in quantizers for any PyTorch model: latents (B, D, *positions) or, with ``channel_last=True``,
(B, *positions, D) in, ``QuantizerOutput`` out; ``ResidualQuantizer`` stacks them.

    from vqwae.quantizers import WassersteinQuantizer, VectorQuantizer, StochasticQuantizer, ResidualQuantizer

``WassersteinQuantizer`` is VQ-WAE as vqwae ships it; ``PaperWassersteinQuantizer`` the paper's forms (reference);
``diagnostics(quantizer, latents)`` measures how a VQ-WAE quantizer's transport and usage stand on given latents.
"""
from vqwae.quantizers.base import CodebookShape, LatentShape, Quantizer, QuantizerOutput
from vqwae.quantizers.diagnostics import Diagnostics, diagnostics
from vqwae.quantizers.paper import PaperWassersteinQuantizer
from vqwae.quantizers.residual import ResidualOutput, ResidualQuantizer
from vqwae.quantizers.stochastic import StochasticConfig, StochasticOptions, StochasticQuantizer
from vqwae.quantizers.upgrade import upgrade_quantizer_config, upgrade_state_dict
from vqwae.quantizers.vector import VectorConfig, VectorOptions, VectorQuantizer
from vqwae.quantizers.wasserstein import WassersteinQuantizer
from vqwae.quantizers.wasserstein_options import (PaperWassersteinConfig, VQWAEOptions, WassersteinConfig,
                                                   WassersteinOptions)

QUANTIZERS = {q.kind: q for q in (WassersteinQuantizer, PaperWassersteinQuantizer, VectorQuantizer,
                                  StochasticQuantizer)}


def build_quantizer(kind: str, config=None, **options) -> Quantizer:
    """Build a quantizer from its registry name ("wasserstein", "paper-wasserstein", "vector", "stochastic") and its
    config object and / or config fields."""
    if kind not in QUANTIZERS:
        raise ValueError(f"unknown quantizer {kind!r}; valid: {', '.join(QUANTIZERS)}")
    return QUANTIZERS[kind](config, **options)


__all__ = [
    "Quantizer", "QuantizerOutput", "WassersteinQuantizer", "PaperWassersteinQuantizer", "VectorQuantizer",
    "StochasticQuantizer", "WassersteinConfig", "PaperWassersteinConfig", "VectorConfig", "StochasticConfig",
    "WassersteinOptions", "VQWAEOptions", "VectorOptions", "StochasticOptions", "CodebookShape", "LatentShape",
    "ResidualQuantizer", "ResidualOutput", "QUANTIZERS", "build_quantizer", "upgrade_quantizer_config",
    "upgrade_state_dict", "diagnostics", "Diagnostics",
]
