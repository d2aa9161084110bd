"""The semi-discrete solver's transport map as a quantizer uses it: each latent's code under the map, and the map
solved to convergence on a set of latents once training has ended (both VQ-WAE quantizers, with that solver).

Training steps the potential once per batch while the encoder and the codebook move under it, so the map's cells lag
pi; held still, they converge (docs/lab/17-29.md#fit-steps)."""
from __future__ import annotations

import torch

from vqwae.ot.semidiscrete import SemiDiscreteSolver, assignment_mass
from vqwae.ot.transport import latents_by_group

#: fit_transport: latents per ascent step (all groups together; one pi per position: 1,024 rows of 64 positions)
FIT_LATENTS_PER_STEP = 1 << 16


def transport_map(solver: SemiDiscreteSolver, codebook: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """(B, M, D) latents -> (B, M) codes under the map argmin_k ||z - c_k||^2 - g_k (g: the solver's potential, per
    position or shared; a latent's cell needs no batch)."""
    x = latents_by_group(flat.detach(), solver.shared)
    return solver.assign_batch(x, codebook.detach())[1].view(flat.shape[:2])


def tv_from_pi(codes: torch.Tensor, pi: torch.Tensor) -> float:
    """The total variation between the histogram of ``codes`` (N, G) and pi (G, K), averaged over the groups (0: each
    code receives exactly its share)."""
    groups, num_codes = pi.shape
    mass = assignment_mass(codes, groups, num_codes, pi.dtype)
    return float(0.5 * (mass - pi).abs().sum(-1).mean())


def cells_tv(solver: SemiDiscreteSolver, codebook: torch.Tensor, pi: torch.Tensor, flat: torch.Tensor) -> float:
    """:func:`tv_from_pi` of the map's cells on the latents ``flat`` (B, M, D)."""
    cells = transport_map(solver, codebook, flat)  # (B, M)
    return tv_from_pi(cells.reshape(-1, 1) if solver.shared else cells, pi)


@torch.no_grad()
def fit_transport(solver: SemiDiscreteSolver, codebook: torch.Tensor, pi: torch.Tensor, flat: torch.Tensor,
                  steps: int, generator: torch.Generator | None = None) -> dict:
    """Solve the transport map on the latents ``flat`` (B, M, D) with the codebook and pi held: ``steps`` ascent steps
    on the potential, warm-started from training's, on batches of about FIT_LATENTS_PER_STEP latents. Returns the
    cells' total variation from pi before and after (``tv_before``, ``tv_after``), the steps and the latents."""
    x = latents_by_group(flat, solver.shared)  # (N, G, D)
    before = cells_tv(solver, codebook, pi, flat)
    batch = max(1, min(x.shape[0], FIT_LATENTS_PER_STEP // x.shape[1]))
    solver.fit(x, codebook.detach(), pi, steps, batch, generator=generator)
    return dict(tv_before=before, tv_after=cells_tv(solver, codebook, pi, flat), steps=steps,
                latents=x.shape[0] * x.shape[1])
