"""No command deletes or overwrites a file it did not write, and no run continues another (issue #58).

A user's own file is put in every output folder of every command that writes one (decode, sample, prior train,
train) and checksummed before and after; each command either works around it or refuses with one line. Then the
run's identity on --resume, the write order of an epoch (its metrics line only once its state is saved) and the
advice Ctrl-C gives.
"""
from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.helpers import TINY, checksums, invoke, one_line_error, train_tiny
from vqwae.figures.image_folder import save_image_folder
from vqwae.models import VQAutoencoder
from vqwae.runs import layout
from vqwae.training import TrainConfig, checkpoint, train

CPU = ["--device", "cpu", "--threads", "1"]
PRIOR = ["--hidden", "8", "--layers", "2", "--epochs", "1", "--max-steps", "2", *CPU]


def _ok(result):
    assert result.exit_code == 0, (result.output, result.exception)
    return result


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = train_tiny(tmp_path_factory.mktemp("files") / "run")
    _ok(invoke(["prior", "train", out, *PRIOR]))
    _ok(invoke(["encode", out, "--out", out.parent / "codes.safetensors", "--limit", "6", *CPU]))
    return out


def _user_files(folder: Path, *names: str) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.fromarray(np.full((8, 8, 3), 7, dtype=np.uint8)).save(folder / name) if name.endswith(".png") \
            else (folder / name).write_text(f"the user's own {name}\n")
    return {k: v for k, v in checksums(folder).items() if k in names}


def _kept(folder: Path, before: dict[str, str]) -> None:
    after = checksums(folder)
    assert {k: after.get(k) for k in before} == before, "a user's file was changed or removed"


def test_decode_keeps_the_users_images_and_replaces_only_its_own(run, tmp_path):
    out = tmp_path / "dec"
    before = _user_files(out, "image_holiday.png", "notes.txt")
    codes = run.parent / "codes.safetensors"
    _ok(invoke(["decode", run, codes, "--out", out, *CPU]))
    _ok(invoke(["decode", run, codes, "--out", out, "--limit", "2", *CPU]))  # fewer: its own older PNGs go
    _kept(out, before)
    assert sorted(p.name[:8] for p in out.glob("image_*.png")) == ["image_0_", "image_1_", "image_ho"]


def test_decode_refuses_a_user_file_of_a_name_it_would_write(run, tmp_path):
    out = tmp_path / "dec"
    before = _user_files(out, "grid.png")
    one_line_error(invoke(["decode", run, run.parent / "codes.safetensors", "--out", out, *CPU]),
                   "grid.png", "not written by vqwae")
    assert checksums(out) == before  # nothing written, nothing replaced
    _ok(invoke(["decode", run, run.parent / "codes.safetensors", "--out", tmp_path / "mine", "--limit", "2", *CPU]))
    mine = next((tmp_path / "mine").glob("image_1_*.png"))
    mine.write_bytes((out / "grid.png").read_bytes())  # the user edits one of the command's images
    edited = checksums(tmp_path / "mine")[mine.name]
    one_line_error(invoke(["decode", run, run.parent / "codes.safetensors", "--out", tmp_path / "mine", *CPU]),
                   mine.name)
    assert checksums(tmp_path / "mine")[mine.name] == edited


@pytest.mark.parametrize("where", ["--out", "default"])
def test_sample_keeps_the_users_images(run, tmp_path, where):
    out = tmp_path / "s" if where == "--out" else run / layout.SAMPLES
    before = _user_files(out, "sample_from_my_gan.png", "sample_.png")
    args = ["--out", out] if where == "--out" else []
    _ok(invoke(["sample", run, "--n", "3", *args, *CPU]))
    _ok(invoke(["sample", run, "--n", "1", *args, *CPU]))
    _kept(out, before)
    assert sorted(p.name for p in out.glob("sample_*.png")) == ["sample_.png", "sample_0.png", "sample_from_my_gan.png"]
    shutil.rmtree(out)


