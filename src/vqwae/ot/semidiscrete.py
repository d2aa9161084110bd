"""Semi-discrete optimal transport with a warm-started code potential: the fast VQ-WAE solver.

For one latent position m, the WS term is W(mu^m, nu^m) between the encoder's latent distribution at that
position, mu^m = f_e^m # P_x (the population, of which the batch is a sample), and the weighted codebook
nu^m = sum_k pi^m_k delta_{c_k}. With nu discrete, the Kantorovich semi-dual (Genevay et al. 2016, Sec. 3.2;
the paper's Eq. (8) at eps -> 0, its potential phi(c_k) a free vector g_k instead of a network) is

    W(mu, nu) = max_g  h(g),     h(g) = E_{z ~ mu} min_k (||z - c_k||^2 - g_k)  +  sum_k pi_k g_k ,

a concave function of g whose gradient is pi - (the mass that the "power" assignment
a(z) = argmin_k ||z - c_k||^2 - g_k sends to each code). Every g gives a lower bound of W; at the
optimum the assignment is the optimal transport map (each code receives exactly pi_k of the mass).

The solver keeps g as a buffer across training steps (a warm start, one row per position) and per step:

1. assigns the batch's latents, a_i = argmin_k C_ik - g_k, sharing the (N, K) distance matrix with the
   nearest-code search that quantization needs anyway (one matmul, computed in bounded-memory chunks);
2. evaluates the batch estimate of h(g), differentiable w.r.t. the latents (2 (z_i - c_{a_i}) / N), the
   codebook (the assigned latents pull their codes) and pi (dh/dpi = g: the envelope theorem, as the exact
   solver's potential) -- a Wasserstein estimate, not a commitment loss: the assignment is the transport
   map to the weighted codebook, so every code receives its share pi_k of every position's latents;
3. takes one stochastic ascent step on g (Genevay et al.'s SGD on the semi-dual), with no host sync.

:class:`SemiDiscreteSolver` is that per-step procedure as a module: it holds g (``potential``, in units of
``scale``, an EMA of the quantization error, so that g follows the latents' scale as the encoder rescales them;
g = scale * potential in cost units) and exposes ``assign_batch`` for the shared nearest-code / transport assignment.

Per step this costs one extra pass over the (N, K) distance matrix (argmin of C - g) and O(N D) work:
no exponentials, no plan, no (G, N, K) tensor kept for the backward.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist

from vqwae.fused import fused_update
from vqwae.ot.catalog import CHUNK_ENTRIES
from vqwae.ot.cost import chunk_rows, min_rows
from vqwae.ot.histogram import code_histogram
from vqwae.ot.transport import Solver, Transport, latents_by_group

#: The weight of the potential's component shared by the positions (one pi per position; ``ascend_potential``).
POOLING = 4.0
#: The EMA decay of the cost scale (the batch's quantization error) that g is measured in.
SCALE_DECAY = 0.9


def default_potential_lr(shared: bool) -> float:
    """The ascent step on g when none is given. One pi per position: each step's potential ascent sees the B
    latents of a position for K codes (32 for 512 in the paper's setting), so a small step (0.003) averages its
    noise over more batches; 0.01 made MNIST's code usage swing by 150 between evaluations. One shared pi:
    B * M latents per step (2,048 for 8,192 codes), and the potential must move far before codes drawn from
    one batch spread over the data; 0.003 slowed that spread by half at K = 8,192. docs/lab/08.md#slower-potential.
    With one shared pi and fewer than 1/8 latents a code a step, ``sparse_step`` scales this down."""
    return 0.01 if shared else 0.003


#: One shared pi: from this many latents per code a step (r = n / K; 2,048 latents for K = 16,384) up, the ascent step
#: is default_potential_lr's; below, it shrinks as sqrt(r) (``sparse_step``).
DENSE_FROM = 0.125


def sparse_step(latents: int | torch.Tensor, num_codes: int) -> float | torch.Tensor:
    """The factor on a shared pi's ascent step for n = ``latents`` a step and K codes: 1 from r = n / K = 1/8 up,
    sqrt(8 r) below. A code's mass in one batch is a count of about r latents, so one step moves g_k by noise of
    step x K x sqrt(pi_k / n) = step / sqrt(r) (in the potential's units): the factor holds that noise at its level at
    r = 1/8. Measured (docs/lab/48-.md#large-k-potential-step): at K = 65,536 with 2,048 latents (r = 1/32) the full
    step left 87% of the codes unused after 500 steps; at r = 1/8 (K = 16,384) a smaller step did no better, and at
    r = 1/4 it slowed the codes' spread (docs/lab/08.md#slower-potential). ``latents`` may be a tensor (a mask's
    count: no host read)."""
    r = latents / max(num_codes, 1) / DENSE_FROM
    if isinstance(r, torch.Tensor):
        return r.clamp(0.0, 1.0).sqrt()
    return min(1.0, max(0.0, r)) ** 0.5


@torch.no_grad()
def assign(
    x: torch.Tensor,
    codebook: torch.Tensor,
    potential: torch.Tensor | None,
    chunk_entries: int = CHUNK_ENTRIES,
    keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Nearest codes and power-diagram (semi-discrete OT) assignments from ONE distance computation, with the
    batch's quantization error (:func:`assign_codes`, then :func:`mean_error`).

    Args:
        x: (B, G, D) latents; row (b, g) belongs to group g (a latent position; G = 1 for a shared pi).
        codebook: (K, D).
        potential: (G, K) code potentials g, or None to skip the OT assignment.
        chunk_entries: at most this many (latent, code) distances exist at once (whole batch rows per chunk).
        keep: (B, G) bool, the real latents; the others are assigned too but left out of the error.

    Returns:
        nearest (B, G) = argmin_k ||x - c_k||^2, assigned (B, G) = argmin_k ||x - c_k||^2 - g_k (None without
        a potential), and the mean squared distance of each (real) latent to its nearest code (a 0-dim tensor:
        the batch's quantization error, the natural cost scale for the potential's steps).
    """
    nearest, assigned, min_sum = assign_codes(x, codebook, potential, chunk_entries, keep)
    return nearest, assigned, mean_error(min_sum, x, keep)


@torch.no_grad()
def assign_codes(x: torch.Tensor, codebook: torch.Tensor, potential: torch.Tensor | None,
                 chunk_entries: int = CHUNK_ENTRIES, keep: torch.Tensor | None = None):
    """:func:`assign`'s codes without its error: nearest (B, G), assigned (B, G) or None, and ``min_sum``, the sum
    over the real latents of min_k ||c_k||^2 - 2 x.c_k (:func:`mean_error` makes it the error; the training step
    does that inside its state update, where it costs no launch of its own)."""
    b, g, d = x.shape
    k = codebook.shape[0]
    c2 = codebook.pow(2).sum(-1)  # (K,)
    ct = codebook.t()
    rows = chunk_rows(chunk_entries, g * k, x.device)  # batch rows per chunk
    if rows >= b:  # one chunk (K <= 256 on a CPU, any usual batch on a GPU): no output buffers, no copies
        dist = torch.addmm(c2, x.reshape(-1, d), ct, alpha=-2.0).view(b, g, k)
        vals, nearest = min_rows(dist)
        assigned = min_rows(dist.sub_(potential))[1] if potential is not None else None
        return nearest, assigned, _kept_sum(vals, keep)
    nearest = torch.empty(b, g, dtype=torch.long, device=x.device)
    assigned = torch.empty(b, g, dtype=torch.long, device=x.device) if potential is not None else None
    min_sum = x.new_zeros(())
    buffer = x.new_empty(rows * g, k)  # one chunk's distances, reused: fresh pages would fault in each chunk
    for start in range(0, b, rows):
        xs = x[start : start + rows]  # (b', G, D)
        out = buffer[: xs.shape[0] * g]
        # ||x||^2 - 2 x.c + ||c||^2; ||x||^2 is constant per row and left out of the argmins.
        dist = torch.addmm(c2, xs.reshape(-1, d), ct, alpha=-2.0, out=out).view(xs.shape[0], g, k)
        vals, idx = min_rows(dist)
        nearest[start : start + rows] = idx
        min_sum = min_sum + _kept_sum(vals, None if keep is None else keep[start : start + rows])
        if potential is not None:
            assigned[start : start + rows] = min_rows(dist.sub_(potential))[1]
    return nearest, assigned, min_sum


def _kept_sum(vals: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """The sum of ``vals`` (B, G) over the real latents (``keep`` (B, G) bool, or None for all)."""
    return vals.sum() if keep is None else (vals * keep.to(vals.dtype)).sum()


def mean_error(min_sum: torch.Tensor, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """The real latents' mean squared distance to their nearest code, from min_sum = the sum over them of
    min_k ||c_k||^2 - 2 x.c_k; 0 for no latents (a padding-only batch)."""
    if keep is None:
        return ((min_sum + x.pow(2).sum()) / max(x.shape[0] * x.shape[1], 1)).clamp_min(0.0)
    w = keep.to(x.dtype)
    return ((min_sum + (x.pow(2).sum(-1) * w).sum()) / w.sum().clamp_min(1.0)).clamp_min(0.0)


def semi_dual_value(
    x: torch.Tensor, codebook: torch.Tensor, assigned: torch.Tensor, potential: torch.Tensor, log_pi: torch.Tensor,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """sum over groups of the batch semi-dual  mean_i (||x_i - c_{a_i}||^2 - g_{a_i}) + sum_k pi_k g_k.

    x (B, G, D) and the codebook (K, D) get the transport map's gradient, log_pi (G, K) gets g through pi;
    ``assigned`` (B, G) and ``potential`` (G, K) are held fixed (the backward reads ``potential``: a tensor that
    is not stepped in place before it, such as ``SemiDiscreteSolver.code_potential()``'s). With ``keep`` (B, G)
    bool the mean runs over each group's real latents, and a group without any contributes 0 (no estimate, no
    gradient to its pi).
    """
    potential = potential.detach()
    c_a = torch.nn.functional.embedding(assigned, codebook)  # (B, G, D); embedding: a fast backward
    g_at = potential.gather(1, assigned.t()).t()  # (B, G): g_{a_i} of each latent's own group
    if keep is None:
        return semi_dual_from(x, c_a, g_at.sum(), potential, log_pi)
    weights, potential = semi_dual_weights(keep, potential)
    return semi_dual_from(x, c_a, g_at, potential, log_pi, weights)


def semi_dual_weights(keep: torch.Tensor, potential: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A mask's part of :func:`semi_dual_value`: each latent's weight in its group's mean, keep / (real latents of
    the group) (B, G), and the potential (G, K) of the groups without any real latent zeroed (no estimate, no
    gradient to their pi)."""
    w = keep.to(potential.dtype)
    count = w.sum(0)  # (G,) real latents per group
    return w / count.clamp_min(1.0), potential * (count > 0).unsqueeze(1)


def semi_dual_from(x: torch.Tensor, c_a: torch.Tensor, g_at: torch.Tensor, potential: torch.Tensor,
                   log_pi: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`semi_dual_value` from its pieces, all held fixed but x (B, G, D) and log_pi: the assigned codes c_a
    (B, G, D), the potential at the assignment, and the potential (G, K). Without a mask g_at is its sum,
    sum_i g_{a_i}, and every latent weighs 1/B; with one, g_at is per latent (B, G) and ``weights``, ``potential``
    come from :func:`semi_dual_weights`. With the fewest operators (a GPU step is bound by their launches): one
    fused squared error (without a mask) and one dot product."""
    pi_g = torch.dot(log_pi.exp().flatten(), potential.detach().flatten())
    if weights is None:
        sq = torch.nn.functional.mse_loss(x, c_a, reduction="sum")
        return (sq - g_at) / max(x.shape[0], 1) + pi_g
    return (((x - c_a).pow(2).sum(-1) - g_at) * weights).sum() + pi_g


def assignment_counts(assigned: torch.Tensor, groups: int, num_codes: int, dtype=torch.float32,
                      keep: torch.Tensor | None = None) -> torch.Tensor:
    """(G, K) number of each group's latents assigned to each code, for assignments (N, G); with ``keep`` (N, G)
    bool, of its real latents."""
    flat = assigned + torch.arange(groups, device=assigned.device) * num_codes  # group-major code ids
    return code_histogram(flat, groups * num_codes, dtype, keep=keep).view(groups, num_codes)


def assignment_mass(assigned: torch.Tensor, groups: int, num_codes: int, dtype=torch.float32,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """(G, K) fraction of each group's latents assigned to each code, for assignments (N, G); with ``keep``
    (N, G) bool, of its real latents (a group without any gets zeros)."""
    return _as_mass(assignment_counts(assigned, groups, num_codes, dtype, keep), assigned.shape[0], keep)


def _as_mass(counts: torch.Tensor, n: int, keep: torch.Tensor | None) -> torch.Tensor:
    """Counts (G, K) of n latents per group as fractions of each group's (real) latents."""
    if keep is None:
        return counts / max(n, 1)
    return counts / keep.sum(0, keepdim=True).t().to(counts.dtype).clamp_min(1.0)


@torch.no_grad()
def ascend_potential(
    potential: torch.Tensor, assigned: torch.Tensor | None, pi: torch.Tensor, step: torch.Tensor | float,
    pooling: float = 0.0, mass: torch.Tensor | None = None,
) -> torch.Tensor:
    """One stochastic ascent step on the semi-dual, in place:

        g^m += step * K * [(pi^m - mass^m) + pooling * mean_m' (pi^m' - mass^m')]

    where mass^m is the fraction of group m's latents assigned to each code. The pooled term is a shared
    component of the groups' potentials (g^m = shared + own), ascended with every group's samples: with
    B latents per group and K >> B codes each group's own gradient is very noisy, while positions of natural
    images have similar latent distributions. It is a preconditioning of the same concave objective (its
    gradient is the sum of the groups'), so the optimum is unchanged. ``step`` is in the potential's units
    (a tensor is fine: no host sync). The mean of each g^m is preserved. Returns mass (G, K).
    """
    g, k = potential.shape
    if mass is None:
        mass = assignment_mass(assigned, g, k, potential.dtype)
    grad = pi - mass
    if pooling and g > 1:
        grad = grad + pooling * grad.mean(0, keepdim=True)
    potential.add_(grad * (step * k))
    return mass


@torch.no_grad()
def fit_potential(
    x: torch.Tensor,
    codebook: torch.Tensor,
    pi: torch.Tensor,
    steps: int,
    lr: float,
    potential: torch.Tensor | None = None,
    batch: int | None = None,
    generator: torch.Generator | None = None,
    pooling: float = 0.0,
) -> torch.Tensor:
    """Solve the semi-discrete OT between samples x (N, G, D) and the weighted codebook by stochastic ascent
    on g (minibatches of ``batch`` samples, or all of them), with the step lr * (quantization error) and a
    1/sqrt(t) decay. In training the quantizer takes one such step per training step instead; this loop solves the
    map of a trained quantizer to convergence (``SemiDiscreteSolver.fit``), and serves the tests and benchmarks."""
    n, g, _ = x.shape
    pot = torch.zeros(g, codebook.shape[0], dtype=x.dtype, device=x.device) if potential is None else potential
    for t in range(steps):
        xb = x if batch is None else x[torch.randint(0, n, (batch,), generator=generator, device=x.device)]
        _, a, err = assign(xb, codebook, pot)
        ascend_potential(pot, a, pi, lr * err / (1 + t) ** 0.5, pooling)
    return pot


class Assignment(NamedTuple):
    """One search of a batch's latents x (N, G, D) (``SemiDiscreteSolver.assign_batch``)."""

    nearest: torch.Tensor  # (N, G) each latent's nearest code
    assigned: torch.Tensor  # (N, G) its code under the transport map argmin_k ||x - c_k||^2 - g_k
    min_sum: torch.Tensor  # () sum over the real latents of min_k ||c_k||^2 - 2 x.c_k (``mean_error`` makes the error)
    potential: torch.Tensor  # (G, K) the potential g the map used, in cost units


class SemiDiscreteSolver(Solver):
    """The semi-discrete semi-dual with a warm-started per-group potential g (see the module docstring). Its step
    size is ``default_potential_lr`` (with a shared pi, times ``sparse_step`` of the step's latents), its pooling
    POOLING and its scale's decay SCALE_DECAY; ``chunk_entries``, ``compile_update`` and ``graph_update`` are runtime
    settings (``vqwae.fused``), not saved."""

    def __init__(self, groups: int, num_codes: int, shared: bool, global_batch: bool = False):
        super().__init__(groups, num_codes, shared, global_batch)
        self.compile_update, self.graph_update = False, True  # the per-step update's runtime (vqwae.fused)
        self.chunk_entries = CHUNK_ENTRIES
        self.potential_lr = default_potential_lr(shared)
        self.register_buffer("potential", torch.zeros(groups, num_codes))  # g / scale
        self.register_buffer("scale", torch.zeros(()))  # EMA of the quantization error (0: not yet set)

    def code_potential(self) -> torch.Tensor:
        """g (G, K) in cost units (a new tensor)."""
        return self.scale * self.potential

    @torch.no_grad()
    def assign_batch(self, x: torch.Tensor, codebook: torch.Tensor, keep: torch.Tensor | None = None) -> Assignment:
        """The batch's codes under the current potential from ONE distance computation: x (N, G, D), the codebook
        (K, D), ``keep`` (N, G) bool the real latents."""
        g = self.code_potential()
        nearest, assigned, min_sum = assign_codes(x, codebook, g, self.chunk_entries, keep)
        return Assignment(nearest, assigned, min_sum, g)

    def forward(self, flat, codebook, log_pi, *, update: bool, assignment: Assignment | None = None) -> Transport:
        """As ``Solver.forward``: the batch's semi-dual at the current potential, then (``update``) one ascent step.
        ``assignment``: the batch's search (``assign_batch``) when the caller has made it already."""
        xg = latents_by_group(flat, self.shared)  # (N, G, D)
        x = xg.detach()
        _, assigned, min_sum, g = self.assign_batch(x, codebook.detach()) if assignment is None else assignment
        value = semi_dual_value(xg, codebook, assigned, g, log_pi)
        if update:
            self.update_state(x, assigned, None, min_sum, log_pi.detach())
        return Transport(value=value, assigned=assigned)

    @fused_update
    def update_state(self, x: torch.Tensor, assigned: torch.Tensor, keep: torch.Tensor | None, min_sum: torch.Tensor,
                     log_pi: torch.Tensor) -> torch.Tensor:
        """The training step's update of the solver's state from the batch's latents x (N, G, D) and assignment
        (N, G): one ascent step on the potential with the mass the assignment sends to each code (``_ascend``),
        with the batch's quantization error from ``min_sum`` (``assign_codes``). Returns the counts (G, K) of that
        assignment, this rank's (what the transport codebook's update needs)."""
        counts = assignment_counts(assigned, assigned.shape[1], self.num_codes, keep=keep)
        # latents per group: a host-known size, or without one (a mask) their count as a tensor
        count = assigned.shape[0] if keep is None else keep.sum() / keep.shape[1]
        self._ascend(_as_mass(counts, assigned.shape[0], keep), mean_error(min_sum, x, keep), log_pi.exp(),
                     count=count)
        return counts

    @torch.no_grad()
    def _ascend(self, mass: torch.Tensor, quant_err: torch.Tensor, pi: torch.Tensor, count: int | torch.Tensor) -> None:
        """One stochastic ascent step on the (normalised) potential, and the EMA of the cost scale, from this step's
        ``count`` latents per group (a tensor under a mask). Under DDP with per-rank batches the mass and the scale
        are averaged over ranks weighted by their latents (one small all-reduce), so a rank holding only padding takes
        part without moving anything; a step with no latents anywhere changes nothing."""
        err = quant_err.detach().reshape(()).to(pi.dtype)
        g, k = mass.shape
        step: torch.Tensor | float = self.potential_lr
        live = None
        if self.per_rank_batches():
            n = torch.as_tensor(count, dtype=mass.dtype, device=mass.device).reshape(1)
            total = torch.cat([mass.reshape(-1) * n, err.reshape(1) * n, n])
            dist.all_reduce(total)
            count = total[-1]  # every rank's latents: the step below is the global batch's
            n = count.clamp_min(1.0)
            mass, err, live = (total[:-2] / n).view(g, k), total[-2] / n, total[-1] > 0
            step = torch.where(live, step, 0.0)
        elif isinstance(count, torch.Tensor):  # the count of a mask's real latents: no host read
            live = count > 0
            step = torch.where(live, step, 0.0)
        elif count == 0:  # a host-known size: nothing to learn from
            return
        if self.shared:  # few latents a code: a smaller step (its noise held)
            step = step * sparse_step(count, k)
        ascend_potential(self.potential, None, pi, step, POOLING, mass=mass)
        # First step: the scale starts at this batch's error (no sync: torch.where on device).
        ema = self.scale * SCALE_DECAY + err * (1 - SCALE_DECAY)
        scale = torch.where(self.scale > 0, ema, err)
        keep = torch.isfinite(scale) if live is None else live & torch.isfinite(scale)
        self.scale.copy_(torch.where(keep, scale, self.scale))  # an overflowing batch (latents ~1e19) leaves it

    @torch.no_grad()
    def fit(self, x: torch.Tensor, codebook: torch.Tensor, pi: torch.Tensor, steps: int, batch: int,
            lr: float = 0.1, generator: torch.Generator | None = None) -> None:
        """Solve the OT between the latents x (N, G, D) and the codebook weighted by pi (G, K) with the codebook
        and the latents held still: ``steps`` ascent steps on g from its current value (:func:`fit_potential`,
        batches of ``batch`` rows, a step decaying from ``lr``: 10x training's, as the latents hold still; the
        positions' shared component pooled as in training), then keep the result. Training's one step per batch
        chases a codebook and an encoder that move; this converges the map they ended at
        (docs/lab/17-29.md#fit-steps)."""
        if not self.scale > 0:  # never stepped: the cost scale from these latents (a host read, once)
            self.scale.copy_(assign(x[:batch], codebook, None, self.chunk_entries)[2])
        g = fit_potential(x, codebook, pi, steps, lr, potential=self.code_potential(), batch=batch,
                          generator=generator, pooling=POOLING)
        self.potential.copy_(g / self.scale)

    @torch.no_grad()
    def reset(self) -> None:
        """Forget the potential and its step's scale (the codebook was re-initialised)."""
        self.potential.zero_()
        self.scale.zero_()
