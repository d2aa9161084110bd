"""vqwae: the Vector Quantized Wasserstein Auto-Encoder (Vuong et al., ICML 2023) in PyTorch."""

__version__ = "0.1.0"
