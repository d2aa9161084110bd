"""The paper's networks and the ``VQAutoencoder`` wrapper."""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy), in the API reference's order
    from vqwae.models.autoencoder import VQAutoencoder
    from vqwae.models.networks import Decoder, Encoder, build_networks
    from vqwae.models.network_options import NetworkConfig, NetworkOptions
    from vqwae.models.pretrained import load_checked

__all__ = ["VQAutoencoder", "NetworkConfig", "NetworkOptions", "Encoder", "Decoder", "build_networks", "load_checked"]
__getattr__, __dir__ = attach(__name__)
