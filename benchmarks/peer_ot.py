"""Two optimal-transport vector quantizers of the field that ship no pip package, written for the host zoo
(``hosts.py``) from their papers and their authors' published settings (no code taken from either repository).

* ``OptVQ``: Zhang, Zheng, Zhou and Lu, "Preventing Local Pitfalls in Vector Quantization via Optimal Transport"
  (arXiv 2412.15195, 2024; authors' code github.com/zbr17/OptVQ). The nearest-code search is replaced by an
  entropic optimal-transport assignment of the batch's latents to the codes: Sinkhorn-Knopp on the (latent, code)
  distance matrix with uniform marginals (each latent 1/N, each code 1/K), after the paper's normalisation of that
  matrix, which makes the entropic regularisation independent of the latents' scale (the exact form is the
  authors' ``normalize_mode: all``). Each latent takes the code of its largest plan entry; the output is
  straight-through; the codebook (a free table through a learned linear map) is trained by gradient with the VQ
  codebook and commitment losses.
* ``WassersteinVQ``: Fang, Guo, Chen, Zhang, Xia, Song, Liu, Wang, Yang, Yuan and Sun, "Enhancing Vector
  Quantization with Distributional Matching: A Theoretical and Empirical Study" (arXiv 2506.15078, 2025; authors'
  code github.com/VQ-Research/Wasserstein-VQ). Nearest-code quantization (straight-through) with the usual VQ
  losses, plus gamma times the closed-form 2-Wasserstein distance between a Gaussian fitted to a queue of recent
  latents and one fitted to the codebook (full covariances, both scaled by the latents' largest per-dimension
  standard deviation); the matching term's gradient goes to the codebook only.

Both take channel-last tokens (B, N, D) and an optional (B, N) bool mask of real tokens, and return
``(quantized (B, N, D), indices (B, N) long, loss scalar)``; padding gets no transport mass, no queue weight and
no loss. Neither forward makes a temporary larger than the (N, K) distance matrix (Wasserstein VQ keeps its
queue, queue_size x D, as a buffer), nor synchronises with the host.
"""
from __future__ import annotations

import math

import torch
from torch import nn

def _flatten(z: torch.Tensor, mask: torch.Tensor | None):
    """(B, N, D) tokens and an optional (B, N) mask -> (B*N, D) latents and (B*N,) float weights (1 real, 0 pad)."""
    if z.dim() != 3:
        raise ValueError(f"expected channel-last tokens (B, N, D), got shape {tuple(z.shape)}")
    flat = z.reshape(-1, z.shape[-1])
    if mask is None:
        return flat, torch.ones(flat.shape[0], dtype=z.dtype, device=z.device)
    if mask.shape != z.shape[:2]:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match the tokens' {tuple(z.shape[:2])}")
    return flat, mask.reshape(-1).to(z.dtype)


