"""The quantizers by registry name, and ``build_quantizer``."""
from __future__ import annotations

from vqwae.quantizers.base import Quantizer
from vqwae.quantizers.lookup import Lookup
from vqwae.quantizers.paper import PaperWassersteinQuantizer
from vqwae.quantizers.stochastic import StochasticQuantizer
from vqwae.quantizers.vector import VectorQuantizer
from vqwae.quantizers.residual import ResidualQuantizer
from vqwae.quantizers.wasserstein import WassersteinQuantizer

QUANTIZERS = {q.kind: q for q in (WassersteinQuantizer, PaperWassersteinQuantizer, VectorQuantizer,
                                  StochasticQuantizer)}
"""Every quantizer by its registry name (``kind``): "wasserstein", "paper-wasserstein", "vector", "stochastic";
what :func:`build_quantizer`, a saved model's config and ``vqwae train --model`` name."""
COMPOSITES = {c.kind: c for c in (ResidualQuantizer, Lookup)}
"""The modules built around quantizers ("residual", "lookup"), by the ``kind`` of their saved config: each rebuilds
itself with ``from_config_dict(config, build)``."""


def build_quantizer(kind: str, config=None, **options) -> Quantizer:
    """Build a quantizer from its registry name ("wasserstein", "paper-wasserstein", "vector", "stochastic") and its
    config object and / or config fields."""
    if kind not in QUANTIZERS:
        raise ValueError(f"unknown quantizer {kind!r}; valid: {', '.join(QUANTIZERS)}")
    return QUANTIZERS[kind](config, **options)
