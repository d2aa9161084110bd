"""Helpers more than one test module uses: a tiny trained run folder and the checks of a user's one-line error
(the robustness tests), a guard that fails on any host synchronisation (the solvers and SQ-VAE), the quantizer toy
problem (a 5-cluster mixture in 8-D), and an independent Frechet distance with the Inception network loaded once."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from vqwae.cli.main import app
from vqwae.metrics.fid import INCEPTION_FILENAME, InceptionFeatures, load_inception
from vqwae.training import TrainConfig, train

# ---- a run folder to try users' inputs on ---------------------------------------------------------------
TINY = ["--dataset", "digits", "--train-limit", "64", "--eval-limit", "32", "--num-codes", "16", "--device", "cpu"]


def checksums(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def train_tiny(out: Path) -> Path:
    """A one-epoch run on 64 digits, K = 16: the run folder the robustness tests try their inputs on."""
    train(TrainConfig.resolve(out=str(out), epochs=1, dataset="digits", train_limit=64, eval_limit=32, num_codes=16,
                              device="cpu"))
    return out


def tiny_run(name: str):
    """A module's `run` fixture: one tiny training per test module, in its own scratch folder."""
    @pytest.fixture(scope="module")
    def run(tmp_path_factory) -> Path:
        return train_tiny(tmp_path_factory.mktemp(name) / "run")
    return run


def one_line_error(result, *needles: str) -> str:
    """The command failed with exit status 2 and exactly one line on stderr, "error: ...", holding every needle."""
    err = result.stderr.strip()
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def invoke(args, env=None):
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


# ---- no host synchronisation --------------------------------------------------------------------------
class NoHostSync:
    """Make every device -> host read raise (item, float, int, bool, tolist, numpy)."""

    names = ("item", "__float__", "__int__", "__bool__", "tolist", "numpy", "__index__")

    def __enter__(self):
        self.saved = {n: getattr(torch.Tensor, n) for n in self.names}

        def boom(name):
            def read(*a, **k):
                raise AssertionError(f"a device -> host read (Tensor.{name}) inside a block that must not synchronise")
            return read

        for n in self.names:
            setattr(torch.Tensor, n, boom(n))

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(torch.Tensor, n, f)


# ---- the quantizer toy --------------------------------------------------------------------------------
DIM = 8


def mixture(n, gen):
    centres = torch.randn(5, DIM, generator=torch.Generator().manual_seed(1)) + 3.0
    comp = torch.randint(0, 5, (n,), generator=gen)
    return centres[comp] + torch.randn(n, DIM, generator=gen)


def train_codebook_only(q, steps=400, batch=256, lr=0.05):
    """Train a quantizer's own parameters on the mixture; its code usage on 20,000 fresh points."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    params = [p for p in q.parameters() if p.requires_grad]  # none for EMA codebooks with a fixed pi
    opt = torch.optim.Adam(params, lr=lr) if params else None
    for _ in range(steps):
        out = q(mixture(batch, gen).view(batch, DIM, 1, 1))
        if opt:
            opt.zero_grad()
            out.loss.backward()
            opt.step()
    q.eval()
    with torch.no_grad():
        idx = q(mixture(20000, gen).view(-1, DIM, 1, 1)).indices.reshape(-1)
    return torch.bincount(idx, minlength=q.num_codes).float()


# ---- FID ----------------------------------------------------------------------------------------------
_INCEPTION_CACHE: dict = {}


def inception(shared_weights: Path) -> InceptionFeatures:
    """The FID Inception from ../shared/weights, loaded once per test session (~0.5 s, 87 MB); skips without it."""
    f = shared_weights / "inception" / INCEPTION_FILENAME
    if not f.is_file():
        pytest.skip(f"Inception weights not found at {f}")
    if "net" not in _INCEPTION_CACHE:
        net, why = load_inception(f, batch_size=8)
        assert net is not None, why
        _INCEPTION_CACHE["net"] = net
    return _INCEPTION_CACHE["net"]


def eig_frechet(mu1, s1, mu2, s2) -> float:
    """Independent Frechet distance: tr (S1 S2)^(1/2) = sum sqrt(eig(S1^(1/2) S2 S1^(1/2))), via eigh."""
    w, v = np.linalg.eigh(s1)
    r1 = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    ev = np.linalg.eigvalsh(r1 @ s2 @ r1)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.sqrt(np.clip(ev, 0, None)).sum())


# ---- a vector-quantize-pytorch training loop (test_dropin, test_compat) --------------------------------------
def vector_quantize_pytorch_loop(vq, steps: int = 40):
    """A training loop as vector-quantize-pytorch's README writes it: channel-last (B, N, D) latents,
    ``quantized, indices, loss = vq(x)``, one optimizer over the model's parameters. Returns the first and last
    reconstruction losses and the last indices."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = torch.nn.ModuleDict(dict(enc=torch.nn.Linear(16, 32), vq=vq, dec=torch.nn.Linear(32, 16)))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x = torch.randn(32, 64, 16, generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):
        quantized, indices, loss = model["vq"](model["enc"](x))
        rec = F.mse_loss(model["dec"](quantized), x)
        opt.zero_grad()
        (rec + loss).backward()
        opt.step()
        losses.append(float(rec.detach()))
    return losses[0], losses[-1], indices
