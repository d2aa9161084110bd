"""Drop-in quantizers for any PyTorch model: latents (B, D, *positions) or, with ``channel_last=True``,
(B, *positions, D) in, ``QuantizerOutput`` out; ``ResidualQuantizer`` stacks them, ``Lookup`` adds a
low-dimensional (and l2-normalised) lookup.

    from vqwae.quantizers import WassersteinQuantizer, VectorQuantizer, StochasticQuantizer, ResidualQuantizer, Lookup

``WassersteinQuantizer`` is VQ-WAE as vqwae ships it; ``PaperWassersteinQuantizer`` the paper's forms (reference);
``diagnostics(quantizer, latents)`` measures how a VQ-WAE quantizer's transport and usage stand on given latents.
"""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy), in the API reference's order
    from vqwae.quantizers.shape import CodebookShape, LatentShape
    from vqwae.quantizers.base import Quantizer, QuantizerOutput
    from vqwae.quantizers.diagnostics import Diagnostics, diagnostics
    from vqwae.quantizers.lookup import Lookup
    from vqwae.quantizers.paper import PaperWassersteinQuantizer
    from vqwae.quantizers.residual import ResidualOutput, ResidualQuantizer
    from vqwae.quantizers.stochastic_options import StochasticConfig, StochasticOptions
    from vqwae.quantizers.stochastic import StochasticQuantizer
    from vqwae.quantizers.upgrade import upgrade_quantizer_config, upgrade_state_dict
    from vqwae.quantizers.vector_options import VectorConfig, VectorOptions
    from vqwae.quantizers.vector import VectorQuantizer
    from vqwae.quantizers.wasserstein import WassersteinQuantizer
    from vqwae.quantizers.wasserstein_options import (PaperWassersteinConfig, VQWAEOptions, WassersteinConfig,
                                                       WassersteinOptions)
    from vqwae.quantizers.registry import QUANTIZERS, build_quantizer

__all__ = [
    "Quantizer", "QuantizerOutput", "WassersteinQuantizer", "PaperWassersteinQuantizer", "VectorQuantizer",
    "StochasticQuantizer", "WassersteinConfig", "PaperWassersteinConfig", "VectorConfig", "StochasticConfig",
    "WassersteinOptions", "VQWAEOptions", "VectorOptions", "StochasticOptions", "CodebookShape", "LatentShape",
    "ResidualQuantizer", "ResidualOutput", "Lookup", "QUANTIZERS", "build_quantizer", "upgrade_quantizer_config",
    "upgrade_state_dict", "diagnostics", "Diagnostics",
]
__getattr__, __dir__ = attach(__name__)