def _vq_term(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The mean squared error between rows of ``a`` and ``b`` over the real rows (weight ``w``) and dimensions."""
    return (w[:, None] * (a - b).pow(2)).sum() / (w.sum().clamp_min(1.0) * a.shape[-1])


def _sq_distances(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """(N, K) squared Euclidean distances, via the matrix product (no (N, K, D) broadcast)."""
    return (x.pow(2).sum(-1, keepdim=True) - 2.0 * x @ c.t() + c.pow(2).sum(-1)).clamp_min_(0.0)


# ------------------------------------------------------------------------------------------------------ OptVQ
def normalise_costs(cost: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """OptVQ's normalisation of the (N, K) distance matrix (the authors' ``normalize_mode: all``): subtract
    the mean of all its entries, divide by their standard deviation, then shift so that the smallest entry is 0.
    The statistics are over the real rows only (``w`` > 0), so padding changes nothing. In place (``cost`` is a
    temporary: no second (N, K) matrix)."""
    count = (w.sum() * cost.shape[1]).clamp_min(2.0)
    cost.sub_((cost.sum(1) * w).sum() / count)
    std = ((torch.linalg.vector_norm(cost, dim=1).square() * w).sum() / (count - 1)).sqrt()
    cost.div_(std + 1e-6)
    return cost.sub_(cost.amin(1).masked_fill(w <= 0, math.inf).min())


def sinkhorn(cost: torch.Tensor, w: torch.Tensor, epsilon: float, n_iters: int):
    """The entropic transport plan between the real latents (rows, mass 1/N_real each; padding none) and the K
    codes (columns, mass 1/K each) for the kernel exp(-epsilon * cost), by Sinkhorn-Knopp's scalings for a fixed
    ``n_iters``, alternating as the authors do, first the codes' marginals then the latents' (so the latents'
    marginals are exact and the codes' approximate). ``epsilon`` multiplies the normalised cost (the authors'
    code, ``exp(-cost * epsilon)``; as the weight of an entropy term it would be 1 / epsilon): larger is closer to
    the unregularised transport.

    Returns ``(kernel, u, v)``, the plan being ``u[:, None] * kernel * v[None, :]``. As in the authors' code the
    iterations are on the kernel itself, matrix-vector products (a log-domain form costs two (N, K) logsumexps an
    iteration: 3.4 s a step against 1.1 at K = 16,384); each row of the kernel is first divided by its largest
    entry (a shift of the cost by its row minimum, which the start of the row scaling ``u`` gives back: the plan is
    unchanged), so no latent's row underflows (where the authors' row would be all zero, the first update of ``u``
    finds it).
    Overwrites ``cost`` (a temporary) with the kernel; padding rows are zero."""
    real = w > 0
    k = cost.shape[1]
    a = w / w.sum().clamp_min(1.0)  # 1/N_real on real rows, 0 on padding
    row_min = cost.amin(1)
    kernel = cost.sub_(row_min[:, None]).mul_(-epsilon).exp_().mul_(real[:, None].to(cost.dtype))
    u = torch.exp(-epsilon * row_min) * real  # the start u = 1 of the unshifted kernel (its rows scaled back)
    v = torch.ones(k, dtype=cost.dtype, device=cost.device)
    tiny = torch.finfo(cost.dtype).tiny
    for _ in range(n_iters):
        v = (1.0 / k) / (kernel.t() @ u).clamp_min(tiny)
        u = a / (kernel @ v).clamp_min(tiny)
    return kernel, u, v


class OptVQ(nn.Module):
    """OptVQ (Zhang et al. 2024, arXiv 2412.15195): the optimal-transport assignment of a batch's latents to the
    codes, solved by Sinkhorn-Knopp on the normalised distance matrix.

    The defaults are the authors' published configurations (``configs/*/optvq.yaml``): ``epsilon = 10``,
    ``n_iters = 5``, the ``all`` normalisation, the hard assignment (``use_prob: false``: the argmax of each
    latent's plan row), ``beta = 0.25`` and the L2 VQ losses, the codebook through a learned linear map
    (``use_proj: true``: codes = W e + b, e a free N(0, 1) table, W drawn N(0, 1/d)). The loss follows the authors'
    (taming-VQGAN) convention: ``mean((z - sg[q])^2) + beta * mean((q - sg[z])^2)``, i.e. the commitment term at
    weight 1 and the codebook term at weight beta. The configs use 4 heads (each latent split into ``num_head``
    sub-vectors quantized against one shared codebook of dimension d / num_head, K^heads combinations); the default
    here is one head, as the authors' README example, so that ``num_codes`` is the number of codes a token can
    take. With heads the indices are (B, N, num_head). The Euclidean (not squared) distance is the cost.
    The assignment is the transport's in evaluation too (as the authors' forward).
    """

    def __init__(self, num_codes: int, dim: int, *, epsilon: float = 10.0, n_iters: int = 5, beta: float = 0.25,
                 use_proj: bool = True, num_head: int = 1):
        super().__init__()
        if dim % num_head:
            raise ValueError(f"dim {dim} is not divisible by num_head {num_head}")
        self.num_codes, self.dim, self.num_head = num_codes, dim, num_head
        self.code_dim = dim // num_head
        self.epsilon, self.n_iters, self.beta = float(epsilon), int(n_iters), float(beta)
        self.embedding = nn.Parameter(torch.randn(num_codes, self.code_dim))
        self.proj = nn.Linear(self.code_dim, self.code_dim) if use_proj else None
        if self.proj is not None:
            nn.init.normal_(self.proj.weight, std=self.code_dim ** -0.5)

    @property
    def codebook(self) -> torch.Tensor:
        """The codes (K, d / num_head): the table through the linear map when ``use_proj``."""
        return self.embedding if self.proj is None else self.proj(self.embedding)

    def _split(self, z: torch.Tensor, mask: torch.Tensor | None):
        """(B, N, D) -> (B*N*heads, d) sub-vectors and their weights."""
        b, n, _ = z.shape
        flat, w = _flatten(z, mask)
        if self.num_head > 1:
            flat, w = flat.reshape(b * n * self.num_head, self.code_dim), w.repeat_interleave(self.num_head)
        return flat, w

    @torch.no_grad()
    def plan(self, z: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The transport plan (B*N*heads, K) of these tokens (rows of padding are zero; each real row sums to
        1/N_real, each column to about 1/K)."""
        flat, w = self._split(z, mask)
        kernel, u, v = self._sinkhorn(flat, w, self.codebook)
        return kernel.mul_(v).mul_(u[:, None])

    def _sinkhorn(self, flat, w, codes):
        cost = _sq_distances(flat.detach(), codes.detach()).sqrt_()
        return sinkhorn(normalise_costs(cost, w), w, self.epsilon, self.n_iters)

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None):
        flat, w = self._split(z, mask)
        codes = self.codebook
        with torch.no_grad():
            kernel, _, v = self._sinkhorn(flat, w, codes)
            idx = kernel.mul_(v).argmax(dim=1)  # each row's largest plan entry (u scales the row)
        q = codes[idx]
        loss = _vq_term(flat, q.detach(), w) + self.beta * _vq_term(q, flat.detach(), w)
        q = flat + (q - flat).detach()  # straight-through
        shape = z.shape[:2] + ((self.num_head,) if self.num_head > 1 else ())
        return q.reshape(z.shape), idx.reshape(shape), loss


