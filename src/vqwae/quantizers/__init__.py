"""Drop-in quantizers for any PyTorch autoencoder: latents (B, D, H, W) in, ``QuantizerOutput`` out.

    from vqwae.quantizers import WassersteinQuantizer, VectorQuantizer, StochasticQuantizer
"""
from vqwae.quantizers.base import Quantizer, QuantizerOutput
from vqwae.quantizers.stochastic import StochasticConfig, StochasticQuantizer
from vqwae.quantizers.vector import VectorConfig, VectorQuantizer
from vqwae.quantizers.wasserstein import WassersteinConfig, WassersteinQuantizer

QUANTIZERS = {q.kind: q for q in (WassersteinQuantizer, VectorQuantizer, StochasticQuantizer)}


def build_quantizer(kind: str, **kwargs) -> Quantizer:
    """Build a quantizer from its registry name ("wasserstein", "vector", "stochastic") and config fields."""
    if kind not in QUANTIZERS:
        raise ValueError(f"unknown quantizer {kind!r}; valid: {', '.join(QUANTIZERS)}")
    return QUANTIZERS[kind](**kwargs)


__all__ = [
    "Quantizer", "QuantizerOutput", "WassersteinQuantizer", "VectorQuantizer", "StochasticQuantizer",
    "WassersteinConfig", "VectorConfig", "StochasticConfig", "QUANTIZERS", "build_quantizer",
]
