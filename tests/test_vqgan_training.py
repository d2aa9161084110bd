"""VQGAN training (--arch vqgan): the adaptive weight, the two optimisers, resume, the CLI and its errors."""
import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from vqwae.metrics.lpips import LPIPS_ENV
from vqwae.training import TrainConfig, train
from vqwae.training.adversarial import AdversarialLoss, AdversarialOptions, adaptive_weight

# A VQGAN small enough for the tests: 32x32 digits, f = 4, no attention, K 64 x D 32.
TINY_GAN = dict(dataset="digits", train_limit=64, eval_limit=32, batch_size=16, num_codes=64, dim=32,
                arch="vqgan", ch=32, ch_mult="1,1,2", num_res_blocks=1, attn_resolutions="", z_channels=32,
                disc_start=2, disc_channels=8, disc_layers=2, device="cpu")


@pytest.fixture
def lpips_dir(shared_weights, monkeypatch):
    d = shared_weights / "lpips"
    if not (d / "vgg16_features.pth").is_file():
        pytest.skip(f"no LPIPS-VGG trunk in {d}")
    monkeypatch.setenv(LPIPS_ENV, str(d))
    return d


def test_adaptive_weight_equals_hand_computation():
    """lambda = ||d nll / dW|| / (||d g / dW|| + 1e-4) at the last layer W, by hand on a linear decoder."""
    torch.manual_seed(0)
    z, target, v = torch.randn(5, 3), torch.randn(5, 4), torch.randn(5, 4)
    last = nn.Linear(3, 4, bias=False)
    out = last(z)
    nll = ((out - target) ** 2).sum()
    g = -(out * v).mean()
    grad_nll = 2 * (out - target).detach().T @ z  # d/dW sum((Wz - t)^2)
    grad_g = -(v.T @ z) / v.numel()  # d/dW -mean(v * Wz)
    expected = 0.8 * grad_nll.norm() / (grad_g.norm() + 1e-4)
    got = adaptive_weight(nll, g, last.weight, disc_weight=0.8)
    assert torch.allclose(got, expected, rtol=1e-5)
    assert not got.requires_grad and last.weight.grad is None  # nothing accumulated into .grad
    # the clamp: a generator loss with no gradient at W gives 1e4 * disc_weight
    flat = adaptive_weight(nll, 0 * out.sum(), last.weight, disc_weight=0.5)
    assert float(flat) == pytest.approx(0.5 * 1e4)


def test_generator_and_discriminator_steps_touch_only_their_own_parameters():
    opts = AdversarialOptions(perceptual_weight=0.0, disc_start=1, disc_layers=2, disc_channels=8)
    gan = AdversarialLoss(opts, in_channels=1, perceptual=None, lr=1e-3)
    dec = nn.Conv2d(1, 1, 3, padding=1)
    x = torch.rand(4, 1, 32, 32)
    x_hat = dec(torch.rand(4, 1, 32, 32))
    loss, terms = gan.generator_terms(x, x_hat, dec.weight, step=0)  # before disc_start: L1 only
    assert set(terms) == {"l1", "nll"} and torch.equal(loss, terms["nll"])
    assert torch.allclose(terms["l1"], 2 * (x - x_hat).abs().mean())  # taming's scale: images in [-1, 1]
    assert gan.discriminator_step(x, x_hat, step=0) == {}
    loss, terms = gan.generator_terms(x, x_hat, dec.weight, step=1)
    assert {"g", "d_weight"} <= set(terms)
    loss.backward()
    assert dec.weight.grad is not None
    assert all(p.grad is None for p in gan.discriminator.parameters())  # the generator step leaves D alone
    before = [p.detach().clone() for p in gan.discriminator.parameters()]
    d_terms = gan.discriminator_step(x, x_hat, step=1)
    assert {"disc", "logits_real", "logits_fake"} == set(d_terms)
    assert any(not torch.equal(a, b) for a, b in zip(before, gan.discriminator.parameters()))