def test_the_writer_removes_only_what_its_manifest_proves_its_own(tmp_path):
    out = tmp_path / "imgs"
    save_image_folder(torch.rand(3, 3, 8, 8), out, prefix="x")
    (out / "x_2.png").unlink()
    (out / "x_2.png").write_text("now the user's")  # the same name, other content: no longer the writer's
    with pytest.raises(FileExistsError, match="x_2.png"):
        save_image_folder(torch.rand(3, 3, 8, 8), out, prefix="x")
    save_image_folder(torch.rand(2, 3, 8, 8), out, prefix="x")  # x_2.png is not among the new names: it stays
    assert (out / "x_2.png").read_text() == "now the user's"


def test_prior_train_refuses_a_folder_holding_a_users_config(run, tmp_path):
    out = tmp_path / "p"
    before = _user_files(out, "config.json", "notes.txt")
    run_before = checksums(run)
    one_line_error(invoke(["prior", "train", run, "--out", out, *PRIOR]), "config.json", "not written by")
    assert checksums(out) == before and checksums(run) == run_before
    (out / "config.json").unlink()
    before = checksums(out)
    _ok(invoke(["prior", "train", run, "--out", out, *PRIOR]))
    _kept(out, before)
    _ok(invoke(["prior", "train", run, "--out", out, "--force", *PRIOR]))  # its own prior: replaced on request
    _kept(out, before)


@pytest.mark.parametrize("name", ["config.json", "eval.json", "model_config.json"])
def test_train_refuses_a_folder_holding_a_users_file_of_a_runs_name(tmp_path, name):
    out = tmp_path / "r"
    before = _user_files(out, name, "notes.txt")
    one_line_error(invoke(["train", "--out", out, *TINY, "--max-steps", "1"]), name, "not written by vqwae train")
    assert checksums(out) == before
    (out / name).unlink()
    before = checksums(out)
    _ok(invoke(["train", "--out", out, *TINY, "--max-steps", "1"]))
    _kept(out, before)


# ---- --resume continues the run's own state, and only that -----------------------------------------------
def _tiny(out: Path, **kw) -> TrainConfig:
    return TrainConfig.resolve(out=str(out), **{**dict(epochs=1, dataset="digits", train_limit=64, eval_limit=32,
                                                       num_codes=8, device="cpu"), **kw})


def test_resume_refuses_the_state_of_another_run(tmp_path):
    train(_tiny(tmp_path / "a"))
    train(_tiny(tmp_path / "b", seed=1))
    shutil.copy(tmp_path / "b" / layout.STATE, tmp_path / "a" / layout.STATE)
    before = checksums(tmp_path / "a")
    one_line_error(invoke(["train", "--out", tmp_path / "a", "--resume", "--epochs", "2"]),
                   "belongs to another run", "seed 1")
    assert checksums(tmp_path / "a") == before


def test_resume_of_a_finished_one_epoch_run_without_its_state_is_refused(tmp_path):
    out = tmp_path / "run"
    train(_tiny(out))
    (out / layout.STATE).unlink()
    before = checksums(out)
    one_line_error(invoke(["train", "--out", out, "--resume", "--epochs", "2"]), "state.pt is missing",
                   "1 trained epoch")
    assert checksums(out) == before


def test_a_kill_between_the_state_and_its_metrics_line_loses_no_line(tmp_path, monkeypatch):
    from vqwae.training import folder

    out = tmp_path / "run"
    out.mkdir()

    def killed(*args):
        raise SystemExit(9)

    monkeypatch.setattr(folder, "commit_metrics", killed)
    with pytest.raises(SystemExit):
        train(_tiny(out, epochs=2))
    monkeypatch.undo()
    assert checkpoint.load_state(out / layout.STATE)["epoch"] == 1 and layout.read_metrics(out) == []
    train(_tiny(out, epochs=2), resume=True)
    assert [m["epoch"] for m in layout.read_metrics(out)] == [1, 2]


