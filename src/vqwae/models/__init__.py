"""The paper's networks and the ``VQAutoencoder`` wrapper."""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy): the options' module needs no torch
    from vqwae.models.autoencoder import VQAutoencoder
    from vqwae.models.network_options import NetworkConfig, NetworkOptions
    from vqwae.models.networks import Decoder, Encoder, build_networks

__all__ = ["VQAutoencoder", "NetworkConfig", "NetworkOptions", "Encoder", "Decoder", "build_networks"]
__getattr__, __dir__ = attach(__name__)