@pytest.mark.parametrize("model", ["vqvae", "vqwae"])
def test_vqgan_run_logs_every_term_and_resumes_exactly(tmp_path, lpips_dir, model):
    """A GAN run stopped after epoch 1 and resumed ends with the same autoencoder, discriminator and optimiser
    states as an uninterrupted one; metrics.jsonl names every loss term."""
    cfg = dict(TINY_GAN, model=model, epochs=2)
    straight, parts = tmp_path / "straight", tmp_path / "parts"
    train(TrainConfig.resolve(out=str(straight), **cfg))
    train(TrainConfig.resolve(out=str(parts), **dict(cfg, epochs=1)))
    train(TrainConfig.resolve(out=str(parts), **cfg), resume=True)
    a = torch.load(straight / "state.pt", weights_only=True)
    b = torch.load(parts / "state.pt", weights_only=True)
    for part in ("model",):
        assert all(torch.equal(a[part][k], b[part][k]) for k in a[part]), part
    for k, v in a["gan"]["discriminator"].items():
        assert torch.equal(v, b["gan"]["discriminator"][k]), k
    assert a["gan"]["optimizer"]["state"].keys() == b["gan"]["optimizer"]["state"].keys()
    lines = [json.loads(l) for l in (straight / "metrics.jsonl").read_text().splitlines()]
    for key in ("train/l1", "train/perceptual", "train/nll", "train/g", "train/d_weight", "train/disc",
                "train/logits_real", "train/logits_fake", "val/mse", "val/perplexity"):
        assert key in lines[-1], key
    assert ("train/ws" if model == "vqwae" else "train/commitment") in lines[-1]
    # the adversary's terms average over the steps it was on (2 of epoch 1's 4): the hinge loss of a fresh
    # discriminator is about 1, not diluted to 1/2 by the steps before disc_start
    assert 0.8 < lines[0]["train/disc"] < 1.2
    saved = json.loads((straight / "config.json").read_text())
    assert saved["network"]["arch"] == "vqgan" and saved["gan"]["disc_start"] == 2


def test_missing_vgg_trunk_is_one_line_before_anything_is_written(tmp_path, monkeypatch):
    empty = tmp_path / "weights"
    empty.mkdir()
    monkeypatch.setenv(LPIPS_ENV, str(empty))
    out = tmp_path / "run"
    args = [sys.executable, "-m", "vqwae", "train", "--out", str(out), "--epochs", "1"]
    for k, v in TINY_GAN.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 2, proc.stderr
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and "vgg16_features.pth" in lines[0] and "Traceback" not in proc.stderr
    assert not (out / "config.json").exists()


def test_vqgan_network_options_are_checked():
    with pytest.raises(ValueError, match="ch_mult"):
        TrainConfig.resolve(arch="vqgan", ch_mult="1,x")
    cfg = TrainConfig.resolve(arch="vqgan", ch_mult="1,2,2,4")
    with pytest.raises(ValueError, match="not divisible"):
        cfg.network_config(channels=3, image_size=60)
    assert cfg.network_config(channels=3, image_size=64).latent_side(64) == 8


def test_ffhq_preset_is_the_papers_row():
    cfg = TrainConfig.resolve(preset="ffhq")
    assert (cfg.network.arch, cfg.data.dataset, cfg.data.image_size) == ("vqgan", "ffhq", 256)
    assert (cfg.quantizer.num_codes, cfg.quantizer.dim) == (1024, 256)
    net = cfg.network_config(channels=3, image_size=256)
    assert net.factor == 16 and net.latent_side(256) == 16
    assert (cfg.gan.disc_weight, cfg.gan.disc_start, cfg.gan.perceptual_weight) == (0.8, 30001, 1.0)
    assert (cfg.optim.batch_size, cfg.optim.epochs) == (32, 100)


def _ddp_gan_worker(rank, world, port, out, cfg, lpips):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), **{LPIPS_ENV: lpips})
    torch.set_num_threads(1)
    import vqwae.training.trainer as T

    made = {}
    original = T.build_adversarial

    def spy(*a, **k):
        made["gan"] = original(*a, **k)
        return made["gan"]

    T.build_adversarial = spy
    res = train(TrainConfig.resolve(out=str(out), **cfg))
    torch.save({"disc": made["gan"].discriminator.state_dict(), "loss": res.last_metrics["train/loss"]},
               f"{out}/rank{rank}.pt")


@pytest.mark.slow
def test_ddp_vqgan_keeps_the_discriminator_identical_on_every_rank(tmp_path, lpips_dir):
    import torch.multiprocessing as mp

    cfg = dict(TINY_GAN, model="vqwae", epochs=1, max_steps=3, disc_start=1, batch_size=8)
    port = 29700 + os.getpid() % 1000
    mp.start_processes(_ddp_gan_worker, args=(2, port, str(tmp_path), cfg, str(lpips_dir)), nprocs=2, join=True,
                       start_method="spawn")
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert r0["loss"] == r1["loss"]  # the epoch's loss is reduced over ranks
    # the weights, by averaged gradients. (BatchNorm's running statistics are rank 0's at each DDP forward and
    # drift by a rank's last batch after it; the discriminator only ever runs in training mode, on batch
    # statistics, so they are never used.)
    weights = [k for k in r0["disc"] if "running_" not in k and "num_batches" not in k]
    assert len(weights) == 10
    for k in weights:
        assert torch.equal(r0["disc"][k], r1["disc"][k]), k
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    assert "gan" in state and state["step"] == 3


def test_bf16_vqgan_run_is_finite(tmp_path, lpips_dir):
    res = train(TrainConfig.resolve(out=str(tmp_path / "bf16"), **dict(TINY_GAN, model="vqwae", epochs=1,
                                                                           max_steps=3, precision="bf16")))
    assert all(v == v and abs(v) < 1e6 for k, v in res.last_metrics.items() if isinstance(v, float)), res.last_metrics
