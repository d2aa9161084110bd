"""``VQAutoencoder``: encoder -> quantizer -> decoder, with save/load (``PretrainedMixin``).

    model = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=512)
    x_hat, out = model(x)               # out: QuantizerOutput
    model.save_pretrained("runs/m1")    # model.safetensors + model_config.json
    same = VQAutoencoder.from_pretrained("runs/m1")
    codes = model.encode(x)             # (B, h, w) code indices; (B, h, w, L) with a ResidualQuantizer of L levels
    x_hat = model.decode_indices(codes) # (B, C, S, S): equal to model(x)[0] in eval mode

Any quantizer of ``vqwae.quantizers`` fits, ``ResidualQuantizer`` included (``VQAutoencoder(encoder, rq,
decoder, network_config)``); ``save_pretrained`` / ``from_pretrained`` keep it.
"""
from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import torch
from torch import nn

from vqwae.models.networks import NetworkConfig, build_networks
from vqwae.models.pretrained import PretrainedMixin
from vqwae.quantizers import Quantizer, QuantizerOutput, build_quantizer, upgrade_quantizer_config
from vqwae.quantizers.registry import COMPOSITES


class VQAutoencoder(PretrainedMixin, nn.Module):
    """An encoder, a quantizer and a decoder: images (B, C, S, S) in [0, 1] -> reconstructions, and the code grids
    between them (``encode``, ``decode_indices``). Build the paper's networks with ``from_config``, or wrap your own
    encoder and decoder; save and load with ``save_pretrained`` / ``from_pretrained`` (safetensors).

    >>> from vqwae.models import NetworkConfig
    >>> model = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein")  # the paper's 32x32 network
    >>> x = torch.rand(8, 1, 32, 32)                                                     # MNIST is padded to 32
    >>> x_hat, out = model(x)
    >>> loss = model.reconstruction_loss(x_hat, x) + out.loss

    Args:
        encoder: images -> latents (B, D, h, w).
        quantizer: any ``Quantizer`` (or a ``ResidualQuantizer``) of dimension D, channel-first.
        decoder: quantized latents -> images.
        network_config: the paper's networks' configuration; only ``save_pretrained`` needs it.
    """

    #: model_config.json, not config.json: in a run folder config.json is the training config.
    config_name = "model_config.json"
    #: 1: no "format_version" key (before 2026-11-23); 2: versioned; 3: VQ-WAE as two quantizers (issue #56:
    #: ``upgrade_quantizer_config`` reads the earlier ones).
    format_version = 3

    def __init__(self, encoder: nn.Module, quantizer: Quantizer, decoder: nn.Module, network_config: NetworkConfig | None = None):
        super().__init__()
        self.encoder, self.quantizer, self.decoder = encoder, quantizer, decoder
        self.network_config = network_config  # needed only for save_pretrained

    @classmethod
    def from_config(cls, network: NetworkConfig, quantizer_kind: str, quantizer_config=None,
                    **quantizer_options) -> "VQAutoencoder":
        """The paper's networks with a quantizer from the registry (its config object and / or options); the
        quantizer's dim defaults to the network's latent dim and must equal it."""
        if quantizer_config is None:
            quantizer_options.setdefault("dim", network.latent_dim)
            quantizer_options.setdefault("channel_last", False)  # the networks' latents: (B, D, h, w)
        enc, dec = build_networks(network)
        quantizer = build_quantizer(quantizer_kind, quantizer_config, **quantizer_options)
        if quantizer.dim != network.latent_dim:
            raise ValueError(f"quantizer dim {quantizer.dim} != network latent_dim {network.latent_dim}")
        return cls(enc, quantizer, dec, network)

    @property
    def image_size(self) -> int | None:
        """The image side the network was built for (None for a model built without a network config)."""
        return None if self.network_config is None else self.network_config.image_side

    @property
    def num_codes(self) -> int:
        """K: every code index lies in [0, K)."""
        return int(self.quantizer.num_codes)

    def check_images(self, x: torch.Tensor) -> None:
        """Images must be a floating-point (B, C, S, S) batch with the network's channels (values in [0, 1])."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"expected a tensor of images, got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"images must be floating point in [0, 1], got {x.dtype} (for uint8 images: x.float() / 255)")
        if x.dim() != 4:
            raise ValueError(f"expected images of shape (B, C, H, W), got shape {tuple(x.shape)}")
        channels = self.network_config.in_channels if self.network_config is not None else None
        if channels is not None and x.shape[1] != channels:
            raise ValueError(f"images have {x.shape[1]} channels but the network takes {channels}")
        side = self.image_size
        if side is not None and tuple(x.shape[-2:]) != (side, side):
            raise ValueError(f"images of {x.shape[-2]}x{x.shape[-1]}, but the network takes {side}x{side} (its code "
                             f"grid: {self._grid_side}x{self._grid_side})")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, QuantizerOutput]:
        """Images (B, C, S, S) in [0, 1] -> (reconstructions, the quantizer's output)."""
        self.check_images(x)
        out = self.quantizer(self.encoder(x))
        return self.decoder(out.quantized), out

    def reconstruction_loss(self, x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The data term the quantizer's method pairs with its loss: the MSE, or SQ-VAE's (D_x / 2) log MSE."""
        return self.quantizer.reconstruction_loss(x_hat, x)

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, S, S) in [0, 1] -> code indices (B, h, w) int64 (h = w = S / 4 for the paper's networks,
        S / f for VQGAN), with a trailing level axis (B, h, w, L) for a ``ResidualQuantizer``. Call it in eval
        mode: in training mode the quantizer's forward updates its codebook."""
        self.check_images(x)
        return self.quantizer(self.encoder(x), compute_loss=False).indices

    @torch.no_grad()
    def decode_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """Code indices as ``encode`` returns them, (B, h, w) or (B, h, w, L) -> images (B, C, S, S); in eval mode
        ``decode_indices(encode(x))`` equals ``model(x)[0]`` exactly."""
        grid = self._grid_side
        if grid is not None and tuple(indices.shape[1:3]) != (grid, grid):
            raise ValueError(f"code grids of {tuple(indices.shape[1:3])}, but the network makes {grid}x{grid} grids "
                             f"from {self.image_size}x{self.image_size} images")
        return self.decoder(self.quantizer.indices_to_latents(indices))

    @property
    def _grid_side(self) -> int | None:
        """The side of the code grid the network makes (None without a network config)."""
        return None if self.image_size is None else self.image_size // self.network_config.factor

    # ---- persistence (PretrainedMixin) -----------------------------------------------------------------
    def config_dict(self) -> dict:
        """The network's and the quantizer's configurations, as ``save_pretrained`` writes them."""
        if self.network_config is None:
            raise ValueError("save_pretrained needs a model built with from_config (or given a network_config)")
        return {"network": dataclasses.asdict(self.network_config), "quantizer": self.quantizer.config_dict()}

    @classmethod
    def _from_config_dict(cls, config: dict, version: int) -> "VQAutoencoder":
        unknown = sorted(set(config) - {"network", "quantizer"})
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}; a model config holds 'network' and "
                             "'quantizer'")
        for section in ("network", "quantizer"):
            if not isinstance(config.get(section), dict):
                raise ValueError(f"{section!r} must be an object of options, got {config.get(section)!r}")
        qcfg = dict(config["quantizer"])
        network = NetworkConfig(**config["network"])
        composite = COMPOSITES.get(qcfg.get("kind"))
        if composite is not None:  # a stack or a lookup: its parts rebuilt from their saved configs
            enc, dec = build_networks(network)
            quantizer = composite.from_config_dict(qcfg, lambda kind, options: _build_saved(kind, options, version))
            return cls(enc, quantizer, dec, network)
        kind, options = upgrade_quantizer_config(qcfg.pop("kind"), qcfg, version)
        # The construction order (networks, then quantizer) is from_config's: the same seed gives the same model.
        return cls.from_config(network, kind, **options)

    def _check_loaded(self, missing: list[str], unexpected: list[str], where: Path) -> None:
        """Buffers added by a later vqwae (solver state) keep their initial values, with a warning; missing
        parameters or unknown keys mean a different model."""
        buffers = {name for name, _ in self.named_buffers()}
        missing_params = [k for k in missing if k not in buffers]
        if missing_params or unexpected:
            raise ValueError(f"{where} does not match its {self.config_name}: missing {missing_params[:5]}, "
                             f"unexpected {unexpected[:5]}")
        if missing:
            warnings.warn(f"{where} predates buffers {missing}; they keep their initial values", stacklevel=3)


def _build_saved(kind: str, options: dict, version: int) -> Quantizer:
    """A quantizer from its saved config of format ``version`` (``upgrade_quantizer_config``)."""
    kind, options = upgrade_quantizer_config(kind, options, version)
    return build_quantizer(kind, **options)
