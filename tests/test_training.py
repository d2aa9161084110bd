"""The training pipeline end to end on the embedded digits data: run folder, resume, errors, DDP."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from vqwae.models import VQAutoencoder
from vqwae.training import TrainConfig, TrainingDiverged, train
from vqwae.training.config import load_config_file

TINY = dict(dataset="digits", train_limit=128, eval_limit=64, batch_size=32, num_codes=32, device="cpu")


def test_run_folder_contents_and_best_model(tmp_path):
    out = tmp_path / "run"
    res = train(TrainConfig.resolve(out=str(out), epochs=2, **TINY))
    assert res.epochs_completed == 2 and res.steps == 8
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "model_config.json", "metrics.jsonl", "state.pt"} <= names
    lines = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert [l["epoch"] for l in lines] == [1, 2]
    for key in ("train/loss", "train/mse", "train/ws", "train/kl", "val/mse", "val/ws", "val/perplexity",
                "val/codes_used", "lr", "seconds"):
        assert key in lines[-1], key
    assert json.loads((out / "config.json").read_text())["data"]["dataset"] == "digits"
    model = VQAutoencoder.from_pretrained(out).eval()
    assert res.best_val_mse == min(l["val/mse"] for l in lines)
    x = torch.rand(2, 1, 32, 32)
    assert model(x)[0].shape == x.shape


def test_fit_steps_solves_the_saved_weights_transport_map_once(tmp_path):
    out = tmp_path / "run"
    cfg = dict(TINY, solver="semidiscrete", pi_init="gaussian", learn_pi=False, quantize="transport", epochs=2)
    train(TrainConfig.resolve(out=str(out), **cfg))
    unfitted = VQAutoencoder.from_pretrained(out).quantizer.solver.potential.clone()
    assert not (out / "transport_fit.json").exists()
    train(TrainConfig.resolve(out=str(out), **dict(cfg, fit_steps=200)), resume=True)  # trained: only the fit runs
    fit = json.loads((out / "transport_fit.json").read_text())
    assert fit["images"] == 128 and fit["steps"] == 200 and fit["tv_after"] < fit["tv_before"], fit
    fitted = VQAutoencoder.from_pretrained(out)
    assert not torch.equal(fitted.quantizer.solver.potential, unfitted)  # the saved weights carry the fitted map
    weights = (out / "model.safetensors").read_bytes()
    train(TrainConfig.resolve(out=str(out), **dict(cfg, fit_steps=200)), resume=True)  # fitted already: unchanged
    assert (out / "model.safetensors").read_bytes() == weights


def test_compile_trains_as_eager_does_and_saves_plain_weights(tmp_path):
    """run.compile: the training forward and backward through torch.compile (the quantizer's solver step and its
    codebook update inside the graph). Same batches, same start: the same run up to float rounding, and the saved
    weights load into an uncompiled model (no torch.compile prefix in their names)."""
    cfg = dict(TINY, solver="semidiscrete", epochs=1)
    eager = train(TrainConfig.resolve(out=str(tmp_path / "eager"), **cfg))
    compiled = train(TrainConfig.resolve(out=str(tmp_path / "compiled"), compile=True, **cfg))
    assert compiled.steps == eager.steps == 4
    assert compiled.best_val_mse == pytest.approx(eager.best_val_mse, rel=1e-3)
    a = VQAutoencoder.from_pretrained(tmp_path / "eager").state_dict()
    b = VQAutoencoder.from_pretrained(tmp_path / "compiled").state_dict()
    assert a.keys() == b.keys()
    # Adam moves a weight by up to lr a step whatever its gradient's size, so where a gradient is near zero the
    # compiled kernels' rounding can flip its step: a few weights (<= 5% of a tensor) may differ by up to lr x steps
    # (the buffers record discrete assignments, where a latent on a cell's boundary may go either way: finite only)
    lr, steps = TrainConfig.resolve(out=str(tmp_path / "x"), **cfg).optim.lr, eager.steps
    params = {name for name, _ in VQAutoencoder.from_pretrained(tmp_path / "eager").named_parameters()}
    for name in a:
        if a[name].is_floating_point() and name not in params:
            assert torch.isfinite(b[name]).all(), name
        elif a[name].is_floating_point():
            diff = (b[name] - a[name]).abs()
            far = diff > 1e-4 + 1e-3 * a[name].abs()
            assert float(far.float().mean()) <= 0.05 and float(diff.max()) <= lr * steps, (name, float(diff.max()))


def test_refuses_to_overwrite_a_run(tmp_path):
    out = tmp_path / "run"
    train(TrainConfig.resolve(out=str(out), epochs=1, **TINY))
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(FileExistsError, match="--resume"):
        train(TrainConfig.resolve(out=str(out), epochs=1, **TINY))
    assert (out / "metrics.jsonl").read_text() == before


@pytest.mark.parametrize("model", ["vqwae", "vqvae", "sqvae"])
def test_resume_equals_uninterrupted(tmp_path, model):
    cfg = dict(TINY, model=model, epochs=3)
    straight = tmp_path / "straight"
    train(TrainConfig.resolve(out=str(straight), **cfg))
    parts = tmp_path / "parts"
    train(TrainConfig.resolve(out=str(parts), **dict(cfg, epochs=1)))
    train(TrainConfig.resolve(out=str(parts), **cfg), resume=True)
    a = torch.load(straight / "state.pt", weights_only=False)["model"]
    b = torch.load(parts / "state.pt", weights_only=False)["model"]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    la = [json.loads(l) for l in (straight / "metrics.jsonl").read_text().splitlines()]
    lb = [json.loads(l) for l in (parts / "metrics.jsonl").read_text().splitlines()]
    assert [l["val/mse"] for l in la] == [l["val/mse"] for l in lb]


def test_resume_after_kill_9(tmp_path):
    """A run killed with SIGKILL mid-epoch resumes from its last completed epoch, to the same weights."""
    cfg = dict(TINY, epochs=3, train_limit=512)
    straight = tmp_path / "straight"
    train(TrainConfig.resolve(out=str(straight), **cfg))
    killed = tmp_path / "killed"
    args = [sys.executable, "-m", "vqwae", "train", "--out", str(killed)]
    for k, v in cfg.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    # Same thread count as this process (conftest pins 1): float reductions then match bit for bit.
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while not (killed / "state.pt").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)  # somewhere inside epoch 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    state = torch.load(killed / "state.pt", weights_only=False)  # the last good checkpoint is readable
    assert state["epoch"] >= 1
    train(TrainConfig.resolve(out=str(killed), **cfg), resume=True)
    a = torch.load(straight / "state.pt", weights_only=False)["model"]
    b = torch.load(killed / "state.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    epochs = [json.loads(l)["epoch"] for l in (killed / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3]


def test_non_finite_loss_stops_and_keeps_last_checkpoint(tmp_path):
    out = tmp_path / "run"
    train(TrainConfig.resolve(out=str(out), epochs=1, **TINY))
    good = (out / "state.pt").read_bytes()
    with pytest.raises(TrainingDiverged, match="non-finite loss"):
        train(TrainConfig.resolve(out=str(out), epochs=3, **dict(TINY, ws_weight=3e38)), resume=True)
    assert (out / "state.pt").read_bytes() == good


def test_config_resolution_order(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("num_codes: 128\nsolver: dual\nlr: 0.01\n")
    cfg = TrainConfig.resolve(preset="paper", config_file=f, lr=0.5, epochs=None)
    q = cfg.quantizer
    assert (q.num_codes, q.vqwae.solver, cfg.optim.lr, q.vqwae.kl_reduction, cfg.run.preset) == (128, "dual", 0.5, "mean",
                                                                                            "paper")
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"batch-size": 8}))
    assert load_config_file(j) == {"batch_size": 8}
    with pytest.raises(ValueError, match="unknown config keys \\['colour'\\]"):
        TrainConfig.resolve(colour="red")
    with pytest.raises(ValueError, match="valid: paper"):
        TrainConfig.resolve(preset="fast-ish")
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'; valid: mnist"):
        TrainConfig.resolve(dataset="imagenet")


def test_train_defaults_are_the_quantizer_defaults_and_the_paper_preset_is_the_authors():
    from vqwae.quantizers.wasserstein import WassersteinConfig

    kind, config = TrainConfig().quantizer_config(64)
    assert kind == "wasserstein"
    # every field the quantizer's own default, the shared pi included; the networks' layout said
    assert config == WassersteinConfig(channel_last=False)
    kind, paper = TrainConfig.resolve(preset="paper").quantizer_config(64)
    assert kind == "paper-wasserstein" and (paper.solver, paper.ws_weight, paper.kl_reduction, paper.codebook_init,
                                            paper.num_positions) == ("exact", 1e-3, "mean", "normal", 64)


def test_saved_configs_that_predate_an_option_keep_the_behaviour_they_were_trained_with(tmp_path):
    from vqwae.models import NetworkConfig, VQAutoencoder
    from vqwae.runs.layout import read_config

    old = TrainConfig().to_flat()  # format 1: flat keys, no format_version
    del old["codebook_update"]  # a run saved before the option existed trained its codebook by gradient
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert read_config(tmp_path).quantizer.vqwae.codebook_update == "gradient"
    assert TrainConfig.resolve().quantizer.vqwae.codebook_update == "transport"  # new runs get the new default
    # format 2 (nested, versioned) reads back exactly
    new = TrainConfig.resolve(model="sqvae", num_codes=64, sq_temperature_decay=2e-5)
    (tmp_path / "config.json").write_text(json.dumps(new.to_dict()))
    assert read_config(tmp_path) == new
    model = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "paper-wasserstein")
    model.save_pretrained(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "model_config.json").read_text())
    cfg["quantizer"].update(kind="wasserstein", pi_floor=0.0)  # a model_config.json of format 1: no codebook_update
    del cfg["format_version"]
    (tmp_path / "m" / "model_config.json").write_text(json.dumps(cfg))
    loaded = VQAutoencoder.from_pretrained(tmp_path / "m")
    assert loaded.quantizer.kind == "paper-wasserstein" and loaded.quantizer.embedding.requires_grad
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    # a VQ-WAE config saved before the pull existed (formats 1 and 2) trained at the full pull, not today's rule
    flat = TrainConfig.resolve(num_codes=16384).to_flat()
    del flat["pull"]
    (tmp_path / "config.json").write_text(json.dumps(flat))
    assert read_config(tmp_path).quantizer.vqwae.pull == 1.0
    nested = TrainConfig.resolve(num_codes=16384).to_dict()
    nested["format_version"] = 2
    del nested["quantizer"]["vqwae"]["pull"]
    (tmp_path / "config.json").write_text(json.dumps(nested))
    assert read_config(tmp_path).quantizer.vqwae.pull == 1.0
    assert TrainConfig.resolve(num_codes=16384).quantizer.vqwae.pull is None  # new runs get the rule
    model = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=64)
    model.save_pretrained(tmp_path / "w")
    cfg = json.loads((tmp_path / "w" / "model_config.json").read_text())
    del cfg["quantizer"]["pull"]
    cfg["format_version"] = 2
    (tmp_path / "w" / "model_config.json").write_text(json.dumps(cfg))
    assert VQAutoencoder.from_pretrained(tmp_path / "w").quantizer.config.pull == 1.0


def test_the_latents_per_code_pull_keeps_the_full_pulls_identity_where_it_gives_one_and_the_presets_pin_it():
    # the default pull=None trains as pull=1 where every step brings 4 latents a code (32 x 8 x 8 latents at K <= 512):
    # the same run, the same cache key as the runs made before it was the default; at K = 8,192 (r = 1/4) another run
    for k, same in ((64, True), (512, True), (1024, False), (8192, False)):
        cfg = TrainConfig.resolve(num_codes=k)
        assert cfg.quantizer.vqwae.pull is None
        assert (cfg.identity() == cfg.replace(pull=1.0).identity()) == same, k
    assert (TrainConfig.resolve(num_codes=512, batch_size=16).identity()
            != TrainConfig.resolve(num_codes=512, batch_size=16, pull=1.0).identity())  # r = 2: pull 0.46
    for preset in ("paper", "paper-fast", "ffhq"):  # the authors' full pull, pinned
        assert TrainConfig.resolve(preset=preset).quantizer.vqwae.pull == 1.0


def test_cli_train_and_errors(tmp_path):
    out = tmp_path / "cli"
    base = [sys.executable, "-m", "vqwae", "train", "--out", str(out), "--dataset", "digits", "--train-limit", "64",
            "--eval-limit", "32", "--num-codes", "16", "--solver", "sinkhorn", "--codebook-update", "gradient",
            "--epochs", "1"]
    r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (out / "model.safetensors").exists()
    r = subprocess.run(base[:6] + ["--solver", "emd"], capture_output=True, text=True)
    assert r.returncode == 2 and "valid: 'semidiscrete', 'exact', 'sinkhorn', 'dual'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "vqwae", "train", "--out", str(tmp_path / "m"), "--dataset", "mnist",
                        "--data-root", str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert r.returncode == 2 and str(tmp_path / "nowhere") in r.stderr
    r = subprocess.run(base + ["--resume", "--lr", "0.5"], capture_output=True, text=True)
    assert r.returncode == 2 and "lr" in r.stderr


# ---- DDP: 2 CPU processes with gloo against one process on the same global batch ---------------------


def _env(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)


def _ddp_grad_worker(rank, world, port, out, cfg, images):
    _env(rank, world, port)
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from vqwae.training import build_model

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = build_model(TrainConfig.resolve(**cfg), 1, 32)
    ddp = DDP(model, broadcast_buffers=False)
    x = images.chunk(world)[rank]
    x_hat, q = ddp(x)
    loss = model.reconstruction_loss(x_hat, x) + q.loss
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    torch.save({"grads": grads, "ws": float(q.losses["ws"])}, Path(out) / f"grads{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_global_batch_gradients_equal_single_process(tmp_path):
    """DDP (2 gloo processes, WS over the gathered latents) computes the gradients of one process that sees
    the whole global batch."""
    from vqwae.training import build_model

    # N(0, 1) codebook: a data start draws from rank 0's half-batch, not from the whole global batch.
    cfg = dict(TINY, global_batch=True, solver="exact", codebook_init="normal", codebook_update="gradient")
    images = torch.rand(16, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    port = 29500 + os.getpid() % 1000
    mp.start_processes(_ddp_grad_worker, args=(2, port, tmp_path, cfg, images), nprocs=2, join=True,
                       start_method="spawn")
    torch.manual_seed(0)
    model = build_model(TrainConfig.resolve(**dict(cfg, global_batch=False)), 1, 32)
    x_hat, q = model(images)
    (model.reconstruction_loss(x_hat, images) + q.loss).backward()
    g0, g1 = (torch.load(tmp_path / f"grads{r}.pt") for r in (0, 1))
    assert g0["ws"] == g1["ws"] and abs(g0["ws"] - float(q.losses["ws"].detach())) < 1e-5 * abs(g0["ws"])
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        assert torch.equal(g0["grads"][name], g1["grads"][name]), name  # DDP: identical on every rank
        assert torch.allclose(g0["grads"][name], p.grad, rtol=1e-4, atol=1e-7), name


def _ddp_codebook_worker(rank, world, port, out, cfg):
    _env(rank, world, port)
    captured = {}
    import vqwae.training.trainer as T

    original = T.validate

    def spy(model, *a, **k):  # runs at the end of each epoch with the rank's own model
        captured["codebook"] = model.quantizer.embedding.detach().clone()
        return original(model, *a, **k)

    T.validate = spy
    res = train(TrainConfig.resolve(out=str(out), **cfg))
    torch.save({"loss": res.last_metrics["train/loss"], "codebook": captured["codebook"]}, Path(out) / f"rank{rank}.pt")


@pytest.mark.slow
def test_ddp_training_keeps_codebooks_identical_and_matches_single_process_loss(tmp_path):
    cfg = dict(TINY, epochs=1, max_steps=1, global_batch=True, batch_size=16, solver="exact", codebook_init="normal",
               codebook_update="gradient")
    port = 29600 + os.getpid() % 1000
    mp.start_processes(_ddp_codebook_worker, args=(2, port, tmp_path / "ddp", cfg), nprocs=2, join=True,
                       start_method="spawn")
    r0, r1 = (torch.load(tmp_path / "ddp" / f"rank{r}.pt") for r in (0, 1))
    assert torch.equal(r0["codebook"], r1["codebook"])
    assert r0["loss"] == r1["loss"]
    single = train(TrainConfig.resolve(out=str(tmp_path / "single"), **dict(cfg, batch_size=32, global_batch=False)))
    assert abs(r0["loss"] - single.last_metrics["train/loss"]) < 1e-5 * abs(r0["loss"])
