"""vqwae as a tokenizer: encode / decode (Python and CLI), the codes file, CodesDataset feeding the prior, and the
feedback of long commands (progress lines in a log file, threads inside sampling, Ctrl-C, the short help)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torchvision.utils import save_image
from typer.testing import CliRunner

from vqwae.cli.main import app
from vqwae.data import CodesDataset, load_codes
from vqwae.data.codes import index_dtype
from vqwae.models import NetworkConfig, VQAutoencoder, build_networks
from vqwae.quantizers import ResidualQuantizer, WassersteinQuantizer
from vqwae.runs.codes import decode_file, encode_to_file
from vqwae.runs.layout import load_model, load_run_split
from vqwae.training import TrainConfig, train

CPU = ["--device", "cpu", "--threads", "1"]


def invoke(*args, ok: bool = True):
    res = CliRunner().invoke(app, [str(a) for a in args])
    if ok:
        assert res.exit_code == 0, (res.output, res.exception)
    return res


def error_of(*args) -> str:
    res = invoke(*args, ok=False)
    assert res.exit_code == 2, (res.output, res.exception)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("tok") / "run"
    train(TrainConfig.resolve(dataset="digits", train_limit=96, eval_limit=48, num_codes=16, max_steps=6, epochs=1,
                              device="cpu", out=str(out)), progress=False)
    return out


# ---- the model: encode then decode is the forward pass, for every kind of model ---------------------------
def _conv32():
    return VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=32)


def _vqgan():
    net = NetworkConfig(arch="vqgan", in_channels=3, latent_dim=16, image_size=16, ch=32, ch_mult="1,2",
                        num_res_blocks=1, attn_resolutions="8", z_channels=32)
    return VQAutoencoder.from_config(net, "vector", num_codes=300)


def _residual():
    net = NetworkConfig(in_channels=1)
    enc, dec = build_networks(net)
    rq = ResidualQuantizer(lambda: WassersteinQuantizer(num_codes=16, dim=net.latent_dim), num_levels=3)
    return VQAutoencoder(enc, rq, dec, net)


@pytest.mark.parametrize("build,levels", [(_conv32, None), (_vqgan, None), (_residual, 3)],
                         ids=["conv32", "vqgan", "residual"])
def test_encode_then_decode_is_the_forward_pass_also_through_files(build, levels, tmp_path):
    model = build()
    channels, size = model.network_config.in_channels, model.image_size
    x = torch.randint(0, 256, (6, channels, size, size)).float() / 255  # exactly what a PNG holds
    model.train()
    model(x)  # the first training batch starts the codebook
    model.eval()
    idx = model.encode(x)
    assert idx.shape[-1] == levels if levels else idx.dim() == 3
    assert torch.equal(model.decode_indices(idx), model(x)[0])

    model.save_pretrained(tmp_path / "model")  # a model folder (no run): encode its images
    (tmp_path / "imgs").mkdir()
    for i in range(x.shape[0]):
        save_image(x[i], tmp_path / "imgs" / f"{i}.png")
    path, meta, n = encode_to_file(tmp_path / "model", tmp_path / "c.safetensors", images=[tmp_path / "imgs"])
    codes, labels, meta = load_codes(path)
    assert n == 6 and labels is None and meta.levels == levels and meta.image_size == size
    assert torch.equal(codes, idx)
    images, _, _ = decode_file(tmp_path / "model", path)
    assert torch.equal(images, model(x)[0].clamp(0, 1))


def test_index_type_is_the_smallest_that_holds_k():
    assert index_dtype(16) == torch.uint8 and index_dtype(256) == torch.uint8
    assert index_dtype(257) == torch.uint16 and index_dtype(65536) == torch.uint16
    assert index_dtype(65537) == torch.int32


# ---- the commands ------------------------------------------------------------------------------------
def test_encode_a_split_decode_it_and_train_the_prior_on_the_codes(run_dir, tmp_path):
    invoke("encode", run_dir, "--split", "test", "--out", tmp_path / "test.safetensors", *CPU)
    raw = load_file(str(tmp_path / "test.safetensors"))
    assert raw["indices"].dtype == torch.uint8 and raw["labels"].dtype == torch.int64  # K = 16

    ds = CodesDataset(tmp_path / "test.safetensors")
    test, _ = load_run_split(run_dir, "test")
    assert len(ds) == len(test) and ds.meta.num_codes == 16 and ds.meta.grid == (8, 8) and ds.meta.num_classes == 10
    model = load_model(run_dir)
    x = torch.stack([test[i][0] for i in range(len(test))])
    assert torch.equal(ds.codes, model.encode(x))
    codes, label = ds[3]
    assert codes.dtype == torch.int64 and int(label) == int(test[3][1])

    res = invoke("decode", run_dir, tmp_path / "test.safetensors", "--out", tmp_path / "dec", "--limit", "5", *CPU)
    assert "5 images" in res.output
    assert sorted(p.name for p in (tmp_path / "dec").iterdir() if not p.name.startswith("."))[0] == "grid.png"
    assert len(list((tmp_path / "dec").glob("image_*_class*.png"))) == 5
    images, _, _ = decode_file(run_dir, tmp_path / "test.safetensors", limit=5)
    # the codes were encoded with the whole split in one batch: a batch of 5 may round a boundary latent's
    # convolution otherwise and pick its neighbouring code, so the reference is the same batch's reconstruction
    torch.testing.assert_close(images, model(x)[0][:5].clamp(0, 1))

    # the two stages meet at the codes file: the prior trains on it, and records it
    invoke("encode", run_dir, "--split", "train", "--out", tmp_path / "train.safetensors", *CPU)
    invoke("encode", run_dir, "--split", "val", "--out", tmp_path / "val.safetensors", *CPU)
    invoke("prior", "train", run_dir, "--codes", tmp_path / "train.safetensors", "--val-codes",
           tmp_path / "val.safetensors", "--out", tmp_path / "prior", "--hidden", "8", "--layers", "2",
           "--epochs", "1", *CPU)
    summary = json.loads((tmp_path / "prior" / "train_summary.json").read_text())
    assert summary["num_train"] == len(CodesDataset(tmp_path / "train.safetensors"))
    assert summary["codes_file"] == str((tmp_path / "train.safetensors").resolve())


def test_codes_of_other_weights_or_a_busy_path_are_refused(run_dir, tmp_path):
    codes = tmp_path / "c.safetensors"
    invoke("encode", run_dir, "--out", codes, "--limit", "8", *CPU)
    assert "exists; pass --force" in error_of("encode", run_dir, "--out", codes, *CPU)
    invoke("encode", run_dir, "--out", codes, "--limit", "4", "--force", *CPU)
    assert len(CodesDataset(codes)) == 4

    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    model = load_model(other)
    with torch.no_grad():
        next(model.decoder.parameters()).add_(0.01)  # other weights, the same K
    model.save_pretrained(other)
    line = error_of("decode", other, codes, "--out", tmp_path / "d", *CPU)
    assert "encoded by weights" in line and "decode codes with the model that wrote them" in line
    assert not (tmp_path / "d").exists()
    line = error_of("prior", "train", other, "--codes", codes, *CPU)
    assert "encoded by weights" in line

    assert "not found" in error_of("encode", run_dir, "--images", tmp_path / "nothing", "--out", tmp_path / "x",
                                   *CPU)
    assert "not a vqwae codes file" in error_of("decode", run_dir, run_dir / "model.safetensors", "--out",
                                                tmp_path / "d2", *CPU)
    assert "unknown --split" in error_of("encode", run_dir, "--split", "bogus", "--out", tmp_path / "y", *CPU)


def _encode_worker(rank: int, world: int, port: int, run_dir: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    encode_to_file(run_dir, out, split="test", batch_size=10)


def test_torchrun_ranks_encode_shares_and_write_the_same_file(run_dir, tmp_path):
    """The ranks' shares, gathered, are the one process's file. Both encode in batches of 10 (each rank's share of
    the 200 test images is 100): a convolution's rounding can depend on the batch's size, which moves a latent that
    sits on the boundary between two codes (7 of 12,800 codes differ between batches of 7 and of 256)."""
    import torch.multiprocessing as mp

    encode_to_file(run_dir, tmp_path / "one.safetensors", split="test", batch_size=10)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_encode_worker, args=(2, port, str(run_dir), str(tmp_path / "two.safetensors")), nprocs=2, join=True)
    a, b = load_codes(tmp_path / "one.safetensors"), load_codes(tmp_path / "two.safetensors")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2]


# ---- feedback ----------------------------------------------------------------------------------------
def test_train_help_is_short_and_help_all_lists_every_option():
    short, full = invoke("train", "--help").output, None
    assert "--num-codes" in short and "--help-all" in short and "--sinkhorn-iters" not in short
    proc = subprocess.run([sys.executable, "-m", "vqwae", "train", "--help-all"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100"})
    full = proc.stdout
    assert proc.returncode == 0 and "--sinkhorn-iters" in full and "--split-unused" in full
    assert len(full.splitlines()) > 2 * len(short.splitlines())


def test_progress_in_a_log_file_is_whole_lines():
    from vqwae import progress

    class Log:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

        def isatty(self):
            return False

    log = Log()
    old = sys.stderr
    sys.stderr = log
    try:
        for _ in progress.progress_bar(range(5), desc="encode", unit="img"):
            pass
    finally:
        sys.stderr = old
    assert "\r" not in log.text and log.text.startswith("encode:") and log.text.endswith("\n")


def test_generation_sampling_obeys_threads(run_dir, shared_weights, tmp_path, monkeypatch):
    import vqwae.runs.prior as prior_runs

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    invoke("prior", "train", run, "--hidden", "8", "--layers", "2", "--epochs", "1", "--max-steps", "2", *CPU)
    seen = []
    real = prior_runs.sample_codes

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(prior_runs, "sample_codes", spy)
    invoke("eval", run, "--generation", "--n-samples", "4", "--limit", "8", "--no-lpips", "--device", "cpu",
           "--threads", "2", "--inception-weights",
           shared_weights / "inception" / "fid_inception_v3_tf2015_torchscript.pt")
    assert seen == [2]  # the autouse fixture holds torch at 1 thread: 2 is --threads at work


@pytest.mark.parametrize("link", ["loop", "dangling"])
def test_encode_refuses_an_out_that_is_a_symbolic_link_without_force(run_dir, tmp_path, link):
    """A link to itself or to nowhere is the user's: ``Path.exists`` says no for it, and the write replaced it."""
    out = tmp_path / "codes.safetensors"
    out.symlink_to(out if link == "loop" else tmp_path / "nowhere.safetensors")
    line = error_of("encode", run_dir, "--split", "test", "--limit", "8", "--out", out, *CPU)
    assert "is a symbolic link; pass --force to replace it" in line
    assert out.is_symlink() and not (tmp_path / "nowhere.safetensors").exists()