# ------------------------------------------------------------------------------------------- Wasserstein VQ
def _sqrtm_psd(cov: torch.Tensor) -> torch.Tensor:
    """The symmetric square root of a symmetric positive semi-definite matrix (by its eigendecomposition)."""
    evals, evecs = torch.linalg.eigh(cov)
    return (evecs * evals.clamp_min(0.0).sqrt()) @ evecs.t()


def gaussian_w2_squared(mean_a: torch.Tensor, cov_a: torch.Tensor, mean_b: torch.Tensor,
                        cov_b: torch.Tensor) -> torch.Tensor:
    """The squared 2-Wasserstein distance between N(mean_a, cov_a) and N(mean_b, cov_b), in closed form:
    ||mean_a - mean_b||^2 + tr(cov_a + cov_b - 2 (cov_a^1/2 cov_b cov_a^1/2)^1/2) (the paper's Gaussian form of
    its distributional-matching objective). Differentiable in ``mean_b`` and ``cov_b``; the root of ``cov_a`` is
    taken without gradient (in WassersteinVQ side a is the latents', which get no gradient from it)."""
    root_a = _sqrtm_psd(cov_a.detach().double()).to(cov_b.dtype)
    cross = root_a @ cov_b @ root_a
    cross = 0.5 * (cross + cross.t())  # symmetric up to rounding
    roots = (torch.linalg.eigvalsh(cross).clamp_min(0.0) + 1e-12).sqrt()
    trace = torch.diagonal(cov_a).sum() + torch.diagonal(cov_b).sum() - 2.0 * roots.sum()
    return (mean_a - mean_b).pow(2).sum() + trace.clamp_min(0.0)


def _moments(sum_w: torch.Tensor, sum_z: torch.Tensor, sum_zz: torch.Tensor):
    """Mean and unbiased covariance from the weighted sums (sum w, sum w z, sum w z z^T)."""
    mean = sum_z / sum_w.clamp_min(1e-12)
    cov = (sum_zz - sum_w * torch.outer(mean, mean)) / (sum_w - 1.0).clamp_min(1.0)
    return mean, 0.5 * (cov + cov.t())


