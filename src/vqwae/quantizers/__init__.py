"""Drop-in quantizers for any PyTorch model: latents (B, D, *positions) or, with ``channel_last=True``,
(B, *positions, D) in, ``QuantizerOutput`` out; ``ResidualQuantizer`` stacks them.

    from vqwae.quantizers import WassersteinQuantizer, VectorQuantizer, StochasticQuantizer, ResidualQuantizer
"""
from vqwae.quantizers.base import CodebookShape, LatentShape, Quantizer, QuantizerOutput
from vqwae.quantizers.residual import ResidualOutput, ResidualQuantizer
from vqwae.quantizers.stochastic import StochasticConfig, StochasticOptions, StochasticQuantizer
from vqwae.quantizers.vector import VectorConfig, VectorOptions, VectorQuantizer
from vqwae.quantizers.wasserstein import WassersteinConfig, WassersteinOptions, WassersteinQuantizer

QUANTIZERS = {q.kind: q for q in (WassersteinQuantizer, VectorQuantizer, StochasticQuantizer)}


# What a format-1 saved config (written before format versions, 2026-11-23) leaves out, with the value that run
# was trained with: options added later whose new default differs from the behaviour before them.
_FORMAT_1_IMPLICIT = {"wasserstein": {"codebook_update": "gradient", "pi_floor": 0.0}}


def upgrade_quantizer_config(kind: str, values: dict, version: int) -> dict:
    """A saved quantizer config (or flat training config) of format ``version`` as the current format reads it."""
    if version == 1:
        return {**_FORMAT_1_IMPLICIT.get(kind, {}), **values}
    return dict(values)


def build_quantizer(kind: str, config=None, **options) -> Quantizer:
    """Build a quantizer from its registry name ("wasserstein", "vector", "stochastic") and its config object
    and / or config fields."""
    if kind not in QUANTIZERS:
        raise ValueError(f"unknown quantizer {kind!r}; valid: {', '.join(QUANTIZERS)}")
    return QUANTIZERS[kind](config, **options)


__all__ = [
    "Quantizer", "QuantizerOutput", "WassersteinQuantizer", "VectorQuantizer", "StochasticQuantizer",
    "WassersteinConfig", "VectorConfig", "StochasticConfig", "WassersteinOptions", "VectorOptions",
    "StochasticOptions", "CodebookShape", "LatentShape", "ResidualQuantizer", "ResidualOutput", "QUANTIZERS", "build_quantizer", "upgrade_quantizer_config",
]
