"""The paper's networks and the ``VQAutoencoder`` wrapper."""
from vqwae.models.autoencoder import VQAutoencoder
from vqwae.models.networks import Decoder, Encoder, NetworkConfig, build_networks

__all__ = ["VQAutoencoder", "NetworkConfig", "Encoder", "Decoder", "build_networks"]
