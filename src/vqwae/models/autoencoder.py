"""``VQAutoencoder``: encoder -> quantizer -> decoder, with diffusers-style save/load.

    model = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=512)
    x_hat, out = model(x)               # out: QuantizerOutput
    model.save_pretrained("runs/m1")    # model.safetensors + model_config.json
    same = VQAutoencoder.from_pretrained("runs/m1")
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from vqwae.models.networks import NetworkConfig, build_networks
from vqwae.quantizers import Quantizer, QuantizerOutput, build_quantizer
from vqwae.quantizers.wasserstein import SAVED_BEFORE as WASSERSTEIN_SAVED_BEFORE

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "model_config.json"


class VQAutoencoder(nn.Module):
    def __init__(self, encoder: nn.Module, quantizer: Quantizer, decoder: nn.Module, network_config: NetworkConfig | None = None):
        super().__init__()
        self.encoder, self.quantizer, self.decoder = encoder, quantizer, decoder
        self.network_config = network_config  # needed only for save_pretrained

    @classmethod
    def from_config(cls, network: NetworkConfig, quantizer_kind: str, **quantizer_kwargs) -> "VQAutoencoder":
        """The paper's networks with a quantizer from the registry; the quantizer's dim is the latent dim."""
        quantizer_kwargs.setdefault("dim", network.latent_dim)
        if quantizer_kwargs["dim"] != network.latent_dim:
            raise ValueError(f"quantizer dim {quantizer_kwargs['dim']} != network latent_dim {network.latent_dim}")
        enc, dec = build_networks(network)
        return cls(enc, build_quantizer(quantizer_kind, **quantizer_kwargs), dec, network)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, QuantizerOutput]:
        out = self.quantizer(self.encoder(x))
        return self.decoder(out.quantized), out

    def reconstruction_loss(self, x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.quantizer.reconstruction_loss(x_hat, x)

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, S, S) -> code indices (B, h, w)."""
        return self.quantizer(self.encoder(x), compute_loss=False).indices

    @torch.no_grad()
    def decode_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """Code indices (B, h, w) -> images (B, C, S, S)."""
        return self.decoder(self.quantizer.indices_to_latents(indices))

    # ---- persistence (safetensors weights + JSON config) -----------------------------------------------
    def config_dict(self) -> dict:
        if self.network_config is None:
            raise ValueError("save_pretrained needs a model built with from_config (or given a network_config)")
        return {"network": dataclasses.asdict(self.network_config), "quantizer": self.quantizer.config_dict()}

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write model.safetensors and model_config.json atomically (temp files, then rename)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        # Tied weights (the authors' shared residual layers) appear under several names; safetensors
        # refuses shared storage, so store clones.
        state = {k: v.clone() for k, v in state.items()}
        tmp_w, tmp_c = d / (WEIGHTS_NAME + ".tmp"), d / (CONFIG_NAME + ".tmp")
        save_file(state, str(tmp_w), metadata={"format": "pt"})
        tmp_c.write_text(json.dumps(self.config_dict(), indent=2))
        os.replace(tmp_w, d / WEIGHTS_NAME)
        os.replace(tmp_c, d / CONFIG_NAME)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, map_location: str | torch.device = "cpu") -> "VQAutoencoder":
        d = Path(directory)
        cfg_path, w_path = d / CONFIG_NAME, d / WEIGHTS_NAME
        for p in (cfg_path, w_path):
            if not p.is_file():
                raise FileNotFoundError(f"{p} not found: expected a folder written by save_pretrained (or a vqwae run)")
        try:
            cfg = json.loads(cfg_path.read_text())
            network = NetworkConfig(**cfg["network"])
            qcfg = dict(cfg["quantizer"])
            kind = qcfg.pop("kind")
            if kind == "wasserstein":  # options the file predates: the behaviour it was trained with
                qcfg = {**WASSERSTEIN_SAVED_BEFORE, **qcfg}
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{cfg_path} is not a valid vqwae model config: {e}") from e
        model = cls.from_config(network, kind, **qcfg)
        try:
            state = load_file(str(w_path), device=str(map_location))
        except Exception as e:  # safetensors raises its own error types for truncated/corrupt files
            raise ValueError(f"{w_path} could not be read (corrupt or truncated?): {e}") from e
        missing, unexpected = model.load_state_dict(state, strict=False)
        # Buffers added by a later vqwae (solver state such as the semidiscrete potential's scale) keep their
        # initial values, with a warning; missing parameters or unknown keys mean a different model.
        buffers = {name for name, _ in model.named_buffers()}
        missing_params = [k for k in missing if k not in buffers]
        if missing_params or unexpected:
            raise ValueError(f"{w_path} does not match {cfg_path}: missing {missing_params[:5]}, unexpected {unexpected[:5]}")
        if missing:
            warnings.warn(f"{w_path} predates buffers {missing}; they keep their initial values", stacklevel=2)
        return model