@pytest.mark.parametrize("existed", [False, True])
def test_ctrl_c_before_the_first_checkpoint_names_a_command_that_works(tmp_path, monkeypatch, existed):
    out = tmp_path / "run"
    if existed:
        out.mkdir()

    def interrupted(*args):
        raise KeyboardInterrupt  # after epoch 1's weights and metrics, before its state.pt

    monkeypatch.setattr(checkpoint, "atomic_torch_save", interrupted)
    args = ["train", "--out", out, *TINY, "--epochs", "1"]
    result = invoke(args)
    assert result.exit_code == 130
    monkeypatch.undo()
    if existed:  # the weights of the unfinished epoch stay: --resume starts it again
        assert "--resume" in result.stderr
        _ok(invoke(["train", "--out", out, "--resume"]))
    else:  # a folder this command made, holding only what it wrote, is gone
        assert "run the same command again" in result.stderr and not out.exists()
        _ok(invoke(args))
    assert [m["epoch"] for m in layout.read_metrics(out)] == [1]


def test_tsne_keeps_a_users_png_and_replaces_its_own(run, tmp_path):
    before = _user_files(tmp_path, "plot.png")
    one_line_error(invoke(["tsne", run, "--n", "8", "--out", tmp_path / "plot.png", *CPU]), "plot.png",
                   "not written by")
    assert checksums(tmp_path) == before
    for _ in range(2):  # a new file, then the one it wrote itself
        _ok(invoke(["tsne", run, "--n", "8", "--out", tmp_path / "mine.png", *CPU]))
    _kept(tmp_path, before)


def test_train_into_a_model_folder_is_refused_and_leaves_no_lock(run, tmp_path):
    model = tmp_path / "model"
    VQAutoencoder.from_pretrained(run).save_pretrained(model)  # a folder save_pretrained wrote
    before = checksums(model)
    one_line_error(invoke(["train", "--out", model, *TINY]), "already holds a run")
    assert checksums(model) == before  # no run.lock left behind


def test_every_command_on_a_run_keeps_a_users_file_in_the_run_folder(run, tmp_path):
    run = Path(shutil.copytree(run, tmp_path / "run"))
    before = _user_files(run, "notes.txt", "sample_mine.png", "my_prior_notes.md")
    for args in (["eval", run, "--no-fid", "--no-lpips", "--limit", "8"], ["probe", run, "--limit", "8"],
                 ["tsne", run, "--n", "8"], ["prior", "train", run, "--force", *PRIOR[:-4]],
                 ["sample", run, "--n", "2"], ["encode", run, "--out", run / "codes.safetensors", "--limit", "2"],
                 ["train", "--out", run, "--resume", "--epochs", "2", "--max-steps", "3"]):
        _ok(invoke([*args, *CPU] if args[0] != "train" else args))
    _kept(run, before)


def test_a_runs_samples_folder_of_an_earlier_vqwae_is_still_its_own(run, tmp_path):
    run = Path(shutil.copytree(run, tmp_path / "run"))
    _ok(invoke(["sample", run, "--n", "3", *CPU]))
    (run / layout.SAMPLES / ".vqwae-images.json").unlink()  # as an earlier vqwae left it: no manifest
    before = _user_files(run / layout.SAMPLES, "sample_from_my_gan.png")
    _ok(invoke(["sample", run, "--n", "1", *CPU]))
    _kept(run / layout.SAMPLES, before)
    assert sorted(p.name for p in (run / layout.SAMPLES).glob("sample_*.png")) == ["sample_0.png",
                                                                                   "sample_from_my_gan.png"]


# ---- a disk that fills, a write that was killed (issue #65) ---------------------------------------------------
def _train_with_file_size_limit(out: Path, limit: int):
    import resource
    import signal
    import subprocess
    import sys

    def cap():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails with EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return subprocess.run([sys.executable, "-m", "vqwae", "train", "--out", str(out), *TINY, "--max-steps", "2",
                           "--threads", "1"], preexec_fn=cap, capture_output=True, text=True)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="a file-size cap needs POSIX")
