"""Other libraries' APIs on vqwae's quantizers: ``from vqwae.compat import VectorQuantize`` in place of
``from vector_quantize_pytorch import VectorQuantize`` (and ``ResidualVQ``; docs/guides/migration.md)."""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy)
    from vqwae.compat.vector_quantize import ARGUMENTS, FORWARD_ARGUMENTS, LossBreakdown, VectorQuantize
    from vqwae.compat.residual import RESIDUAL_ARGUMENTS, RESIDUAL_FORWARD_ARGUMENTS, ResidualVQ

__all__ = ["VectorQuantize", "ResidualVQ", "LossBreakdown", "ARGUMENTS", "FORWARD_ARGUMENTS", "RESIDUAL_ARGUMENTS",
           "RESIDUAL_FORWARD_ARGUMENTS"]
__getattr__, __dir__ = attach(__name__)
