"""``diagnostics(quantizer, latents)``: how a VQ-WAE quantizer's transport and code usage stand on given latents (e.g.
a test set's encoder outputs) -- the measurements the benchmarks read, in one place.

    d = diagnostics(model.quantizer, model.encoder(x_test))
    d.tv_cells, d.tv_floor    # the transport cells' distance from pi, and what sampling alone gives
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from vqwae.extras import require
from vqwae.options import check_int
from vqwae.ot.histogram import code_histogram, perplexity_from_counts
from vqwae.ot.semidiscrete import SemiDiscreteSolver, semi_dual_value
from vqwae.ot.transport import latents_by_group
from vqwae.quantizers.pi import check_positions
from vqwae.quantizers.transport_map import tv_from_pi
from vqwae.quantizers.wasserstein_base import WassersteinBase

#: The exact W of the ratio is only solved up to this K: exact OT on N latents over-fits them when N is not >> K (its
#: optimum spreads each latent over K / N codes), and POT's simplex grows with N K.
EXACT_UP_TO = 2048


@dataclass(frozen=True)
class Diagnostics:
    """Measured on the latents given (averages over positions with one pi per position):

    * tv_cells: the total variation between pi and the mass of the transport map's cells (0: each code receives its
      share pi_k exactly); tv_floor: the same for as many codes drawn exactly from pi (the sampling floor: tv_cells
      within about 2x of it means the map is as close to pi as the sample can tell);
    * tv_nearest: the same for the nearest codes (what the decoder receives);
    * w_ratio: the solver's W estimate (the semi-dual at its potential, a lower bound) over exact OT's W (POT)
      between the latents (a random ``batch`` of them with a shared pi) and the pi-weighted codebook; None above
      K = EXACT_UP_TO and where the exact W is 0 (every latent on a code);
    * cells_disagree: the share of latents whose transport code is not their nearest code;
    * dead_codes: codes that are no latent's nearest code; perplexity: exp(entropy) of the nearest codes' usage.

    The transport fields are None for a quantizer without a transport map (the paper's exact, Sinkhorn and dual
    solvers keep no potential between steps)."""

    tv_cells: float | None
    tv_nearest: float
    tv_floor: float
    w_ratio: float | None
    cells_disagree: float | None
    dead_codes: int
    perplexity: float

    def to_dict(self) -> dict:
        """The fields as a plain dict (e.g. for a JSON log)."""
        return asdict(self)


def _exact_w(x: torch.Tensor, codebook: torch.Tensor, pi: torch.Tensor) -> float:
    """sum over groups of the exact W between the latents x (N, G, D) (weights 1/N) and the codebook weighted by pi."""
    ot = require("ot")  # POT (vqwae[paper]): only here (it costs ~1.7 s at import)

    n = x.shape[0]
    a = torch.full((n,), 1 / n, dtype=torch.float64)
    c = codebook.double().cpu()
    return sum(float(ot.emd2(a, pi[m].cpu(), torch.cdist(x[:, m].double().cpu(), c) ** 2, numItermax=10**7))
               for m in range(x.shape[1]))


@torch.no_grad()
def diagnostics(quantizer, latents: torch.Tensor, *, batch: int = 16384, exact: bool = True,
                generator: torch.Generator | None = None) -> Diagnostics:
    """Diagnostics of a ``WassersteinQuantizer`` or ``PaperWassersteinQuantizer`` on ``latents`` in its input layout
    ((B, D, *positions), or channel-last). ``batch``: the latents the exact W is solved on with a shared pi;
    ``exact=False`` skips that solve (w_ratio None); ``generator``: the draws of that batch and of the sampling
    floor."""
    if not isinstance(quantizer, WassersteinBase):
        raise TypeError(f"diagnostics takes a WassersteinQuantizer or PaperWassersteinQuantizer, got "
                        f"{type(quantizer).__name__} (its usage: vqwae.metrics.usage.CodeUsage)")
    check_int(batch, "diagnostics: batch", minimum=1)
    quantizer.check_input(latents)  # the layout, the dim, finite, not empty
    flat = quantizer.flatten(latents)  # (B, M, D)
    solver = quantizer.solver
    shared = quantizer.config.num_positions is None
    x = latents_by_group(flat, shared)  # (N, G, D)
    pi = quantizer.pi.double()  # (G, K)
    k, n = quantizer.num_codes, x.shape[0]
    nearest = quantizer.nearest(flat).reshape(n, -1)  # (N, G)
    draws = torch.multinomial(pi.float().cpu(), n, replacement=True, generator=generator).t()
    counts = code_histogram(nearest, k)
    tv_cells = w_ratio = disagree = None
    if isinstance(solver, SemiDiscreteSolver):
        check_positions(flat, quantizer.config.num_positions)
        assigned = solver.assign_batch(x, quantizer.embedding.detach())[1]
        tv_cells, disagree = tv_from_pi(assigned, pi), float((nearest != assigned).double().mean())
        if exact and k <= EXACT_UP_TO:
            rows = torch.randperm(n, generator=generator)[:batch] if shared else torch.arange(n)
            xs, a = x[rows.to(x.device)], assigned[rows.to(x.device)]
            h = semi_dual_value(xs, quantizer.embedding, a, solver.code_potential(), quantizer.log_pi())
            exact_w = _exact_w(xs, quantizer.embedding, pi)
            w_ratio = float(h) / exact_w if exact_w > 0 else None  # W = 0: every latent on a code, no ratio
    return Diagnostics(tv_cells=tv_cells, tv_nearest=tv_from_pi(nearest, pi),
                       tv_floor=tv_from_pi(draws.to(pi.device), pi),
                       w_ratio=w_ratio, cells_disagree=disagree, dead_codes=int((counts == 0).sum()),
                       perplexity=float(perplexity_from_counts(counts)))