def test_a_disk_that_fills_while_the_state_is_written_ends_in_one_line(tmp_path):
    """torch.save's own writer reports a failed write as a RuntimeError without errno ("unexpected pos"): the
    state is written through a Python file that keeps the OSError, so the command ends with one line naming the
    file. A file-size cap stands in for a full disk: the weights (~2.6 MB) fit, the state (~8 MB) does not."""
    r = _train_with_file_size_limit(tmp_path / "run", 4_000_000)
    assert r.returncode == 2, r.stderr[-2000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert errors and "cannot write" in errors[0] and "state.pt" in errors[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "unexpected pos" not in r.stderr


def test_a_temporary_file_left_by_a_killed_write_is_removed_by_the_next_write(tmp_path):
    import os

    from vqwae.files import atomic_write_text

    target = tmp_path / "codes.safetensors"
    orphan = tmp_path / f".{target.name}.{2**22 + 12345}.x1y2.tmp"  # above any pid this test could meet
    live = tmp_path / f".{target.name}.{os.getpid()}.a1b2.tmp"  # a write in progress in a running process
    other = tmp_path / ".other.safetensors.4194999.z.tmp"  # another target's
    for f in (orphan, live, other):
        f.write_text("half")
    atomic_write_text(target, "whole")
    assert target.read_text() == "whole"
    assert not orphan.exists() and live.exists() and other.exists()


def _snapshot(folder: Path) -> dict:
    """Every file of a folder, hidden ones too: its bytes' digest and its modification time."""
    return {name: (digest, (folder / name).stat().st_mtime_ns) for name, digest in checksums(folder).items()}


@pytest.mark.parametrize("flags,says", [
    (["--preset", "paper"], "--preset would be ignored"),
    (["--num-codes", "32"], "num_codes"),
    (["--logger", "tensorboard"], "pip install 'vqwae[tensorboard]'"),
    (["--device", "meta"], "bad --device 'meta'"),
    (["--seed", "99999999999999999999"], "seed"),
    (["--epochs", "0"], "epochs must be >= 1"),
    (["--batch-size", "0"], "batch_size"),
    (["--max-steps", "0"], "max_steps must be >= 1"),
    ([], "is being written by"),  # another process holds the run
])
def test_every_refusal_of_train_resume_leaves_the_run_folder_as_it_was(tmp_path, monkeypatch, flags, says):
    """No command changes a file before it has decided to run (issue #84: a missing tensorboard was refused only
    after config.json was rewritten and provenance.jsonl appended to, so the next plain --resume asked for it)."""
    import sys

    from vqwae.training.lock import RunLock

    out = tmp_path / "run"
    train(_tiny(out))
    if "tensorboard" in flags:  # tensorboard not installed
        monkeypatch.setitem(sys.modules, "tensorboard", None)
        monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with (RunLock(out) if not flags else contextlib.nullcontext()):
        before = _snapshot(out)
        one_line_error(invoke(["train", "--out", out, "--resume", "--epochs", "2", *flags]), says)
        assert _snapshot(out) == before
    if "tensorboard" in flags:  # and the next plain --resume continues the run as it was
        monkeypatch.delitem(sys.modules, "tensorboard")
        monkeypatch.delitem(sys.modules, "torch.utils.tensorboard")
        result = invoke(["train", "--out", out, "--resume", "--epochs", "2"])
        assert result.exit_code == 0, result.output
        assert layout.read_config(out).run.logger == "none"


def test_a_seed_outside_what_the_libraries_take_is_refused_naming_the_option(tmp_path):
    """It ended in "error: Overflow when unpacking long long", naming no option."""
    out = tmp_path / "run"
    one_line_error(invoke(["train", *TINY, "--max-steps", "1", "--seed", "99999999999999999999", "--out", out]),
                   "seed must be >= 0 and <= 4294967295, got 99999999999999999999")
    assert not out.exists()
    assert TrainConfig.resolve(seed=2**32 - 1).run.seed == 2**32 - 1