class WassersteinVQ(nn.Module):
    """Wasserstein VQ (Fang et al. 2025, arXiv 2506.15078): nearest-code VQ plus a distributional-matching term,
    gamma times the 2-Wasserstein distance between Gaussians fitted to a queue of recent latents and to the
    codebook.

    The defaults are the authors' VQ-VAE settings (their ``code/VQVAE``: the scripts
    ``scripts/*/train_wasserstein_quantizer_*.sh`` and the quantizer they train): a queue of 65,536 latents, the
    batch's latents entering it before the term is computed; full covariances (unbiased); both sides divided by the
    queue's largest per-dimension standard deviation (no gradient through it); the term is the distance itself,
    sqrt(W2^2), not its square; ``gamma = 0.5``; the loss ``beta * mean((z - sg[q])^2) + alpha * mean((q -
    sg[z])^2) + gamma * W`` with ``beta = 0.1`` (commitment) and ``alpha = 1`` (codebook); the codebook drawn
    N(0, 0.01^2). The matching gradient reaches the codebook only (the queue and its statistics carry none).
    The authors also give the codebook its own Adam learning rate, 0.02 and constant (the network's 5e-5 with warm-up
    and cosine decay; their ``train_vqvae.py``): ``codebook_lr``, which ``hosts.py`` gives the codebook's parameter
    group (the network keeps the host's optimiser and rate).

    The queue is a ring buffer of latents and weights (1 real, 0 padding, 0 never written: unlike the authors'
    queue, which starts as small random vectors, the unwritten slots count for nothing) with running float64
    sums of w, w z and w z z^T, so a step costs O(batch d^2) rather than O(queue d^2). It is fed in training mode
    only; an evaluation before any training step uses the batch's own latents. The write position is host-side
    (not in the state dict).
    """

    #: the authors' learning rate of the codebook (Adam), whatever the network's
    codebook_lr = 0.02

    def __init__(self, num_codes: int, dim: int, *, queue_size: int = 65536, gamma: float = 0.5,
                 beta: float = 0.1, alpha: float = 1.0, init_std: float = 0.01):
        super().__init__()
        self.num_codes, self.dim, self.queue_size = num_codes, dim, int(queue_size)
        self.gamma, self.beta, self.alpha = float(gamma), float(beta), float(alpha)
        self.embedding = nn.Parameter(torch.randn(num_codes, dim) * init_std)
        self.register_buffer("queue", torch.zeros(self.queue_size, dim))
        self.register_buffer("queue_weight", torch.zeros(self.queue_size))
        self.register_buffer("sum_w", torch.zeros((), dtype=torch.float64))
        self.register_buffer("sum_z", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("sum_zz", torch.zeros(dim, dim, dtype=torch.float64))
        self._ptr = 0  # next slot to write (host-side: no synchronisation)
        self._written = 0  # slots ever written

    @property
    def codebook(self) -> torch.Tensor:
        return self.embedding

    @torch.no_grad()
    def _enqueue(self, flat: torch.Tensor, w: torch.Tensor) -> None:
        """Write the batch's latents (and weights) over the oldest slots, updating the running sums."""
        if flat.shape[0] > self.queue_size:
            flat, w = flat[-self.queue_size:], w[-self.queue_size:]
        n = flat.shape[0]
        slots = (self._ptr + torch.arange(n, device=flat.device)) % self.queue_size
        old_z, old_w = self.queue[slots].double(), self.queue_weight[slots].double()
        new_z, new_w = flat.detach().double(), w.double()
        self.sum_w += new_w.sum() - old_w.sum()
        self.sum_z += (new_w[:, None] * new_z).sum(0) - (old_w[:, None] * old_z).sum(0)
        self.sum_zz += (new_z.t() @ (new_w[:, None] * new_z)) - (old_z.t() @ (old_w[:, None] * old_z))
        self.queue[slots], self.queue_weight[slots] = flat.detach(), w
        self._ptr, self._written = (self._ptr + n) % self.queue_size, min(self._written + n, self.queue_size)

    def latent_moments(self, flat: torch.Tensor | None = None, w: torch.Tensor | None = None):
        """The queue's mean and covariance (float64), or those of ``flat`` (weights ``w``) when given."""
        if flat is not None:
            z, ww = flat.detach().double(), w.double()
            return _moments(ww.sum(), (ww[:, None] * z).sum(0), z.t() @ (ww[:, None] * z))
        return _moments(self.sum_w, self.sum_z, self.sum_zz)

    def wasserstein(self, mean_z: torch.Tensor, cov_z: torch.Tensor) -> torch.Tensor:
        """The paper's matching term: W2 between N(mean_z, cov_z) and the codebook's Gaussian, both divided by the
        latents' largest per-dimension standard deviation (a constant: no gradient)."""
        scale = torch.diagonal(cov_z).max().clamp_min(1e-24).sqrt()
        mean_z, cov_z = (mean_z / scale).float(), (cov_z / scale ** 2).float()
        c = self.embedding / scale.float()
        mean_c = c.mean(0)
        centred = c - mean_c
        cov_c = centred.t() @ centred / max(self.num_codes - 1, 1)
        return (gaussian_w2_squared(mean_z, cov_z, mean_c, cov_c) + 1e-10).sqrt()

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None):
        flat, w = _flatten(z, mask)
        with torch.no_grad():
            idx = _sq_distances(flat, self.embedding).argmin(dim=1)
        q = self.embedding[idx]
        if self.training:
            self._enqueue(flat, w)
        moments = self.latent_moments() if self._written else self.latent_moments(flat, w)
        loss = (self.beta * _vq_term(flat, q.detach(), w) + self.alpha * _vq_term(q, flat.detach(), w)
                + self.gamma * self.wasserstein(*moments))
        q = flat + (q - flat).detach()  # straight-through
        return q.reshape(z.shape), idx.reshape(z.shape[:2]), loss
