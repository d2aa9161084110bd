"""The transport map's fit once training has ended (the ``fit_steps`` option): the saved weights' map solved on the
training latents with the network held still (``WassersteinQuantizer.fit_transport``), which training's one potential
step per batch never reaches (docs/lab/17-29.md#fit-steps)."""
from __future__ import annotations

from pathlib import Path

import torch

from vqwae.models import VQAutoencoder
from vqwae.training import folder
from vqwae.training.config import TrainConfig

#: fit_steps: the training images whose latents the transport map is solved on, at most (and at most 2^27 latent
#: values, 512 MiB of float32, for large latent grids)
FIT_IMAGES = 20_000
FIT_LATENT_FLOATS = 1 << 27


@torch.no_grad()
def fit_latents(model: VQAutoencoder, images, device: torch.device | str = "cpu") -> tuple[torch.Tensor, int]:
    """The encoder's latents of the first images of ``images`` (a data set of (image, ...) items) that fit_steps
    solves the transport map on: at most FIT_IMAGES images and FIT_LATENT_FLOATS latent values. Returns (the
    latents in the quantizer's input layout, how many images)."""
    per_image = model.encoder(images[0][0][None].to(device)).numel()  # D x M latent values of one image
    n = max(1, min(len(images), FIT_IMAGES, FIT_LATENT_FLOATS // per_image))
    z = torch.cat([model.encoder(torch.stack([images[i][0] for i in range(s, min(s + 256, n))]).to(device))
                   for s in range(0, n, 256)])
    return z, n


@torch.no_grad()
def fit_saved_weights(cfg: TrainConfig, run_dir: Path, images, device: torch.device, step: int) -> None:
    """With ``cfg``'s fit_steps, solve the saved (best) weights' transport map on the first training ``images``' latents
    and save the weights again. transport_fit.json names the weights it wrote, so a resumed or re-run command does not
    fit twice (and fits again when training saved new weights); a kill before the save leaves the weights as trained."""
    steps = cfg.transport_fit_steps
    if not folder.fit_pending(run_dir, steps):
        return
    model = VQAutoencoder.from_pretrained(run_dir).to(device)
    model.quantizer.set_runtime(**cfg.quantizer_runtime)
    z, n = fit_latents(model, images, device)
    result = model.quantizer.fit_transport(z, steps, generator=torch.Generator(device).manual_seed(cfg.run.seed))
    model.save_pretrained(run_dir)
    folder.write_transport_fit(run_dir, dict(images=n, step=step, **result,
                                             weights_fingerprint=folder.model_fingerprint(run_dir)))
    print(f"transport map fitted on {n} training images ({steps} steps): the cells' total variation from pi "
          f"{result['tv_before']:.3f} -> {result['tv_after']:.3f}", flush=True)
