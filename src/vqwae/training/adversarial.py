"""VQGAN's training objective (Esser et al. 2021, Sec. 3.2): perceptual reconstruction plus a patch adversary.

With ``--arch vqgan`` the reconstruction term of a run is this objective instead of the MSE; the quantizer's
own terms (VQ-VAE's beta commitment, VQ-WAE's WS + KL, SQ-VAE's) are added to it unchanged, which is how
taming-transformers adds its codebook loss. Per step, with x, x_hat the images and D the discriminator:

    generator:      L = nll + d_weight * disc_factor * g + (quantizer terms)
                    nll = |x - x_hat|_1 + perceptual_weight * LPIPS-VGG(x, x_hat)        (L_rec, Eq. 4)
                    g   = -mean D(x_hat)                                                 (hinge generator loss)
                    d_weight = disc_weight * lambda,  lambda = ||grad_L nll|| / (||grad_L g|| + 1e-4),
                    clamped to [0, 1e4] and detached; L = the decoder's last layer       (Eq. 7)
    discriminator:  disc = disc_factor * 0.5 * (mean relu(1 - D(x)) + mean relu(1 + D(x_hat)))

disc_factor is 0 before ``disc_start`` steps and 1 from then on; before it the adversary is neither run nor
trained (taming computes and discards it). L1 is taken on images in [-1, 1], taming's scale, so the weights
mean what they mean there. Both optimisers are Adam(lr, betas=(0.5, 0.9)).
"""
from __future__ import annotations

import torch
from torch import nn

from vqwae.training.adversarial_options import AdversarialOptions

BETAS = (0.5, 0.9)  # taming's Adam betas, for the autoencoder and the discriminator alike


def adaptive_weight(nll: torch.Tensor, g: torch.Tensor, last_layer: torch.Tensor, disc_weight: float) -> torch.Tensor:
    """d_weight = disc_weight * ||grad_L nll|| / (||grad_L g|| + 1e-4), clamped to [0, 1e4], detached (Eq. 7).

    Both gradients are taken at the decoder's last layer L only (``autograd.grad`` with retain_graph), so
    nothing is accumulated into ``.grad`` and the backward of the full loss follows as usual."""
    grad_nll, = torch.autograd.grad(nll, last_layer, retain_graph=True)
    grad_g, = torch.autograd.grad(g, last_layer, retain_graph=True)
    lam = grad_nll.norm() / (grad_g.norm() + 1e-4)
    return (lam.clamp(0.0, 1e4) * disc_weight).detach()


class AdversarialLoss(nn.Module):
    """The discriminator, its optimiser and the frozen LPIPS-VGG network of one VQGAN run.

    ``generator_terms`` gives the autoencoder's objective (its backward and step stay with the trainer);
    ``discriminator_step`` trains the discriminator on the same batch. ``state_dict`` holds what a resume
    needs (the discriminator, its BatchNorm statistics and its optimiser)."""

    def __init__(self, opts: AdversarialOptions, in_channels: int, perceptual: nn.Module | None, lr: float):
        super().__init__()
        if opts.perceptual_weight > 0 and perceptual is None:
            raise ValueError("perceptual_weight > 0 needs an LPIPS-VGG network")
        self.opts = opts
        self.perceptual = perceptual  # frozen, always in eval mode; gradients flow to its inputs
        from vqwae.models.discriminator import PatchDiscriminator  # only VQGAN runs need it

        self.discriminator = PatchDiscriminator(in_channels, opts.disc_channels, opts.disc_layers)
        self.optimizer = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=BETAS)
        self._ddp: nn.Module | None = None

    def wrap_ddp(self, wrap) -> None:
        """Under DDP the discriminator's gradients are averaged across ranks and rank 0's BatchNorm statistics
        are broadcast in each of its forwards, so every rank holds the same discriminator."""
        self._ddp = wrap(self.discriminator)

    def active(self, step: int) -> bool:
        """Whether the adversary is on at this (0-based) optimiser step: disc_factor of the docstring."""
        return step >= self.opts.disc_start and (self.opts.disc_weight > 0)

    def generator_terms(self, x: torch.Tensor, x_hat: torch.Tensor, last_layer: torch.Tensor,
                        step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(the autoencoder's reconstruction + adversarial loss, its named terms). x, x_hat in [0, 1]."""
        l1 = (x - x_hat).abs().mean() * 2  # on [-1, 1] images
        terms = {"l1": l1}
        nll = l1
        if self.opts.perceptual_weight > 0:
            perceptual = self.perceptual(x_hat, x, normalize=True).mean()
            terms["perceptual"] = perceptual
            nll = nll + self.opts.perceptual_weight * perceptual
        terms["nll"] = nll
        if not self.active(step):
            return nll, terms
        # The generator sees the discriminator without training it: its parameters take no gradient here.
        self.discriminator.requires_grad_(False)
        try:
            g = -self.discriminator(x_hat).mean()  # hinge generator loss
        finally:
            self.discriminator.requires_grad_(True)
        d_weight = adaptive_weight(nll, g, last_layer, self.opts.disc_weight)
        terms.update(g=g, d_weight=d_weight)
        return nll + d_weight * g, terms

    def discriminator_step(self, x: torch.Tensor, x_hat: torch.Tensor, step: int) -> dict[str, torch.Tensor]:
        """One Adam step of the discriminator on real x and detached reconstructions; its named terms."""
        if not self.active(step):
            return {}
        net = self._ddp if self._ddp is not None else self.discriminator
        # Two forwards, as taming: each BatchNorm batch is all real or all fake.
        real, fake = net(x), net(x_hat.detach())
        disc = 0.5 * (torch.relu(1 - real).mean() + torch.relu(1 + fake).mean())  # hinge
        self.optimizer.zero_grad(set_to_none=True)
        disc.backward()
        self.optimizer.step()
        return {"disc": disc.detach(), "logits_real": real.detach().mean(), "logits_fake": fake.detach().mean()}

    def state_dict(self, *args, **kwargs) -> dict:  # noqa: D102 - what resume needs, nothing of LPIPS
        return {"discriminator": self.discriminator.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict, strict: bool = True):  # noqa: D102
        from vqwae.models import load_checked

        load_checked(self.discriminator, state["discriminator"], "the run's discriminator state", strict=strict)
        self.optimizer.load_state_dict(state["optimizer"])
