"""The paper's networks and the ``VQAutoencoder`` wrapper."""
from vqwae.models.autoencoder import VQAutoencoder
from vqwae.models.networks import Decoder, Encoder, NetworkConfig, NetworkOptions, build_networks

__all__ = ["VQAutoencoder", "NetworkConfig", "NetworkOptions", "Encoder", "Decoder", "build_networks"]
