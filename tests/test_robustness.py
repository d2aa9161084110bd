"""Nothing a user does corrupts a run or ends in a traceback.

Every bad input below is tried against a trained run folder, as a new user would: each must stop with one
line "error: ..." naming the problem (exit status 2), and no file of the existing run may change (checked
by checksums of every file in it). Then the quiet and odd cases that must *work*: TensorBoard curves, no warnings, a
batch of padding only, a relative data root, a full disk. One writer per run folder: test_robustness_lock.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from vqwae.cli.main import app
from vqwae.models import NetworkConfig, VQAutoencoder
from vqwae.quantizers import WassersteinQuantizer
from vqwae.runs import layout
from vqwae.training.lock import RunLock
from vqwae.training import TrainConfig, train

from tests.helpers import TINY, checksums, invoke, one_line_error, tiny_run

run = tiny_run("robust")


def _yaml(tmp: Path, text: str) -> Path:
    p = tmp / f"c{abs(hash(text))}.yaml"
    p.write_text(text)
    return p


# (arguments given the run folder and a scratch folder, words the error must hold)
CASES = {
    "fresh train into an existing run": (lambda r, t: ["train", "--out", r, *TINY], ["already holds a run"]),
    "resume a folder with no run": (lambda r, t: ["train", "--out", t / "typo_run", "--resume"], ["no run to continue"]),
    "train limit 0": (lambda r, t: ["train", "--out", t / "a", *TINY, "--train-limit", "0"], ["train_limit", ">= 1"]),
    "max steps 0": (lambda r, t: ["train", "--out", t / "a", *TINY, "--max-steps", "0"], ["max_steps"]),
    "max steps -3": (lambda r, t: ["train", "--out", t / "a", *TINY, "--max-steps", "-3"], ["max_steps"]),
    "negative ws weight": (lambda r, t: ["train", "--out", t / "a", *TINY, "--ws-weight", "-1"], ["ws_weight"]),
    "eval limit 0": (lambda r, t: ["train", "--out", t / "a", *TINY, "--eval-limit", "0"], ["eval_limit"]),
    "config: epochs ten": (lambda r, t: ["train", "--out", t / "a", *TINY, "--config", _yaml(t, "epochs: ten\n")],
                           ["epochs", "ten"]),
    "config: batch size 32.5": (lambda r, t: ["train", "--out", t / "a", *TINY, "--config",
                                              _yaml(t, "batch_size: 32.5\n")], ["batch_size", "32.5"]),
    "config: unknown key": (lambda r, t: ["train", "--out", t / "a", *TINY, "--config", _yaml(t, "epoch: 3\n")],
                            ["epoch"]),
    "config: a key twice": (lambda r, t: ["train", "--out", t / "a", *TINY, "--config",
                                          _yaml(t, "lr: 0.1\nlr: 0.2\n")], ["repeated key", "lr"]),
    "config: flat and nested": (lambda r, t: ["train", "--out", t / "a", *TINY, "--config",
                                              _yaml(t, "lr: 0.1\noptim:\n  lr: 0.2\n")], ["lr", "twice"]),
    "train --device foo": (lambda r, t: ["train", "--out", t / "a", *TINY[:-2], "--device", "foo"], ["foo"]),
    "resume with another model": (lambda r, t: ["train", "--out", r, "--resume", "--model", "vqvae"], ["model"]),
    "resume with a config file": (lambda r, t: ["train", "--out", r, "--resume", "--config", _yaml(t, "lr: 0.1\n")],
                                  ["--config", "saved configuration"]),
    "resume with a preset": (lambda r, t: ["train", "--out", r, "--resume", "--preset", "paper"], ["--preset"]),
    "eval --device foo": (lambda r, t: ["eval", r, "--device", "foo"], ["--device", "foo"]),
    "eval --split foo": (lambda r, t: ["eval", r, "--split", "foo"], ["split", "foo"]),
    "eval --limit 0": (lambda r, t: ["eval", r, "--limit", "0"], ["--limit"]),
    "eval --generation --no-fid": (lambda r, t: ["eval", r, "--generation", "--no-fid"], ["--generation", "--no-fid"]),
    "eval a folder that is no run": (lambda r, t: ["eval", t], ["not a trained run folder"]),
    "probe --device foo": (lambda r, t: ["probe", r, "--device", "foo"], ["foo"]),
    "tsne --n 1": (lambda r, t: ["tsne", r, "--n", "1"], ["--n"]),
    "probe --limit 1": (lambda r, t: ["probe", r, "--limit", "1", "--device", "cpu"], ["at least 2", "--limit"]),
    "prior train --threads 0": (lambda r, t: ["prior", "train", r, "--threads", "0"], ["--threads"]),
    "sample without a prior": (lambda r, t: ["sample", r, "--n", "4", "--device", "cpu"], ["prior"]),
    "sample --n 10^8": (lambda r, t: ["sample", r, "--n", "100000000"], ["--n", "at most"]),
    "sample --n 10^20": (lambda r, t: ["sample", r, "--n", "99999999999999999999"], ["--n"]),
    "sample --out a file": (lambda r, t: ["sample", r, "--out", r / "config.json"], ["--out", "is a file"]),
    "demo --device foo": (lambda r, t: ["demo", "--out", t / "demo", "--device", "foo"], ["foo"]),
    "reproduce --threads 0": (lambda r, t: ["reproduce", "--out", t / "rep", "--threads", "0"], ["--threads"]),
    "reproduce unknown budget": (lambda r, t: ["reproduce", "--out", t / "rep", "--budget", "huge"], ["huge"]),
    "reproduce unknown dataset": (lambda r, t: ["reproduce", "--out", t / "rep", "--datasets", "bogus"],
                                  ["--datasets", "bogus"]),
    "reproduce no dataset": (lambda r, t: ["reproduce", "--out", t / "rep", "--datasets", ""], ["--datasets"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_changes_no_run(run, tmp_path, case):
    build, needles = CASES[case]
    before = checksums(run)
    one_line_error(invoke(build(run, tmp_path)), *needles)
    assert checksums(run) == before


def test_bad_thread_count_in_the_environment(run, tmp_path):
    before = checksums(run)
    one_line_error(invoke(["train", "--out", tmp_path / "a", *TINY], env={"VQWAE_THREADS": "abc"}), "VQWAE_THREADS")
    assert checksums(run) == before


def test_eval_on_weights_that_do_not_fit_the_config(run, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    cfg = json.loads((bad / layout.MODEL_CONFIG).read_text())
    cfg["quantizer"]["num_codes"] = 32  # the weights hold 16 codes
    (bad / layout.MODEL_CONFIG).write_text(json.dumps(cfg))
    before = checksums(bad)
    one_line_error(invoke(["eval", bad, "--no-fid", "--no-lpips"]), "size mismatch", "quantizer.embedding")
    assert checksums(bad) == before


def _image_folder(root: Path) -> Path:
    rng = np.random.default_rng(0)
    root.mkdir()
    for i in range(24):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(root / f"img{i:02d}.jpg")
    (root / "img03.jpg").write_text("this is not an image")  # a text file with an image's name
    (root / "img05.jpg").write_bytes(b"")  # an empty file
    data = (root / "img07.jpg").read_bytes()
    (root / "img07.jpg").write_bytes(data[: len(data) // 3])  # truncated
    return root


def test_unreadable_images_name_the_file_or_are_skipped_with_a_count(tmp_path):
    images = _image_folder(tmp_path / "images")
    args = ["train", "--dataset", "imagefolder", "--data-root", images, "--max-steps", "1", "--image-size", "32",
            "--num-codes", "8", "--device", "cpu"]
    one_line_error(invoke([*args, "--out", tmp_path / "r1"]), "img03.jpg", "--skip-unreadable")
    assert not (tmp_path / "r1").exists()  # a run that never started leaves no folder (nor a lock) behind
    r = invoke([*args, "--out", tmp_path / "r2", "--skip-unreadable"])
    assert r.exit_code == 0, r.output
    assert "skipped 3 unreadable image file(s)" in r.stderr
    one_line_error(invoke(["train", "--out", tmp_path / "r3", *TINY, "--skip-unreadable"]), "imagefolder")


def test_api_errors_name_the_problem():
    q = WassersteinQuantizer(num_codes=16, dim=8, num_positions=4)
    with pytest.raises(ValueError, match="empty"):
        q(torch.zeros(0, 8, 2, 2))
    with pytest.raises(TypeError, match="floating point, got torch.int64"):
        q(torch.zeros(2, 8, 2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="NaN"):
        q.set_pi(torch.full((16,), float("nan")))
    with pytest.raises(ValueError, match="positive sum"):
        q.set_pi(torch.zeros(16))
    before = q.pi.clone()
    with pytest.raises(ValueError, match=r"\(4, 16\)"):
        q.set_pi(torch.ones(3, 16))
    assert torch.equal(q.pi, before)  # a refused pi leaves pi as it was
    model = VQAutoencoder.from_config(NetworkConfig(in_channels=1), "wasserstein", num_codes=16)
    with pytest.raises(TypeError, match=r"uint8.*x.float\(\) / 255"):
        model(torch.zeros(2, 1, 32, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="3 channels but the network takes 1"):
        model(torch.zeros(2, 3, 32, 32))


# ---- visible, quiet -----------------------------------------------------------------------------------
def test_tensorboard_logger_writes_the_curves(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    train(TrainConfig.resolve(out=str(out), epochs=2, dataset="digits", train_limit=64, eval_limit=32, num_codes=8,
                              device="cpu", logger="tensorboard"))
    events = EventAccumulator(str(out / layout.TENSORBOARD))
    events.Reload()
    val = events.Scalars("val/mse")
    assert [e.step for e in val] == [2, 4]  # one point per epoch, against the global step
    assert [round(e.value, 6) for e in val] == [round(m["val/mse"], 6) for m in layout.read_metrics(out)]


def test_training_prints_no_warning(tmp_path):
    r = subprocess.run([sys.executable, "-W", "default", "-m", "vqwae", "train", "--out", str(tmp_path / "run"),
                        *TINY, "--max-steps", "2", "--threads", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and "Warning" not in r.stdout, r.stderr


def test_a_held_folder_stops_every_torchrun_rank(run, tmp_path):
    """Under DDP rank 0 takes the lock and every rank learns that it could not: all stop, none trains."""
    before = checksums(run)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with RunLock(run):
        r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "vqwae", "train",
                            "--out", str(run), "--resume", "--epochs", "3"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    # every rank that got to print (torchrun stops the others once one has exited) names the holder
    assert errors and all(f"pid {os.getpid()}" in e and "being written" in e for e in errors), r.stderr
    after = checksums(run)
    after.pop(layout.LOCK, None), before.pop(layout.LOCK, None)
    assert after == before


# ---- a batch of padding only (routine in sequence training and under DDP) changes nothing --------------------
def _quantizers_with_masks():
    from vqwae.quantizers import ResidualQuantizer, StochasticQuantizer, VectorQuantizer

    shape = dict(num_codes=16, dim=8, channel_last=True)
    # (PaperWassersteinQuantizer, the paper's solvers, takes no mask: its OT has every latent)
    cases = {"wasserstein": lambda: WassersteinQuantizer(**shape)}
    cases["vector"] = lambda: VectorQuantizer(**shape)
    cases["vector ema"] = lambda: VectorQuantizer(ema=True, **shape)
    cases.update({f"stochastic {m}": lambda m=m: StochasticQuantizer(latent_scale=m, **shape)
                  for m in ("batch", "data", "none")})
    cases["residual"] = lambda: ResidualQuantizer(lambda: WassersteinQuantizer(**shape), 2)
    return cases


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "trained"])
@pytest.mark.parametrize("name", list(_quantizers_with_masks()))
def test_a_padding_only_batch_changes_no_buffer_and_no_later_step(name, fresh):
    torch.manual_seed(0)
    q = _quantizers_with_masks()[name]().train()
    x = torch.randn(4, 10, 8, requires_grad=True)
    if not fresh:
        q(x).loss.backward()
    before = {k: v.clone() for k, v in q.state_dict().items()}
    out = q(x, torch.zeros(4, 10, dtype=torch.bool))
    out.loss.backward()
    assert float(out.loss.detach()) == 0.0 and torch.isfinite(out.quantized).all()
    assert torch.isfinite(x.grad).all()
    assert [k for k, v in q.state_dict().items() if not torch.equal(v, before[k])] == []
    later = q(torch.randn(4, 10, 8))  # the next batch with real latents trains normally
    assert torch.isfinite(later.loss) and all(torch.isfinite(v).all() for v in q.state_dict().values())


def test_a_relative_data_root_is_stored_absolute_and_resume_takes_it_from_elsewhere(tmp_path, monkeypatch):
    (tmp_path / "a" / "data").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    out = tmp_path / "run"
    result = invoke(["train", "--out", out, *TINY, "--epochs", "1", "--data-root", "data"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["data"]["data_root"] == str(tmp_path / "a" / "data")
    monkeypatch.chdir(tmp_path / "b")  # another folder, the same data by another relative path
    result = invoke(["train", "--out", out, "--resume", "--epochs", "2", "--data-root", "../a/data"])
    assert result.exit_code == 0, result.output


def test_an_image_folder_too_small_to_validate_on_is_one_line(tmp_path):
    folder = tmp_path / "three"
    folder.mkdir()
    for i in range(3):
        Image.fromarray(np.full((16, 16, 3), 40 * i, dtype=np.uint8)).save(folder / f"{i}.png")
    result = invoke(["train", "--out", tmp_path / "run", "--dataset", "imagefolder", "--data-root", folder,
                     "--epochs", "1", "--num-codes", "8", "--device", "cpu"])
    one_line_error(result, "validation", "at least 10 images")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("code", ["EROFS", "ENOSPC"])
def test_a_read_only_or_full_disk_is_one_line_and_keeps_the_run(run, tmp_path, monkeypatch, code):
    import builtins
    import errno
    import io

    real_open, number = builtins.open, getattr(errno, code)

    def refusing_open(file, mode="r", *args, **kwargs):  # every write under tmp_path or the run fails
        if any(c in mode for c in "wax+") and str(file).startswith((str(tmp_path), str(run))):
            raise OSError(number, os.strerror(number), str(file))
        return real_open(file, mode, *args, **kwargs)

    before = checksums(run)
    monkeypatch.setattr(builtins, "open", refusing_open)
    monkeypatch.setattr(io, "open", refusing_open)  # pathlib's write_text / write_bytes
    one_line_error(invoke(["train", "--out", tmp_path / "new", *TINY]), "cannot write", str(tmp_path / "new"))
    result = invoke(["eval", run, "--no-fid", "--no-lpips", "--device", "cpu"])
    last = result.stderr.strip().splitlines()[-1]  # after the evaluation's progress bar
    assert result.exit_code == 2 and "Traceback" not in result.output and last.startswith("error: cannot write")
    monkeypatch.undo()
    assert checksums(run) == before


def test_eval_json_says_what_it_measured_and_drops_what_a_later_eval_recomputed(run):
    assert invoke(["eval", run, "--no-fid", "--no-lpips", "--device", "cpu", "--limit", "8"]).exit_code == 0
    first = json.loads((run / "eval.json").read_text())
    assert "lpips_skipped" in first and first["limit"] == 8 and first["split"] == "test"
    assert len(first["weights_fingerprint"]) == 64 and first["trained_steps"] > 0

    weights = Path(__file__).resolve().parents[2] / "shared" / "weights" / "lpips"
    if not weights.is_dir():
        pytest.skip(f"no LPIPS weights at {weights} (the shared folder is absent)")
    assert invoke(["eval", run, "--no-fid", "--device", "cpu", "--limit", "8", "--lpips-weights", weights]).exit_code == 0
    after = json.loads((run / "eval.json").read_text())
    assert after["lpips"] is not None and "lpips_skipped" not in after  # the old skip note went with the old value


def test_resume_without_the_state_of_a_longer_run_is_refused_and_changes_nothing(tmp_path):
    out = tmp_path / "run"
    train(TrainConfig.resolve(out=str(out), epochs=2, dataset="digits", train_limit=64, eval_limit=32, num_codes=8,
                              device="cpu"))
    (out / layout.STATE).unlink()
    before = checksums(out)
    one_line_error(invoke(["train", "--out", out, "--resume", "--epochs", "3"]), "state.pt is missing", "2 trained epochs")
    assert checksums(out) == before


def test_tsne_out_without_a_suffix_names_the_file_it_wrote(run, tmp_path):
    result = invoke(["tsne", run, "--n", "30", "--out", tmp_path / "plot", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    named = Path(json.loads((run / "eval.json").read_text())["tsne_png"])
    assert named == tmp_path / "plot.png" and named.is_file()


@pytest.mark.parametrize("command", [["train", *TINY], ["encode", "RUN"], ["decode", "RUN", "RUN/model.safetensors"],
                                     ["prior", "train", "RUN"], ["sample", "RUN"], ["tsne", "RUN"]])
def test_an_empty_out_is_refused_before_anything_is_written(command, run, tmp_path, monkeypatch):
    """``--out ""`` (an unset shell variable) would name the current folder: every command refuses it."""
    monkeypatch.chdir(tmp_path)
    before = checksums(run)
    res = CliRunner().invoke(app, [str(run) if a == "RUN" else a.replace("RUN", str(run)) for a in command]
                             + ["--out", ""])
    assert res.exit_code == 2 and "empty path" in res.output, res.output
    assert list(tmp_path.iterdir()) == [] and checksums(run) == before
